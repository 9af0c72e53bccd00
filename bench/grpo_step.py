"""Benchmark: one fspo-lite training step against one step of TRL's GRPOTrainer, side by side on CPU.

    python bench/grpo_step.py [--models smollm2-135m,tiny] [--steps 5] [--warmup 1] [--overhead-steps 3]
                              [--set speed.packed_weights=false ...]
    make bench-cpu            # installs the `bench` extra (TRL) first

Each trainer lives in its own worker process; the coordinator alternates one step of each, so
both see the same machine state. Both get the same weights (the same seeded LoRA adapter),
the same rendered prompt texts in the same order, G, completion length (min_new_tokens =
max_new_tokens on both, so every step generates exactly P * G * C tokens), temperature,
LoRA r/alpha/targets, beta, mu, token-mean loss, learning rate, micro-batch and gradient
accumulation. TRL's advantages are replaced by fspo-lite's FSPO token advantages
(bench/trl_grpo.py), so both optimise the same objective with the same verifier.

Peak memory: before each step the worker writes "5" to /proc/self/clear_refs (resets the
kernel's high-water mark of its resident set, VmHWM) and reads VmHWM after it, giving the
peak RSS during that step. The model-loaded RSS of each worker is reported too.

After the comparison, the fspo-lite worker runs --overhead-steps FSPO steps at natural length
(no forced length, so responses end and their reasoning is verified). After each, it scores that
step's responses again through `score_rollouts` + `advantages_from_scores` (fspo_lite.scoring.rewards),
once as FSPO and once as GRPO without sentence verdicts; the difference (verification, sentence
spans to tokens, the flip) is FSPO's extra work, reported against the rest of the step.

The last line holds the ratios of each model, so a rerun can be compared at a glance.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_name, _value)

OMP_WAIT_POLICIES = ("default", "passive", "active")
"""--omp-wait-policy: what both workers' OpenMP threads do between parallel regions. default: as the environment says
(libgomp, torch's OpenMP on Linux, spins a while and then sleeps when OMP_WAIT_POLICY is unset); passive: sleep at
once (OMP_WAIT_POLICY=PASSIVE, a wake-up per parallel region); active: spin."""


def omp_wait_policy() -> str:
    """This process's OMP_WAIT_POLICY, "unset" when the environment has none (libgomp's own policy)."""
    return os.environ.get("OMP_WAIT_POLICY", "unset")


@dataclass
class BenchSettings:
    """What both trainers get; every field is shared by the two sides."""

    model: str = "smollm2-135m"
    prompts_per_step: int = 4
    group_size: int = 4
    max_new_tokens: int = 64
    temperature: float = 0.7
    micro_batch_size: int = 8
    learning_rate: float = 2e-5
    beta: float = 0.0
    ppo_epochs: int = 1
    lora_r: int = 16
    lora_alpha: int = 32
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    method: str = "fspo"
    verifier: str = "lexical"
    seed: int = 0
    threads: int = 2
    sampler_dtype: str = "policy"
    """fspo-lite's side only: speed.sampler_dtype (bfloat16: a bfloat16 sampler copy with its log-probs as pi_old);
    TRL keeps its float32 `generate`, so the two sides then differ in the sampler's precision."""
    trl_keep_freed_memory: bool = False
    """TRL's side only: its worker sets the malloc options fspo-lite's trainer sets on a CPU (speed.keep_freed_memory,
    `fspo_lite.speed.allocator`), so both sides allocate alike; off by default: TRL as a user runs it."""
    device: str = "cpu"
    """cpu (peak RSS) or cuda (peak allocated GPU memory; TRL without vLLM on the GPU too)."""
    fspo_settings: list[str] = field(default_factory=list)
    """fspo-lite's side only: config settings KEY=VALUE on top of the shared ones (--set), for an A/B of one knob
    that changes no work, e.g. speed.packed_weights=false."""

    @property
    def responses(self) -> int:
        return self.prompts_per_step * self.group_size


