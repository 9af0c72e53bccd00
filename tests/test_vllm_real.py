"""vLLM for real: the colocated engine, a real vLLM OpenAI server and the served judge (`make test-vllm`).

These tests need the `vllm` package with a platform here: vLLM's CPU build in .venv-vllm (`make setup-vllm`,
which `make test-vllm` runs first) or the official wheel on a CUDA GPU. In any other environment they skip and
say so. The model is the bundled SmolLM2-135M-Instruct (its converted float32 safetensors folder), never a
download. One server serves the whole module: started on a free port of 127.0.0.1 with LoRA loading at run
time, stopped by a finalizer (the whole process group: SIGTERM, then SIGKILL), also when a test fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from vllm_server import VLLMServer, group_alive  # noqa: E402

from fspo_lite.rollout.vllm_rollout import vllm_platform  # noqa: E402

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed in this environment: `make test-vllm` installs vLLM's CPU build in .venv-vllm "
                "and runs these tests there", allow_module_level=True)
PLATFORM = vllm_platform()
if PLATFORM is None:
    pytest.skip("the installed vllm finds no platform here (no CUDA GPU, and not vLLM's CPU build)",
                allow_module_level=True)

pytestmark = pytest.mark.slow

from fspo_lite.models.policy import bundled_model_dir  # noqa: E402

ENV = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
ENV.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the Makefile exports it: spinning threads on 2 shared cores stall
SMALL = ["--config", "configs/smoke_smollm2.yaml", "--set", "rollout.max_new_tokens=16", "--set",
         "rollout.group_size=2", "--set", "train.prompts_per_step=2", "--set", "train.micro_batch_size=4"]


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """A real vLLM OpenAI server for the module; the finalizer stops its process group even when a test fails."""
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    server = VLLMServer(bundled_model_dir("smollm2-135m"), served_name="smollm2-135m", max_logprobs=100,
                        log_path=log)
    request.addfinalizer(server.stop)
    server.start()
    yield server
    server.stop()
    assert not group_alive(server.process.pid), "the vLLM server left a process behind"


def train(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m fspo_lite train ...` in its own process group (killed with the group if it outlives `timeout`)."""
    process = subprocess.Popen([sys.executable, "-m", "fspo_lite", "train", *args], cwd=REPO, env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        kill_group(process)
    return subprocess.CompletedProcess(process.args, process.returncode, output, "")


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def metric_steps(output_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def adapter_names(server: VLLMServer) -> list[str]:
    return [m["id"] for m in server.models() if m.get("parent")]


# ---------------------------------------------------------------- rollout.engine=vllm-server


def test_server_engine_trains_resumes_after_kill_and_serves_a_second_run(server, tmp_path):
    run = tmp_path / "run"
    engine = ["--set", "rollout.engine=vllm-server", "--set", f"rollout.vllm_server_url={server.url}",
              "--set", "rollout.use_sampler_logprobs=true"]
    # 1. a run killed (SIGKILL, whole process group) once its first checkpoint is written
    process = subprocess.Popen([sys.executable, "-m", "fspo_lite", "train", *SMALL, *engine, "--set", "train.steps=3",
                                "--set", "train.save_every=1", "--set", f"train.output_dir={run}"],
                               cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not list((run / "checkpoints").glob("step-*")) and process.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint within 15 minutes"
            time.sleep(0.5)
    finally:
        kill_group(process)
    output = process.stdout.read()
    assert "JSONDecodeError" not in output and "Traceback" not in output, output[-3000:]
    killed = adapter_names(server)
    assert killed and all(name.startswith("policy-") for name in killed), killed
    # 2. resumed against the same server: finishes, logs every step once, and unloads the killed run's adapter
    resumed = train([*SMALL, *engine, "--set", "train.steps=3", "--set", "train.save_every=1",
                     "--set", f"train.output_dir={run}", "--set", "train.resume=true"])
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resumed from" in resumed.stdout
    assert metric_steps(run) == [1, 2, 3]
    after_resume = adapter_names(server)
    assert len(after_resume) == 1 and after_resume[0] not in killed, (killed, after_resume)
    # 3. a second run on the same server (new output folder): new adapter names, no HTTP 400 "already loaded"
    second = train([*SMALL, *engine, "--set", "train.steps=1", "--set", f"train.output_dir={tmp_path / 'second'}"])
    assert second.returncode == 0, second.stdout[-3000:]
    names = adapter_names(server)
    assert len(set(names)) == len(names) and after_resume[0] in names and len(names) == 2, names
    metrics = [json.loads(line) for line in (tmp_path / "second" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["step"] == 1 and metrics[0]["clip_fraction"] < 0.5
    # the engine's start probe passed this server (started with --logprobs-mode processed_logprobs) at temperature 0.7
    probe = re.search(r"log-probs at temperature 0\.7: (\S+) nats from the policy's, (\S+) from the raw", second.stdout)
    assert probe and float(probe[1]) < 1e-3 and float(probe[2]) > 0.1, second.stdout[-3000:]


def test_server_engine_refuses_a_server_started_without_processed_logprobs(tmp_path_factory, tmp_path):
    """A second server, started without --logprobs-mode (vLLM's default, raw_logprobs): the engine's start probe
    refuses it in one line naming the flag, before any step, and measures its log-probs at the raw model's to the
    server's float32 rounding."""
    log = tmp_path_factory.mktemp("vllm-server-raw") / "server.log"
    with VLLMServer(bundled_model_dir("smollm2-135m"), served_name="smollm2-135m", log_path=log,
                    logprobs_mode=None) as raw_server:
        assert "--logprobs-mode" not in raw_server.command
        result = train([*SMALL, "--set", "rollout.engine=vllm-server", "--set",
                        f"rollout.vllm_server_url={raw_server.url}", "--set", "rollout.use_sampler_logprobs=true",
                        "--set", "train.steps=1", "--set", f"train.output_dir={tmp_path}"])
    lines = result.stdout.strip().splitlines()
    assert result.returncode != 0 and lines[-1].startswith("fspo_lite: error: the vLLM server at "), lines[-5:]
    assert "start the server with --logprobs-mode processed_logprobs" in lines[-1] and "Traceback" not in result.stdout
    gaps = re.search(r"log-probs \((\S+) nats from them, .* at temperature 0\.7 \((\S+) nats from", lines[-1])
    assert gaps and float(gaps[1]) < 1e-3 and float(gaps[2]) > 0.1, lines[-1]
    assert not (tmp_path / "metrics.jsonl").exists()  # refused before any step


# ---------------------------------------------------------------- the served judge


JUDGE_PROMPTS = [
    "Is Paris the capital of France? Answer Yes or No.",
    "Is the Moon made of cheese? Answer yes or no.",
    [{"role": "system", "content": "You are a strict fact checker."},
     {"role": "user", "content": "Claim: Water boils at 100 C at sea level. Is the claim supported? Answer Yes or No."}],
    "Evidence: The Nile flows through Egypt.\nSentence: The Nile flows through Brazil.\nIs the sentence supported "
    "by the evidence? Reply Yes or No.",
]


@pytest.fixture(scope="module")
def local_chat():
    from fspo_lite.scoring.llm import LocalChatModel

    return LocalChatModel.from_name("smollm2-135m", device="cpu")


def test_served_yes_probability_equals_the_local_backend(server, local_chat, capsys):
    from fspo_lite.scoring.llm import OpenAICompatibleChatModel

    served = OpenAICompatibleChatModel(f"{server.url}/v1", timeout=120)
    assert served.model == "smollm2-135m"
    local = local_chat.yes_probability(JUDGE_PROMPTS)
    remote = served.yes_probability(JUDGE_PROMPTS)
    assert served.parsed_fallbacks == 0 and served.top_logprobs == 100
    assert remote == pytest.approx(local, abs=1e-3)
    assert len({round(p, 2) for p in local}) > 1  # the prompts do not all give one value
    # a client asking for more than the server allows (--max-logprobs 100) is told the limit and uses it
    greedy = OpenAICompatibleChatModel(f"{server.url}/v1", timeout=120, top_logprobs=500, concurrency=1)
    assert greedy.yes_probability(JUDGE_PROMPTS[:2]) == pytest.approx(local[:2], abs=1e-3)
    assert greedy.top_logprobs == 100 and "refuses top_logprobs=500: asking for 100" in capsys.readouterr().out


def test_served_parsed_reply_path_equals_the_local_greedy_reply(server, local_chat):
    """Without log-probs (top_logprobs=0: what a client does after a server refused them outright) the verdict is
    parsed from an 8-token greedy reply: the same verdict as the local model's greedy reply."""
    from fspo_lite.scoring.llm import PARSED_REPLY_TOKENS, OpenAICompatibleChatModel, parse_yes_no

    served = OpenAICompatibleChatModel(f"{server.url}/v1", "smollm2-135m", timeout=120, top_logprobs=0)
    remote = served.yes_probability(JUDGE_PROMPTS)
    assert served.parsed_fallbacks == len(JUDGE_PROMPTS)
    replies = local_chat.generate(JUDGE_PROMPTS, max_new_tokens=PARSED_REPLY_TOKENS)
    expected = [None if parse_yes_no(r) is None else float(parse_yes_no(r)) for r in replies]
    assert remote == expected and any(v is not None for v in expected), (remote, replies)
    assert served.generate(JUDGE_PROMPTS, max_new_tokens=12) == local_chat.generate(JUDGE_PROMPTS, max_new_tokens=12)


def test_llm_verifier_claims_and_evaluation_judge_through_the_server(server, local_chat):
    from fspo_lite.scoring.claims import build_claim_extractor
    from fspo_lite.config import VerifierConfig, load_config
    from fspo_lite.evaluation.judges import build_judge
    from fspo_lite.scoring.verifiers import build_verifier
    from fspo_lite.scoring.verifiers.llm_judge import LLMJudgeVerifier

    served_config = VerifierConfig(name="llm", server_url=f"{server.url}/v1", request_timeout=120)
    evidence = ["Paris is the capital and largest city of France.", "The Nile is a river in Africa."] * 2
    sentences = ["Paris is the capital of France.", "The Nile is in Africa.", "Paris is in Japan.",
                 "The Nile flows through Brazil."]
    served = build_verifier(served_config).score(evidence, sentences)
    local = LLMJudgeVerifier(local_chat).score(evidence, sentences)
    assert served == pytest.approx(local, abs=1e-3)

    sentence = ["Marie Curie won two Nobel Prizes, in physics and in chemistry, and was born in Warsaw."]
    served_claims = build_claim_extractor("llm", served_config)
    local_claims = build_claim_extractor("llm", VerifierConfig(name="llm", device="cpu"))
    assert served_claims.extract(sentence) == local_claims.extract(sentence)

    config = load_config("configs/tiny.yaml", [f"verifier.server_url={server.url}/v1", "verifier.request_timeout=120"])
    judge = build_judge("llm", "en", config)
    args = (["What is the capital of France?"] * 2, ["Paris.", "I have no comment."], [["Paris"]] * 2,
            [["London"]] * 2)
    local_config = load_config("configs/tiny.yaml", ["verifier.device=cpu"])
    assert judge.judge(*args) == build_judge("llm", "en", local_config).judge(*args)
    assert server.url in judge.description


# ---------------------------------------------------------------- rollout.engine=vllm (colocated)


@pytest.mark.skipif(PLATFORM != "cpu", reason="checks vLLM's CPU platform")
@pytest.mark.parametrize("setting, message", [
    ("rollout.vllm_enable_sleep_mode=true", "rollout.vllm_enable_sleep_mode=true needs vLLM on a CUDA GPU"),
    ("model.load_in_4bit=true", "model.load_in_4bit=true with rollout.engine=vllm needs a CUDA GPU"),
])
def test_colocated_engine_refuses_what_the_cpu_platform_lacks_in_one_line(tmp_path, setting, message):
    started = time.monotonic()
    result = train([*SMALL, "--set", "rollout.engine=vllm", "--set", setting, "--set", f"train.output_dir={tmp_path}"])
    lines = result.stdout.strip().splitlines()
    assert result.returncode != 0 and lines[-1].startswith("fspo_lite: error: ") and message in lines[-1], lines
    assert "Traceback" not in result.stdout and "Loading weights" not in result.stdout  # before any model loads
    assert time.monotonic() - started < 120


def test_colocated_engine_trains_on_this_platform(tmp_path):
    result = train([*SMALL, "--set", "rollout.engine=vllm", "--set", "rollout.use_sampler_logprobs=true",
                    "--set", "train.steps=2", "--set", f"train.output_dir={tmp_path}"])
    assert result.returncode == 0, result.stdout[-3000:]
    if PLATFORM == "cpu":
        assert "vLLM runs on the CPU (its CPU build): rollout.vllm_gpu_memory_utilization does not apply" in result.stdout
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["clip_fraction"] < 0.5 for m in metrics)  # sampler and trainer log-probs agree (ratio near 1)
    assert "Traceback" not in result.stdout


# ---------------------------------------------------------------- adapter freshness, engines that end


def run_script(name: str, *args: str, timeout: float = 900) -> tuple[int, dict, str]:
    """(exit status, the JSON object of its last stdout line, its output) of scripts/<name> in its own process group."""
    process = subprocess.Popen([sys.executable, f"scripts/{name}", *args], cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        kill_group(process)
    lines = [line for line in output.splitlines() if line.startswith("{")]
    return process.returncode, json.loads(lines[-1]) if lines else {}, output


@pytest.mark.parametrize("engine", ["vllm", "vllm-server"])
def test_the_engine_samples_the_adapter_the_trainer_holds(request, tmp_path, engine):
    """Adapter freshness (scripts/adapter_freshness.py): three steps at a learning rate where one update moves the
    log-probs far more than the engine's rounding. Step 1's logged gap is the fresh level (nothing updated yet);
    step 2 samples the adapter after the first update and must stay under 10x it; step 3 is sampled with the
    adapter refresh skipped and must be at least 100x it, so the check is seen to fail on a stale adapter."""
    url = ["--server-url", request.getfixturevalue("server").url] if engine == "vllm-server" else []
    code, result, output = run_script("adapter_freshness.py", "--engine", engine, *url, "--steps", "3",
                                      "--stale-from", "3", "--out", str(tmp_path / "run"))
    assert code == 0 and result["ok"], output[-3000:]
    fresh, updated, stale = result["gap_mean"]
    assert updated < 10 * max(fresh, 1e-5) and stale >= 100 * max(fresh, 1e-5), result
    assert result["update_skipped"] == [0, 0, 0], result
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["sampler_logprob_gap_mean"] for r in rows] == result["gap_mean"]  # what metrics.jsonl holds


@pytest.mark.skipif(PLATFORM != "cpu", reason="on a GPU scripts/gpu_session.py runs two trainers in turn")
def test_three_trainers_in_one_process_each_end_their_engine(tmp_path):
    """Notebook 03's loop (scripts/trainers_in_turn.py): three colocated-vLLM trainers one after another in one
    process; each had engine processes while it ran, and none of them outlives its trainer's close."""
    code, result, output = run_script("trainers_in_turn.py", "--engine", "vllm", "--trainers", "3",
                                      "--out", str(tmp_path))
    assert code == 0 and result["ok"], output[-3000:]
    assert [t["engine_processes_while_running"] > 0 for t in result["trainers"]] == [True] * 3, result
    assert all(t["left_after_close"] == [] for t in result["trainers"]), result


def test_bench_vllm_rollout_smoke(server, tmp_path):
    """bench/vllm_rollout.py end to end on a tiny rollout: every engine measured, the gaps small, a summary line."""
    out = tmp_path / "bench.jsonl"
    result = subprocess.run([sys.executable, "bench/vllm_rollout.py", "--prompts", "1", "--samples", "2",
                             "--tokens", "8", "--repeats", "1", "--updates", "1", "--server-url", server.url,
                             "--out", str(out)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    speeds = {r["engine"]: r for r in records if r["kind"] == "speed"}
    assert set(speeds) == {"transformers", "vllm", "vllm-server"} and all(r["tokens"] > 0 for r in speeds.values())
    gaps = [r for r in records if r["kind"] == "gap"]
    assert len(gaps) == 4 and all(r["tokens"] > 0 and r["max_abs_diff"] < 0.05 for r in gaps), gaps
    assert records[-1]["kind"] == "summary" and records[-1]["ratio_to_transformers"]["transformers"] == 1.0
