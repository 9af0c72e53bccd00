"""The config schema: one dataclass section per stage of a run, each field with its default and what it does.

Loadable from YAML and overridable with dotted ``key=value`` strings (`load_config`; the reading is in
`fspo_lite.config_load`); unknown keys are an error that lists the valid ones, so a typo never silently falls back to
a default, and every value is range-checked (`fspo_lite.config_checks`) against what its field here accepts: a
numeric key's range (`ranged`) or a word key's words (`one_of`), stated once, where the key is. docs/performance.md
gives the measured effect of each speed setting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fspo_lite.algos import LOSS_AGGREGATIONS
# The checks and the loader, re-exported: code outside the package imports them from here.
from fspo_lite.config_checks import (COUNT, INDEX, NONNEGATIVE, RANGE, REWARD_SOURCES, SEED, SHARE,  # noqa: F401
                                     TIMEOUT, VERIFIER_NAMES, WEIGHT, WORDS, ConfigError, Range,
                                     check_training_settings, key_table, one_of, ranged, split_method, validate_band,
                                     validate_config)
from fspo_lite.config_checks import numeric_keys as section_numeric_keys
from fspo_lite.config_load import (ConfigLoader, apply_overrides, apply_shortcuts, build_sections,  # noqa: F401
                                   from_dict, load, parse_yaml, parse_yaml_file, parsed_overrides, split_override)

FORMAT_INSTRUCTION = "Think inside <think> </think>, then give the final answer inside <answer> </answer>."
"""The reply format every prompt asks for: the default system prompt's and the prompt sweep's (fspo_lite.text
parses it)."""


@dataclass
class ModelConfig:
    """Which policy to train and how to adapt it."""

    name: str = "smollm2-135m"  # 'smollm2-135m' (bundled, offline), 'tiny' (random weights), a hub id or a folder
    dtype: str = one_of("float32", "bfloat16", "float16")  # docs/gpu.md: which dtype a GPU computes in
    lora: bool = True  # train a LoRA adapter (true) or all weights (false)
    lora_r: int = ranged(16, Range(1, 4096, note="the LoRA rank"))
    lora_alpha: int = ranged(32, Range(0, 1e6, low_open=True, note="the LoRA scale is lora_alpha / lora_r; 0 disables "
                                       "the adapter"))
    # dropout on the adapter's input
    lora_dropout: float = ranged(0.0, Range(0, 1, high_open=True, note="a dropout probability; 1 drops everything"))
    lora_target_modules: list[str] = field(  # the projections that get an adapter
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    adapter_path: str | None = None  # start from a saved adapter: a PEFT folder, a checkpoint folder or a hub id
    trust_remote_code: bool = False  # let a hub model run its own code; off: that code would run on your machine
    gradient_checkpointing: bool | None = None  # recompute activations in backward; null: on above 1B parameters
    load_in_4bit: bool = False  # QLoRA: 4-bit NF4 base weights through bitsandbytes; needs lora
    backend: str = one_of("transformers", "unsloth")  # unsloth: GPU only (its 4-bit loading, LoRA kernels and vLLM)


@dataclass
class DataConfig:
    """Where questions come from and how prompts are built."""

    # 'bundled:<name>', a .jsonl/.parquet path or 'hf:<id>[:config][@split]'; mix with ' + ', subset with '[N]'
    train: str = "bundled:kbqa_train"
    eval: str = "bundled:kbqa_test"  # held-out QA set: the source of the `kbqa` evaluation benchmark
    limit: int | None = ranged(None, COUNT)  # use only the first N training examples (after shuffling with the seed)
    skip_bad_rows: bool = False  # skip and count malformed rows instead of stopping at the first one
    system_prompt: str = f"You are a careful assistant. {FORMAT_INSTRUCTION}"  # the system turn of every prompt
    # worked examples shown as earlier chat turns; small models need them to use the tags
    few_shot: int = ranged(2, Range(0, 2, note="0, 1 or 2 worked examples"))
    response_prefix: str = "<think>"  # opens the assistant turn; the reply is parsed as prefix + completion
    evidence_in_prompt: bool = False  # show the evidence to the policy; off: closed-book, as in the FSPO paper
    max_prompt_tokens: int = ranged(512, COUNT)  # longer prompts are cut to this many tokens
    filter_path: str | None = None  # a difficulty-filter file (`fspo_lite filter`): train only on its kept questions


@dataclass
class RolloutConfig:
    """How responses are sampled (its speed settings are the speed section's)."""

    # vllm: GPU only; vllm-server: an OpenAI-compatible server
    engine: str = one_of("transformers", "vllm", "vllm-server")
    group_size: int = ranged(8, COUNT)  # G: responses sampled per prompt; advantages are relative within a group
    max_new_tokens: int = ranged(256, COUNT)  # longest sampled completion
    temperature: float = ranged(1.0, Range(0, 10, note="0: greedy"))  # sampling temperature
    # nucleus sampling: draw from the smallest set of tokens holding this probability
    top_p: float = ranged(1.0, Range(0, 1, low_open=True))
    generation_batch_size: int = ranged(64, COUNT)  # sequences generated at once (vLLM's max_num_seqs)
    use_sampler_logprobs: bool = False  # ppo_epochs=1 only: pi_old from the sampler's log-probs (docs/gpu.md)
    draw: str = one_of("multinomial", "exponential_race")  # how the decoding loops draw (multinomial: generate's draw)
    # share of GPU memory the colocated vLLM engine may take
    vllm_gpu_memory_utilization: float = ranged(0.4, Range(0, 1, low_open=True, note="a share of GPU memory"))
    vllm_enable_sleep_mode: bool = False  # put vLLM to sleep between rollouts so training gets its memory
    vllm_max_lora_rank: int | None = ranged(None, Range(1, 4096))  # largest LoRA rank vLLM reserves; null: model.lora_r
    vllm_server_url: str | None = None  # rollout.engine=vllm-server: the server's base URL (started with --enable-lora)
    vllm_server_timeout: float = ranged(600.0, TIMEOUT)  # seconds one request to the server may take in all


@dataclass
class RewardConfig:
    """How responses are scored and turned into advantages."""

    method: str = "fspo"  # reward source, optionally '+fspo' for FSPO's flip: grpo | fspo | caution | rlfh | klcf ...
    answer_metric: str = one_of("auto", "f1", "em")  # auto: F1 for QA, exact equivalence for math
    format_penalty: float = ranged(-2.0, WEIGHT)  # reward of a response whose <think>/<answer> tags are malformed
    log_step_factuality: bool = True  # verify reasoning sentences for every method, to compare step factuality
    # FSPO option: add lambda x the step score to the reward (0: published)
    step_reward_lambda: float = ranged(0.0, WEIGHT)
    strict_checkable: bool = False  # FSPO option: no positive advantage for reasoning with no checkable sentence
    claim_extractor: str = one_of("rules", "llm")  # how RLFH and KLCF split sentences into statements


@dataclass
class CautionConfig:
    """Factuality GRPO with a caution ("Unknown") reward (reward.method=caution; docs/algorithms.md section 3)."""

    # fact: correctness only; fact_then_caution: fact, then caution
    variant: str = one_of("both", "fact", "caution", "fact_then_caution")
    # fact_then_caution: first step of the caution phase; null: half of train.steps
    switch_step: int | None = ranged(None, INDEX)
    correct_reward: float = ranged(1.0, WEIGHT)  # reward of a correct answer
    process_reward: float = ranged(0.5, WEIGHT)  # reward of a "process correct" answer in a group with a correct one
    unknown_reward: float = ranged(1.0, WEIGHT)  # reward of "Unknown" when no response of the group is correct
    # a wrong answer is process correct when its token F1 with a gold answer is this high...
    process_f1: float = ranged(0.5, SHARE)
    process_in_reasoning: bool = True  # ... or when a gold answer appears as whole words in its reasoning


@dataclass
class RLFHConfig:
    """RLFH token-level rewards from statement-level feedback (reward.method=rlfh; docs/algorithms.md section 4)."""

    # where rewards land: token (each statement's last word), sentence or paragraph
    granularity: str = one_of("token", "sentence", "paragraph")
    truth_weight: float = ranged(1.0, WEIGHT)  # w_t in r_truth(s) = w_t * V[label] * |I[info]|
    info_weight: float = ranged(1.2, WEIGHT)  # w_i in r_info(S) = w_i * ln(max(-0.9, sum of I over S's statements) + 1)
    truth_correct: float = ranged(0.45, WEIGHT)  # V[Correct]: supported by the evidence
    truth_hedged_correct: float = ranged(0.35, WEIGHT)  # V[Hedged correct]: supported, stated with a hedge
    truth_vague: float = ranged(-1.0, WEIGHT)  # V[Vague]: the verifier cannot decide
    truth_hedged_wrong: float = ranged(-1.5, WEIGHT)  # V[Hedged wrong]: contradicted or unsupported, with a hedge
    truth_wrong: float = ranged(-1.7, WEIGHT)  # V[Wrong]: contradicted or unsupported
    info_answer: float = ranged(1.25, WEIGHT)  # I[5]: the statement answers the question
    info_crucial: float = ranged(1.0, WEIGHT)  # I[4]: crucial for the answer
    info_relevant: float = ranged(0.75, WEIGHT)  # I[3]: relevant to the question
    info_supplementary: float = ranged(0.1, WEIGHT)  # I[2]: supplementary detail
    info_useless: float = ranged(-0.2, WEIGHT)  # I[1]: useless for the question
    correct_threshold: float = ranged(0.5, SHARE)  # P(supported) above this: Correct (or Hedged correct)
    # P(supported) at or below this: Wrong (or Hedged wrong); between the two thresholds: Vague
    wrong_threshold: float = ranged(0.2, SHARE)
    hedge_words: list[str] = field(default_factory=lambda: [  # words that make a statement hedged (whole words)
        "probably", "possibly", "perhaps", "maybe", "might", "may be", "likely", "could be", "i think",
        "i believe", "i guess", "not sure", "seems", "appears to",
    ])
    crucial_overlap: float = ranged(0.5, SHARE)  # share of the question's content words that makes a statement crucial
    reward_clip: float = ranged(10.0, Range(0, 1e6, low_open=True,
                                            note="token rewards are clipped to [-reward_clip, reward_clip]"))
    # add this x the outcome reward (answer F1) on the final token (0: published)
    outcome_weight: float = ranged(0.0, WEIGHT)


@dataclass
class KLCFConfig:
    """KLCF dual-fact rewards: checklist recall and claim precision (reward.method=klcf; docs/algorithms.md section 5)."""

    checklist_path: str | None = None  # the checklist file of `fspo_lite klcf-checklist` (needed by klcf)
    checklist_samples: int = ranged(4, COUNT)  # base-model responses sampled per training question for its checklist
    checklist_threshold: float = ranged(0.5, SHARE)  # a base-model claim enters the checklist when P(supported) > this
    dedup_overlap: float = ranged(0.8, SHARE)  # checklist claims with this content-word Jaccard overlap are duplicates
    match_threshold: float = ranged(0.5, SHARE)  # a checklist fact counts as stated when P(fact | response) > this
    recall_weight: float = ranged(1.0, WEIGHT)  # weight of the recall reward (share of checklist facts stated)
    precision_weight: float = ranged(1.0, WEIGHT)  # weight of the precision reward (mean P(supported) of the claims)
    reward_model: str | None = None  # an optional general reward model (a local sequence-classification folder)
    reward_model_weight: float = ranged(0.0, WEIGHT)  # weight of the general reward model's score
    outcome_weight: float = ranged(0.0, WEIGHT)  # add this x the outcome reward (answer F1); 0: published (no gold)


@dataclass
class DetailConfig:
    """A detail term added to any method's reward so that saying less does not pay (docs/methods.md); off by default."""

    weight: float = ranged(0.0, NONNEGATIVE)  # weight of log(1 + S), S = distinct supported reasoning sentences; 0: off
    cap: int = ranged(8, COUNT)  # at most this many supported sentences count, so length cannot buy reward
    duplicate_threshold: float = ranged(0.8, SHARE)  # sentences with word-set Jaccard similarity this high count once
    # weight of S / (T + 1), T = judged sentences of the response (0: off)
    precision_weight: float = ranged(0.0, NONNEGATIVE)
    # weight of P(the response addresses the question) from relevance_judge (0: off)
    relevance_weight: float = ranged(0.0, WEIGHT)
    # null: off; llm: a chat model asked whether the response addresses the question
    relevance_judge: str | None = one_of("llm", default=None)
    relevance_model: str | None = None  # the llm relevance judge's local model (null: the bundled smollm2-135m)


@dataclass
class FilterConfig:
    """Difficulty filtering: `python -m fspo_lite filter` (docs/algorithms.md section 3.4)."""

    samples: int = ranged(16, COUNT)  # k: base-model answers sampled per training question
    top: int | None = ranged(None, COUNT)  # keep the N most varied questions; neither top nor band: 0 < success < 1
    band: list[float] | None = None  # keep questions whose success rate lies in [low, high], e.g. [0.2, 0.8]
    output: str = "results/filter.json"  # where the statistics and kept ids are cached (for data.filter_path)


@dataclass
class VerifierConfig:
    """The step verifier that FSPO uses to label reasoning sentences (docs/verifiers.md compares them)."""

    name: str = "lexical"  # lexical (offline) | embedding | likelihood | nli | hhem | llm | kb (kbqa only)
    threshold: float = ranged(0.5, SHARE)  # a sentence is factual iff P(supported) > threshold
    batch_size: int = ranged(32, COUNT)  # (evidence, sentence) pairs per forward pass of a model-based verifier
    model: str | None = None  # model id or folder of a model-based verifier; null: each one's default
    device: str = "auto"  # auto (CUDA when available, else CPU) | cpu | cuda | cuda:N
    trust_remote_code: bool = False  # let a hub model run its own code (HHEM needs it)
    max_evidence_tokens: int = ranged(400, COUNT)  # longer evidence is cut (nli, hhem, llm) or split (embedding)
    server_url: str | None = None  # llm verifier: an OpenAI-compatible server's base URL; null: a local model
    server_model: str | None = None  # llm verifier: the model name the server expects (null: its first)
    api_key_env: str | None = None  # llm verifier: the environment variable holding the server's API key
    request_timeout: float = ranged(60.0, TIMEOUT)  # llm verifier: seconds to wait for one server reply


@dataclass
class TrainConfig:
    """The optimisation loop (docs/algorithms.md section 1; its speed settings are the speed section's)."""

    steps: int = ranged(50, COUNT)  # training steps
    prompts_per_step: int = ranged(4, COUNT)  # questions per step, each sampled group_size times
    learning_rate: float = ranged(1e-5, Range(0, 1, low_open=True))  # AdamW's learning rate
    weight_decay: float = ranged(0.0, Range(0, 10))  # AdamW's weight decay
    beta: float = ranged(0.0, NONNEGATIVE)  # KL coefficient (k3 estimator); 0 skips the reference forward pass
    epsilon_low: float = ranged(0.2, Range(0, 1, high_open=True,
                                           note="the ratio's lower clip 1 - epsilon_low must stay above 0"))
    epsilon_high: float = ranged(0.2, Range(0, 10, note="0.2 in GRPO, 0.28 in DAPO"))  # upper clip: 1 + epsilon_high
    scale_by_std: bool = True  # divide group advantages by the group std (GRPO); false: Dr.GRPO's centring
    loss_aggregation: str = one_of(*LOSS_AGGREGATIONS)  # fspo_lite.algos.aggregate_loss computes each
    ppo_epochs: int = ranged(1, Range(1, 1000))  # mu: passes over each batch of rollouts (1: pi_old = pi_theta)
    micro_batch_size: int = ranged(8, COUNT)  # sequences per forward/backward; gradients accumulate over the step
    # gradients are clipped to this total norm
    max_grad_norm: float = ranged(1.0, Range(0, 1e6, low_open=True, note="a negative one would reverse the update"))
    seed: int = ranged(0, SEED)  # seeds data order, sampling and initialisation
    output_dir: str = "runs/default"  # where the run's metrics, samples and checkpoints go
    save_every: int = ranged(0, Range(0, 10**9, note="0: only at the end"))  # checkpoint every N steps
    resume: bool = False  # continue from the latest checkpoint in output_dir
    max_bad_steps: int = ranged(3, Range(1, 10**9, note="consecutive non-finite steps tolerated before the run stops"))
    tensorboard: bool = False  # also write TensorBoard logs
    entropy_coef: float = ranged(0.0, NONNEGATIVE)  # entropy bonus: the loss subtracts this x the mean token entropy
    fsdp: bool = False  # shard weights, gradients and optimizer state over torchrun's processes (docs/gpu.md)


@dataclass
class SpeedConfig:
    """Work saved on some hardware, never a change of what is computed beyond float rounding (fspo_lite.speed;
    docs/performance.md, "What each lever does")."""

    # auto: the switches below as set; off: the plain reference rollout and log-prob passes
    mode: str = one_of("auto", "off")
    share_prompt_prefill: bool = True  # rollout: encode each distinct prompt once for its G samples
    share_prompt_prefix: bool = True  # rollout: encode the start every prompt of a batch shares once (16+ tokens)
    merge_lora_for_generation: bool = True  # rollout: sample with each adapter merged into a copy of its weights
    drop_ended_rows: bool = True  # rollout: the fast decoding loop, a row leaves once ended (false: generate)
    packed_weights: bool | None = None  # rollout: decode on MKL-packed float32 weights; null: on Intel CPUs only
    # rollout: sample from the policy or from a copy in bfloat16 (needs rollout.use_sampler_logprobs)
    sampler_dtype: str = one_of("policy", "bfloat16")
    share_prompt_pass: bool = True  # update: each distinct prompt and the rollout's common start run once
    group_by_length: bool = True  # update: micro-batches longest first, each only as wide as its longest
    fused_lora: bool = True  # update: each plain LoRA projection as one autograd node with its scale folded in
    grouped_query_sdpa: bool = True  # update, on a CPU: grouped key/value heads go to torch's kernel as they are
    keep_freed_memory: bool = True  # update, on Linux/glibc: malloc keeps freed memory for the next step


@dataclass
class EvalConfig:
    """Hallucination benchmarks: `python -m fspo_lite eval` (docs/evaluation.md); the model is the model section's."""

    benchmarks: list[str] = field(default_factory=lambda: [  # benchmark names; the default list runs offline
        "kbqa", "multihop", "truthfulqa_mc", "truthfulqa_gen", "halueval"])
    limit: int | None = ranged(None, COUNT)  # use only N items of each benchmark: the first N, or N at random (shuffle)
    shuffle: bool = False  # with limit: draw the N items at random (seeded by seed)
    samples: int = ranged(1, Range(1, 10_000))  # k: answers sampled per question; k > 1 needs temperature > 0
    temperature: float = ranged(0.0, Range(0, 10, note="0: greedy"))  # above 0: sampling at this temperature
    max_new_tokens: int = ranged(256, COUNT)  # longest generated answer
    batch_size: int = ranged(16, COUNT)  # sequences per generate or scoring forward pass
    seed: int = ranged(0, SEED)  # seeds sampling and HaluEval's candidate draw
    step_verifier: str = "embedding"  # judge of reasoning sentences; not training's default, to avoid self-grading
    judge: str = one_of("similarity", "overlap", "llm")  # the judge of free-form answers
    judge_model: str | None = None  # llm judge: a model name or folder (null: the bundled smollm2-135m)
    sources: dict[str, str] = field(default_factory=dict)  # per-benchmark data, e.g. {truthfulqa_mc: file.jsonl}
    output_dir: str = "runs/eval"  # where summary.json, table.csv and records.jsonl are written
    extra_step_verifiers: list[str] = field(default_factory=list)  # more judges of the reasoning, reported apart
    evidence_in_prompt: bool | None = None  # null: as data.evidence_in_prompt; true/false: held-out prompts show/hide it


@dataclass
class Config:
    """The whole config: one section per stage."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    caution: CautionConfig = field(default_factory=CautionConfig)
    rlfh: RLFHConfig = field(default_factory=RLFHConfig)
    klcf: KLCFConfig = field(default_factory=KLCFConfig)
    detail: DetailConfig = field(default_factory=DetailConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        """`Config(train={"steps": 2})` builds the section as a config file's is, a section of any other type is
        refused, and the whole config is checked: code that builds a config stops where a config file or the CLI
        would, in the same one-line ConfigError."""
        build_sections(self)
        validate_config(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        """The config as YAML, credentials in URLs redacted (`redacted`), written atomically: a link at `path` is
        replaced, never written through."""
        from fspo_lite.atomic import atomic_write_text
        from fspo_lite.config_load import redacted

        atomic_write_text(path, yaml.safe_dump(redacted(self.to_dict()), sort_keys=False))


NUMBER_RANGES: dict[str, Range] = key_table(Config, RANGE)
"""Every numeric key -> its valid range, as its field above gives it (`ranged`): read here, written nowhere else
(tests/test_hostile_inputs.py checks that every int and float field has one)."""
CHOICES: dict[str, tuple[str, ...]] = key_table(Config, WORDS)
"""Every word key -> the words it accepts, as its field above gives them (`one_of`): the modules that act on a word
read their tuple from here (tests/test_config_tables.py fails on a second copy). The names of reward.method and
verifier.name are config_checks.REWARD_SOURCES and VERIFIER_NAMES; benchmark names are checked by the evaluation,
before any model loads."""


def load_config(path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None) -> Config:
    """A YAML config (or the defaults when path is None) with overrides applied and every value range-checked."""
    return load(Config, path, overrides)


def config_from_dict(values: dict[str, Any] | None) -> Config:
    """A Config from nested plain data (a parsed YAML file), every key checked."""
    return from_dict(Config, values)


def parse_overrides(texts: list[str]) -> dict[str, Any]:
    """'section.key=value' strings as a checked flat {'section.key': value} dict (e.g. for notebook parameters)."""
    return parsed_overrides(Config, texts)


def numeric_keys() -> dict[str, tuple[bool, bool]]:
    """Every numeric config key -> (integer, nullable), read off the dataclasses."""
    return section_numeric_keys(Config)
