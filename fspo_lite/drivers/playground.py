"""The reward playground: score stored responses under any method and settings, and show the token
advantages (notebooks/05_reward_playground.ipynb wires these functions to widgets).

`compute_playground` runs a training step's own reward and advantage code (fspo_lite.scoring.rewards:
score_rollouts and advantages_from_scores) on a group of pre-sampled responses, so what the sliders show is exactly
what a training step would compute. Items live in data/playground_examples.jsonl: a question with
its evidence and a group of SmolLM2-135M responses (`sample_items` makes fresh ones).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fspo_lite.config import CHOICES as CONFIG_CHOICES
from fspo_lite.config import Config
from fspo_lite.config_load import apply_overrides
from fspo_lite.data.examples import DATA_DIR, QAExample
from fspo_lite.drivers.base_samples import base_engine, sample_texts
from fspo_lite.jsonl import read_jsonl
from fspo_lite.rollout.transformers_rollout import rollout_from_texts
from fspo_lite.scoring.claims import build_claim_extractor
from fspo_lite.scoring.methods.klcf import build_checklist
from fspo_lite.scoring.plan import scoring_plan
from fspo_lite.scoring.rewards import advantages_from_scores, build_reward_tools, score_rollouts
from fspo_lite.scoring.verifiers import build_verifier

PLAYGROUND_FILE = DATA_DIR / "playground_examples.jsonl"

KNOBS: dict[str, tuple[float, float, float]] = {
    # config key: (min, max, step) for a slider; see fspo_lite/config.py for what each does
    "verifier.threshold": (0.0, 1.0, 0.05),
    "reward.step_reward_lambda": (0.0, 2.0, 0.1),
    "caution.process_reward": (0.0, 1.0, 0.05),
    "caution.process_f1": (0.0, 1.0, 0.05),
    "rlfh.truth_weight": (0.0, 3.0, 0.1),
    "rlfh.info_weight": (0.0, 3.0, 0.1),
    "rlfh.truth_correct": (-2.0, 2.0, 0.05),
    "rlfh.truth_hedged_correct": (-2.0, 2.0, 0.05),
    "rlfh.truth_vague": (-2.0, 2.0, 0.05),
    "rlfh.truth_hedged_wrong": (-2.0, 2.0, 0.05),
    "rlfh.truth_wrong": (-2.0, 2.0, 0.05),
    "rlfh.info_answer": (-1.0, 2.0, 0.05),
    "rlfh.info_crucial": (-1.0, 2.0, 0.05),
    "rlfh.info_relevant": (-1.0, 2.0, 0.05),
    "rlfh.info_supplementary": (-1.0, 2.0, 0.05),
    "rlfh.info_useless": (-1.0, 2.0, 0.05),
    "rlfh.correct_threshold": (0.0, 1.0, 0.05),
    "rlfh.wrong_threshold": (0.0, 1.0, 0.05),
    "rlfh.outcome_weight": (0.0, 3.0, 0.1),
    "klcf.recall_weight": (0.0, 3.0, 0.1),
    "klcf.precision_weight": (0.0, 3.0, 0.1),
    "klcf.outcome_weight": (0.0, 3.0, 0.1),
    "klcf.match_threshold": (0.0, 1.0, 0.05),
    "klcf.checklist_threshold": (0.0, 1.0, 0.05),
    "detail.weight": (0.0, 1.0, 0.05),
    "detail.precision_weight": (0.0, 1.0, 0.05),
}
DETAIL_COLUMNS = ("category", "vetoed", "recall", "precision", "supported_distinct", "detail_bonus")
"""Per-response details shown in the table and the HTML when the method (or the detail term) sets them."""
CHOICES: dict[str, tuple[str, ...]] = {
    "caution.variant": tuple(v for v in CONFIG_CHOICES["caution.variant"] if v != "fact_then_caution"),
    "rlfh.granularity": CONFIG_CHOICES["rlfh.granularity"],
}
"""The word settings offered as dropdowns: the config's words (fspo_lite.config.CHOICES), less fact_then_caution,
a schedule over training steps whose two phases are the fact and caution tables already offered."""


@dataclass
class PlaygroundItem:
    """A question and a group of sampled responses (completions after the response prefix)."""

    example: QAExample
    completions: list[str]
    response_prefix: str = "<think>"
    meta: dict[str, Any] = field(default_factory=dict)


def load_items(path: str | Path | None = None) -> list[PlaygroundItem]:
    rows = read_jsonl(path or PLAYGROUND_FILE)
    return [PlaygroundItem(QAExample(**row["example"]), row["completions"], row.get("response_prefix", "<think>"),
                           row.get("meta", {})) for row in rows]


def save_items(items: list[PlaygroundItem], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for item in items:
            row = {"example": item.example.to_dict(), "completions": item.completions,
                   "response_prefix": item.response_prefix, "meta": item.meta}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def sample_items(config: Config, examples: list[QAExample], samples: int = 4, engine=None, tokenizer=None
                 ) -> list[PlaygroundItem]:
    """Fresh playground items: `samples` responses of the config's base model to each example."""
    if engine is None:
        engine, tokenizer = base_engine(config)
    prefix = config.data.response_prefix
    meta = {"model": config.model.name, "temperature": config.rollout.temperature,
            "max_new_tokens": config.rollout.max_new_tokens, "system_prompt": config.data.system_prompt}
    items = []
    for chunk, texts in sample_texts(engine, tokenizer, examples, config.data, samples):
        items += [PlaygroundItem(e, [t[len(prefix):] for t in group], prefix, dict(meta)) for e, group in zip(chunk, texts)]
    return items


