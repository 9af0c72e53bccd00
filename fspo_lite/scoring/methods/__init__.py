"""The seed reward family beyond FSPO's outcome reward: one small module each, and the table that names them.

- `caution`: factuality GRPO's group-aware caution reward (correct / process correct / "Unknown").
- `statements`: a response's sentences, their atomic statements and where each statement ends.
- `rlfh`: RLFH's statement-level truthfulness and informativeness rewards, placed on tokens.
- `klcf`: KLCF's checklist recall and claim precision rewards, and the offline checklist builder.
- `truth`: the controls `random` (a coin) and `format` (format only), Binary RAR's `binary` and TruthRL's `ternary`.
- `detail`: the detail term (distinct supported sentences) and the relevance judge: not a reward source but
  additive terms that the scoring plan (fspo_lite.scoring.plan) puts on top of any source's reward.

Each module holds pure functions of plain values. `METHODS` below is the one table of reward sources: name ->
`RewardMethod`, whose `score` turns a batch of graded responses into one `MethodResult`, given only its own
config section (`caution`, `rlfh`, `klcf`) and the batch facts every method shares (`RewardBatch`).
Each entry also builds what its method uses besides the verifier (`RewardTools`: claim extractor, informativeness
scorer, checklists, reward model), once per run. `fspo_lite.scoring.rewards` dispatches through the table (the source of the run's scoring plan); `fspo_lite.algos`
turns the rewards into advantages. Adding a method: its module, its config section and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from fspo_lite.config_checks import method_names
from fspo_lite.scoring.claims import ClaimExtractor, build_claim_extractor
from fspo_lite.scoring.llm import ChatModel
from fspo_lite.scoring.methods import rlfh
from fspo_lite.scoring.methods.caution import (PROCESS, answer_category, caution_group_rewards, caution_phase,
                                               contains_answer)
from fspo_lite.scoring.methods.klcf import RewardModel, build_reward_model, klcf_reward, klcf_scores, load_checklists
from fspo_lite.scoring.methods.rlfh import InformativenessScorer, RuleBasedInformativeness
from fspo_lite.scoring.methods.truth import binary_rewards, coin_rewards, format_rewards, ternary_rewards
from fspo_lite.text import parse_response


@dataclass
class RewardBatch:
    """What every method sees of one step's responses (one per row, each prompt's G responses contiguous)."""

    examples: list
    """One QAExample per response."""
    views: list
    """One verdicts.ResponseView per response: its text and the characters of each completion token."""
    outcomes: list
    """One grading.Outcome per response (the outcome reward, format, correctness)."""
    completion_mask: torch.Tensor
    """(N, C) 1 on generated tokens."""
    format_penalty: float
    """reward.format_penalty: the reward of a malformed response."""
    group_size: int = 1
    """rollout.group_size: responses per prompt."""
    step: int = 0
    """The training step (scheduled rewards: caution.variant=fact_then_caution)."""
    total_steps: int = 1
    """train.steps."""
    seed: int = 0
    """train.seed (the random reward's coins)."""
    verdicts: list | None = None
    """One verdicts.SentenceVerdicts per response when the run's plan has the verifier label reasoning sentences
    (always for a method with `needs_verdicts`), else None."""
    completion_ids: list | None = None
    """Each response's generated token ids (a list of ints per response), for a user's reward functions."""

    @property
    def texts(self) -> list[str]:
        return [view.text for view in self.views]


@dataclass
class MethodResult:
    """One method's rewards for a batch."""

    rewards: torch.Tensor
    """(N,) scalar reward per response (for token rewards: their sum)."""
    token_rewards: torch.Tensor | None = None
    """(N, C) per-token rewards (RLFH); when set, advantages come from their reward-to-go."""
    details: list[dict] = field(default_factory=list)
    """Per-response details for logs and the playground."""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RewardTools:
    """What a reward method uses besides the verifier, built once per run (`rewards.build_reward_tools`): its
    METHODS entry's `tools` builder fills the fields the method reads; the others stay None."""

    extractor: ClaimExtractor | None = None
    """The atomic-claim extractor (reward.claim_extractor): RLFH's statements, KLCF's claims."""
    informativeness: InformativenessScorer | None = None
    """RLFH's informativeness scorer."""
    checklists: dict[str, list[str]] | None = None
    """KLCF's checklist facts by question id."""
    reward_model: RewardModel | None = None
    """KLCF's reward model (klcf.reward_model), when one is set."""
    relevance: ChatModel | None = None
    """The detail term's relevance judge (detail.relevance_judge), when its weight is not 0; any method."""
    user_reward: Any = None
    """The user's own reward functions (fspo_lite.scoring.user_reward.UserReward, `Trainer(reward_funcs=...)`):
    when set, they are the source in place of the outcome reward of grpo / fspo."""


def no_tools(config, checklists: dict[str, list[str]] | None = None) -> RewardTools:
    """The builder of a method that uses nothing besides the verifier (grpo, caution)."""
    return RewardTools()


def nothing_to_read(config) -> None:
    """The preflight of a method that reads no file of its own."""


@dataclass(frozen=True)
class RewardMethod:
    """A reward source: `score(batch, section, verifier, tools) -> MethodResult`, where `section` is
    config.<section> (None when the method has none) and `tools` the run's `RewardTools`."""

    score: Callable[..., MethodResult]
    section: str | None = None
    needs_verifier: bool = False
    flips: bool = True
    """Whether '<name>+fspo' (the FSPO flip on top) is allowed."""
    tools: Callable[..., RewardTools] = no_tools
    """`tools(config, checklists=None) -> RewardTools`: what `score` reads besides the verifier, built from the whole
    config; `checklists` are KLCF checklists the caller already holds (the playground's), else read from the config."""
    preflight: Callable[[Any], None] = nothing_to_read
    """`preflight(config)`: reads what the method needs from disk and raises FileNotFoundError / ValueError, in one
    line, when it is missing or wrong; cheap, run with the settings' checks before any model loads."""
    needs_verdicts: bool = False
    """Whether `score` reads the verifier's sentence labels (RewardBatch.verdicts); implies needs_verifier."""
    about: str = ""
    """One line on what the method pays (`fspo-lite list methods`)."""


def outcome_method(batch: RewardBatch, section: Any, verifier, tools) -> MethodResult:
    """GRPO / FSPO: the outcome reward (grading.outcome_reward) as it is."""
    return MethodResult(torch.tensor([o.reward for o in batch.outcomes], dtype=torch.float32),
                        details=[{} for _ in batch.views])


def random_method(batch: RewardBatch, section: Any, verifier, tools) -> MethodResult:
    """The control `random`: a fair coin per well-formed response (methods.truth.coin_rewards)."""
    rewards = coin_rewards([o.format_ok for o in batch.outcomes], batch.seed, batch.step, batch.format_penalty)
    return MethodResult(torch.tensor(rewards, dtype=torch.float32), details=[{} for _ in batch.views])


def format_method(batch: RewardBatch, section: Any, verifier, tools) -> MethodResult:
    """The control `format`: 1 per well-formed response (methods.truth.format_rewards)."""
    rewards = format_rewards([o.format_ok for o in batch.outcomes], batch.format_penalty)
    return MethodResult(torch.tensor(rewards, dtype=torch.float32), details=[{} for _ in batch.views])


def binary_method(batch: RewardBatch, section: Any, verifier, tools) -> MethodResult:
    """Binary RAR: a correct answer is paid only when the verifier finds none of its reasoning sentences
    unsupported (methods.truth.binary_rewards)."""
    outcomes, labels = batch.outcomes, [v.labels for v in batch.verdicts]
    rewards = binary_rewards([o.format_ok for o in outcomes], [o.correct for o in outcomes], labels,
                             batch.format_penalty)
    vetoed = [o.format_ok and o.correct and -1 in row for o, row in zip(outcomes, labels)]
    metrics = {"binary_vetoed_share": sum(vetoed) / max(sum(o.format_ok and o.correct for o in outcomes), 1)}
    return MethodResult(torch.tensor(rewards, dtype=torch.float32), None,
                        [{"vetoed": flag} for flag in vetoed], metrics)


def ternary_method(batch: RewardBatch, section: Any, verifier, tools) -> MethodResult:
    """TruthRL's ternary reward: correct +1, "Unknown" 0, wrong -1 (methods.truth.ternary_rewards)."""
    outcomes = batch.outcomes
    rewards = ternary_rewards([o.format_ok for o in outcomes], [o.correct for o in outcomes],
                              [o.unknown for o in outcomes], batch.format_penalty)
    return MethodResult(torch.tensor(rewards, dtype=torch.float32), details=[{} for _ in batch.views])


def caution_method(batch: RewardBatch, caution, verifier, tools) -> MethodResult:
    """Group-aware caution rewards (methods.caution) and their metrics. `caution` is config.caution."""
    categories = [
        answer_category(o.format_ok, o.correct, o.unknown, o.f1,
                        caution.process_in_reasoning and contains_answer(think_text(text), e.answers),
                        caution.process_f1)
        for e, text, o in zip(batch.examples, batch.texts, batch.outcomes)
    ]
    phase = caution_phase(caution.variant, batch.step, caution.switch_step, batch.total_steps)
    size = batch.group_size
    rewards = []
    for start in range(0, len(categories), size):
        rewards += caution_group_rewards(categories[start : start + size], phase, caution.correct_reward,
                                         caution.process_reward, caution.unknown_reward, batch.format_penalty)
    metrics = {"process_correct_rate": categories.count(PROCESS) / len(categories), "caution_phase": phase}
    return MethodResult(torch.tensor(rewards), None, [{"category": c} for c in categories], metrics)


def think_text(text: str) -> str:
    """The text inside a response's <think>...</think> ('' when there is none)."""
    span = parse_response(text).think_span
    return text[span[0] : span[1]] if span else ""


def rlfh_method(batch: RewardBatch, config, verifier, tools) -> MethodResult:
    """RLFH token rewards (methods.rlfh) plus the outcome/format term on the final token, clipped per token.
    `config` is config.rlfh."""
    completion_mask, examples, views = batch.completion_mask, batch.examples, batch.views
    lengths = [int(n) for n in completion_mask.sum(dim=1).tolist()]
    feedback = rlfh.rlfh_feedback(examples, views, lengths, tools.extractor, verifier, tools.informativeness, config)
    token_rewards = torch.zeros(completion_mask.shape, dtype=torch.float32)
    for row, (item, outcome, length) in enumerate(zip(feedback, batch.outcomes, lengths)):
        token_rewards[row, :length] = torch.tensor(item.token_rewards, dtype=torch.float32)
        if length:
            final = config.outcome_weight * outcome.reward if outcome.format_ok else batch.format_penalty
            token_rewards[row, length - 1] += final
    clip = config.reward_clip
    token_rewards = token_rewards.clamp(-clip, clip) * completion_mask.to(token_rewards.dtype)
    labels = [label for item in feedback for label in item.labels]
    infos = [level for item in feedback for level in item.infos]
    metrics = {
        "rlfh_statements": len(labels),
        "rlfh_unlocated": sum(item.unlocated for item in feedback),
        "rlfh_unplaced": sum(item.unplaced for item in feedback),
        "rlfh_correct_share": share(labels, (rlfh.CORRECT, rlfh.HEDGED_CORRECT)),
        "rlfh_wrong_share": share(labels, (rlfh.WRONG, rlfh.HEDGED_WRONG)),
        "rlfh_info_mean": sum(infos) / len(infos) if infos else float("nan"),
    }
    details = [{"statements": [s.text for s in item.statements], "labels": item.labels, "infos": item.infos,
                "truth_rewards": item.truth_rewards, "info_rewards": item.info_rewards,
                "unlocated": item.unlocated, "unplaced": item.unplaced} for item in feedback]
    return MethodResult(token_rewards.sum(dim=1), token_rewards, details, metrics)


def share(labels: list[str], wanted: tuple[str, ...]) -> float:
    """Share of `labels` in `wanted` (NaN for no labels)."""
    return sum(label in wanted for label in labels) / len(labels) if labels else float("nan")


def klcf_method(batch: RewardBatch, klcf, verifier, tools) -> MethodResult:
    """KLCF recall/precision (+ reward model) rewards (methods.klcf); malformed responses get the format penalty.
    `klcf` is config.klcf."""
    examples, texts = batch.examples, batch.texts
    checklists = [tools.checklists.get(e.id, []) for e in examples]
    scores = klcf_scores(texts, checklists, [e.evidence for e in examples], [e.question for e in examples],
                         tools.extractor, verifier, klcf.match_threshold)
    rm_scores = (tools.reward_model.score([e.question for e in examples], texts) if tools.reward_model
                 else [0.0] * len(texts))
    rewards = [
        klcf_reward(recall, precision, klcf, rm, outcome.reward) if outcome.format_ok else batch.format_penalty
        for (recall, precision, _), rm, outcome in zip(scores, rm_scores, batch.outcomes)
    ]
    metrics = {
        "klcf_recall": sum(s[0] for s in scores) / len(scores),
        "klcf_precision": sum(s[1] for s in scores) / len(scores),
        "klcf_claims_per_response": sum(s[2] for s in scores) / len(scores),
        "klcf_empty_checklist_share": sum(not c for c in checklists) / len(checklists),
    }
    if tools.reward_model:
        metrics["klcf_reward_model"] = sum(rm_scores) / len(rm_scores)
    details = [{"recall": r, "precision": p, "claims": n, "checklist": c}
               for (r, p, n), c in zip(scores, checklists)]
    return MethodResult(torch.tensor(rewards, dtype=torch.float32), None, details, metrics)


def rlfh_tools(config, checklists: dict[str, list[str]] | None = None) -> RewardTools:
    """RLFH's claim extractor (reward.claim_extractor) and its rule-based informativeness scorer."""
    return RewardTools(build_claim_extractor(config.reward.claim_extractor, config.verifier),
                       RuleBasedInformativeness(config.rlfh.crucial_overlap))


def klcf_tools(config, checklists: dict[str, list[str]] | None = None) -> RewardTools:
    """KLCF's claim extractor, checklists (`checklists` when given, else the file klcf.checklist_path) and
    reward model (klcf.reward_model; None when unset)."""
    return RewardTools(build_claim_extractor(config.reward.claim_extractor, config.verifier),
                       checklists=checklists if checklists is not None else load_checklists(config.klcf.checklist_path),
                       reward_model=build_reward_model(config.klcf.reward_model))


def klcf_preflight(config) -> None:
    """KLCF's checklists are read from klcf.checklist_path: the file must exist and be a checklist file."""
    load_checklists(config.klcf.checklist_path)


METHODS: dict[str, RewardMethod] = {
    "grpo": RewardMethod(outcome_method, about="the outcome reward: answer F1 (QA) or equivalence (math)"),
    "caution": RewardMethod(caution_method, section="caution",
                            about="the caution table: correct answers, or \"Unknown\" when no answer is correct"),
    "rlfh": RewardMethod(rlfh_method, section="rlfh", needs_verifier=True, flips=False, tools=rlfh_tools,
                         about="RLFH: token rewards from each statement's truthfulness and informativeness"),
    "klcf": RewardMethod(klcf_method, section="klcf", needs_verifier=True, tools=klcf_tools, preflight=klcf_preflight,
                         about="KLCF: checklist recall plus claim precision"),
    "random": RewardMethod(random_method, flips=False, about="a control: a fair coin per well-formed response"),
    "format": RewardMethod(format_method, flips=False, about="a control: 1 per well-formed response"),
    "binary": RewardMethod(binary_method, needs_verifier=True, needs_verdicts=True,
                           about="Binary RAR: a correct answer paid only when no reasoning sentence is unsupported"),
    "ternary": RewardMethod(ternary_method, about="TruthRL: +1 correct, 0 \"Unknown\", -1 wrong"),
}
"""The reward sources by name (reward.method is one of them, or '<name>+fspo'; 'fspo' is 'grpo+fspo')."""

REWARD_METHODS: tuple[str, ...] = method_names({source: method.flips for source, method in METHODS.items()})
"""Every valid reward.method: each source, and its FSPO-flipped form where allowed."""


def method_summaries() -> dict[str, str]:
    """Every valid reward.method with one line on what it pays (the CLI's `list methods`)."""
    out = {}
    for name in REWARD_METHODS:
        source = "grpo" if name == "fspo" else name.removesuffix("+fspo")
        about = METHODS[source].about
        out[name] = about + (", with FSPO's sentence-wise advantage flip" if name.endswith("fspo") else "")
    return out
