"""What the vLLM server engine (`fspo_lite.rollout.vllm_server`) accepts from a server: how long an answer may take,
how many bytes it may hold, and what the completions in it must be.

A server is another process, possibly another program: what it sends is bounded and checked before anything uses
it, so a slow, endless or wrong answer ends in one line naming the server instead of a wait without end or a tensor
built from it (more tokens than asked grow the trainer's memory without bound, NaN log-probs pass into the loss, a
float or an id past the vocabulary ends in a TypeError, OverflowError or IndexError far from its cause).
`Deadline` and `read_within` bound a request; `check_completions`, a pure function, judges the answer;
`logprobs_mode_refusal`, another, judges the log-probs of the probe the engine sends when it starts.
"""

from __future__ import annotations

import math
import socket
import threading
import time
import urllib.request

from fspo_lite.config_checks import shown

ANSWER_BYTES = 4 << 20
"""The most bytes read from an answer other than completions (an adapter loaded or unloaded, /v1/models): a list of
thousands of adapters fits."""
ERROR_BYTES = 64 << 10
"""The most bytes read from the body of an HTTP error (its first 500 characters are shown)."""
CHUNK = 64 << 10
"""The most bytes of one read of an answer: between reads the size and the deadline are checked."""

BYTES_PER_TOKEN = 1024
"""JSON bytes allowed per token of a /v1/completions answer. vLLM writes a sampled token's id (token_ids), its text
(in `text`) and, with log-probs, its text twice more (`tokens`, the key of `top_logprobs`) with its log-prob and text
offset: a few tens of bytes for most tokens, a few hundred for the longest (runs of spaces or dashes are single tokens
in large vocabularies, and a non-ASCII character may be written as a 6-byte \\uXXXX escape). It also echoes the
prompt's ids per completion (prompt_token_ids). 1 KiB per token covers all of that with room to spare and still bounds
the memory a reply can take."""

ANSWER_MARGIN = 1 << 20
"""Bytes allowed on top of the per-token share: the answer's envelope (id, model name, usage, finish reasons)."""
SHOWN = 40
"""Characters of a value from a server shown in a refusal (config_checks.shown cuts it there)."""

VLLM_SERVER = "rollout.vllm_server_url must name a vLLM server"
"""What to change when a server's answer is not one a vLLM server gives."""

LOGPROB_SLACK = 1e-3
"""How far above 0 a sampled token's log-prob may lie: a near-certain token's log-prob, rounded in the server's
float32 arithmetic, may come out a hair above 0; anything more is not a log-probability."""


class Deadline:
    """The end of one request, `seconds` from its start, for the whole exchange: connecting, sending, the status line,
    the headers and every read of the body.

    urllib's timeout bounds each socket operation, not the request: a server that sends a byte now and then never
    trips it. Here a timer shuts down the request's sockets (`keep` collects them as connections open) when the time
    is up, which ends whatever read or write is waiting; `expired` then tells why the request failed. The timer runs
    while the request is inside `with Deadline(seconds) as deadline:`."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.sockets: list[socket.socket] = []
        self.cut_off = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(seconds, self.cut)
        self.timer.daemon = True

    def __enter__(self) -> Deadline:
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()

    def expired(self) -> bool:
        return self.cut_off or time.monotonic() >= self.end

    def keep(self, sock: socket.socket) -> None:
        """A connected socket of this request: shut down now if the time is already up, else when it runs out."""
        with self.lock:
            self.sockets.append(sock)
            late = self.cut_off
        if late:
            shut(sock)

    def cut(self) -> None:
        with self.lock:
            self.cut_off = True
            sockets = list(self.sockets)
        for sock in sockets:
            shut(sock)

    def opener(self) -> urllib.request.OpenerDirector:
        """urllib's opener (proxies from the environment, redirects) whose connections hand their sockets to `keep`."""
        return urllib.request.build_opener(KeptHTTP(self), KeptHTTPS(self))


def shut(sock: socket.socket) -> None:
    """Shut a socket down for reading and writing (the plain socket's call: for TLS too, without a TLS goodbye), so a
    read or write waiting on it in another thread returns at once."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class KeepSockets:
    """Mixed into urllib's HTTP and HTTPS handlers: each connection they open hands its socket to a `Deadline`."""

    def __init__(self, deadline: Deadline):
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        deadline = self.deadline

        class Kept(http_class):
            def connect(self):
                super().connect()
                deadline.keep(self.sock)

        return super().do_open(Kept, req, **kwargs)


class KeptHTTP(KeepSockets, urllib.request.HTTPHandler):
    pass


class KeptHTTPS(KeepSockets, urllib.request.HTTPSHandler):
    pass


