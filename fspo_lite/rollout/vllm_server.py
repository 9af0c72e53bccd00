"""rollout.engine=vllm-server: sampling from an OpenAI-compatible vLLM server, the policy's adapter loaded per step.

The HTTP client is the standard library. vLLM answers the adapter endpoints with HTTP 200 and a plain-text
body, refuses an adapter name it already holds (HTTP 400), and lists the loaded adapters with their folders
at /v1/models; `answer_from_body`, `adapter_name` (fspo_lite.rollout.vllm_rollout) and `stale_adapters` handle each.

The server is not trusted (`fspo_lite.rollout.server_checks`): every request has one deadline for the whole
exchange (rollout.vllm_server_timeout) and a bound on the bytes read, and a completions answer is checked before
anything uses it. With rollout.use_sampler_logprobs at a temperature other than 1, `probe_logprobs_mode` asks it for
one short completion when the engine starts and refuses a server that returns the raw model's log-probs (started
without --logprobs-mode processed_logprobs) in one line, before any step.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path

import torch

from fspo_lite.config import RolloutConfig
from fspo_lite.config_checks import ConfigError
from fspo_lite.models.logprobs import completion_logprobs
from fspo_lite.rollout.sampling import Engine
from fspo_lite.rollout.server_checks import (ANSWER_BYTES, ERROR_BYTES, Deadline, check_completions, completion_bytes,
                                             logprobs_mode_gaps, logprobs_mode_refusal, read_within, vocabulary_size)
from fspo_lite.rollout.transformers_rollout import Rollout, eos_ids
from fspo_lite.rollout.vllm_rollout import AdapterVersions, prompt_token_ids, rollout_from_token_ids, sampling_arguments


def answer_from_body(body: str) -> dict:
    """A server's answer as a dict: the JSON object it sent, or {"message": text} for a plain-text body (vLLM
    answers /v1/load_lora_adapter and /v1/unload_lora_adapter with HTTP 200 and text such as "Success: LoRA
    adapter 'x' added successfully."), {} for an empty one. Text that is not JSON Python can hold (nesting too deep,
    an integer of thousands of digits) is text too."""
    text = body.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {"message": text}
    return value if isinstance(value, dict) else {"message": value}


def _send(request: urllib.request.Request, timeout: float, limit: int = ANSWER_BYTES) -> dict:
    """One request, over within `timeout` seconds in all (`Deadline`), its answer at most `limit` bytes
    (`read_within`); every failure is one RuntimeError line naming the URL."""
    url = request.full_url
    with Deadline(timeout) as deadline:
        try:
            with deadline.opener().open(request, timeout=timeout) as response:
                body = read_within(response, limit, deadline, url)
        except urllib.error.HTTPError as error:
            try:
                text = error.read(ERROR_BYTES).decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                text = ""
            detail = " ".join(text.split())[:500]
            raise RuntimeError(f"{url} answered HTTP {error.code}: {detail}") from None
        except (OSError, http.client.HTTPException) as error:
            if deadline.expired():
                raise RuntimeError(f"the vLLM server at {url} did not answer within rollout.vllm_server_timeout="
                                   f"{timeout:g} s: raise rollout.vllm_server_timeout if the server is busy (a long "
                                   "batch), or check the server") from None
            if isinstance(error, urllib.error.URLError):
                raise RuntimeError(f"cannot reach the vLLM server at {url}: {error.reason}") from None
            reason = " ".join(str(error).split())[:200] or type(error).__name__
            raise RuntimeError(f"the vLLM server at {url} did not answer: {reason}") from None
    return answer_from_body(body.decode("utf-8", "replace"))


def post_json(url: str, payload: dict, timeout: float, limit: int = ANSWER_BYTES) -> dict:
    """POST a JSON body; the answer as `answer_from_body` reads it, at most `limit` bytes within `timeout` seconds.
    HTTP errors carry the server's message."""
    return _send(urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                        headers={"Content-Type": "application/json"}), timeout, limit)


def get_json(url: str, timeout: float) -> dict:
    """GET a URL; the answer as `answer_from_body` reads it."""
    return _send(urllib.request.Request(url, method="GET"), timeout)


