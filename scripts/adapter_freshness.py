"""Adapter freshness: train a few steps and check that the engine samples the adapter the trainer holds.

    python scripts/adapter_freshness.py --engine vllm --out runs/freshness --stale-from 4
    python scripts/adapter_freshness.py --engine vllm-server --server-url http://127.0.0.1:8000 --out runs/fresh-server
    python scripts/adapter_freshness.py --engine vllm --set rollout.vllm_enable_sleep_mode=true ...   # CUDA only

With rollout.use_sampler_logprobs every metrics row holds `sampler_logprob_gap_mean`, the mean |sampler - trainer|
log-prob over the sampled tokens (`fspo_lite.algos.logprob_gap`). Step 1 samples the adapter the trainer was built
with (no update has happened yet), so its gap is the engine's rounding: the fresh level. The learning rate is high
and an entropy bonus guarantees a gradient, so each update moves the log-probs far more than that rounding. Each
later step must stay under --fresh-factor times step 1's gap. With --stale-from K the engine's adapter refresh is
skipped from step K on (it keeps serving the adapter of step K-1: the known failure of LoRA over vLLM), and those
steps must show at least --stale-factor times step 1's gap, which shows that the check can fail.

The trainer is closed at the end (its engine's processes end with it). One JSON object goes to stdout (and --out's
freshness.json): the gaps per step, ok, and the problems; the exit status is 1 when the check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)

SMALL = ["rollout.max_new_tokens=16", "rollout.group_size=2", "train.prompts_per_step=2", "train.micro_batch_size=4",
         "train.learning_rate=0.02", "train.entropy_coef=0.01", "train.beta=0", "rollout.use_sampler_logprobs=true",
         "train.save_every=0"]
"""Four short responses a step, a learning rate at which each update moves the log-probs by far more than an
engine's rounding, and an entropy bonus so that every step has a gradient (a group of equal rewards has none)."""
GAP_FLOOR = 1e-5
"""Step 1's gap is taken as at least this (nats): an engine that matches the trainer exactly gives 0."""


def freshness_problems(gaps: list[float], stale_from: int | None = None, fresh_factor: float = 10.0,
                       stale_factor: float = 100.0) -> list[str]:
    """What is wrong with the mean gaps of steps 1, 2, ...: a later step with the refresh in place at or above
    `fresh_factor` times step 1's gap (stale adapter served), a step from `stale_from` on (refresh skipped) below
    `stale_factor` times it (the check could not have seen a stale adapter), a missing or non-finite gap."""
    if len(gaps) < 2:
        return [f"{len(gaps)} step(s) logged a gap; the check needs at least 2"]
    if not all(isinstance(gap, (int, float)) and math.isfinite(gap) for gap in gaps):
        return [f"steps without a finite sampler_logprob_gap_mean: {gaps}"]
    fresh = max(gaps[0], GAP_FLOOR)
    problems = []
    for step, gap in enumerate(gaps[1:], start=2):
        if stale_from is not None and step >= stale_from:
            if gap < stale_factor * fresh:
                problems.append(f"step {step} (refresh skipped): gap {gap:.3g} is under {stale_factor:g} x step 1's "
                                f"{fresh:.3g}: raise the learning rate so that a stale adapter shows")
        elif gap >= fresh_factor * fresh:
            problems.append(f"step {step}: gap {gap:.3g} is {gap / fresh:.0f} x step 1's {fresh:.3g}: the engine "
                            "sampled another adapter than the trainer holds")
    return problems


def skip_adapter_refresh(engine) -> None:
    """From now on `engine` keeps serving the adapter it holds: the failure the check must catch. The vLLM server
    engine keeps its registered adapter, the colocated one its saved folder, the transformers engine its sampler copy
    (speed.sampler_dtype); the transformers engine without a copy samples the policy itself and cannot go stale."""
    if hasattr(engine, "served_adapter"):
        engine._publish_adapter = lambda: engine.served_adapter
    elif hasattr(engine, "adapters"):
        versions = engine.adapters
        held = (f"policy-{versions.run_id}-v{versions.version}", versions.version, str(versions.folder(versions.version)))
        versions.save = lambda model: held
    elif getattr(engine, "_copy", None) is not None:
        engine.sampling_model = lambda: engine._copy
    else:
        raise ValueError("this engine samples the policy itself (speed.sampler_dtype=policy): nothing can go stale")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="vllm", choices=("vllm", "vllm-server", "transformers"))
    parser.add_argument("--config", default=str(REPO / "configs" / "smoke_smollm2.yaml"))
    parser.add_argument("--server-url", default=None, help="the vLLM server (--engine vllm-server)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--stale-from", type=int, default=None, help="skip the adapter refresh from this step on")
    parser.add_argument("--fresh-factor", type=float, default=10.0)
    parser.add_argument("--stale-factor", type=float, default=100.0)
    parser.add_argument("--out", type=Path, required=True, help="the run's output folder (must not hold a run)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from fspo_lite.config import load_config
    from fspo_lite.update.trainer import Trainer

    overrides = [*SMALL, f"rollout.engine={args.engine}", f"train.steps={args.steps}", f"train.output_dir={args.out}",
                 *([f"rollout.vllm_server_url={args.server_url}"] if args.server_url else []), *args.overrides]
    config = load_config(args.config, overrides)
    started = time.perf_counter()
    rows = []
    with Trainer(config, progress=False) as trainer:  # its engine ends with it
        for step in range(1, args.steps + 1):
            if args.stale_from is not None and step == args.stale_from:
                skip_adapter_refresh(trainer.engine)
            rows.append(trainer.train_step())
    gaps = [row.get("sampler_logprob_gap_mean", float("nan")) for row in rows]
    problems = freshness_problems(gaps, args.stale_from, args.fresh_factor, args.stale_factor)
    fresh = max(gaps[0], GAP_FLOOR) if gaps and math.isfinite(gaps[0]) else float("nan")
    result = {"engine": args.engine, "ok": not problems, "problems": problems, "stale_from": args.stale_from,
              "gap_mean": gaps, "gap_max": [row.get("sampler_logprob_gap_max") for row in rows],
              "ratio_to_step_1": [gap / fresh for gap in gaps], "update_skipped": [row["update_skipped"] for row in rows],
              "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result), flush=True)
    (args.out / "freshness.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