def read_within(response, limit: int, deadline: Deadline, url: str) -> bytes:
    """A response's body (an http.client.HTTPResponse), read in chunks: a one-line RuntimeError naming `url` once it
    holds more than `limit` bytes or announces more (Content-Length), TimeoutError once the deadline has passed."""
    too_big = (f"the vLLM server at {url} sent more than {limit:,} bytes, more than an answer to this request can "
               f"take: {VLLM_SERVER}")
    if (getattr(response, "length", None) or 0) > limit:  # http.client's reading of Content-Length, or None
        raise RuntimeError(too_big)
    chunks, size = [], 0
    while chunk := response.read1(min(CHUNK, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            raise RuntimeError(too_big)
        if deadline.expired():
            break
        chunks.append(chunk)
    if deadline.expired():
        raise TimeoutError("deadline")
    return b"".join(chunks)


def completion_bytes(count: int, prompt_tokens: int, max_new_tokens: int) -> int:
    """The most bytes a /v1/completions answer to this request may take: `count` completions, each echoing a prompt of
    at most `prompt_tokens` ids and bringing at most `max_new_tokens` tokens, BYTES_PER_TOKEN each, plus
    ANSWER_MARGIN. A larger answer is not one to this request, and is refused before it is read into memory."""
    return count * (prompt_tokens + max_new_tokens) * BYTES_PER_TOKEN + ANSWER_MARGIN


def vocabulary_size(policy, tokenizer) -> int:
    """The token ids the policy can score are [0, this): its config's vocab_size (the rows of its embedding, which
    may exceed len(tokenizer) where a model pads its vocabulary), else len(tokenizer)."""
    size = getattr(getattr(policy, "config", None), "vocab_size", None)
    return size if type(size) is int and size > 0 else len(tokenizer)




def ordered_choices(choices, expected_count: int, url: str) -> list[dict]:
    """The choices of an answer in completion order (by `index`, which defaults to the position), refused unless they
    are `expected_count` objects whose indexes are 0 .. expected_count - 1."""
    if not isinstance(choices, list) or not all(isinstance(choice, dict) for choice in choices):
        raise RuntimeError(f"{url} answered without a list of choices ({shown(choices, 200)}): {VLLM_SERVER}")
    if len(choices) != expected_count:
        raise RuntimeError(f"{url} answered {len(choices)} completions for the {expected_count} asked (prompts x n): "
                           f"{VLLM_SERVER}")
    indexes = [choice.get("index", position) for position, choice in enumerate(choices)]
    if any(type(index) is not int for index in indexes) or sorted(indexes) != list(range(expected_count)):
        raise RuntimeError(f"{url} answered completions indexed {shown(indexes, SHOWN)}, not 0 to {expected_count - 1}: "
                           f"{VLLM_SERVER}")
    return [choice for _, choice in sorted(zip(indexes, choices), key=lambda pair: pair[0])]


def checked_ids(ids, max_new_tokens: int, vocab_size: int, where: str) -> list[int]:
    """One completion's token ids, refused unless they are 1 to max_new_tokens plain integers in [0, vocab_size).
    Zero tokens is refused (a finished completion holds at least its end-of-sequence token)."""
    if not isinstance(ids, list):
        raise RuntimeError(f"{where} with token_ids {shown(ids, SHOWN)}, not a list of token ids: {VLLM_SERVER}")
    if not ids:
        raise RuntimeError(f"{where} with no tokens (a completion holds at least its end-of-sequence token): "
                           f"{VLLM_SERVER}")
    if len(ids) > max_new_tokens:
        raise RuntimeError(f"{where} with {len(ids)} tokens, more than the max_tokens={max_new_tokens} asked: "
                           f"{VLLM_SERVER} (it honours max_tokens)")
    for position, token in enumerate(ids):
        if type(token) is not int:
            raise RuntimeError(f"{where} with token id {shown(token, SHOWN)} at position {position}, not an integer: "
                               f"{VLLM_SERVER}")
        if not 0 <= token < vocab_size:
            raise RuntimeError(f"{where} with token id {shown(token, SHOWN)} at position {position}, outside the policy's "
                               f"vocabulary of {vocab_size} tokens; the server must serve the policy's base model "
                               "(model.name)")
    return list(ids)


def checked_logprobs(choice: dict, length: int, where: str) -> list[float]:
    """One completion's sampled-token log-probs (logprobs.token_logprobs), refused unless there is one per token, each
    a finite number not above LOGPROB_SLACK."""
    logprobs = choice.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list):
        raise RuntimeError(f"{where} without logprobs.token_logprobs, which rollout.use_sampler_logprobs=true needs: "
                           f"{VLLM_SERVER}, or set rollout.use_sampler_logprobs=false")
    if len(values) != length:
        raise RuntimeError(f"{where} with {len(values)} log-probs for {length} tokens (rollout.use_sampler_logprobs "
                           f"needs one per token): {VLLM_SERVER}, or set rollout.use_sampler_logprobs=false")
    for position, value in enumerate(values):
        if type(value) not in (int, float) or not math.isfinite(value) or value > LOGPROB_SLACK:
            raise RuntimeError(f"{where} with log-prob {shown(value, SHOWN)} at position {position}, not a finite number "
                               f"<= 0: {VLLM_SERVER}, or set rollout.use_sampler_logprobs=false")
    return [float(value) for value in values]


def check_completions(choices, expected_count: int, max_new_tokens: int, vocab_size: int, with_logprobs: bool,
                      url: str) -> tuple[list[list[int]], list[list[float]] | None]:
    """(token ids per completion, sampled-token log-probs per completion or None) from the `choices` of a
    /v1/completions answer to a request for `expected_count` completions of at most `max_new_tokens` tokens each;
    with_logprobs: rollout.use_sampler_logprobs, whose log-probs stand in for pi_old.

    Refused with a one-line RuntimeError naming `url`: not `expected_count` choices indexed 0 .. expected_count - 1,
    a choice without token_ids (a server without vLLM's return_token_ids), ids that are not a list of 1 to
    max_new_tokens plain integers (bool, float, str, None and lists are not) in [0, vocab_size), and with_logprobs
    log-probs that are missing, of another length than the ids, not numbers, not finite or above LOGPROB_SLACK."""
    ordered = ordered_choices(choices, expected_count, url)
    if any("token_ids" not in choice for choice in ordered):
        raise RuntimeError(f"{url} returned no token ids; fspo-lite needs a vLLM server that supports return_token_ids "
                           "(vLLM 0.10.2 or newer)")
    completions, logprobs = [], []
    for index, choice in enumerate(ordered):
        where = f"{url} answered completion {index}"
        ids = checked_ids(choice["token_ids"], max_new_tokens, vocab_size, where)
        completions.append(ids)
        if with_logprobs:
            logprobs.append(checked_logprobs(choice, len(ids), where))
    return completions, (logprobs if with_logprobs else None)


LOGPROBS_MODE_TOLERANCE = 0.01
"""Nats: a probe whose served log-probs lie within this mean distance of the policy's at the run's temperature
passes whatever lies nearer. It is a floor under the comparison of `logprobs_mode_refusal` for temperatures so near
1 that the raw and the processed log-probs differ by rounding only. vLLM's CPU server in float32 returns log-probs
about 1e-5 from the float32 policy's; without --logprobs-mode processed_logprobs they lie 0.29 nats from them at
temperature 0.7 and 0.019 at 0.99 (SmolLM2; docs/gpu.md, "vLLM rollouts with LoRA, without merging")."""


def mean_gap(left: list[float], right: list[float]) -> float:
    """The mean |left - right| over paired values (0 for none)."""
    if len(left) != len(right):
        raise ValueError(f"{len(left)} log-probs against {len(right)}")
    return sum(abs(a - b) for a, b in zip(left, right)) / len(left) if left else 0.0


def logprobs_mode_gaps(served: list[float], at_temperature: list[float], raw: list[float]) -> tuple[float, float]:
    """(mean |served - at_temperature|, mean |served - raw|): how far the log-probs a server returned for the tokens
    it sampled lie from the policy's at the run's temperature (log softmax(logits / temperature) at those tokens)
    and from the raw model's (the same at temperature 1)."""
    if not served:
        raise ValueError("the log-prob probe has no tokens to compare")
    gaps = mean_gap(served, at_temperature), mean_gap(served, raw)
    if not all(math.isfinite(gap) for gap in gaps):
        raise ValueError("the log-prob probe's log-probs are not finite")
    return gaps


def logprobs_mode_refusal(gap: float, raw_gap: float, temperature: float, url: str,
                          tolerance: float = LOGPROBS_MODE_TOLERANCE) -> str | None:
    """The one-line refusal of a server whose log-probs are the raw model's, not those after temperature: `gap`
    (from the policy's at `temperature`) beyond `tolerance` and larger than `raw_gap` (from the raw model's), the
    signature of a vLLM server started without --logprobs-mode processed_logprobs; else None.

    Only the nearer reference decides, above the floor: a server in another precision (a bfloat16 engine differs
    from a float32 trainer by a few hundredths of a nat per token) lies further from both, and still nearer the
    processed log-probs when it returns them, since the temperature's shift adds to its rounding.
    With rollout.use_sampler_logprobs the served log-probs are pi_old: off by the temperature's shift, the ratio
    pi_theta / pi_old would be skewed on every token, and the clip would act on the skew instead of the update."""
    if gap <= tolerance or gap <= raw_gap:
        return None
    return (f"the vLLM server at {url} returns the raw model's log-probs ({raw_gap:.2g} nats from them, mean per "
            f"sampled token), not those at temperature {temperature:g} ({gap:.2g} nats from the policy's), which "
            "rollout.use_sampler_logprobs takes as pi_old: start the server with --logprobs-mode processed_logprobs, "
            "or set rollout.use_sampler_logprobs=false")
