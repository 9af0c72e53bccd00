"""Benchmark: one rollout through the transformers engine, colocated vLLM and a vLLM server, side by side.

    python bench/vllm_rollout.py [--prompts 4 --samples 4 --tokens 64 --repeats 3 --updates 3]
        [--server-url http://127.0.0.1:8000] [--out results/bench_vllm_rollout.jsonl]
    make bench-vllm           # in .venv-vllm (vLLM's CPU build), after make setup-vllm

The policy is the bundled SmolLM2-135M-Instruct with a LoRA adapter (float32), the prompts the first
--prompts questions of the bundled training set, --samples responses each at temperature 1 (16 x 64 by
default). The engines take turns, --repeats rounds, so they see the same machine state; each reports the
median tokens/s (completion tokens generated / seconds of `generate`) and its ratio to the transformers
engine. A server is started on 127.0.0.1 (and stopped) unless --server-url names a running one (started
with --enable-lora, --max-lora-rank >= 16 and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).

The log-prob gap: the log-prob each vLLM engine reports for every token it sampled against the trainer's
log-prob of that token (`completion_logprobs`, the same numbers the update uses): mean and max |difference|
and the mean importance ratio exp(trainer - sampler) (what the clipped objective sees at mu = 1 with
rollout.use_sampler_logprobs), first with the fresh adapter (B = 0), then after --updates gradient steps
(Adam, lr 1e-3, raising the log-prob of the sampled responses) have moved the adapter away from zero.

One JSON line per measurement is printed (and appended to --out); the last line is the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)


def gap_statistics(sampler, trainer, mask) -> dict:
    """Mean and max |trainer - sampler| over the masked tokens, and the mean of exp(trainer - sampler) there."""
    import torch

    keep = mask.bool()
    difference = (trainer.float() - sampler.float())[keep]
    if difference.numel() == 0:
        return {"tokens": 0, "mean_abs_diff": None, "max_abs_diff": None, "mean_ratio": None}
    return {"tokens": int(difference.numel()), "mean_abs_diff": difference.abs().mean().item(),
            "max_abs_diff": difference.abs().max().item(), "mean_ratio": torch.exp(difference).mean().item()}


def tokens_per_second(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else float("nan")


def summary(records: list[dict]) -> dict:
    """Median tokens/s per engine, each engine's ratio to the transformers engine, the gaps by phase."""
    speeds: dict[str, list[float]] = {}
    for record in records:
        if record.get("kind") == "speed":
            speeds.setdefault(record["engine"], []).append(record["tokens_per_s"])
    medians = {engine: statistics.median(values) for engine, values in speeds.items()}
    base = medians.get("transformers")
    ratios = {engine: value / base for engine, value in medians.items()} if base else {}
    gaps = {f"{r['engine']}@{r['phase']}": {k: r[k] for k in ("mean_abs_diff", "max_abs_diff", "mean_ratio")}
            for r in records if r.get("kind") == "gap"}
    return {"kind": "summary", "tokens_per_s": medians, "ratio_to_transformers": ratios, "logprob_gap": gaps}