# ---- bookkeeping (pure: tested without TRL) -----------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class StepRecord:
    """One measured step of one trainer."""

    seconds: float
    peak_mb: float
    tokens: int
    parts: dict[str, float] = field(default_factory=dict)
    """Per-phase seconds where the trainer reports them (fspo-lite: generation, reward, update, FSPO work)."""


def summarise(records: list[StepRecord]) -> dict:
    """Median step time, median and max peak memory, tokens per step and per-phase medians of measured steps."""
    parts = sorted({k for r in records for k in r.parts})
    return {
        "steps": len(records),
        "step_s": median([r.seconds for r in records]),
        "peak_mb": median([r.peak_mb for r in records]),
        "max_peak_mb": max((r.peak_mb for r in records), default=float("nan")),
        "tokens_per_step": median([r.tokens for r in records]),
        "parts_s": {k: median([r.parts.get(k, 0.0) for r in records]) for k in parts},
    }


def compare(ours: dict, theirs: dict) -> dict:
    """fspo-lite / TRL ratios of median step time and median peak memory (below 1: fspo-lite is better)."""
    return {"time_ratio": ours["step_s"] / theirs["step_s"], "memory_ratio": ours["peak_mb"] / theirs["peak_mb"]}


def fspo_overhead(records: list[StepRecord]) -> dict:
    """FSPO's extra work (verification + alignment + flip) as a share of the rest of the step (a GRPO step),
    from per-step sums, plus the median number of sentences verified per step."""
    extra = sum(r.parts.get("fspo_s", 0.0) for r in records)
    total = sum(r.seconds for r in records)
    grpo = total - extra
    return {"steps": len(records), "fspo_s": extra / max(len(records), 1), "grpo_step_s": grpo / max(len(records), 1),
            "share": extra / grpo if grpo > 0 else float("nan"),
            "verified_sentences": median([r.parts.get("verified_sentences", 0.0) for r in records])}


def summary_line(results: dict[str, dict]) -> str:
    """One line with every model's ratios (and the FSPO share when measured), for reruns to compare."""
    items = []
    for model, result in results.items():
        ratio = result["ratios"]
        text = f"{model}: time {ratio['time_ratio']:.2f}x TRL, peak memory {ratio['memory_ratio']:.2f}x TRL"
        if result.get("fspo_overhead"):
            overhead = result["fspo_overhead"]
            text += (f", FSPO work {100 * overhead['share']:.2f}% of a GRPO step "
                     f"({overhead['verified_sentences']:.0f} sentences verified)")
        items.append(text)
    return "RATIOS " + " | ".join(items)