@dataclass
class PlaygroundResult:
    """Per response: its tokens, token advantages, scalar reward and method details; plus metrics and HTML."""

    tokens: list[list[str]]
    advantages: list[list[float]]
    rewards: list[float]
    details: list[dict]
    metrics: dict[str, Any]
    html: str
    token_rewards: list[list[float]] | None = None


def playground_config(method: str, group_size: int, response_prefix: str, settings: dict[str, Any] | None = None
                      ) -> Config:
    """A default Config with the method, the group size of the item and the slider values applied."""
    config = Config()
    apply_overrides(config, {"reward.method": method, "rollout.group_size": group_size,
                             "data.response_prefix": response_prefix, **(settings or {})})
    return config


def compute_playground(item: PlaygroundItem, tokenizer, method: str = "fspo", settings: dict[str, Any] | None = None,
                       verifier=None, step: int = 0) -> PlaygroundResult:
    """Score the item's responses under `method` with `settings` ({config key: value}) and return the
    token advantages a training step would use, with an HTML rendering."""
    config = playground_config(method, len(item.completions), item.response_prefix, settings)
    verifier = verifier if verifier is not None else build_verifier(config.verifier)
    plan = scoring_plan(config.reward, config.detail, verifier is not None)
    checklists = None
    if plan.source == "klcf":
        extractor = build_claim_extractor(config.reward.claim_extractor, config.verifier)
        responses = [item.response_prefix + c for c in item.completions]
        checklists = {item.example.id: build_checklist(responses, item.example.evidence, extractor, verifier,
                                                       config.klcf.checklist_threshold, config.klcf.dedup_overlap,
                                                       item.example.question)}
    tools = build_reward_tools(config, checklists=checklists)
    rollout = rollout_from_texts(tokenizer, item.completions)
    scored = score_rollouts([item.example] * len(item.completions), rollout, tokenizer, config, verifier,
                            step=step, tools=tools, plan=plan)
    advantages, _ = advantages_from_scores(scored, rollout.completion_mask, config.rollout.group_size,
                                           config.train.scale_by_std, config.reward.strict_checkable)
    lengths = rollout.completion_mask.sum(dim=1).tolist()
    tokens = [[tokenizer.decode([t]) for t in ids[: int(n)]] for ids, n in zip(rollout.completion_ids.tolist(), lengths)]
    values = [row[: int(n)] for row, n in zip(advantages.tolist(), lengths)]
    token_rewards = (None if scored.token_rewards is None
                     else [row[: int(n)] for row, n in zip(scored.token_rewards.tolist(), lengths)])
    details = [{"reward": r, "answer": o.answer, "correct": o.correct, "format_ok": o.format_ok,
                "sentence_labels": v.labels, **d}
               for r, o, v, d in zip(scored.rewards.tolist(), scored.outcomes, scored.verdicts, scored.details)]
    page = render_html(item, tokens, values, details)
    return PlaygroundResult(tokens, values, scored.rewards.tolist(), details, scored.metrics, page, token_rewards)


def _colour(value: float, scale: float) -> str:
    strength = min(abs(value) / scale, 1.0) if scale > 0 else 0.0
    rgb = (46, 160, 67) if value > 0 else (215, 58, 73)
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.72 * strength:.2f})" if value else "transparent"


