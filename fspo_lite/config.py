"""One config object for the CLI, the notebooks and papermill.

Plain dataclasses, loadable from YAML, overridable with dotted ``key=value`` strings.
Unknown keys are an error that lists the valid ones, so a typo never silently falls back
to a default.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from fspo_lite.algos import LOSS_AGGREGATIONS

FORMAT_INSTRUCTION = "Think inside <think> </think>, then give the final answer inside <answer> </answer>."
"""The reply format every prompt asks for: the default `data.system_prompt` and the prompt sweep's prompts end with
it (fspo_lite.text parses that format)."""


@dataclass
class ModelConfig:
    """Which policy to train and how to adapt it."""

    name: str = "smollm2-135m"
    """'smollm2-135m' (bundled GGUF, offline), 'tiny' (random weights, tests), a hub id or a local folder."""
    dtype: str = "float32"
    """float32 | bfloat16 | float16. CPUs want float32. On a GPU without native bfloat16 (T4, V100) bfloat16 is
    emulated (refused with rollout.engine=vllm); float16 training scales its loss (fspo_lite.models.precision)."""
    lora: bool = True
    """Train a LoRA adapter (True) or all weights (False)."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    adapter_path: str | None = None
    """Start from a saved LoRA adapter instead of a fresh one: a PEFT folder, a training checkpoint
    (<output_dir>/checkpoints/step-NNNNNN, whose model/ folder holds it) or a hub id."""
    trust_remote_code: bool = False
    """Never on by default: remote code runs on your machine."""
    gradient_checkpointing: bool | None = None
    """Recompute activations in the backward pass. None: on for models above 1B parameters, where
    activations dominate memory; off below, where it only costs about a third more compute."""
    load_in_4bit: bool = False
    """QLoRA: 4-bit NF4 base weights with double quantization through bitsandbytes; compute in float32 on a CPU,
    on a GPU in an explicit 16-bit model.dtype, else bfloat16 where native (compute capability 8.0 and newer), else
    float16 (T4, V100: fspo_lite.models.precision); needs model.lora."""
    backend: str = "transformers"
    """transformers | unsloth (GPU only: Unsloth's 4-bit loading, LoRA kernels and its vLLM for rollout.engine=vllm)."""


@dataclass
class DataConfig:
    """Where questions come from and how prompts are built."""

    train: str = "bundled:kbqa_train"
    """'bundled:<name>' (files in data/), a local .jsonl/.parquet path, or 'hf:<hub id>[:config][@split]'.
    Mix sources with ' + ' and take a seeded subset of one with '[N]': 'hotpot.jsonl[4000] + math.jsonl'."""
    eval: str = "bundled:kbqa_test"
    """Held-out short-answer QA set: the source of the `kbqa` evaluation benchmark (evaluation.sources.kbqa
    overrides it); any QA file works there (SimpleQA-style grades, decomposition, step hallucination)."""
    limit: int | None = None
    """Use only the first N training examples (after shuffling with the seed)."""
    skip_bad_rows: bool = False
    """Skip malformed rows of a data file and report how many, instead of stopping at the first one
    with an error naming its file, line and field."""
    system_prompt: str = f"You are a careful assistant. {FORMAT_INSTRUCTION}"
    few_shot: int = 2
    """Worked examples shown as earlier chat turns (0-2); small models need them to use the tags."""
    response_prefix: str = "<think>"
    """Text that opens the assistant turn; the reply is parsed as prefix + completion."""
    evidence_in_prompt: bool = False
    """Show the evidence to the policy. Off: closed-book, as in the FSPO paper (only the verifier sees it)."""
    max_prompt_tokens: int = 512
    filter_path: str | None = None
    """A difficulty-filter file (see `fspo_lite filter`); when set, train only on the kept questions."""


@dataclass
class RolloutConfig:
    """How responses are sampled."""

    engine: str = "transformers"
    """transformers | vllm (GPU only) | vllm-server (an OpenAI-compatible server)."""
    group_size: int = 8
    """G: responses sampled per prompt; advantages are relative within a group."""
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    generation_batch_size: int = 64
    """Sequences generated at once (prompts x samples). The colocated vLLM engine takes it as max_num_seqs, which also
    bounds the batch sizes it captures CUDA graphs for (fewer graphs: a shorter start-up)."""
    use_sampler_logprobs: bool = False
    """train.ppo_epochs=1 only: take pi_old from the sampler's log-probs instead of the detached current policy, so
    the ratio pi_theta/pi_sampler corrects (and the clip bounds) the numeric gap between the sampler and the
    trainer: vLLM's kernels, or the transformers engine's speed.sampler_dtype copy (its decoding loops return the
    log-probs). With mu > 1 the trainer computes pi_old itself (see docs/gpu.md)."""
    draw: str = "exponential_race"
    """transformers engine's decoding loops: how each token is drawn from the processed
    probabilities. exponential_race: the token with the largest p / E, E = -log U exponential numbers made from
    uniform ones; multinomial: torch.multinomial, the same race with exponential numbers from torch's own sampler,
    as transformers' generate draws, so that a seed gives generate's tokens. Both sample the same distribution, and
    both keep a run's tokens when the probabilities move in their last bits (another CPU); multinomial is the slower
    (docs/performance.md, "The token draw")."""
    vllm_gpu_memory_utilization: float = 0.4
    """Share of GPU memory the colocated vLLM engine may take (weights + KV cache); the trainer gets the rest."""
    vllm_enable_sleep_mode: bool = False
    """Put vLLM to sleep (level 1: weights to CPU RAM, KV cache freed) between rollouts so training gets its memory."""
    vllm_max_lora_rank: int | None = None
    """Largest LoRA rank vLLM reserves room for; None uses model.lora_r."""
    vllm_server_url: str | None = None
    """rollout.engine=vllm-server: base URL of an OpenAI-compatible vLLM server (e.g. http://localhost:8000),
    started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True on a machine that can read train.output_dir."""
    vllm_server_timeout: float = 600.0
    """Seconds one request to the server may take in all: connecting, the server's work and reading its whole answer
    (a server that sends a byte now and then is cut off too)."""
