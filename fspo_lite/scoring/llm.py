"""Chat models as tools: judges, claim extractors and graders call an LLM through this module.

Two backends with the same two methods:

- `generate(prompts, max_new_tokens, temperature) -> list[str]`: the reply to each prompt.
- `yes_probability(prompts) -> list[float | None]`: P(the reply starts with "Yes") among Yes/No,
  read from the next-token log-probabilities, so one forward pass gives a graded answer. Both
  backends count the same tokens: every token that reads "yes" (or "no") once surrounding spaces
  are stripped and case is ignored ("Yes", " yes", "YES"), so a server's answer equals the local
  one for the same model and prompt. When a server gives no log-probs (it refuses them, or
  answers without them), the reply text is parsed instead (1.0 for yes, 0.0 for no, None when
  it says neither or both).

`LocalChatModel` runs a transformers causal LM in this process (the bundled SmolLM2 by default).
`OpenAICompatibleChatModel` talks to any server with the OpenAI chat-completions API (vLLM's
`vllm serve`, llama.cpp's server, a hosted API) using only the standard library. A prompt is
either a string (one user message) or a list of chat messages.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import http.client
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence, Union

import torch

from fspo_lite.config import ModelConfig
from fspo_lite.data.prompts import render_prompt
from fspo_lite.models.policy import load_model, load_tokenizer, resolve_device
from fspo_lite.models.logprobs import prompt_positions
from fspo_lite.rollout.transformers_rollout import eos_ids

Prompt = Union[str, list[dict]]
YES_WORDS = ("yes",)
NO_WORDS = ("no",)


PARSED_REPLY_TOKENS = 8
"""Tokens a server may reply with when the yes/no answer has to be parsed from the text."""
REPLY_BYTES = 16 << 20
"""The most an answer of the judge server may send (a chat completion with log-probs is kilobytes)."""


class LLMError(RuntimeError):
    """A chat backend failed (unreachable server, HTTP error, malformed reply)."""


def as_messages(prompt: Prompt) -> list[dict]:
    """A string prompt becomes one user message; a message list passes through."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


_FIRST_WORD = re.compile(r"[A-Za-z]+")


def parse_yes_no(text: str | None) -> bool | None:
    """True for a reply that answers yes, False for no, None when it says neither or both.

    The first word decides ("Yes, because...", "**No**"); otherwise a reply counts only when
    exactly one of the words yes/no occurs in it.
    """
    if not text:
        return None
    words = [w.lower() for w in _FIRST_WORD.findall(text)]
    if not words:
        return None
    if words[0] in YES_WORDS + NO_WORDS:
        return words[0] in YES_WORDS
    has_yes, has_no = any(w in YES_WORDS for w in words), any(w in NO_WORDS for w in words)
    return has_yes if has_yes != has_no else None


def two_way_probability(yes_logprob: float, no_logprob: float) -> float:
    """P(yes) renormalised over {yes, no}: exp(y) / (exp(y) + exp(n)), computed stably."""
    if yes_logprob == -math.inf or no_logprob == -math.inf:
        return 0.5 if yes_logprob == no_logprob else float(no_logprob == -math.inf)
    return 1.0 / (1.0 + math.exp(min(700.0, no_logprob - yes_logprob)))


def reads_as(token_text: str, words: Sequence[str]) -> bool:
    """Whether a token's text is one of `words` once spaces are stripped and case is ignored."""
    return token_text.strip().lower() in words


def yes_no_token_ids(tokenizer) -> tuple[list[int], list[int]]:
    """Ids of the vocabulary's tokens that read as yes and as no (`reads_as`): the tokens a server's top log-probs
    are matched against, so the local and the served P(yes) sum the same tokens."""
    vocabulary = tokenizer.get_vocab()
    letters = re.compile(r"[^a-z]")
    candidates = sorted(i for token, i in vocabulary.items() if letters.sub("", token.lower()) in YES_WORDS + NO_WORDS)
    texts = tokenizer.batch_decode([[i] for i in candidates])
    yes = [i for i, text in zip(candidates, texts) if reads_as(text, YES_WORDS)]
    no = [i for i, text in zip(candidates, texts) if reads_as(text, NO_WORDS)]
    return yes, no