def stale_adapters(models_answer: dict, root: str | Path, keep: str | None = None) -> list[str]:
    """Names of the LoRA adapters a server lists (GET /v1/models: vLLM gives each adapter's folder as `root` and
    its base model as `parent`) whose folder lies under `root`, other than `keep`: those an earlier (killed) run
    of this output folder left loaded. Entries of another shape are not adapters of this run."""
    root = Path(root).resolve()
    names, data = [], models_answer.get("data")
    for model in data if isinstance(data, list) else []:
        if not isinstance(model, dict) or not isinstance(model.get("id"), str) or model["id"] == keep:
            continue
        folder = model.get("root")
        if not (isinstance(folder, str) and folder and "\0" not in folder):
            continue
        if model.get("parent") and root in Path(folder).resolve().parents:
            names.append(model["id"])
    return names


PROBE_PROMPT = "Question: Which river flows through Cairo?\nAnswer:"
"""The start probe's prompt: any text; the tokens the server samples after it are what the probe compares."""
PROBE_SAMPLES = 2
PROBE_TOKENS = 16
"""The probe asks for PROBE_SAMPLES completions of PROBE_TOKENS tokens (end of text ignored, so all of them come)."""


def probe_request(model: str, prompt_ids: list[int], temperature: float) -> dict:
    """The /v1/completions body of the start probe: PROBE_SAMPLES x PROBE_TOKENS tokens sampled at the run's
    `temperature` with top_p 1 (the processed log-probs are then those at the temperature alone, whatever the run's
    top_p), the sampled tokens' log-probs and ids, a fixed seed."""
    return {"model": model, "prompt": [prompt_ids], "return_token_ids": True, "n": PROBE_SAMPLES,
            "max_tokens": PROBE_TOKENS, "temperature": temperature, "top_p": 1.0, "logprobs": 0, "seed": 0,
            "ignore_eos": True, "skip_special_tokens": True}


def require_server_url(rollout: RolloutConfig) -> None:
    if not rollout.vllm_server_url:
        raise ValueError("rollout.engine=vllm-server needs rollout.vllm_server_url (e.g. http://localhost:8000)")


