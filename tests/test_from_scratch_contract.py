"""The contract between notebooks/00_fspo_from_scratch.ipynb and the package's Trainer: the loop a reader reads is
the loop that runs, and it computes what `Trainer.train_step` computes.

The notebook's code cells run here as they are, in order, in one namespace (the parameters cell's values replaced
after it runs, as papermill does), on the bundled SmolLM2-135M: the tiny random model never writes well-formed tags,
so its rewards are all the format penalty and its advantages all 0, which would make the comparison empty. Then
the Trainer, with speed.mode=off and the same settings and seed, runs two steps. Per step both must give the same
completions, completion masks, rewards, FSPO sentence masks and token advantages, and the same loss and gradient
norm up to float rounding (the notebook takes log-probs with log_softmax over the whole vocabulary, the Trainer with
`algos.selective_log_softmax`). The notebook's loop with another seed must fail the same comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "00_fspo_from_scratch.ipynb"
SETTINGS = {"steps": 2, "questions_per_step": 2, "G": 4, "max_new_tokens": 48, "temperature": 1.0,
            "learning_rate": 2e-4, "beta": 0.04, "epsilon": 0.2, "seed": 0}
"""The notebook's parameters for the comparison (beta > 0: the k3 KL term is compared too)."""


def code_cells(path: Path = NOTEBOOK) -> list[tuple[list[str], str]]:
    """(tags, source) of every code cell of the notebook, in order."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(cell.get("metadata", {}).get("tags", []), "".join(cell["source"])) for cell in cells
            if cell["cell_type"] == "code"]


def run_notebook(parameters: dict) -> list[dict]:
    """The notebook's `history` (one record per step) after every code cell ran, `parameters` set after its
    parameters cell. The namespace (its model, optimizer and functions, which refer back to it) is then emptied and
    collected, so the next run does not start with a second model in memory."""
    import gc

    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {"__name__": "__notebook__"}
    for tags, source in code_cells():
        exec(compile(source, str(NOTEBOOK), "exec"), namespace)
        if "parameters" in tags:
            unknown = set(parameters) - set(namespace)
            assert not unknown, f"the notebook has no parameters {unknown}"
            namespace.update(parameters)
    import matplotlib.pyplot as plt

    plt.close("all")
    history = namespace["history"]
    namespace.clear()
    gc.collect()
    return history


def run_trainer(tmp_path: Path, settings: dict) -> list[dict]:
    """Two steps of the package's Trainer with speed.mode=off and the notebook's settings: per step the completions,
    masks, rewards, sentence mask, advantages, loss and gradient norm."""
    from fspo_lite.config import load_config
    from fspo_lite.update import trainer as trainer_module

    config = load_config(None, [
        "model.name=smollm2-135m", "reward.method=fspo", "verifier.name=lexical", "speed.mode=off",
        f"train.steps={settings['steps']}", f"train.prompts_per_step={settings['questions_per_step']}",
        f"rollout.group_size={settings['G']}", f"rollout.max_new_tokens={settings['max_new_tokens']}",
        f"rollout.temperature={settings['temperature']}", f"train.learning_rate={settings['learning_rate']}",
        f"train.beta={settings['beta']}", f"train.epsilon_low={settings['epsilon']}",
        f"train.epsilon_high={settings['epsilon']}", f"train.seed={settings['seed']}",
        f"train.micro_batch_size={settings['questions_per_step'] * settings['G']}",
        f"train.output_dir={tmp_path / 'trainer'}"])
    records: list[dict] = []
    score_rollouts = trainer_module.score_rollouts

    def scored_and_kept(examples, rollout, *args, **kwargs):
        scored = score_rollouts(examples, rollout, *args, **kwargs)
        records.append(dict(completion_ids=rollout.completion_ids, completion_mask=rollout.completion_mask,
                            texts=[view.text for view in scored.views], rewards=scored.rewards,
                            sentence_mask=scored.sentence_mask))
        return scored

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer_module, "score_rollouts", scored_and_kept)
        with trainer_module.Trainer(config, progress=False) as trainer:
            update = trainer.update

            def update_and_keep(rollout, advantages):
                result = update(rollout, advantages)
                records[-1].update(advantages=advantages, loss=result["loss"], grad_norm=result["grad_norm"])
                return result

            trainer.update = update_and_keep
            for _ in range(settings["steps"]):
                trainer.train_step()
    return records


def differences(notebook: dict, trainer: dict) -> list[str]:
    """What differs between one step of the notebook and of the Trainer (empty: the same step)."""
    found = []
    for key in ("completion_ids", "completion_mask"):
        if not torch.equal(notebook[key], trainer[key]):
            found.append(key)
    if notebook["texts"] != trainer["texts"]:
        found.append("texts")
    for key in ("rewards", "sentence_mask", "advantages"):
        mine, theirs = notebook[key].float(), trainer[key].float()
        if mine.shape != theirs.shape or not torch.allclose(mine, theirs, atol=1e-6, rtol=1e-6):
            found.append(key)
    for key in ("loss", "grad_norm"):
        if notebook[key] != pytest.approx(trainer[key], rel=1e-4, abs=1e-7):
            found.append(f"{key} ({notebook[key]!r} vs {trainer[key]!r})")
    return found


def test_the_notebook_has_the_loop_and_stays_short():
    cells = code_cells()
    sources = "\n".join(source for _, source in cells)
    assert sum(len(source.splitlines()) for _, source in cells) <= 350
    assert sum("parameters" in tags for tags, _ in cells) == 1
    for name in ("def sample_answers", "def score_answers", "def fspo_advantages", "def fspo_step", "model.generate"):
        assert name in sources, name
    imported = [line.split()[1] for line in sources.splitlines() if line.startswith(("from fspo_lite", "import fspo"))]
    assert not [name for name in imported if name.split(".")[1:2] and name.split(".")[1] in
                ("update", "speed", "rollout", "drivers")], imported


@pytest.mark.long
@pytest.mark.slow
def test_the_notebook_loop_is_the_trainer_step(tmp_path):
    notebook = run_notebook(SETTINGS)
    trainer = run_trainer(tmp_path, SETTINGS)
    assert len(notebook) == len(trainer) == SETTINGS["steps"]
    for step, (mine, theirs) in enumerate(zip(notebook, trainer), 1):
        assert differences(mine, theirs) == [], f"step {step}"
    # the comparison is not empty: some answer was well formed, some group had different rewards, some token flipped
    assert any((record["rewards"] > -2).any() for record in trainer)
    assert any(record["advantages"].abs().sum() > 0 and record["grad_norm"] > 0 for record in trainer)
    assert any((record["sentence_mask"] != 0).any() for record in trainer)
    other = run_notebook({**SETTINGS, "seed": 1, "steps": 1})
    assert differences(other[0], trainer[0])  # the comparison can fail