@dataclass
class RewardConfig:
    """How responses are scored and turned into advantages."""

    method: str = "fspo"
    """The reward source, optionally joined with '+fspo' for FSPO's sentence-wise advantage flip:
    grpo | fspo (= grpo+fspo) | caution | caution+fspo | rlfh | klcf | klcf+fspo (docs/methods.md)."""
    answer_metric: str = "auto"
    """auto (F1 for QA, exact equivalence for math) | f1 | em."""
    format_penalty: float = -2.0
    """Reward for a response whose <think>/<answer> tags are malformed (FSPO reference: -2)."""
    log_step_factuality: bool = True
    """Verify reasoning sentences for every method (not only FSPO) so runs can be compared on step
    factuality. Off saves the verifier's time when the method does not need it."""
    step_reward_lambda: float = 0.0
    """FSPO option: add lambda * step score (mean of +1/-1 over verified sentences) to the reward.
    0 is the published behaviour (the step score is only logged)."""
    claim_extractor: str = "rules"
    """How RLFH and KLCF split sentences into atomic statements: rules (offline clause splitting) | llm (a chat
    model named by verifier.model / verifier.server_url, as for the llm verifier; fspo_lite.scoring.claims)."""


@dataclass
class CautionConfig:
    """Factuality GRPO with a caution ("Unknown") reward (reward.method=caution; docs/algorithms.md section 3)."""

    variant: str = "both"
    """both (the seed's group-aware table) | fact (correctness only) | caution (only "Unknown" when no sample
    of the group is correct) | fact_then_caution (fact before switch_step, caution from it on)."""
    switch_step: int | None = None
    """fact_then_caution: the first step (0-based) of the caution phase; None means half of train.steps."""
    correct_reward: float = 1.0
    """Reward of a correct answer (exact match after normalisation, or math equivalence)."""
    process_reward: float = 0.5
    """Reward of a "process correct" answer (see process_f1 and process_in_reasoning) in a group with a correct one."""
    unknown_reward: float = 1.0
    """Reward of "Unknown" (fspo_lite.text.is_unknown) when no response of the group is correct."""
    process_f1: float = 0.5
    """A wrong, attempted answer is process correct when its token F1 with a gold answer is at least this ..."""
    process_in_reasoning: bool = True
    """... or when a gold answer appears as whole words in the reasoning (right reasoning, wrong final form)."""


@dataclass
class RLFHConfig:
    """RLFH token-level rewards from statement-level feedback (reward.method=rlfh; docs/algorithms.md section 4)."""

    granularity: str = "token"
    """token (each statement at its last word, sentence info at the sentence end) | sentence | paragraph."""
    truth_weight: float = 1.0
    """w_t in r_truth(s) = w_t * V[label] * |I[info]|."""
    info_weight: float = 1.2
    """w_i in r_info(S) = w_i * ln(max(-0.9, sum of I over S's statements) + 1)."""
    truth_correct: float = 0.45
    """V[Correct]: the statement is supported by the evidence."""
    truth_hedged_correct: float = 0.35
    """V[Hedged correct]: supported, but stated with a hedge ("probably", "I think", ...)."""
    truth_vague: float = -1.0
    """V[Vague]: the verifier cannot decide (nothing checkable, or support between the two thresholds)."""
    truth_hedged_wrong: float = -1.5
    """V[Hedged wrong]: contradicted or unsupported, stated with a hedge."""
    truth_wrong: float = -1.7
    """V[Wrong]: contradicted or unsupported by the evidence."""
    info_answer: float = 1.25
    """I[5]: the statement answers the question."""
    info_crucial: float = 1.0
    """I[4]: crucial for the answer."""
    info_relevant: float = 0.75
    """I[3]: relevant to the question."""
    info_supplementary: float = 0.1
    """I[2]: supplementary detail."""
    info_useless: float = -0.2
    """I[1]: useless for the question."""
    correct_threshold: float = 0.5
    """P(supported) above this: Correct (or Hedged correct)."""
    wrong_threshold: float = 0.2
    """P(supported) at or below this: Wrong (or Hedged wrong); between the thresholds: Vague."""
    hedge_words: list[str] = field(default_factory=lambda: [
        "probably", "possibly", "perhaps", "maybe", "might", "may be", "likely", "could be", "i think",
        "i believe", "i guess", "not sure", "seems", "appears to",
    ])
    """Words or phrases that make a statement hedged (matched as whole words, case-insensitive)."""
    crucial_overlap: float = 0.5
    """Rule-based informativeness: a statement sharing at least this share of the question's content words is
    crucial (4); sharing some is relevant (3); see docs/methods.md."""
    reward_clip: float = 10.0
    """Each token's total reward is clipped to [-reward_clip, reward_clip]."""
    outcome_weight: float = 0.0
    """Add this times the outcome reward (answer F1) on the final token. 0: the published method (statements only)."""