_ALLOWED = re.compile(r"(?:max(?:imum)?\s+allowed|at\s+most|<=|less\s+than\s+or\s+equal\s+to)\D{0,20}?(\d+)",
                      re.IGNORECASE)


def allowed_top_logprobs(message: str) -> int | None:
    """The largest top_logprobs a server says it allows, from its refusal ("Requested sample logprobs of 100, which
    is greater than max allowed: 20"; "top_logprobs must be <= 20"); None when the message names no limit."""
    match = _ALLOWED.search(message or "")
    return int(match.group(1)) if match else None


def refuses_logprobs(message: str) -> bool:
    """Whether an error message is a server refusing the log-probs a request asked for (HTTP 400 about logprobs)."""
    return "HTTP 400" in message and "logprob" in message.lower()


def _logsumexp(values: Sequence[float]) -> float:
    finite = [v for v in values if v > -math.inf]
    if not finite:
        return -math.inf
    top = max(finite)
    return top + math.log(sum(math.exp(v - top) for v in finite))


class ChatModel:
    """Interface of a chat backend."""

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 256, temperature: float = 0.0) -> list[str]:
        raise NotImplementedError

    def yes_probability(self, prompts: Sequence[Prompt]) -> list[float | None]:
        raise NotImplementedError


class LocalChatModel(ChatModel):
    """A transformers causal LM in this process, prompted through its chat template."""

    def __init__(self, model, tokenizer, batch_size: int = 8, max_prompt_tokens: int = 1024):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_prompt_tokens = max_prompt_tokens
        self.yes_ids, self.no_ids = yes_no_token_ids(tokenizer)
        if not self.yes_ids or not self.no_ids:
            raise LLMError("the chat model's vocabulary has no token that reads as yes or no")

    @classmethod
    def from_name(cls, name: str = "smollm2-135m", device: str = "auto", trust_remote_code: bool = False,
                  batch_size: int = 8) -> "LocalChatModel":
        """Load a bundled name, hub id or local folder (see models.load_model) without an adapter."""
        config = ModelConfig(name=name, lora=False, trust_remote_code=trust_remote_code)
        model = load_model(config).to(resolve_device(device))
        return cls(model, load_tokenizer(name, trust_remote_code=trust_remote_code), batch_size=batch_size)

    def render(self, prompt: Prompt) -> str:
        """The prompt text with the chat template applied and the assistant turn opened."""
        return render_prompt(self.tokenizer, as_messages(prompt))

    def _encode(self, texts: list[str]):
        device = next(self.model.parameters()).device
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False, truncation=True,
                              max_length=self.max_prompt_tokens, padding_side="left").to(device)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 256, temperature: float = 0.0) -> list[str]:
        replies = []
        for start in range(0, len(prompts), self.batch_size):
            encoded = self._encode([self.render(p) for p in prompts[start : start + self.batch_size]])
            sampling = dict(do_sample=True, temperature=temperature, top_k=0) if temperature > 0 else \
                dict(do_sample=False, temperature=None, top_p=None, top_k=None)
            output = self.model.generate(**encoded, max_new_tokens=max_new_tokens, eos_token_id=eos_ids(self.tokenizer, self.model),
                                         pad_token_id=self.tokenizer.pad_token_id, **sampling)
            replies += self.tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1]:], skip_special_tokens=True)
        return [r.strip() for r in replies]

    @torch.no_grad()
    def yes_probability(self, prompts: Sequence[Prompt]) -> list[float | None]:
        probabilities: list[float | None] = []
        for start in range(0, len(prompts), self.batch_size):
            encoded = self._encode([self.render(p) for p in prompts[start : start + self.batch_size]])
            position_ids = prompt_positions(encoded["attention_mask"])  # left padding shifts nothing
            logits = self.model(**encoded, position_ids=position_ids, logits_to_keep=1).logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            yes = torch.logsumexp(logprobs[:, self.yes_ids], dim=-1)
            no = torch.logsumexp(logprobs[:, self.no_ids], dim=-1)
            probabilities += torch.sigmoid(yes - no).tolist()
        return probabilities


