"""A lower-precision sampler for the CPU, measured before it is built: int8 and bfloat16 against float32.

    python bench/sampler_precision.py [--model smollm2-135m] [--questions 4] [--samples 4] [--tokens 64]
                                      [--repeats 3] [--threads 1] [--out results/bench_sampler_precision.jsonl]

The rollout engine could sample with cheaper weights than the float32 policy the trainer updates, and let the ratio
pi_theta / pi_sampler of the clipped surrogate correct the gap (docs/performance.md, "Lower precision"). Whether
that pays depends on two numbers, both printed here for each variant:

- speed: the held-out knowledge-base prompts (system prompt, two demonstrations, the question) through
  `TransformersRollout` at the training step's shape (questions x samples rows, `--tokens` forced new tokens,
  temperature 0.7 from seed 0), the variants alternated round after round; median wall seconds and the ratio to
  float32;
- the gap: float32's own sampled responses scored again, teacher-forced, by each variant: mean and 99th percentile
  of |log pi_variant - log pi_float32| over the response tokens, and the share of tokens whose ratio
  pi_float32 / pi_variant lies outside the clip range [0.8, 1.2] (those tokens would get no gradient from the
  clipped surrogate when their advantage pushes them further out).

Variants: `int8`, torch's dynamic int8 linear (fbgemm / oneDNN; one int8 scale per output row of every weight, one
per activation tensor, computed on the fly), on every nn.Linear including the output layer; `int8-no-down`, the same
without the MLP down projections and the output layer; `bfloat16`, a bfloat16 copy of the whole model. For int8 it
also prints the linear inputs with the largest max / mean |activation| (an activation outlier forces a coarse
per-tensor scale on every other entry of its tensor). Writes one JSON line to `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402

INT8_MAX = 127
CLIP = (0.8, 1.2)


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values, scales) of a (out, in) weight, one scale per output row: scale_i = max_j |w_ij| / 127 (1 for an
    all-zero row), q_ij = round(w_ij / scale_i), so |q_ij * scale_i - w_ij| <= scale_i / 2."""
    if weight.dim() != 2:
        raise ValueError(f"expected a (out, in) weight, got shape {tuple(weight.shape)}")
    weight = weight.detach().float()
    peak = weight.abs().amax(dim=1)
    scales = torch.where(peak > 0, peak / INT8_MAX, torch.ones_like(peak))
    return torch.round(weight / scales[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8), scales


def int8_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Module:
    """torch's dynamic int8 linear holding the per-row int8 copy of `weight` (`quantize_rows`' scales)."""
    import warnings

    import torch.ao.nn.quantized.dynamic as dynamic

    _, scales = quantize_rows(weight)
    with warnings.catch_warnings():  # torch 2.13 marks the quantized tensor constructors deprecated
        warnings.simplefilter("ignore", UserWarning)
        qweight = torch.quantize_per_channel(weight.detach().float(), scales.double(),
                                             torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8)
    layer = dynamic.Linear(weight.shape[1], weight.shape[0], bias_=bias is not None, dtype=torch.qint8)
    layer.set_weight_bias(qweight, None if bias is None else bias.detach().float())
    return layer


def linears(model, skip: tuple[str, ...] = ()) -> dict[str, torch.nn.Linear]:
    """The model's float nn.Linear layers by name, without those whose name contains one of `skip`."""
    return {name: module for name, module in model.named_modules()
            if type(module) is torch.nn.Linear and not any(part in name for part in skip)}


@contextlib.contextmanager
def int8_weights(model, skip: tuple[str, ...] = ()):
    """Inside: the chosen linear layers compute with `int8_linear` (forward replaced on the instance, restored on
    exit); the float weights are not touched."""
    swapped = []
    try:
        for module in linears(model, skip).values():
            module.forward = int8_linear(module.weight, module.bias).forward
            swapped.append(module)
        yield len(swapped)
    finally:
        for module in swapped:
            del module.forward


def gap(reference: torch.Tensor, other: torch.Tensor) -> dict[str, float]:
    """Mean and 99th percentile of |other - reference| over the given log-probs, and the share of tokens whose
    ratio exp(reference - other) (pi_trainer / pi_sampler) lies outside CLIP."""
    difference = (other - reference).abs()
    ratio = torch.exp(reference - other)
    return {"mean_abs": round(difference.mean().item(), 5), "p99_abs": round(difference.quantile(0.99).item(), 5),
            "outside_clip": round(((ratio < CLIP[0]) | (ratio > CLIP[1])).float().mean().item(), 4)}


def activation_outliers(model, run, top: int = 3) -> list[tuple[str, float, float]]:
    """(layer, max |x|, max / mean |x|) of the linear inputs with the largest max / mean during `run()`."""
    seen: dict[str, tuple[float, float]] = {}
    hooks = [module.register_forward_pre_hook(
        lambda _module, inputs, name=name: seen.__setitem__(name, (inputs[0].abs().max().item(),
                                                                   inputs[0].abs().mean().item())))
        for name, module in linears(model).items()]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    rows = [(name, peak, peak / max(mean, 1e-12)) for name, (peak, mean) in seen.items()]
    return [(name, round(peak, 1), round(ratio)) for name, peak, ratio in sorted(rows, key=lambda r: -r[2])[:top]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="append the results as one JSON line")
    args = parser.parse_args(argv)

    from fspo_lite.config import Config, ModelConfig, RolloutConfig
    from fspo_lite.data.examples import load_examples
    from fspo_lite.data.prompts import prompt_text
    from fspo_lite.models.logprobs import completion_logprobs
    from fspo_lite.models.policy import load_policy
    from fspo_lite.rollout.transformers_rollout import TransformersRollout
    from fspo_lite.machine import machine_description

    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(ModelConfig(name=args.model, lora=False), for_training=False)
    prompts = [prompt_text(tokenizer, e, Config().data)
               for e in load_examples("bundled:kbqa_test", limit=args.questions)]
    temperature = 0.7
    rollout_config = RolloutConfig(max_new_tokens=args.tokens, generation_batch_size=len(prompts) * args.samples,
                                   temperature=temperature)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    variants = {"float32": (model, contextlib.nullcontext), "int8": (model, lambda: int8_weights(model)),
                "int8-no-down": (model, lambda: int8_weights(model, ("down_proj", "lm_head"))),
                "bfloat16": (bf16, contextlib.nullcontext)}
    machine = machine_description()
    print(f"machine: {machine}; torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"quantized engine {torch.backends.quantized.engine}, {args.threads} thread(s); "
          f"load average {os.getloadavg()[0]:.1f}")

    seconds: dict[str, list[float]] = {name: [] for name in variants}
    sampled = None
    for repeat in range(args.repeats):
        names = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for name in names:
            policy, inside = variants[name]
            engine = TransformersRollout(policy, tokenizer, rollout_config, generate_kwargs={"min_new_tokens": args.tokens})
            torch.manual_seed(0)
            started = time.perf_counter()
            with inside(), torch.no_grad():
                result = engine.generate(prompts, args.samples)
            seconds[name].append(time.perf_counter() - started)
            if name == "float32":
                sampled = result
    print(f"{len(prompts)} prompts x {args.samples} samples x {args.tokens} tokens, temperature {temperature}, "
          f"{args.repeats} alternated repeats; median wall seconds:")
    speed = {}
    for name, values in seconds.items():
        speed[name] = {"median_s": round(statistics.median(values), 3),
                       "ratio_to_float32": round(statistics.median(values) / statistics.median(seconds["float32"]), 3)}
        print(f"  {name}: {speed[name]['median_s']:.2f} s, {speed[name]['ratio_to_float32']:.2f}x float32")

    mask = sampled.completion_mask.bool()

    def scored(policy) -> torch.Tensor:
        with torch.no_grad():
            logp, _ = completion_logprobs(policy, sampled.prompt_ids, sampled.prompt_mask, sampled.completion_ids,
                                          sampled.completion_mask, temperature)
        return logp.float()[mask]

    reference = scored(model)
    gaps = {}
    for name, (policy, inside) in variants.items():
        if name == "float32":
            continue
        with inside():
            gaps[name] = gap(reference, scored(policy))
        print(f"  log-prob gap to float32, {name}: mean |diff| {gaps[name]['mean_abs']:.4f}, "
              f"99th percentile {gaps[name]['p99_abs']:.4f}, ratio outside {list(CLIP)}: "
              f"{100 * gaps[name]['outside_clip']:.1f}% of {int(mask.sum())} tokens")
    outliers = activation_outliers(model, lambda: scored(model))
    print("  largest max / mean |input| of a linear layer: "
          + "; ".join(f"{name} {peak} ({ratio}x)" for name, peak, ratio in outliers))
    result = {"bench": "sampler_precision", "model": args.model, "machine": machine, "threads": args.threads,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
              "questions": args.questions, "samples": args.samples, "tokens": args.tokens, "repeats": args.repeats,
              "speed": speed, "gap": gaps, "outliers": outliers, "tokens_scored": int(mask.sum()),
              "load_average": round(os.getloadavg()[0], 2), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.out:
        with open(args.out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