@dataclass
class KLCFConfig:
    """KLCF dual-fact rewards: checklist recall and claim precision (reward.method=klcf; docs/algorithms.md section 5)."""

    checklist_path: str | None = None
    """The checklist file written by `python -m fspo_lite klcf-checklist` (required by reward.method=klcf)."""
    checklist_samples: int = 4
    """Base-model responses sampled per training question to build its checklist."""
    checklist_threshold: float = 0.5
    """A claim of the base model enters the checklist when the verifier's P(supported | evidence) exceeds this."""
    dedup_overlap: float = 0.8
    """Two checklist claims are duplicates when their content-word Jaccard overlap is at least this."""
    match_threshold: float = 0.5
    """A checklist fact counts as stated when P(fact | response as evidence) exceeds this."""
    recall_weight: float = 1.0
    """Weight of the recall reward (share of checklist facts the response states)."""
    precision_weight: float = 1.0
    """Weight of the precision reward (mean P(supported) of the response's own claims)."""
    reward_model: str | None = None
    """Optional general reward model (a local sequence-classification model folder); None: off."""
    reward_model_weight: float = 0.0
    """Weight of the general reward model's score."""
    outcome_weight: float = 0.0
    """Add this times the outcome reward (answer F1). 0: the published method (no gold answers)."""


@dataclass
class DetailConfig:
    """A detail term added to any method's reward so that saying less does not pay (fspo_lite.scoring.methods.detail;
    docs/methods.md). Off by default (weight 0 and precision_weight 0)."""

    weight: float = 0.0
    """Weight of log(1 + S), S = distinct supported reasoning sentences of a response (0 = off). 0.1-0.3 keeps the
    term below one answer's F1 for the few sentences small models write."""
    cap: int = 8
    """At most this many supported sentences count, so a response cannot buy reward with length."""
    duplicate_threshold: float = 0.8
    """Two sentences whose word sets have Jaccard similarity >= this are near-duplicates: only the first counts in S."""
    precision_weight: float = 0.0
    """Weight of S / (T + 1), T = judged sentences of the response (duplicates included); 0 = off."""
    relevance_weight: float = 0.0
    """Weight of P(the response addresses the question) from relevance_judge, added to well-formed responses; 0 = off."""
    relevance_judge: str | None = None
    """None (off) | llm: a chat model asked whether the response addresses the question (verifier.server_url and its
    settings when set, else relevance_model run locally)."""
    relevance_model: str | None = None
    """The llm relevance judge's local model (None: the bundled smollm2-135m)."""


@dataclass
class FilterConfig:
    """Difficulty filtering: `python -m fspo_lite filter` (docs/algorithms.md section 3.4)."""

    samples: int = 16
    """k: base-model answers sampled per training question."""
    top: int | None = None
    """Keep the N questions with the most varied outcomes. With neither top nor band: keep 0 < success < 1."""
    band: list[float] | None = None
    """Keep questions whose success rate lies in [low, high], e.g. [0.2, 0.8]."""
    output: str = "results/filter.json"
    """Where the per-question statistics and kept ids are cached (point data.filter_path at it to train)."""


@dataclass
class VerifierConfig:
    """The step verifier that FSPO uses to label reasoning sentences."""

    name: str = "lexical"
    """lexical (offline default) | embedding | likelihood | nli | hhem | llm | kb (kbqa questions only: their facts).
    docs/verifiers.md compares them."""
    threshold: float = 0.5
    """A sentence is factual iff P(supported) > threshold."""
    batch_size: int = 32
    """(evidence, sentence) pairs per forward pass of a model-based verifier."""
    model: str | None = None
    """Model id/path for model-based verifiers; None picks each one's default (embedding: the bundled
    all-MiniLM-L6-v2, likelihood and llm: the bundled smollm2-135m, nli: cross-encoder/nli-deberta-v3-base,
    hhem: vectara/hallucination_evaluation_model)."""
    device: str = "auto"
    """auto (CUDA when available, else CPU) | cpu | cuda | cuda:1 ..."""
    trust_remote_code: bool = False
    """Let a hub model run its own Python code. HHEM needs it; off by default because that code runs on your machine."""
    max_evidence_tokens: int = 400
    """Longer evidence is cut (nli, hhem, llm) or split into sentences (embedding) to fit the model."""
    server_url: str | None = None
    """llm verifier: base URL of an OpenAI-compatible server (e.g. http://localhost:8000/v1 for vLLM).
    None runs the judge model locally with transformers."""
    server_model: str | None = None
    """llm verifier: the model name the server expects (None: the first one its /models lists)."""
    api_key_env: str | None = None
    """llm verifier: name of an environment variable holding the server's API key (vLLM needs none)."""
    request_timeout: float = 60.0
    """llm verifier: seconds to wait for one server reply before failing."""


