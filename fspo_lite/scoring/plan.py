"""The scoring plan: what scoring a step does, decided once from the config (`scoring_plan`).

A step's responses are scored in one direction (fspo_lite.scoring.rewards.score_rollouts): views -> outcome and the
reward of one source -> the verifier's sentence verdicts, when the plan needs them -> the additive terms that rest
on the verdicts -> the FSPO sentence mask, when the plan flips. The plan says, for one run:

- `source`: where the reward comes from, one entry of the table `methods.METHODS` (grpo, caution, rlfh, klcf,
  random, format, binary, ternary);
- `flip`: whether FSPO flips the advantages of tokens in unsupported sentences (the '+fspo' of reward.method);
- `verdicts`: whether the verifier labels the reasoning sentences at all;
- the additive terms on top of the source's reward: the detail term (`detail`), the relevance term (`relevance`),
  both in fspo_lite.scoring.methods.detail, and FSPO's step reward (`step_reward_lambda`, 0 when off).

`parse_method` takes reward.method apart (the grammar is `config_checks.method_source`, the names are the METHODS
table's; the config layer holds the same names as data, `config_checks.REWARD_SOURCES`, so that load_config and
Config(...) refuse an unknown one whatever was imported); `check_settings` runs every check of a run's settings
before any data or model loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from fspo_lite.config_checks import ConfigError, check_training_settings, method_source, validate_config
from fspo_lite.scoring.methods import METHODS


@dataclass(frozen=True)
class MethodSpec:
    """A reward.method string taken apart: where the reward comes from, and whether FSPO flips advantages."""

    source: str
    flip: bool


def parse_method(name: str) -> MethodSpec:
    """'fspo' -> (grpo, flip), 'caution+fspo' -> (caution, flip), 'rlfh' -> (rlfh, no flip), ...; ValueError listing
    every valid reward.method for anything else (no name, two sources, an unknown source, rlfh with the flip)."""
    return MethodSpec(*method_source(name, {source: method.flips for source, method in METHODS.items()}))


@dataclass(frozen=True)
class ScoringPlan:
    """What scoring a step does, for one run (`scoring_plan`; the module docstring lists the fields' roles)."""

    source: str
    """The reward source: a key of methods.METHODS."""
    section: str | None
    """The config section the source reads (its METHODS entry's `section`; None when it reads none)."""
    flip: bool
    """FSPO's flip: the sentence mask is built and the advantages of unsupported sentences' tokens change sign."""
    verdicts: bool
    """The verifier labels each response's reasoning sentences (for the flip, the detail term, a source that reads
    them (Binary RAR) or the logged step factuality, reward.log_step_factuality); never without a verifier."""
    detail: bool
    """The detail term is added (`detail_on`: detail.weight or detail.precision_weight not 0); off, no detail counts
    or near-duplicate flags are computed."""
    relevance: bool
    """The relevance term is added (`relevance_on`: detail.relevance_weight not 0); off, no relevance judge is built
    or asked."""
    step_reward_lambda: float
    """The weight of FSPO's step score added to the reward (reward.step_reward_lambda with the flip, else 0)."""


def detail_on(detail) -> bool:
    """Whether config.detail turns the detail term on: detail.weight or detail.precision_weight not 0."""
    return bool(detail.weight or detail.precision_weight)


def relevance_on(detail) -> bool:
    """Whether config.detail turns the relevance term on: detail.relevance_weight not 0."""
    return bool(detail.relevance_weight)


def scoring_plan(reward, detail, verifier_present: bool) -> ScoringPlan:
    """The plan of a run from its `reward` and `detail` config sections and whether it has a verifier; ValueError
    when reward.method is not valid, or when the source or the detail term needs a verifier and there is none."""
    spec = parse_method(reward.method)
    method = METHODS[spec.source]
    detail_term = detail_on(detail)
    if (method.needs_verifier or method.needs_verdicts) and not verifier_present:
        raise ValueError(f"reward.method={reward.method} needs a verifier")
    if detail_term and not verifier_present:
        raise ValueError("detail.weight / detail.precision_weight need a verifier (verifier.name) to judge sentences")
    return ScoringPlan(
        source=spec.source, section=method.section, flip=spec.flip,
        verdicts=verifier_present and (spec.flip or bool(reward.log_step_factuality) or detail_term
                                       or method.needs_verdicts),
        detail=detail_term, relevance=relevance_on(detail),
        step_reward_lambda=reward.step_reward_lambda if spec.flip else 0.0,
    )


def check_settings(config) -> None:
    """Every check a run's settings get before any data or model loads: `validate_config` (ranges, words and the
    names of reward.method and verifier.name), `check_training_settings` (keys only training reads) and the files
    the reward method reads (its `preflight`: KLCF's checklist file); ConfigError naming the key or the file."""
    validate_config(config)
    check_training_settings(config)
    try:
        METHODS[parse_method(config.reward.method).source].preflight(config)
    except (OSError, ValueError) as error:
        raise ConfigError(str(error)) from None