class VLLMServerRollout(Engine):
    """Sampling from an OpenAI-compatible vLLM server (rollout.vllm_server_url, rollout.vllm_server_timeout), the
    current adapter registered per step.

    The server must run with --enable-lora (and --max-lora-rank >= model.lora_r) and the
    environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and must be able to read the
    adapter folders this process writes (under train.output_dir). With rollout.use_sampler_logprobs it must run
    with --logprobs-mode processed_logprobs (log-probs after temperature, as the trainer's): a server with vLLM's
    default, the raw model's, is refused by `probe_logprobs_mode`, which the engine factory runs when it builds this.
    """

    def __init__(self, policy, tokenizer, rollout: RolloutConfig, max_prompt_tokens: int = 512,
                 adapter_root: str | Path | None = None, device=None):
        require_server_url(rollout)
        super().__init__(policy, tokenizer, rollout, max_prompt_tokens)
        self.url = rollout.vllm_server_url.rstrip("/")
        self.timeout = rollout.vllm_server_timeout
        self.adapters = AdapterVersions(adapter_root)
        self.device = device
        self.eos = eos_ids(tokenizer, policy)
        self.served_adapter: str | None = None
        self.vocab_size = vocabulary_size(policy, tokenizer)

    def _publish_adapter(self) -> str:
        """Save the adapter as a new version and register it (`register_adapter`); returns its served name."""
        name, _, path = self.adapters.save(self.model)
        return self.register_adapter(name, path)

    def register_adapter(self, name: str, path: str) -> str:
        """Register the adapter folder `path` with the server as `name`, drop the previous one (and, on the first
        call, those an earlier killed run of this output folder left loaded); returns `name`."""
        try:
            post_json(f"{self.url}/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, self.timeout)
        except RuntimeError as error:
            if "HTTP 404" in str(error) or "HTTP 405" in str(error):
                raise RuntimeError(f"{self.url} cannot load LoRA adapters at run time: start the vLLM server with "
                                   "--enable-lora and the environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                                   f"({error})") from None
            raise
        if self.served_adapter is None:
            old = stale_adapters(get_json(f"{self.url}/v1/models", self.timeout), self.adapters.root, keep=name)
        else:
            old = [self.served_adapter]
        for stale in old:
            post_json(f"{self.url}/v1/unload_lora_adapter", {"lora_name": stale}, self.timeout)
        self.served_adapter = name
        return name

    def completion_request(self, model: str, ids: list[list[int]], num_samples: int, do_sample: bool,
                           max_new_tokens: int | None = None) -> dict:
        """The /v1/completions body: token-id prompts, and token ids back (vLLM's return_token_ids)."""
        arguments = sampling_arguments(self.sampling(self.eos, do_sample, max_new_tokens), num_samples,
                                       self.rollout.use_sampler_logprobs)
        return {"model": model, "prompt": ids, "return_token_ids": True, **arguments}

    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None) -> Rollout:
        """The server's completions of the prompts, read within rollout.vllm_server_timeout and `completion_bytes`
        and checked (`check_completions`) before they become a Rollout."""
        ids = prompt_token_ids(self.tokenizer, prompts, self.max_prompt_tokens)
        requests = ids if do_sample else [p for p in ids for _ in range(num_samples)]
        body = self.completion_request(self._publish_adapter(), requests, num_samples, do_sample, max_new_tokens)
        url, count, most = f"{self.url}/v1/completions", len(requests) * body["n"], body["max_tokens"]
        answer = post_json(url, body, self.timeout, completion_bytes(count, max(map(len, ids)), most))
        # an answer without choices is shown whole: it may be the server's error message
        completions, logprobs = check_completions(answer.get("choices", answer), count, most, self.vocab_size,
                                                  self.rollout.use_sampler_logprobs, url)
        return rollout_from_token_ids(ids, completions, logprobs, num_samples, self.tokenizer, self.eos, self.device)

    def probe_logprobs_mode(self) -> dict | None:
        """With rollout.use_sampler_logprobs at a temperature other than 0 and 1: the server's log-probs of a few
        tokens it samples at the run's temperature against the policy's own on the same tokens, at that temperature
        and at 1 (the raw model's). Refused in one line (ConfigError, `logprobs_mode_refusal`) when they are the raw
        ones: a server started without --logprobs-mode processed_logprobs. Returns the two mean gaps (None: nothing
        to probe; at temperature 1 raw and processed log-probs are the same).

        The policy runs in eval mode without gradients, as the adapter the server holds: the current one, published
        as the next version (the first step publishes another)."""
        temperature = self.rollout.temperature
        if not self.rollout.use_sampler_logprobs or temperature in (0, 1):
            return None
        ids = prompt_token_ids(self.tokenizer, [PROBE_PROMPT], self.max_prompt_tokens)
        url = f"{self.url}/v1/completions"
        body = probe_request(self._publish_adapter(), ids[0], temperature)
        answer = post_json(url, body, self.timeout, completion_bytes(PROBE_SAMPLES, len(ids[0]), PROBE_TOKENS))
        completions, served = check_completions(answer.get("choices", answer), PROBE_SAMPLES, PROBE_TOKENS,
                                                self.vocab_size, True, url)
        device = self.device if self.device is not None else next(self.model.parameters()).device
        rollout = rollout_from_token_ids(ids, completions, served, PROBE_SAMPLES, self.tokenizer, self.eos, device)
        training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                own = [completion_logprobs(self.model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                           rollout.completion_mask, t)[0] for t in (temperature, 1.0)]
        finally:
            self.model.train(training)
        mask = rollout.completion_mask.bool()
        gap, raw_gap = logprobs_mode_gaps(*(values[mask].tolist() for values in (rollout.sampling_logprobs, *own)))
        refusal = logprobs_mode_refusal(gap, raw_gap, temperature, self.url)
        if refusal:
            raise ConfigError(refusal)
        print(f"[fspo_lite] the vLLM server's log-probs at temperature {temperature:g}: {gap:.2g} nats from the "
              f"policy's, {raw_gap:.2g} from the raw model's (mean per token)", flush=True)
        return {"gap": gap, "raw_gap": raw_gap, "tokens": int(mask.sum())}