def read_status_kb(name: str) -> int:
    """A field of /proc/self/status in kB (VmHWM: peak RSS since the last reset, VmRSS: current)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise KeyError(name)


def reset_peak_rss() -> None:
    """Set VmHWM back to the current RSS (Linux >= 4.0: '5' > /proc/self/clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def reset_peak(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak_rss()


def read_peak_mb(device: str) -> float:
    """Peak memory since `reset_peak`: resident set on CPU, allocated GPU memory on CUDA."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    return read_status_kb("VmHWM") / 1024


def loaded_mb(device: str) -> float:
    if device == "cuda":
        import torch

        return torch.cuda.memory_allocated() / 2**20
    return read_status_kb("VmRSS") / 1024


def init_worker(settings: BenchSettings) -> None:
    """Before torch is used: hide GPUs from a CPU run (fspo-lite would otherwise pick CUDA) and set threads."""
    if settings.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    torch.set_num_threads(settings.threads)


# ---- the two sides -----------------------------------------------------------------------------------
def fspo_config(settings: BenchSettings, output_dir: str, extra: dict | None = None):
    from fspo_lite.config import load_config, parse_overrides

    return load_config(overrides={
        "model.name": settings.model, "model.lora": True, "model.lora_r": settings.lora_r,
        "model.lora_alpha": settings.lora_alpha, "model.lora_target_modules": settings.lora_target_modules,
        "model.gradient_checkpointing": False,
        "rollout.group_size": settings.group_size, "rollout.max_new_tokens": settings.max_new_tokens,
        "rollout.temperature": settings.temperature, "rollout.generation_batch_size": settings.responses,
        "speed.sampler_dtype": settings.sampler_dtype, "rollout.use_sampler_logprobs": settings.sampler_dtype != "policy",
        "reward.method": settings.method, "verifier.name": settings.verifier,
        "train.prompts_per_step": settings.prompts_per_step, "train.micro_batch_size": settings.micro_batch_size,
        "train.learning_rate": settings.learning_rate, "train.beta": settings.beta,
        "train.ppo_epochs": settings.ppo_epochs, "train.loss_aggregation": "token-mean",
        "train.seed": settings.seed, "train.output_dir": output_dir, "train.steps": 10**6,
        # the draw docs/performance.md's figures were measured with: generate's distribution, fewer operations on a
        # CPU ("The token draw"); --set rollout.draw=multinomial measures the reader's default
        "rollout.draw": "exponential_race",
        **parse_overrides(settings.fspo_settings), **(extra or {}),
    })


def step_examples(config, count: int):
    """The training questions in the order fspo-lite's sampler draws them (TRL is fed the same order)."""
    from fspo_lite.data.training_set import ExampleSampler, load_training_examples

    examples = load_training_examples(config)
    order = ExampleSampler(len(examples), seed=config.train.seed).next(count)
    return examples, order


def scoring_seconds(trainer, config, repeats: int = 3) -> tuple[float, int]:
    """Seconds (fastest of `repeats`) to score the trainer's last rollout and turn the scores into token advantages
    under `config` (fspo_lite.scoring.rewards' `score_rollouts` and `advantages_from_scores`, as `train_step` calls
    them, with the run's tools and scoring plan made once), and the number of reasoning sentences the verifier
    labelled (supported or unsupported)."""
    from fspo_lite.scoring.plan import scoring_plan
    from fspo_lite.scoring.rewards import advantages_from_scores, build_reward_tools, score_rollouts

    examples, rollout = trainer.last_rollout
    per_response = [e for e in examples for _ in range(config.rollout.group_size)]
    tools, plan = build_reward_tools(config), scoring_plan(config.reward, config.detail, trainer.verifier is not None)
    best, scored = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        scored = score_rollouts(per_response, rollout, trainer.tokenizer, config, trainer.verifier, tools=tools,
                                plan=plan)
        advantages_from_scores(scored, rollout.completion_mask, config.rollout.group_size, config.train.scale_by_std)
        best = min(best, time.perf_counter() - started)
    sentences = sum(1 for verdict in scored.verdicts for label in verdict.labels if label != 0)
    return best, sentences


def fspo_extra_seconds(trainer, settings: BenchSettings, output_dir: str) -> tuple[float, int]:
    """FSPO's extra work on the trainer's last rollout: scoring + advantages under FSPO minus the same under GRPO
    without sentence verdicts (what remains is verification, sentence spans to tokens and the flip), and the
    sentences verified. Both through the trainer's public functions on the same responses: no module attribute
    is patched, so a renamed or moved function fails loudly instead of silently timing nothing."""
    fspo, sentences = scoring_seconds(trainer, trainer.config)
    grpo, _ = scoring_seconds(trainer, fspo_config(settings, output_dir, {
        "reward.method": "grpo", "reward.log_step_factuality": False}))
    return max(fspo - grpo, 0.0), sentences


def fspo_worker(settings: BenchSettings, conn) -> None:
    """fspo-lite's Trainer; each 'step' message runs one train_step and answers a StepRecord."""
    init_worker(settings)
    from fspo_lite.update.trainer import Trainer

    class RecordingTrainer(Trainer):
        """Keeps each step's prompts and rollout (through the public `rollout` method) for `fspo_extra_seconds`."""

        def rollout(self, examples):
            result = super().rollout(examples)
            self.last_rollout = (examples, result)
            return result

    with tempfile.TemporaryDirectory() as output_dir:
        config = fspo_config(settings, output_dir)
        examples, order = step_examples(config, settings.prompts_per_step * 10_000)
        trainer = RecordingTrainer(config, train_examples=examples, progress=False)
        conn.send({"ready": True, "memory_mb": loaded_mb(settings.device), "versions": versions(),
                   "omp_wait_policy": omp_wait_policy()})
        while True:
            message = conn.recv()
            if message == "stop":
                break
            forced = message == "step"  # "natural": responses may end early (the FSPO overhead phase)
            trainer.engine.generate_kwargs["min_new_tokens"] = settings.max_new_tokens if forced else 0
            reset_peak(settings.device)
            started = time.perf_counter()
            metrics = trainer.train_step()
            peak = read_peak_mb(settings.device)
            seconds = time.perf_counter() - started
            parts = {"generation_s": metrics["generation_time"], "reward_s": metrics["reward_time"],
                     "update_s": metrics["update_time"], "format_rate": metrics["format_rate"]}
            if not forced:  # timed after the step on its responses, so the step's own time is untouched
                parts["fspo_s"], parts["verified_sentences"] = fspo_extra_seconds(trainer, settings, output_dir)
            tokens = int(trainer.last_rollout[1].completion_mask.sum())
            conn.send(asdict(StepRecord(seconds, peak, tokens, parts)))


def trl_worker(settings: BenchSettings, total_steps: int, conn) -> None:
    """TRL's GRPOTrainer (no vLLM) driven step by step through a callback that waits for the coordinator."""
    init_worker(settings)
    from fspo_lite.speed.allocator import keep_freed_memory

    kept = keep_freed_memory() if settings.trl_keep_freed_memory else False
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from fspo_lite.models.policy import load_policy
    from fspo_lite.data.prompts import prompt_text
    from fspo_lite.rollout.transformers_rollout import Rollout
    from fspo_lite.scoring.plan import scoring_plan
    from fspo_lite.scoring.rewards import advantages_from_scores, build_reward_tools, score_rollouts
    from fspo_lite.update.trainer import set_seed
    from fspo_lite.scoring.verifiers import build_verifier
    from trl_grpo import TokenAdvantageGRPOTrainer

    with tempfile.TemporaryDirectory() as output_dir:
        config = fspo_config(settings, output_dir)
        set_seed(config.train.seed)
        model, tokenizer = load_policy(config.model, seed=config.train.seed)
        examples, order = step_examples(config, settings.prompts_per_step * total_steps)
        dataset = Dataset.from_list([{"prompt": prompt_text(tokenizer, examples[i], config.data), "example_index": i}
                                     for i in order])
        verifier, tools = build_verifier(config.verifier), build_reward_tools(config)
        plan = scoring_plan(config.reward, config.detail, verifier is not None)

        def fspo_advantages(inputs, output):
            rollout = Rollout(output["prompt_ids"].cpu(), output["prompt_mask"].cpu(), output["completion_ids"].cpu(),
                              output["completion_mask"].cpu(), [], settings.group_size)
            rows = [examples[x["example_index"]] for x in inputs]
            scored = score_rollouts(rows, rollout, tokenizer, config, verifier, tools=tools, plan=plan)
            return advantages_from_scores(scored, rollout.completion_mask, config.rollout.group_size,
                                          config.train.scale_by_std)[0]

        accumulation = settings.responses // settings.micro_batch_size
        args = GRPOConfig(
            output_dir=output_dir, use_cpu=settings.device == "cpu", bf16=False, fp16=False, gradient_checkpointing=False,
            use_vllm=False, per_device_train_batch_size=settings.micro_batch_size,
            gradient_accumulation_steps=accumulation, num_generations=settings.group_size,
            max_completion_length=settings.max_new_tokens, temperature=settings.temperature, top_p=1.0, top_k=0,
            generation_kwargs={"min_new_tokens": settings.max_new_tokens},
            learning_rate=settings.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            optim="adamw_torch", max_grad_norm=1.0, beta=settings.beta, num_iterations=settings.ppo_epochs,
            epsilon=0.2, loss_type="dapo", scale_rewards="group", shuffle_dataset=False, max_steps=total_steps,
            seed=settings.seed, report_to="none", save_strategy="no", logging_steps=10**6, disable_tqdm=True,
            dataloader_num_workers=0, log_completions=False,
        )

        class Lockstep(TrainerCallback):
            """Waits for the coordinator before each optimizer step and reports the step after it."""

            def __init__(self):
                self.started = 0.0

            def on_step_begin(self, args, state, control, **kwargs):
                if conn.recv() != "step":
                    raise RuntimeError("the TRL worker only takes forced-length steps")
                trainer.generated_tokens = 0
                reset_peak(settings.device)
                self.started = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                peak = read_peak_mb(settings.device)
                seconds = time.perf_counter() - self.started
                conn.send(asdict(StepRecord(seconds, peak, trainer.generated_tokens)))

        trainer = TokenAdvantageGRPOTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
            reward_funcs=[lambda completions, **_: [0.0] * len(completions)],  # unused: advantages come from FSPO
            advantage_fn=fspo_advantages, callbacks=[Lockstep()],
        )
        conn.send({"ready": True, "memory_mb": loaded_mb(settings.device), "versions": versions(),
                   "keep_freed_memory": kept, "omp_wait_policy": omp_wait_policy()})
        trainer.train()
        conn.recv()  # "stop"


def versions() -> dict:
    import importlib.metadata as metadata

    names = ("torch", "transformers", "peft", "accelerate", "trl")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# ---- the coordinator ---------------------------------------------------------------------------------
def start(target, *args):
    """Start a worker process; its "ready" message is read later (`ready`), so two workers load at once."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(*args, child), daemon=True)
    process.start()
    child.close()  # so that recv() raises EOFError instead of hanging when the worker dies
    return process, parent


def ready(process, conn) -> dict:
    try:
        return conn.recv()
    except EOFError:
        process.join(timeout=10)
        raise RuntimeError(f"a benchmark worker died while loading (exit code {process.exitcode})") from None


def step(conn, message: str = "step") -> StepRecord:
    conn.send(message)
    return StepRecord(**conn.recv())


def run_model(settings: BenchSettings, steps: int, warmup: int, overhead_steps: int) -> dict:
    """Alternate fspo-lite and TRL steps (the order flips every round), then the FSPO overhead steps."""
    ours_process, ours = start(fspo_worker, settings)
    theirs_process, theirs = start(trl_worker, settings, warmup + steps)
    ours_ready, theirs_ready = ready(ours_process, ours), ready(theirs_process, theirs)
    records = {"fspo-lite": [], "trl": []}
    for round_index in range(warmup + steps):
        pair = [("fspo-lite", ours), ("trl", theirs)]
        for name, conn in pair if round_index % 2 == 0 else pair[::-1]:
            record = step(conn)
            print(f"  {settings.model} round {round_index} {name}: {record.seconds:.2f} s, "
                  f"peak {record.peak_mb:.0f} MB, {record.tokens} tokens", flush=True)
            if round_index >= warmup:
                records[name].append(record)
    theirs.send("stop")
    theirs_process.join(timeout=60)
    overhead = []
    for _ in range(overhead_steps):
        record = step(ours, "natural")
        print(f"  {settings.model} natural-length FSPO step: {record.seconds:.2f} s, FSPO work "
              f"{record.parts['fspo_s']:.3f} s, {record.parts['verified_sentences']:.0f} sentences verified", flush=True)
        overhead.append(record)
    ours.send("stop")
    ours_process.join(timeout=60)
    ours_summary, theirs_summary = summarise(records["fspo-lite"]), summarise(records["trl"])
    return {
        "settings": asdict(settings),
        "fspo-lite": {**ours_summary, "loaded_memory_mb": ours_ready["memory_mb"],
                      "omp_wait_policy": ours_ready["omp_wait_policy"]},
        "trl": {**theirs_summary, "loaded_memory_mb": theirs_ready["memory_mb"],
                "keep_freed_memory": theirs_ready["keep_freed_memory"],
                "omp_wait_policy": theirs_ready["omp_wait_policy"]},
        "ratios": compare(ours_summary, theirs_summary),
        "fspo_overhead": fspo_overhead(overhead) if overhead else None,
        "versions": theirs_ready["versions"],
    }


def report(model: str, result: dict) -> str:
    lines = [f"== {model}"]
    for side in ("fspo-lite", "trl"):
        s = result[side]
        parts = ", ".join(f"{k} {v:.2f}" for k, v in s["parts_s"].items() if k.endswith("_s"))
        lines.append(f"  {side:9s}: median step {s['step_s']:.2f} s, median peak {s['peak_mb']:.0f} MB "
                     f"(max {s['max_peak_mb']:.0f}), model loaded {s['loaded_memory_mb']:.0f} MB, "
                     f"{s['tokens_per_step']:.0f} tokens/step" + (f"; {parts}" if parts else ""))
    r = result["ratios"]
    lines.append(f"  ratios   : step time {r['time_ratio']:.2f}x, peak memory {r['memory_ratio']:.2f}x (fspo-lite / TRL)")
    if result["fspo_overhead"]:
        o = result["fspo_overhead"]
        lines.append(f"  FSPO work: {o['fspo_s']:.4f} s per step on top of {o['grpo_step_s']:.2f} s "
                     f"({100 * o['share']:.2f}%), {o['verified_sentences']:.0f} sentences verified per step")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2-135m,tiny")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per trainer and model")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--overhead-steps", type=int, default=3, help="natural-length FSPO steps (0: skip)")
    parser.add_argument("--max-new-tokens", type=int, default=BenchSettings.max_new_tokens)
    parser.add_argument("--beta", type=float, default=BenchSettings.beta)
    parser.add_argument("--verifier", default=BenchSettings.verifier, help="verifier.name for the FSPO advantages")
    parser.add_argument("--sampler-dtype", default=BenchSettings.sampler_dtype, choices=("policy", "bfloat16"),
                        help="fspo-lite's speed.sampler_dtype (TRL keeps float32: the sides then differ)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: both trainers on the GPU, peak = max allocated GPU memory")
    parser.add_argument("--threads", type=int, default=BenchSettings.threads, help="torch CPU threads per worker")
    parser.add_argument("--trl-keep-freed-memory", action="store_true",
                        help="TRL's worker sets the malloc options fspo-lite's trainer sets (speed.keep_freed_memory)")
    parser.add_argument("--omp-wait-policy", choices=OMP_WAIT_POLICIES, default="default",
                        help="both workers' OMP_WAIT_POLICY (default: the environment's, libgomp's own when unset)")
    parser.add_argument("--set", dest="fspo_settings", action="append", default=[], metavar="KEY=VALUE",
                        help="fspo-lite's side only: a config setting that changes no work (repeatable), e.g. "
                             "speed.packed_weights=false")
    parser.add_argument("--out", default=None, help="append the results as one JSON line to this file")
    args = parser.parse_args(argv)
    from fspo_lite.config import ConfigError, parse_overrides

    try:
        parse_overrides(args.fspo_settings)  # an unknown key or a bad value stops here, before any worker starts
    except ConfigError as error:
        parser.error(f"--set: {error}")
    if args.omp_wait_policy != "default":  # read by each spawned worker's OpenMP runtime when torch loads there
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    wait_policy = omp_wait_policy()
    from fspo_lite.machine import machine_description

    print(f"machine: {machine_description()}, python {platform.python_version()}, OMP_WAIT_POLICY {wait_policy}",
          flush=True)
    results = {}
    for model in args.models.split(","):
        settings = BenchSettings(model=model, max_new_tokens=args.max_new_tokens, beta=args.beta, device=args.device,
                                 threads=args.threads, verifier=args.verifier, sampler_dtype=args.sampler_dtype,
                                 trl_keep_freed_memory=args.trl_keep_freed_memory, fspo_settings=args.fspo_settings)
        results[model] = run_model(settings, args.steps, args.warmup, args.overhead_steps)
        print(report(model, results[model]), flush=True)
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     "machine": machine_description(),
                                     "omp_wait_policy": wait_policy, "results": results}) + "\n")
    print(summary_line(results), flush=True)


if __name__ == "__main__":
    main()