def emit(record: dict, out: Path | None) -> None:
    line = json.dumps(record, sort_keys=True)
    print(line, flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as handle:
            handle.write(line + "\n")


def update_adapter(model, rollout, steps: int, lr: float = 1e-3, micro_batch: int = 4) -> None:
    """`steps` Adam steps raising the log-prob of the sampled responses: the adapter moves away from B = 0."""
    import torch

    from fspo_lite.models.logprobs import completion_logprobs

    model.train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    tokens = rollout.completion_mask.sum()
    for _ in range(steps):
        optimizer.zero_grad()
        for start in range(0, rollout.completion_ids.shape[0], micro_batch):  # activations of `micro_batch` rows
            rows = slice(start, start + micro_batch)
            logprobs, _ = completion_logprobs(model, rollout.prompt_ids[rows], rollout.prompt_mask[rows],
                                              rollout.completion_ids[rows], rollout.completion_mask[rows])
            (-(logprobs * rollout.completion_mask[rows]).sum() / tokens).backward()
        optimizer.step()
    model.eval()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--server-url", default=None)
    parser.add_argument("--engines", default="transformers,vllm,vllm-server")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    from fspo_lite.config import load_config
    from fspo_lite.update.distributed import Distributed
    from fspo_lite.rollout.engines import build_rollout_engine, check_rollout_engine
    from fspo_lite.models.logprobs import completion_logprobs
    from fspo_lite.models.policy import bundled_model_dir, load_policy
    from fspo_lite.data.prompts import prompt_text
    from fspo_lite.data.training_set import load_training_examples

    engines = args.engines.split(",")
    base = ["model.name=smollm2-135m", "model.lora=true", f"rollout.max_new_tokens={args.tokens}",
            "rollout.temperature=1.0", "rollout.top_p=1.0", "train.output_dir=runs/bench_vllm_rollout",
            f"rollout.group_size={args.samples}"]
    configs = {name: load_config("configs/smoke_smollm2.yaml", [*base, f"rollout.engine={name}"] + (
        ["rollout.use_sampler_logprobs=true"] if name != "transformers" else [])) for name in engines}
    for name, config in configs.items():
        if name != "vllm-server":
            check_rollout_engine(config.rollout, config.model, config.train)
    config = configs[engines[0]]
    torch.manual_seed(0)
    model, tokenizer = load_policy(config.model, seed=0)
    model.eval()
    examples = load_training_examples(config)[: args.prompts]
    prompts = [prompt_text(tokenizer, e, config.data) for e in examples]
    dist = Distributed()
    server = None
    environment = {"kind": "environment", "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                   "torch": torch.__version__, "threads": torch.get_num_threads(),
                   "settings": {k: v for k, v in vars(args).items() if k != "out"}}
    try:
        import vllm

        environment["vllm"] = vllm.__version__
    except ImportError:
        environment["vllm"] = None
    emit(environment, args.out)
    records = []
    built = {}
    try:
        for name in engines:
            started = time.perf_counter()  # the server's start counts (when this script starts it)
            if name == "vllm-server":
                url = args.server_url
                if url is None:
                    from vllm_server import VLLMServer

                    server = VLLMServer(bundled_model_dir("smollm2-135m"), served_name="smollm2-135m").start()
                    url = server.url
                configs[name].rollout.vllm_server_url = url
            chosen = configs[name]
            built[name] = build_rollout_engine(model, tokenizer, chosen.rollout, chosen.model, chosen.train,
                                               chosen.data.max_prompt_tokens, dist)
            emit({"kind": "startup", "engine": name, "seconds": round(time.perf_counter() - started, 2)}, args.out)
        rollouts = {}
        for repeat in range(args.repeats):
            for name in engines:
                torch.manual_seed(repeat)
                started = time.perf_counter()
                rollout = built[name].generate(prompts, args.samples)
                seconds = time.perf_counter() - started
                tokens = int(rollout.completion_mask.sum())
                rollouts[name] = rollout
                record = {"kind": "speed", "engine": name, "repeat": repeat, "sequences": rollout.completion_ids.shape[0],
                          "tokens": tokens, "seconds": round(seconds, 3),
                          "tokens_per_s": round(tokens_per_second(tokens, seconds), 2)}
                records.append(record)
                emit(record, args.out)
        for phase in ("fresh adapter", f"after {args.updates} updates"):
            if phase != "fresh adapter":
                update_adapter(model, rollouts["transformers" if "transformers" in rollouts else engines[0]],
                               args.updates)
            for name in engines:
                if name == "transformers":
                    continue
                rollout = built[name].generate(prompts, args.samples)
                with torch.no_grad():
                    trainer, _ = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask,
                                                     rollout.completion_ids, rollout.completion_mask)
                record = {"kind": "gap", "engine": name, "phase": phase,
                          **gap_statistics(rollout.sampling_logprobs, trainer, rollout.completion_mask)}
                records.append(record)
                emit(record, args.out)
    finally:
        if server is not None:
            server.stop()
    emit(summary(records), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