def render_html(item: PlaygroundItem, tokens: list[list[str]], advantages: list[list[float]], details: list[dict]) -> str:
    """The question, then each response with every token shaded by its advantage (green +, red -)."""
    scale = max((abs(a) for row in advantages for a in row), default=0.0)
    parts = [f"<div style='font-family:monospace;font-size:13px'><b>Q:</b> {html.escape(item.example.question)} "
             f"<b>gold:</b> {html.escape(', '.join(item.example.answers))}<br>"]
    for index, (row_tokens, row_values, info) in enumerate(zip(tokens, advantages, details)):
        extra = ", ".join(f"{k}={info[k]:.3g}" if isinstance(info[k], float) else f"{k}={info[k]}"
                          for k in DETAIL_COLUMNS if k in info)
        answer = "(none)" if info["answer"] is None else str(info["answer"])  # as in reward_table
        parts.append(f"<hr><b>#{index}</b> reward={info['reward']:.3f} answer={html.escape(answer)}"
                     f"{' ' + html.escape(extra) if extra else ''}<br>{html.escape(item.response_prefix)}")
        for token, value in zip(row_tokens, row_values):
            text = html.escape(token).replace("\n", "&#8629;<br>")
            parts.append(f"<span title='{value:+.3f}' style='background:{_colour(value, scale)}'>{text}</span>")
    parts.append("</div>")
    return "".join(parts)


def reward_table(result: PlaygroundResult):
    """One row per response: its reward, answer, correctness, the method's own details (caution category,
    KLCF recall and precision, the detail term's S and bonus when it is on) and its mean token advantage, as a DataFrame (the playground's table)."""
    import pandas as pd

    rows = []
    for index, (info, values) in enumerate(zip(result.details, result.advantages)):
        answer = "(none)" if info["answer"] is None else str(info["answer"])
        row = {"response": index, "reward": info["reward"], "answer": answer, "correct": info["correct"]}
        row.update({k: info[k] for k in DETAIL_COLUMNS if k in info})
        row["mean advantage"] = sum(values) / len(values) if values else 0.0
        rows.append(row)
    return pd.DataFrame(rows).set_index("response")


def plot_token_advantages(result: PlaygroundResult, index: int = 0, ax=None):
    """Bar chart of one response's token advantages (green positive, red negative); returns the figure.

    Without `ax` the figure is a plain matplotlib Figure, outside pyplot's global state: `display(figure)`
    shows it, and widget callbacks that draw it never pick up or leave behind another plot's figure. No layout
    pass is run: Jupyter's inline backend saves with bbox_inches="tight", which keeps the rotated token labels
    (pass the same to `figure.savefig`); a tight_layout() here would lay out every label once more, a fifth of
    the playground's update time (docs/performance.md, "Playground updates")."""
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(min(18, 2 + 0.16 * len(result.tokens[index])), 3)).subplots()
    values = result.advantages[index]
    ax.bar(range(len(values)), values, color=["#2ea043" if v > 0 else "#d73a49" for v in values])
    if len(values) <= 80:
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([t.replace("\n", "\\n") for t in result.tokens[index]], rotation=90, fontsize=7)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_ylabel("advantage")
    ax.set_title(f"response #{index}: reward {result.rewards[index]:.3f}")
    return ax.figure


def flipped_tokens(before: list[float], after: list[float]) -> int:
    """How many tokens the flip turned against their group advantage (`before`: GRPO's, `after`: FSPO's)."""
    return sum(1 for b, a in zip(before, after) if a * b < 0)


def flip_record_from_examples(tokenizer, items: list[PlaygroundItem] | None = None, verifier=None) -> dict | None:
    """The stored response (of the bundled examples by default) with the most flipped tokens, as a record for
    `fspo_lite.drivers.report.plot_flip`: its tokens, FSPO's token advantages and GRPO's group advantage; None
    when no token of any response flipped.

    Both advantages come from `compute_playground`, the training step's own reward and advantage code, so the
    figure shows what FSPO changes without a model: notebook 04 draws it when no logged run response had a
    flipped token (a short or smoke run)."""
    items = load_items() if items is None else items
    verifier = verifier if verifier is not None else build_verifier(Config().verifier)
    best, most = None, 0
    for item in items:
        grpo = compute_playground(item, tokenizer, "grpo", verifier=verifier)
        fspo = compute_playground(item, tokenizer, "fspo", verifier=verifier)
        for index, (before, after) in enumerate(zip(grpo.advantages, fspo.advantages)):
            count = flipped_tokens(before, after)
            if count > most:
                best, most = (item, index, before, fspo), count
    if best is None:
        return None
    item, index, before, fspo = best
    return {"question": item.example.question, "gold": list(item.example.answers),
            "response": item.response_prefix + item.completions[index], "tokens": fspo.tokens[index],
            "token_advantages": fspo.advantages[index], "advantage": before[0] if before else 0.0,
            "reward": fspo.rewards[index], "flipped_tokens": most}