@dataclass
class TrainConfig:
    """The optimisation loop (docs/algorithms.md section 1)."""

    steps: int = 50
    prompts_per_step: int = 4
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    beta: float = 0.0
    """KL coefficient (k3 estimator). 0 skips the reference forward pass; FSPO used 0.001."""
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    """Clip range 1-eps_low .. 1+eps_high; DAPO's clip-higher uses 0.28."""
    scale_by_std: bool = True
    """Divide group advantages by the group std (GRPO); False gives Dr.GRPO's mean-only centring."""
    loss_aggregation: str = "token-mean"
    """token-mean | seq-mean-token-mean | dr_grpo."""
    ppo_epochs: int = 1
    """mu: passes over each batch of rollouts. 1 means pi_old = pi_theta (ratio 1)."""
    micro_batch_size: int = 8
    """Sequences per forward/backward; gradients accumulate over the step's batch. A multiple of
    rollout.group_size lets speed.share_prompt_pass encode each prompt once per micro-batch."""
    max_grad_norm: float = 1.0
    seed: int = 0
    output_dir: str = "runs/default"
    save_every: int = 0
    """Checkpoint every N steps (0: only at the end)."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir."""
    max_bad_steps: int = 3
    """Stop after this many consecutive steps with a non-finite loss or gradient."""
    tensorboard: bool = False
    entropy_coef: float = 0.0
    """Entropy bonus: the loss subtracts entropy_coef x the mean token entropy (same aggregation as the policy
    loss). 0 (default) skips it; the FSPO run used 0.001."""
    fsdp: bool = False
    """Shard weights, gradients and optimizer state over the processes torchrun starts (torch FSDP2: every decoder
    layer plus the causal LM; gloo on CPUs, NCCL on GPUs), LoRA or full weights; resumable (docs/gpu.md). Rollouts
    come from the transformers engine: the vLLM engines are refused with it."""


@dataclass
class SpeedConfig:
    """Work saved on some hardware, never a change of what is computed beyond float rounding (fspo_lite.speed;
    each switch in docs/performance.md, "What each lever does")."""

    mode: str = "auto"
    """auto: each switch below as set | off: the reference rollout and log-prob passes everywhere, switches unread."""
    share_prompt_prefill: bool = True
    """Rollout: encode each distinct prompt once for its G samples."""
    share_prompt_prefix: bool = True
    """Rollout: encode the start every prompt of a batch shares once (at least 16 tokens)."""
    merge_lora_for_generation: bool = True
    """Rollout: sample with LoRA merged into new copies of the weights."""
    drop_ended_rows: bool = True
    """Rollout: fspo-lite's fast decoding loop (ended rows leave the pass); false: `model.generate`."""
    packed_weights: bool | None = None
    """Rollout: decode on float32 weights packed for MKL; null: on Intel CPUs only."""
    sampler_dtype: str = "policy"
    """Rollout: policy | bfloat16 (sample from a bfloat16 copy; needs rollout.use_sampler_logprobs)."""
    share_prompt_pass: bool = True
    """Update: each distinct prompt and the rollout's common prompt start run once in the log-prob passes."""
    group_by_length: bool = True
    """Update: micro-batches longest first, each cut to its longest response."""
    fused_lora: bool = True
    """Update: each plain LoRA projection as one autograd node."""
    grouped_query_sdpa: bool = True
    """Update, on a CPU: grouped key/value heads passed to torch's attention kernel as they are."""
    keep_freed_memory: bool = True
    """Update, on a CPU under glibc: malloc keeps freed memory for the next step."""


@dataclass
class EvalConfig:
    """Hallucination benchmarks: `python -m fspo_lite eval` and fspo_lite.evaluation.evaluate (docs/evaluation.md).
    The model and adapter come from the model section (model.name, model.adapter_path)."""

    benchmarks: list[str] = field(default_factory=lambda: ["kbqa", "multihop", "truthfulqa_mc", "truthfulqa_gen",
                                                           "halueval"])
    """Any of kbqa, multihop, hotpotqa, truthfulqa_mc, truthfulqa_gen, halueval, halluqa, gsm8k, math500, aime2024,
    aime2025. The default list runs offline on bundled data."""
    limit: int | None = None
    """Use only N items of each benchmark: the first N in file order (a limited run is a prefix of the full one),
    or N drawn at random with `shuffle`."""
    shuffle: bool = False
    """With `limit`: draw the N items at random (seeded by `seed`), for subsets that span the whole file
    (the bundled kbqa file is sorted by category)."""
    samples: int = 1
    """k: answers sampled per question (generation benchmarks); k > 1 needs temperature > 0."""
    temperature: float = 0.0
    """0: greedy decoding; above 0: sampling at this temperature (with rollout.top_p)."""
    max_new_tokens: int = 256
    """Longest generated answer (HaluEval's Yes/No replies stop at 16, TruthfulQA generation at 64)."""
    batch_size: int = 16
    """Sequences per generate / scoring forward pass."""
    seed: int = 0
    """Seeds sampling and HaluEval's candidate draw (files without a fixed candidate)."""
    step_verifier: str = "embedding"
    """Verifier of reasoning sentences for the step hallucination rate. Deliberately not training's default
    (lexical), so the policy is not graded by the verifier it was trained against; falls back to lexical with a
    message when its model is not installed. Other settings come from the verifier section."""
    judge: str = "similarity"
    """Judge of free-form answers (truthfulqa_gen, halluqa): similarity (MiniLM; Chinese uses overlap) | overlap |
    llm (a chat model: evaluation.judge_model, or a server through verifier.server_url)."""
    judge_model: str | None = None
    """llm judge: a model name or folder (None: the bundled smollm2-135m, a weak judge), or the server's model."""
    sources: dict[str, str] = field(default_factory=dict)
    """Per-benchmark data overrides, e.g. {truthfulqa_mc: /data/truthfulqa.jsonl}: a bundled:<name>, data:<name>,
    a local file or hf:<id>. Defaults: the data folder's file ($FSPO_LITE_DATA, `python -m fspo_lite data`),
    else the bundled data, else the hub."""
    output_dir: str = "runs/eval"
    """Where summary.json, table.csv and records.jsonl are written."""
    extra_step_verifiers: list[str] = field(default_factory=list)
    """More judges of the held-out reasoning sentences besides step_verifier, e.g. [likelihood]: each one's labels
    are kept per record (sentence_labels_by_judge) and its rates reported separately (step_hallucination@<name>);
    one that cannot load is an error (no fallback)."""


