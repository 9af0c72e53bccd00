"""How much of each study piece is matrix products: the share no code change short of fewer FLOPs can remove.

    python bench/matmul_share.py [--questions 16] [--items 20] [--steps 2] [--threads 1] [--data-dir DIR]
                                 [--profile study] [--judge likelihood] [--judge-model NAME]

Runs, on the bundled SmolLM2-135M with the study profile's settings (configs/lite/study.yaml), one piece of each
kind under torch's profiler: kbqa generation (`--questions` x 4 sampled answers), the likelihood judge on those
answers' reasoning sentences (evidence states encoded first, as for every model after a worker's first), TruthfulQA
MC and HaluEval on `--items` items, and `--steps` training steps of fspo after one warm-up step. For each it prints
the wall seconds and the share of the profiled CPU time spent in matrix products (aten::mm, addmm, bmm and the
attention kernel). It also prints this machine's single-thread float32 GEMM rate on a 4096 x 576 x 1536 product,
so the matrix-product time can be read as work: removing every other operation would leave at least that share.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward")
"""Profiler names of the products (self time; the attention kernel is two products and a softmax)."""


def profiled(label: str, run):
    """Run `run()` under the profiler; print and return (wall seconds, matmul share of profiled CPU time)."""
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    wall = time.perf_counter() - start
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    products = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    share = products / total if total else float("nan")
    print(f"{label}: {wall:.1f} s wall (profiled); matrix products {share:.0%} of the CPU time", flush=True)
    return wall, share


def gemm_rate(repeats: int = 10) -> float:
    import torch

    a, w = torch.randn(4096, 576), torch.randn(1536, 576)
    for _ in range(3):
        torch.nn.functional.linear(a, w)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.nn.functional.linear(a, w)
    return 2 * 4096 * 576 * 1536 * repeats / (time.perf_counter() - start) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a study worker has 1)")
    parser.add_argument("--data-dir", help="the data folder (default: $FSPO_LITE_DATA, else ~/.cache/fspo-lite/data)")
    parser.add_argument("--profile", default="study", help="the lite profile whose notebook-03 settings are used")
    parser.add_argument("--judge", default="likelihood", help="the step judge timed on the kbqa answers' sentences")
    parser.add_argument("--judge-model", help="verifier.model of the judge (default: the judge's own)")
    args = parser.parse_args(argv)

    import dataclasses

    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "bench"))
    from study_time import notebook03_parameters, shared_settings

    from fspo_lite.config import RolloutConfig, apply_overrides
    from fspo_lite.drivers.experiment import load_profile, local_sources
    from fspo_lite.drivers.runs import run_config
    from fspo_lite.evaluation import evaluate
    from fspo_lite.evaluation.benchmarks import load_items, resolve
    from fspo_lite.models.policy import load_policy
    from fspo_lite.data.prompts import prompt_text
    from fspo_lite.rollout.transformers_rollout import TransformersRollout
    from fspo_lite.text import reasoning_sentences
    from fspo_lite.update.trainer import Trainer
    from fspo_lite.data.training_set import load_training_examples
    from fspo_lite.scoring.verifiers import build_verifier
    from fspo_lite.machine import machine_description

    profile = load_profile(args.profile)
    params = notebook03_parameters(profile)
    sources, used = local_sources(profile.local_data, args.data_dir)
    shared = shared_settings(params)
    shared.update({f"evaluation.sources.{name}": path for name, path in sources.items()})
    config = run_config(shared, "fspo", 0, tempfile.mkdtemp(prefix="matmul_share_"))
    ev = config.evaluation
    print(f"machine: {machine_description()}; torch threads {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.1f}; " + "; ".join(f"{k}: {v}" for k, v in used.items()))
    print(f"float32 GEMM 4096 x 576 x 1536 on this thread count: {gemm_rate():.1f} GFLOP/s")
    model, tokenizer = load_policy(dataclasses.replace(config.model, lora=False), for_training=False)
    model.eval()
    sampling = RolloutConfig(max_new_tokens=ev.max_new_tokens, temperature=ev.temperature, top_p=config.rollout.top_p,
                             generation_batch_size=ev.batch_size)
    engine = TransformersRollout(model, tokenizer, sampling, config.data.max_prompt_tokens)
    questions = load_items("kbqa", resolve("kbqa", {"kbqa": config.data.eval}), ev.limit, ev.seed,
                           ev.shuffle)[: args.questions]
    prompts = [prompt_text(tokenizer, e, config.data) for e in questions]
    torch.manual_seed(ev.seed)
    texts: list[str] = []
    profiled(f"kbqa generation, {len(prompts)} questions x {ev.samples}",
             lambda: texts.extend(config.data.response_prefix + t for t in engine.generate(prompts, ev.samples).texts))
    evidence, sentences = [], []
    for index, text in enumerate(texts):
        for start, end in reasoning_sentences(text):
            sentences.append(text[start:end])
            evidence.append(questions[index // ev.samples].evidence)
    judge = build_verifier(dataclasses.replace(config.verifier, name=args.judge, model=args.judge_model))
    judge.gains(list(dict.fromkeys(evidence)), ["x"] * len(set(evidence)))  # encode these questions' evidence first
    profiled(f"{args.judge} judge, {len(sentences)} sentences (evidence kept)", lambda: judge.gains(evidence, sentences))
    for name, label in (("truthfulqa_mc", "TruthfulQA MC"), ("halueval", "HaluEval")):
        settings = apply_overrides(run_config(shared, "fspo", 0, config.train.output_dir), {
            "evaluation.benchmarks": [name], "evaluation.limit": args.items,
            "evaluation.output_dir": f"{config.train.output_dir}/eval_{name}"})
        profiled(f"{label}, {args.items} items",
                 lambda: evaluate(settings, model=model, tokenizer=tokenizer, progress=False))
    del model, engine
    trainer = Trainer(config, train_examples=load_training_examples(config), progress=False)
    trainer.train_step()  # warm-up
    profiled(f"training, {args.steps} steps of fspo",
             lambda: [trainer.train_step() for _ in range(args.steps)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
