"""TRL's GRPOTrainer with colocated vLLM on the same work as scripts/bench_gpu.py: the GPU comparison.

One process per configuration (clean peak-memory counters, one vLLM engine per process). The workload is
bench_gpu.py's: a random-weight Qwen2.5 architecture (built and cached by bench_gpu.build_random_model), 4 prompts x 8
samples x 256 new tokens per step, LoRA r 16 / alpha 32 on all seven projections, beta 0, one update per batch
(mu = 1), the DAPO token-mean loss, seeded random rewards (a random model earns nothing else). TRL merges the
adapter into vLLM's weights before each generation; fspo-lite passes the adapter to vLLM as a LoRA request.

    python scripts/bench_gpu_trl.py --models qwen2.5-1.5b --steps 2 --out docs/gpu_results.jsonl
    python scripts/bench_gpu_trl.py --models qwen2-test --steps 1 --max-new-tokens 4 --no-vllm   # CPU smoke run

Compare with `python scripts/bench_gpu.py --models M --engines vllm --no-4bit --dtype bfloat16` (same weights).
One JSON line per configuration goes to stdout (and --out), with the columns of bench_gpu.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_gpu import (ARCHITECTURES, add_workload_arguments, build_random_model, gpu_memory_held_gib,  # noqa: E402
                       questions, report_one, run_in_own_process, workload_arguments)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run_one(args) -> dict:
    """One warm-up step plus `args.steps` measured TRL steps in this process; return the figures."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    folder = build_random_model(args.models[0], Path(args.cache))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q.question}], tokenize=False,
                                             add_generation_prompt=True) for q in questions()]
    cuda = torch.cuda.is_available()
    total_steps = args.steps + 1
    dataset = Dataset.from_list([{"prompt": prompts[i % len(prompts)]} for i in range(args.prompts * total_steps)])
    generator = torch.Generator().manual_seed(0)

    def random_rewards(completions, **_):
        return torch.rand(len(completions), generator=generator).tolist()

    checkpointing = ARCHITECTURES[args.models[0]]["hidden_size"] >= 1536  # bench_gpu's rule: on above 1B parameters
    responses = args.prompts * args.group_size
    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir, bf16=cuda, use_cpu=not cuda, gradient_checkpointing=checkpointing,
            use_vllm=not args.no_vllm, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
            vllm_max_model_length=1024, per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=responses // args.micro_batch, num_generations=args.group_size,
            max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, learning_rate=1e-5,
            lr_scheduler_type="constant", warmup_steps=0, beta=args.beta, num_iterations=1, loss_type="dapo",
            shuffle_dataset=False, max_steps=total_steps, seed=0, report_to="none", save_strategy="no",
            logging_steps=10**6, disable_tqdm=True, dataloader_num_workers=0, log_completions=False,
        )
        timings = {"step": [], "generation": []}

        class Timer(TrainerCallback):
            def on_step_begin(self, args_, state, control, **kwargs):
                if cuda:
                    torch.cuda.synchronize()
                    if state.global_step == 1:
                        torch.cuda.reset_peak_memory_stats()  # the warm-up step is excluded, as in bench_gpu.py
                self.started, trainer.generation_seconds, trainer.generated_tokens = time.perf_counter(), 0.0, 0

            def on_step_end(self, args_, state, control, **kwargs):
                if cuda:
                    torch.cuda.synchronize()
                timings["step"].append(time.perf_counter() - self.started)
                timings["generation"].append(trainer.generation_seconds)
                timings.setdefault("tokens", []).append(trainer.generated_tokens)

        class TimedGRPOTrainer(GRPOTrainer):
            """Adds the wall time of generation (vLLM, with the weight sync before it) and the tokens it made."""

            generation_seconds = 0.0
            generated_tokens = 0

            def _generate(self, *a, **k):
                started = time.perf_counter()
                result = super()._generate(*a, **k)
                if cuda:
                    torch.cuda.synchronize()
                self.generation_seconds += time.perf_counter() - started
                return result

            def _generate_and_score_completions(self, inputs):
                output = super()._generate_and_score_completions(inputs)
                self.generated_tokens += int(output["completion_mask"].sum())
                return output

        loaded_at = time.perf_counter()
        trainer = TimedGRPOTrainer(
            model=str(folder), args=config, train_dataset=dataset, processing_class=tokenizer,
            reward_funcs=[random_rewards], callbacks=[Timer()],
            peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                   task_type="CAUSAL_LM"),
        )
        load_time = time.perf_counter() - loaded_at
        trainer.train()
        held = gpu_memory_held_gib() if cuda else None  # before the engine and the trainer go
    measured = slice(1, None)
    mean = lambda key: sum(timings[key][measured]) / len(timings[key][measured])  # noqa: E731
    import trl
    import transformers

    return {
        "model": args.models[0], "method": "grpo", "engine": "trl+vllm" if not args.no_vllm else "trl",
        "four_bit": False, "dtype": "bfloat16" if cuda else "float32", "group_size": args.group_size,
        "prompts_per_step": args.prompts, "max_new_tokens": args.max_new_tokens, "micro_batch_size": args.micro_batch,
        "beta": args.beta, "measured_steps": len(timings["step"][measured]), "step_time_s": mean("step"),
        "generation_time_s": mean("generation"), "update_time_s": mean("step") - mean("generation"),
        "completion_length": mean("tokens") / responses, "gradient_checkpointing": checkpointing,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "gpu_memory_held_gib": held if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "load_time_s": load_time, "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["qwen2.5-1.5b"], choices=sorted(ARCHITECTURES))
    add_workload_arguments(parser)
    parser.add_argument("--no-vllm", action="store_true", help="TRL's own transformers generation (CPU smoke run)")
    args = parser.parse_args()
    if args.one:  # the process run_in_own_process started: one configuration
        return report_one(run_one(args))
    failed = 0
    for model in args.models:
        arguments = ["--models", model, *workload_arguments(args)] + (["--no-vllm"] if args.no_vllm else [])
        label = {"model": model, "engine": "trl" if args.no_vllm else "trl+vllm"}
        failed |= not run_in_own_process(__file__, arguments, label, args.out)
    return failed


if __name__ == "__main__":
    sys.exit(main())