@dataclass
class Config:
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
        """`Config(train={"steps": 2})` builds the section as a config file's is (keys, types: `_update`), a section of
        any other type is refused, and the whole config is checked (`validate_config`): code that builds a config
        stops where a config file or the CLI would, in the same one-line ConfigError."""
        for name, cls in _field_types(Config).items():
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, cls())
                _update(getattr(self, name), value, f"{name}.")
            elif not isinstance(value, cls):
                raise ConfigError(f"'{name}' is a section; expected a mapping or a {cls.__name__}, got {_shown(value)}")
        validate_config(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


class ConfigError(ValueError):
    """A config file or override names an unknown key or a value of the wrong type."""


MAX_YAML_DEPTH = 20
"""Deepest nesting of mappings and lists a config file or --set value may have (the config itself has 3 levels)."""


class ConfigLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, stricter where a config file needs it: no aliases (`*name`; a few hundred bytes of
    nested aliases expand to gigabytes: the "billion laughs"), no nesting deeper than MAX_YAML_DEPTH (deep nesting
    exhausted the recursion), and no key twice in one mapping (`train:` twice: the second silently won). Each is a
    yaml error with the line and column, which load_config reports in one line."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed in a config "
                                              "file; write the value out", event.start_mark)
        self.depth = getattr(self, "depth", 0) + 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    line = seen.get(key)
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if line is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {_shown(key)} appears twice (first on line {line}); keep one",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def parse_yaml(text: str) -> Any:
    """A YAML document read with ConfigLoader (safe types only, no aliases, bounded depth, no duplicate keys)."""
    loader = ConfigLoader(text)  # what yaml.safe_load does, with the stricter SafeLoader subclass
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_value_problem(error: Exception) -> str:
    if isinstance(error, ValueError) and not isinstance(error, yaml.YAMLError):
        return "an integer with more digits than Python converts (4300)"
    return str(error).splitlines()[0]


def _shown(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters, so an error line stays one short line whatever the value holds."""
    try:
        text = repr(value)
    except ValueError:  # an integer over Python's 4300-digit limit for str()
        return f"<an integer of about {value.bit_length() * 0.30103:,.0f} digits>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert a YAML/CLI value to the field's declared type, or raise ConfigError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        try:
            return _coerce(value, inner[0], where)
        except ConfigError as error:
            if type(None) not in args:
                raise
            # say that null is allowed too: "expected true/false or null, got 'maybe'"
            raise ConfigError(str(error).replace(", got ", " or null, got ", 1)) from None
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_shown(value)}")
        return {str(k): _coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_shown(value)}")
        return [_coerce(v, args[0], where) for v in value]
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{where}: expected true/false, got {_shown(value)}")
    if annotation is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
            try:  # YAML reads 1e20 (no dot) as a string; a whole number written so is still a whole number
                number = float(value)
            except ValueError:
                number = None
            if number is not None and number.is_integer():
                return int(number)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {_shown(value)}")
    if annotation is float:
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                pass
            except OverflowError:  # an integer beyond float: infinite, which the range check refuses by name
                return math.inf if value > 0 else -math.inf
        raise ConfigError(f"{where}: expected a number, got {_shown(value)}")
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_shown(value)}")
        return value
    return value


MOVED_KEYS = {f"{section}.{key}": f"speed.{key}" for section, keys in (
    ("rollout", ("share_prompt_prefill", "share_prompt_prefix", "merge_lora_for_generation", "drop_ended_rows",
                 "packed_weights", "sampler_dtype")),
    ("train", ("share_prompt_pass", "group_by_length", "fused_lora", "grouped_query_sdpa", "keep_freed_memory")),
) for key in keys}
"""Keys that moved to another section: the old name is refused in one line that names the new one."""


def _update(obj: Any, values: dict[str, Any], prefix: str) -> None:
    types = _field_types(type(obj))
    for key, value in values.items():
        where = f"{prefix}{key}"
        if key not in types and where in MOVED_KEYS:
            raise ConfigError(f"config key {where!r} is now {MOVED_KEYS[where]!r} (the speed section); rename it")
        if key not in types:
            raise ConfigError(f"unknown config key {_shown(where)}; valid keys here: {', '.join(sorted(types))}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"'{where}' is a section; expected a mapping, got {_shown(value)}")
            _update(current, value, where + ".")
        elif isinstance(current, dict) and isinstance(value, dict):  # a mapping field: keys merge, as --set adds one
            setattr(obj, key, {**current, **_coerce(value, types[key], where)})
        else:
            setattr(obj, key, _coerce(value, types[key], where))


def config_from_dict(values: dict[str, Any] | None) -> Config:
    """Build a Config from nested plain data (a parsed YAML file), validating every key."""
    config = Config()
    _update(config, values or {}, "")
    return config


def apply_overrides(config: Config, overrides: list[str] | dict[str, Any]) -> Config:
    """Apply 'section.key=value' strings (CLI --set) or a flat {'section.key': value} dict (papermill)."""
    items = overrides.items() if isinstance(overrides, dict) else [split_override(o) for o in overrides]
    for dotted, value in items:
        nested: dict[str, Any] = {}
        cursor = nested
        parts = dotted.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
        _update(config, nested, "")
    return config


def apply_shortcuts(config: Config, values: dict[str, Any]) -> Config:
    """A command's option shortcuts ({'section.key': value}, None: option not given) applied like --set and then
    range-checked (`validate_config`), so `eval --limit 0` or `--temperature nan` stop before any model loads."""
    apply_overrides(config, {key: value for key, value in values.items() if value is not None})
    validate_config(config)
    return config


def split_override(text: str) -> tuple[str, Any]:
    """'KEY=VALUE' as (KEY, VALUE read by `parse_yaml`), or ConfigError in one line naming KEY: the parsing of every
    --set, the config's and the lite job's notebook parameters'."""
    if "=" not in text:
        raise ConfigError(f"override {_shown(text)} must look like section.key=value")
    key, raw = text.split("=", 1)
    if not raw.strip():
        return key.strip(), ""
    try:
        return key.strip(), parse_yaml(raw)
    except (yaml.YAMLError, ValueError) as error:  # ValueError: an integer over Python's digit limit
        problem = getattr(error, "problem", None) or _yaml_value_problem(error)
        raise ConfigError(f"--set {key.strip()}: the value is not valid YAML ({problem})") from None


def parse_yaml_file(path: Path) -> Any:
    """A YAML file read with `parse_yaml` (the config's strict loader), or ConfigError in one line naming the file,
    line and column: config files and the lite job's profiles."""
    try:
        return parse_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except (yaml.YAMLError, ValueError) as error:  # ValueError: an integer over Python's digit limit
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or _yaml_value_problem(error)
        raise ConfigError(f"{where}: invalid YAML ({problem})") from None


def load_config(path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None) -> Config:
    """Load a YAML config (or the defaults when path is None), apply overrides and check every value's
    range (`validate_config`), so a bad value stops the run before any model loads."""
    values = {}
    if path is not None:
        path = Path(path)
        if path.is_dir() or not path.exists():
            raise ConfigError(f"{path}: no such config file" + (" (it is a folder)" if path.is_dir() else "")
                              + "; the bundled ones are in configs/ (e.g. configs/tiny.yaml)")
        values = parse_yaml_file(path)
        if values is None:
            raise ConfigError(f"{path}: the file holds no settings (empty, or only comments); leave out --config to "
                              "run with the defaults, or write at least one section (e.g. 'train: {steps: 2}')")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections")
    try:
        config = config_from_dict(values)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}" if path is not None else str(error)) from None
    if overrides:
        apply_overrides(config, overrides)
    validate_config(config)
    return config