class OpenAICompatibleChatModel(ChatModel):
    """A client for POST {base_url}/chat/completions (vLLM, llama.cpp server, hosted APIs).

    Standard library only. `base_url` ends before '/chat/completions' (e.g. http://localhost:8000/v1).
    Requests run `concurrency` at a time; each one waits at most `timeout` seconds and failures
    raise LLMError with the URL and the server's message.

    yes_probability asks for the `top_logprobs` most likely first tokens (100: enough that the yes/no
    tokens outside them weigh under 1e-3 for a small model; a vLLM server allows 20 unless started with
    --max-logprobs 100). A server that refuses that many and names its limit is asked for the limit from
    then on; one that refuses log-probs outright (or `top_logprobs=0`) gets plain requests whose replies
    are parsed. Either change is printed once.
    """

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, timeout: float = 60.0,
                 concurrency: int = 8, top_logprobs: int = 100):
        if urllib.parse.urlparse(base_url or "").scheme not in ("http", "https"):
            raise LLMError(f"server URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.concurrency = max(1, concurrency)
        self.top_logprobs = max(0, top_logprobs)
        self._lock = threading.Lock()
        self.model = model or self.list_models()[0]
        self.parsed_fallbacks = 0
        """yes_probability answers that had to be parsed from text (the server sent no log-probs)."""

    def _request(self, path: str, payload: dict | None = None) -> dict:
        """One request within `timeout` seconds in all (connecting, sending, every read: `Deadline`, as the vLLM
        server client's), its reply at most REPLY_BYTES. The API key is an unredirected header: a redirect, to
        whatever origin, never carries it."""
        from fspo_lite.rollout.server_checks import Deadline

        url = self.base_url + path
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                         method="GET" if data is None else "POST")
        if self.api_key:
            request.add_unredirected_header("Authorization", f"Bearer {self.api_key}")
        with Deadline(self.timeout) as deadline:
            try:
                with deadline.opener().open(request, timeout=self.timeout) as response:
                    body = response.read(REPLY_BYTES + 1)
                    if len(body) > REPLY_BYTES:
                        raise LLMError(f"{url}: reply over {REPLY_BYTES:,} bytes; verifier.server_url must name an "
                                       "OpenAI-compatible server")
            except urllib.error.HTTPError as error:
                detail = error.read(500).decode("utf-8", "replace")[:500] if not deadline.expired() else ""
                raise LLMError(f"{url}: HTTP {error.code}: {detail}") from None
            except (OSError, http.client.HTTPException) as error:
                if deadline.expired():
                    raise LLMError(f"{url}: no whole reply within verifier.request_timeout={self.timeout:g} s; raise "
                                   "it if the server is busy, or check the server") from None
                raise LLMError(f"{url}: server not reachable ({getattr(error, 'reason', error)})") from None
        if deadline.expired():
            raise LLMError(f"{url}: no whole reply within verifier.request_timeout={self.timeout:g} s")
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise LLMError(f"{url}: reply is not JSON: {body[:200]!r}") from None

    def list_models(self) -> list[str]:
        models = [m.get("id") for m in self._request("/models").get("data", []) if m.get("id")]
        if not models:
            raise LLMError(f"{self.base_url}/models lists no model; set verifier.server_model")
        return models

    def _chat(self, prompt: Prompt, **options) -> dict:
        reply = self._request("/chat/completions", {"model": self.model, "messages": as_messages(prompt), **options})
        choices = reply.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise LLMError(f"{self.base_url}/chat/completions: reply has no choices: {str(reply)[:200]}")
        return choices[0]

    def _map(self, function, prompts: Sequence[Prompt]) -> list:
        if len(prompts) <= 1 or self.concurrency == 1:
            return [function(p) for p in prompts]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(function, prompts))

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 256, temperature: float = 0.0) -> list[str]:
        def one(prompt):
            choice = self._chat(prompt, max_tokens=max_new_tokens, temperature=temperature)
            return ((choice.get("message") or {}).get("content") or "").strip()

        return self._map(one, prompts)

    def _yes_no_choice(self, prompt: Prompt) -> dict:
        """The first choice of a one-token greedy reply with the top log-probs, asking for fewer (or none, then
        for a short reply) when the server refuses the number asked for."""
        while self.top_logprobs > 0:
            asked = self.top_logprobs
            try:
                return self._chat(prompt, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=asked)
            except LLMError as error:
                if not refuses_logprobs(str(error)):
                    raise
                limit = allowed_top_logprobs(str(error))
                with self._lock:
                    if self.top_logprobs == asked:  # the first thread to hear it changes the setting
                        self.top_logprobs = limit if limit is not None and 0 <= limit < asked else 0
                        then = (f"asking for {self.top_logprobs}" if self.top_logprobs else
                                "parsing the replies instead")
                        print(f"[fspo_lite] {self.base_url} refuses top_logprobs={asked}: {then}", flush=True)
        return self._chat(prompt, max_tokens=PARSED_REPLY_TOKENS, temperature=0.0)

    def yes_probability(self, prompts: Sequence[Prompt]) -> list[float | None]:
        def one(prompt):
            choice = self._yes_no_choice(prompt)
            probability = yes_probability_from_logprobs(choice.get("logprobs"))
            if probability is not None:
                return probability
            with self._lock:
                self.parsed_fallbacks += 1
            verdict = parse_yes_no((choice.get("message") or {}).get("content"))
            return None if verdict is None else float(verdict)

        return self._map(one, prompts)


