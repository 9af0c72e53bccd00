"""Benchmark: SmolLM2-135M-Instruct with a 4-bit NF4 base (bitsandbytes) against float32, LoRA, on the CPU.

    python bench/four_bit_cpu.py [--repeats 2] [--out results/bench_four_bit_cpu.jsonl]
                                 [--model smollm2-135m] [--variants float32,nf4] [--tokens 32] [--length 96]

Each variant runs in its own process (peak RSS is the process's high-water mark, VmHWM) and does the
same work: load the policy the trainer loads (`load_policy`, LoRA r 16 on all seven projections), then
per repeat
- generation: 8 prompts x 32 new tokens, greedy, min_new_tokens = max_new_tokens (every row full length);
- update: forward + backward of the mean token loss on 8 sequences x 96 tokens (the LoRA gradients).
Reported: load time, the mean generation and update times over the repeats (after one warm-up of each),
the RSS after loading and the peak RSS, and the model's memory footprint (transformers' count).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path
from queue import Empty

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = ["What is the capital of France?", "Who wrote Hamlet?", "What is the boiling point of water?",
           "Name the largest planet.", "What is 12 times 12?", "Who painted the Mona Lisa?",
           "What gas do plants absorb?", "In which year did the Second World War end?"]


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def worker(model_name: str, four_bit: bool, repeats: int, tokens: int, length: int, queue) -> None:
    import torch

    from fspo_lite.config import ModelConfig
    from fspo_lite.models.policy import load_policy

    started = time.perf_counter()
    model, tokenizer = load_policy(ModelConfig(name=model_name, load_in_4bit=four_bit))
    load_time = time.perf_counter() - started
    loaded_rss = rss_kib("VmRSS")
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in PROMPTS]
    prompts = tokenizer(chats, return_tensors="pt", padding=True)
    generator = torch.Generator().manual_seed(0)
    batch = torch.randint(100, 40_000, (8, length), generator=generator)

    def generate():
        model.eval()
        with torch.no_grad():
            return model.generate(**prompts, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)

    def update():
        model.train()
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        return loss.item()

    generate(), update()  # warm-up
    times = {"generation": [], "update": []}
    for _ in range(repeats):
        for name, work in (("generation", generate), ("update", update)):
            begun = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - begun)
    answer = tokenizer.decode(generate()[0, prompts["input_ids"].shape[1]:], skip_special_tokens=True)
    queue.put({
        "variant": "4-bit NF4" if four_bit else "float32", "load_s": round(load_time, 2),
        "generation_s": round(statistics.mean(times["generation"]), 2),
        "update_s": round(statistics.mean(times["update"]), 2),
        "loaded_rss_mib": round(loaded_rss / 1024), "peak_rss_mib": round(rss_kib("VmHWM") / 1024),
        "footprint_mib": round(model.get_memory_footprint() / 2**20), "answer_0": answer.strip()[:60],
        "repeats": repeats, "torch_threads": torch.get_num_threads(), "model": model_name,
        "new_tokens": tokens, "update_length": length,
    })


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="results/bench_four_bit_cpu.jsonl")
    parser.add_argument("--model", default="smollm2-135m", help="the policy (the tiny test model has no 4-bit form)")
    parser.add_argument("--variants", default="float32,nf4", help="float32, nf4 or both")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per prompt in the generation")
    parser.add_argument("--length", type=int, default=96, help="tokens per sequence in the update")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    if set(variants) - {"float32", "nf4"}:
        parser.error(f"--variants: float32 and/or nf4, not {args.variants}")
    context = multiprocessing.get_context("spawn")
    rows = []
    for four_bit in [variant == "nf4" for variant in variants]:
        queue = context.Queue()
        process = context.Process(target=worker, args=(args.model, four_bit, args.repeats, args.tokens, args.length,
                                                       queue))
        process.start()
        row = None
        while row is None:  # a worker that dies (a failed load) ends the run instead of hanging it
            try:
                row = queue.get(timeout=5)
            except Empty:
                if not process.is_alive():
                    raise RuntimeError(f"the {'nf4' if four_bit else 'float32'} worker died "
                                       f"(exit code {process.exitcode})") from None
        process.join()
        row.update(machine=platform.machine(), python=platform.python_version(),
                   time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        rows.append(row)
        print(json.dumps(row))
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    if len(rows) < 2:
        return
    base, quant = rows
    print(f"4-bit / float32: generation x{quant['generation_s'] / base['generation_s']:.2f}, "
          f"update x{quant['update_s'] / base['update_s']:.2f}, "
          f"peak RSS x{quant['peak_rss_mib'] / base['peak_rss_mib']:.2f}")


if __name__ == "__main__":
    main()