@dataclass(frozen=True)
class Range:
    """The valid values of one numeric config key: low <= value <= high (an end excluded when `*_open`), finite,
    and None where the key allows null."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    note: str = ""
    """Why the range is what it is, appended to the error."""

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return _finite(value) and above and below

    def describe(self, integer: bool, nullable: bool) -> str:
        kind = "an integer" if integer else "a finite number"
        ends = []
        if self.low > -math.inf:
            ends.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high < math.inf:
            ends.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        text = f"{kind} {' and '.join(ends)}".strip()
        text = f"null or {text}" if nullable else text
        return f"{text} ({self.note})" if self.note else text


def _number(value: float) -> str:
    return f"{value:,.0f}".replace(",", "_") if float(value).is_integer() and abs(value) >= 10_000 else f"{value:g}"


COUNT = Range(1, 10**9)
"""A count of things (steps, samples, tokens, batch sizes): at least 1, and not absurdly many."""
SHARE = Range(0, 1)
"""A probability, share or threshold."""
WEIGHT = Range(-1e6, 1e6)
"""A reward value or weight: any sign; the bound only catches absurd values (1e20 makes every other term vanish)."""
NONNEGATIVE = Range(0, 1e6)
TIMEOUT = Range(0, 1e6, low_open=True, note="seconds")
SEED = Range(0, 2**32 - 1, note="what numpy and the CUDA generators accept")

NUMBER_RANGES: dict[str, Range] = {
    "model.lora_r": Range(1, 4096, note="the LoRA rank"),
    "model.lora_alpha": Range(0, 1e6, low_open=True, note="the LoRA scale is lora_alpha / lora_r; 0 disables the "
                              "adapter"),
    "model.lora_dropout": Range(0, 1, high_open=True, note="a dropout probability; 1 drops everything"),
    "data.limit": COUNT,
    "data.few_shot": Range(0, 2, note="0, 1 or 2 worked examples"),
    "data.max_prompt_tokens": COUNT,
    "rollout.group_size": COUNT,  # the method-dependent minimum is checked in validate_config
    "rollout.max_new_tokens": COUNT,
    "rollout.temperature": Range(0, 10, note="0: greedy"),
    "rollout.top_p": Range(0, 1, low_open=True),
    "rollout.generation_batch_size": COUNT,
    "rollout.vllm_gpu_memory_utilization": Range(0, 1, low_open=True, note="a share of GPU memory"),
    "rollout.vllm_max_lora_rank": Range(1, 4096),
    "rollout.vllm_server_timeout": TIMEOUT,
    "reward.format_penalty": WEIGHT,
    "reward.step_reward_lambda": WEIGHT,
    "caution.switch_step": Range(0, 10**9),
    "caution.correct_reward": WEIGHT,
    "caution.process_reward": WEIGHT,
    "caution.unknown_reward": WEIGHT,
    "caution.process_f1": SHARE,
    "rlfh.truth_weight": WEIGHT,
    "rlfh.info_weight": WEIGHT,
    "rlfh.truth_correct": WEIGHT,
    "rlfh.truth_hedged_correct": WEIGHT,
    "rlfh.truth_vague": WEIGHT,
    "rlfh.truth_hedged_wrong": WEIGHT,
    "rlfh.truth_wrong": WEIGHT,
    "rlfh.info_answer": WEIGHT,
    "rlfh.info_crucial": WEIGHT,
    "rlfh.info_relevant": WEIGHT,
    "rlfh.info_supplementary": WEIGHT,
    "rlfh.info_useless": WEIGHT,
    "rlfh.correct_threshold": SHARE,
    "rlfh.wrong_threshold": SHARE,
    "rlfh.crucial_overlap": SHARE,
    "rlfh.reward_clip": Range(0, 1e6, low_open=True, note="token rewards are clipped to [-reward_clip, reward_clip]"),
    "rlfh.outcome_weight": WEIGHT,
    "klcf.checklist_samples": COUNT,
    "klcf.checklist_threshold": SHARE,
    "klcf.dedup_overlap": SHARE,
    "klcf.match_threshold": SHARE,
    "klcf.recall_weight": WEIGHT,
    "klcf.precision_weight": WEIGHT,
    "klcf.reward_model_weight": WEIGHT,
    "klcf.outcome_weight": WEIGHT,
    "detail.weight": NONNEGATIVE,
    "detail.cap": COUNT,
    "detail.duplicate_threshold": SHARE,
    "detail.precision_weight": NONNEGATIVE,
    "detail.relevance_weight": WEIGHT,
    "filter.samples": COUNT,
    "filter.top": COUNT,
    "verifier.threshold": SHARE,
    "verifier.batch_size": COUNT,
    "verifier.max_evidence_tokens": COUNT,
    "verifier.request_timeout": TIMEOUT,
    "train.steps": COUNT,
    "train.prompts_per_step": COUNT,
    "train.learning_rate": Range(0, 1, low_open=True),
    "train.weight_decay": Range(0, 10),
    "train.beta": NONNEGATIVE,
    "train.epsilon_low": Range(0, 1, high_open=True,
                               note="the ratio's lower clip 1 - epsilon_low must stay above 0"),
    "train.epsilon_high": Range(0, 10, note="0.2 in GRPO, 0.28 in DAPO"),
    "train.ppo_epochs": Range(1, 1000),
    "train.micro_batch_size": COUNT,
    "train.max_grad_norm": Range(0, 1e6, low_open=True, note="a negative one would reverse the update"),
    "train.seed": SEED,
    "train.save_every": Range(0, 10**9, note="0: only at the end"),
    "train.max_bad_steps": Range(1, 10**9, note="consecutive non-finite steps tolerated before the run stops"),
    "train.entropy_coef": NONNEGATIVE,
    "evaluation.limit": COUNT,
    "evaluation.samples": Range(1, 10_000),
    "evaluation.temperature": Range(0, 10, note="0: greedy"),
    "evaluation.max_new_tokens": COUNT,
    "evaluation.batch_size": COUNT,
    "evaluation.seed": SEED,
}
"""The valid range of every numeric config key (tests/test_config_ranges.py checks that each one is listed)."""

CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": ("float32", "bfloat16", "float16"),
    "model.backend": ("transformers", "unsloth"),
    "rollout.engine": ("transformers", "vllm", "vllm-server"),
    "speed.mode": ("auto", "off"),
    "speed.sampler_dtype": ("policy", "bfloat16"),
    "rollout.draw": ("exponential_race", "multinomial"),
    "reward.answer_metric": ("auto", "f1", "em"),
    "reward.claim_extractor": ("rules", "llm"),
    "caution.variant": ("both", "fact", "caution", "fact_then_caution"),
    "rlfh.granularity": ("token", "sentence", "paragraph"),
    "train.loss_aggregation": LOSS_AGGREGATIONS,
    "evaluation.judge": ("similarity", "overlap", "llm"),
    "detail.relevance_judge": ("llm",),
}
"""The words a string key accepts (the modules that read them hold the same tuples; tests/test_config_ranges.py
compares). Names from the scoring layer's tables (reward.method, verifier.name) are checked through NAME_CHECKS;
benchmark names by the evaluation, before any model loads."""
NAME_CHECKS: list[Callable[[Config], None]] = []
"""Checks of the names whose tables live above this layer, each raising ConfigError in one line: the scoring layer
registers its check of reward.method and verifier.name (fspo_lite.scoring.plan.check_names) when imported, which
importing any part of fspo_lite does (the package's __init__ imports it), and validate_config runs every one, so
load_config and Config(...) refuse an unknown name as the CLI does."""
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def numeric_keys() -> dict[str, tuple[bool, bool]]:
    """Every numeric config key -> (integer, nullable), read off the dataclasses."""
    keys = {}
    sections = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        for name, annotation in _field_types(sections[section.name]).items():
            args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
                else (annotation,)
            numeric = [a for a in args if a in (int, float)]
            if numeric:
                keys[f"{section.name}.{name}"] = (numeric[0] is int, type(None) in args)
    return keys


def _check(condition: bool, key: str, value: Any, valid: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={_shown(value)} is out of range; valid: {valid}")


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)  # an int of any size is finite (isfinite would overflow)


def _value(config: Config, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


def split_method(name: str) -> tuple[tuple[str, ...], bool]:
    """The grammar of reward.method: '+'-separated names, case and spaces ignored, 'fspo' the FSPO flip and every other
    name a reward source. 'fspo' -> ((), True), 'KLCF + FSPO' -> (('klcf',), True), 'rlfh' -> (('rlfh',), False).
    Returns (the source names, sorted and distinct; whether 'fspo' is named). Which names exist is the scoring
    layer's table (fspo_lite.scoring.plan.parse_method checks them)."""
    parts = {part.strip() for part in str(name).lower().split("+") if part.strip()}
    return tuple(sorted(parts - {"fspo"})), "fspo" in parts


def validate_config(config: Config) -> None:
    """Range checks on every value a run depends on (ConfigError naming the key, the value and the valid range):
    each numeric key against NUMBER_RANGES (non-finite values never pass), each word against CHOICES, and the
    rules that tie keys together, then the names other layers hold (NAME_CHECKS). load_config and Config(...) call
    it; so do the trainer and the evaluation, for configs changed in code. Types are already checked by the loader."""
    for key, (integer, nullable) in numeric_keys().items():
        value = _value(config, key)
        if value is None and nullable:
            continue
        bounds = NUMBER_RANGES[key]
        _check(bounds.holds(value) and (not integer or isinstance(value, int)), key, value,
               bounds.describe(integer, nullable))
    for key, choices in CHOICES.items():
        value = _value(config, key)
        _check(value in choices or (value is None and key == "detail.relevance_judge"), key, value,
               " | ".join(choices) + (" | null" if key == "detail.relevance_judge" else ""))
    _check(isinstance(config.verifier.device, str) and bool(_DEVICE.match(config.verifier.device)), "verifier.device",
           config.verifier.device, "auto | cpu | mps | cuda | cuda:N")
    minimum_group = 1 if split_method(config.reward.method)[0] == ("rlfh",) else 2  # token rewards need no group
    _check(config.rollout.group_size >= minimum_group, "rollout.group_size", config.rollout.group_size,
           f"an integer >= {minimum_group} (group-relative advantages need at least two responses per prompt)"
           if minimum_group == 2 else "an integer >= 1")
    rlfh = config.rlfh
    _check(rlfh.wrong_threshold <= rlfh.correct_threshold, "rlfh.wrong_threshold", rlfh.wrong_threshold,
           f"at most rlfh.correct_threshold ({rlfh.correct_threshold}): below it a statement is Wrong, above the "
           "other Correct")
    _check(bool(config.evaluation.benchmarks), "evaluation.benchmarks", config.evaluation.benchmarks,
           "at least one benchmark name")
    _check(config.evaluation.samples == 1 or config.evaluation.temperature > 0, "evaluation.samples",
           config.evaluation.samples, "1 unless evaluation.temperature > 0 (greedy answers would repeat)")
    if config.filter.band is not None:
        validate_band(config.filter.band, "filter.band")
    rollout, sampler_dtype = config.rollout, config.speed.sampler_dtype
    if sampler_dtype != "policy" and config.speed.mode != "off":
        for holds, valid in ((rollout.engine == "transformers", "policy unless rollout.engine is transformers"),
                             (rollout.use_sampler_logprobs, "policy unless rollout.use_sampler_logprobs=true (the "
                              "ratio to the copy's log-probs corrects its gap)"),
                             (config.train.ppo_epochs == 1, "policy unless train.ppo_epochs=1"),
                             (not config.model.load_in_4bit, "policy with model.load_in_4bit (a 4-bit base has no "
                              "bfloat16 copy)")):
            _check(holds, "speed.sampler_dtype", sampler_dtype, valid)
    _check(not rollout.use_sampler_logprobs or config.train.ppo_epochs == 1, "rollout.use_sampler_logprobs",
           rollout.use_sampler_logprobs, "false unless train.ppo_epochs=1 (with mu > 1 the trainer computes pi_old "
           "itself, for every engine)")
    detail = config.detail
    _check(not detail.relevance_weight or detail.relevance_judge is not None, "detail.relevance_weight",
           detail.relevance_weight, "0 unless detail.relevance_judge names a judge (llm)")
    for check in NAME_CHECKS:
        check(config)


def check_training_settings(config: Config) -> None:
    """The rules of keys that only training reads (an evaluation of the same config is not refused): ConfigError, in
    one line saying what to change, before any model loads. The trainer runs them (fspo_lite.scoring.plan), and so
    do the experiment drivers for every arm before the first one trains."""
    model, train, engine = config.model, config.train, config.rollout.engine
    if train.fsdp and engine in ("vllm", "vllm-server"):
        raise ConfigError(f"train.fsdp=true with rollout.engine={engine} is not supported (the vLLM engines load the "
                          "adapter from a folder, and a sharded model cannot save one): use rollout.engine=transformers "
                          "with train.fsdp, or vLLM with train.fsdp=false (one process, or data parallel under "
                          "accelerate launch)")
    if model.dtype == "float16" and not model.lora:
        raise ConfigError("model.dtype=float16 with model.lora=false would train float16 weights, whose small "
                          "updates round away: set model.lora=true (the adapter stays in float32) or "
                          "model.dtype=float32")


def validate_band(band: Any, key: str = "--band") -> list[float]:
    """[low, high] success-rate band with 0 <= low <= high <= 1, or ConfigError."""
    ok = (isinstance(band, (list, tuple)) and len(band) == 2 and all(_finite(x) for x in band)
          and 0 <= band[0] <= band[1] <= 1)
    _check(ok, key, band, "two numbers LOW,HIGH with 0 <= LOW <= HIGH <= 1, e.g. 0.2,0.8")
    return [float(band[0]), float(band[1])]


def parse_overrides(texts: list[str]) -> dict[str, Any]:
    """'section.key=value' strings as a flat {'section.key': value} dict (values parsed as YAML), each key
    checked against the config's fields, for passing on (e.g. to a notebook's `overrides` parameter)."""
    parsed = dict(split_override(text) for text in texts)
    apply_overrides(Config(), parsed)  # raises ConfigError naming an unknown key or a bad value
    return parsed