def yes_probability_from_logprobs(logprobs: dict | None) -> float | None:
    """P(yes) among yes/no from an OpenAI-style `logprobs` field of the first generated token.

    Tokens are compared after stripping spaces and case ("Yes", " yes"); a side absent from the
    top candidates counts as probability 0. None when the field is missing or holds neither word.
    """
    content = (logprobs or {}).get("content") if isinstance(logprobs, dict) else None
    if not content or not isinstance(content[0], dict):
        return None
    candidates = content[0].get("top_logprobs") or [content[0]]
    yes, no = [], []
    for candidate in candidates:
        if not isinstance(candidate, dict):
            continue
        token = str(candidate.get("token", ""))
        value = candidate.get("logprob")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            continue
        if reads_as(token, YES_WORDS):
            yes.append(float(value))
        elif reads_as(token, NO_WORDS):
            no.append(float(value))
    if not yes and not no:
        return None
    return two_way_probability(_logsumexp(yes), _logsumexp(no))


@dataclass(frozen=True)
class ChatModelSettings:
    """Where a chat model runs: a server (`server_url` and how to reach it) or this process (`device`). The
    verifier section holds these settings for every chat model of a run (the llm verifier, claim extraction, the
    relevance judge, the llm answer judge): `ChatModelSettings.of(config.verifier)`."""

    server_url: str | None = None
    server_model: str | None = None
    api_key_env: str | None = None
    timeout: float = 60.0
    device: str = "auto"
    trust_remote_code: bool = False

    @classmethod
    def of(cls, verifier) -> "ChatModelSettings":
        """The settings of a config's verifier section (server_url, server_model, api_key_env, request_timeout,
        device, trust_remote_code)."""
        return cls(verifier.server_url, verifier.server_model, verifier.api_key_env, verifier.request_timeout,
                   verifier.device, verifier.trust_remote_code)


def build_chat_model(model: str | None = None, settings: ChatModelSettings = ChatModelSettings(),
                     batch_size: int = 8) -> ChatModel:
    """A server client when settings.server_url is set, else a local model (`model`, default the bundled SmolLM2;
    `batch_size` prompts per forward pass)."""
    if settings.server_url:
        api_key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        if settings.api_key_env and not api_key:
            raise LLMError(f"environment variable {settings.api_key_env} (verifier.api_key_env) is not set")
        return OpenAICompatibleChatModel(settings.server_url, settings.server_model or model, api_key=api_key,
                                         timeout=settings.timeout)
    return LocalChatModel.from_name(model or "smollm2-135m", device=settings.device,
                                    trust_remote_code=settings.trust_remote_code, batch_size=batch_size)
