"""Evidence likelihood gain: does reading the evidence make a language model expect the sentence?

For each token t of the sentence, a causal LM gives log p(t | evidence, earlier tokens) and
log p(t | earlier tokens) without the evidence. Their difference is the pointwise mutual
information between the token and the evidence; its mean over the sentence,

    gain = mean_t [log p(t | "Evidence: E\\nStatement:", s_<t) - log p(t | "Statement:", s_<t)],

is high when the sentence repeats or follows from the evidence (copying becomes likely) and near
zero or negative when it brings names, numbers or relations the evidence does not contain.
P(supported) = 1 / (1 + exp(-slope * (gain - midpoint))), with midpoint and slope fitted on the
HaluEval-QA train file (docs/verifiers.md). The mean (not the sum) keeps long sentences from
being penalised for their length.

It runs offline with the bundled SmolLM2-135M, or with any local causal LM through `verifier.model`.
It is a likelihood signal, not an entailment check: a sentence that merely reuses the evidence's
words in a wrong relation can still gain.

Cost. The evidence context is most of the tokens (up to 400 evidence tokens against a sentence's
10-30), and it depends only on the judge model and the evidence text. So each evidence text is
encoded once, alone, and its keys and values are kept (`EvidenceStates`, least recently used
dropped past `keep_evidence_mb`); the sentences then run on a copy of them. A judge loaded by
name is loaded once per process together with its kept states (`shared_judge`), so an evaluation
of many models on the same questions (the study: 20 trained models and the base model, each on
the 117 knowledge-base test questions) encodes each evidence once per process, not once per model. Within a
call, a sentence that recurs with the same evidence is scored once.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch

from fspo_lite.algos import selective_log_softmax
from fspo_lite.models.logprobs import LogprobPass
from fspo_lite.models.policy import resolve_device
from fspo_lite.scoring.verifiers.base import Verifier, batches

EVIDENCE_TEMPLATE = "Evidence: {evidence}\nStatement:"
NO_EVIDENCE_TEMPLATE = "Statement:"


def mean_gain(with_evidence: torch.Tensor, without_evidence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per row: mean over the masked tokens of (log-prob with evidence - log-prob without)."""
    mask = mask.float()
    return ((with_evidence - without_evidence) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


class EvidenceStates:
    """The judge's keys/values for each evidence context, and its log-probs for the next token, kept between
    calls: an LRU map from the context text, bounded by `max_mb` MiB of tensors (0 keeps nothing)."""

    def __init__(self, max_mb: float = 4096):
        self.max_bytes = int(max_mb * 2**20)
        self.entries: OrderedDict[str, tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    @staticmethod
    def size(entry) -> int:
        layers, last = entry
        return sum(k.nbytes + v.nbytes for k, v in layers) + last.nbytes

    def get(self, context: str):
        entry = self.entries.get(context)
        if entry is not None:
            self.entries.move_to_end(context)
            self.hits += 1
        else:
            self.misses += 1
        return entry

    def put(self, context: str, entry) -> None:
        size = self.size(entry)
        if size > self.max_bytes:
            return
        while self.entries and self.bytes + size > self.max_bytes:
            self.bytes -= self.size(self.entries.popitem(last=False)[1])
        self.entries[context] = entry
        self.bytes += size


_SHARED: dict[tuple[str, str], tuple] = {}


def shared_judge(name: str, device: str) -> tuple:
    """(model, tokenizer, EvidenceStates) of the judge model `name` on `device`, loaded once per process."""
    key = (name, str(resolve_device(device)))
    if key not in _SHARED:
        from fspo_lite.config import ModelConfig
        from fspo_lite.models.policy import load_model, load_tokenizer

        model = load_model(ModelConfig(name=name, lora=False)).to(resolve_device(device)).eval()
        _SHARED[key] = (model, load_tokenizer(name), EvidenceStates())
    return _SHARED[key]


class LikelihoodVerifier(Verifier):
    """P(supported) from the mean per-token log-likelihood gain that the evidence gives the sentence."""

    name = "likelihood"
    takes_logprob_pass = True
    midpoint = 1.5819
    """Gain (nats per token) at which p = 0.5 (fitted on HaluEval-QA train, see docs/verifiers.md)."""
    slope = 1.6491
    """Steepness of the logistic map (fitted with the midpoint)."""

    def __init__(self, model=None, tokenizer=None, name: str = "smollm2-135m", device: str = "auto",
                 batch_size: int = 8, max_evidence_tokens: int = 400, midpoint: float | None = None,
                 slope: float | None = None, share_evidence: bool = True, keep_evidence_mb: float = 4096,
                 logprob_pass: LogprobPass | None = None, **kwargs):
        super().__init__(**kwargs)
        self.logprob_pass = logprob_pass if logprob_pass is not None else LogprobPass()
        """The log-prob seam the judge scores text through: the one `fspo_lite.speed.judge_logprob_pass` builds for
        speed.mode when the caller gives it, else the reference."""
        states = None
        if model is None:
            model, tokenizer, states = shared_judge(name, device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_evidence_tokens = max_evidence_tokens
        self.midpoint = self.midpoint if midpoint is None else midpoint
        self.slope = self.slope if slope is None else slope
        self.share_evidence = share_evidence
        """Each evidence context is encoded once and its sentences run on its kept keys/values (the same gains
        up to float rounding); False runs every sentence with its whole context (the reference computation)."""
        self.evidence_states = states if states is not None else EvidenceStates(keep_evidence_mb)
        """The kept evidence states: the process-wide ones of a judge loaded by name (`shared_judge`), else this
        verifier's own, of at most keep_evidence_mb MiB (about 18 MiB per 400-token evidence with SmolLM2-135M)."""

    @classmethod
    def from_config(cls, config, logprob_pass: LogprobPass | None = None) -> "LikelihoodVerifier":
        return cls(name=config.model or "smollm2-135m", device=config.device, batch_size=config.batch_size,
                   max_evidence_tokens=config.max_evidence_tokens, logprob_pass=logprob_pass)

    def _encode(self, texts: list[str], left: bool, max_length: int | None = None):
        encoded = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False,
                                 truncation=max_length is not None, max_length=max_length,
                                 padding_side="left" if left else "right")
        device = next(self.model.parameters()).device
        return encoded["input_ids"].to(device), encoded["attention_mask"].to(device)

    def _context(self, evidence: str) -> str:
        ids = self.tokenizer(evidence, add_special_tokens=False)["input_ids"][: self.max_evidence_tokens]
        return EVIDENCE_TEMPLATE.format(evidence=self.tokenizer.decode(ids))

    @torch.no_grad()
    def gains(self, evidence: list[str], sentences: list[str]) -> list[float]:
        """The mean log-likelihood gain (nats per token) of each sentence from its evidence."""
        if not self.share_evidence:
            return self._gains_full_passes(evidence, sentences)
        # evidence text -> claim -> the rows asking for it: a sentence that recurs with the same evidence (the same
        # sentence in several sampled answers to one question) is scored once
        groups: dict[str, dict[str, list[int]]] = {}
        for i, (text, sentence) in enumerate(zip(evidence, sentences)):
            groups.setdefault(text, {}).setdefault(" " + sentence.strip(), []).append(i)
        result = [0.0] * len(sentences)
        for text, claims in groups.items():
            state = self._evidence_state(self._context(text))
            for chunk in batches(list(claims), self.batch_size):
                claim_ids, claim_mask = self._encode(chunk, left=False)
                bare_ids, bare_mask = self._encode([NO_EVIDENCE_TEMPLATE] * len(chunk), left=True)
                with_evidence = self._logprobs_after(state, claim_ids, claim_mask)
                without_evidence = self.logprob_pass.sequence_logprobs(self.model, bare_ids, bare_mask, claim_ids,
                                                                       claim_mask, shared_prompts=True)
                for claim, gain in zip(chunk, mean_gain(with_evidence, without_evidence.float(), claim_mask).tolist()):
                    for i in claims[claim]:
                        result[i] = gain
        return result

    def _evidence_state(self, context: str):
        """(per-layer keys/values, next-token log-probs) of the context alone, from the kept states or encoded now."""
        state = self.evidence_states.get(context)
        if state is None:
            ids, _ = self._encode([context], left=True)
            output = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            state = ([(layer.keys, layer.values) for layer in output.past_key_values.layers],
                     torch.log_softmax(output.logits[:, -1].float(), dim=-1))
            self.evidence_states.put(context, state)
        return state

    def _logprobs_after(self, state, claim_ids: torch.Tensor, claim_mask: torch.Tensor) -> torch.Tensor:
        """log p(claim token | context, earlier claim tokens), (rows, C), with the context's kept keys/values."""
        from transformers import DynamicCache

        layers, first = state
        rows, width = claim_ids.shape
        logp = [first.expand(rows, -1).gather(1, claim_ids[:, :1])]
        if width > 1:
            length = layers[0][0].shape[2]
            cache = DynamicCache(ddp_cache_data=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1))
                                                 for k, v in layers])
            mask = torch.cat([claim_mask.new_ones(rows, length), claim_mask[:, :-1]], dim=1)
            positions = torch.arange(length, length + width - 1, device=claim_ids.device).expand(rows, -1)
            logits = self.model(input_ids=claim_ids[:, :-1], attention_mask=mask, position_ids=positions,
                                past_key_values=cache, use_cache=True).logits
            logp.append(selective_log_softmax(logits, claim_ids[:, 1:]))
        return torch.cat(logp, dim=1)

    def _gains_full_passes(self, evidence: list[str], sentences: list[str]) -> list[float]:
        """The reference computation: every sentence with its whole context, `batch_size` at a time."""
        result = []
        for chunk in batches(list(range(len(sentences))), self.batch_size):
            contexts = [self._context(evidence[i]) for i in chunk]
            claim_ids, claim_mask = self._encode([" " + sentences[i].strip() for i in chunk], left=False)
            with_ids, with_mask = self._encode(contexts, left=True)
            bare_ids, bare_mask = self._encode([NO_EVIDENCE_TEMPLATE] * len(chunk), left=True)
            with_evidence = self.logprob_pass.sequence_logprobs(self.model, with_ids, with_mask, claim_ids, claim_mask)
            without_evidence = self.logprob_pass.sequence_logprobs(self.model, bare_ids, bare_mask, claim_ids,
                                                                   claim_mask)
            result += mean_gain(with_evidence.float(), without_evidence.float(), claim_mask).tolist()
        return result

    def raw_scores(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        checkable = [i for i, s in enumerate(sentences) if s.strip() and evidence[i].strip()]
        result: list[float | None] = [None] * len(sentences)
        gains = self.gains([evidence[i] for i in checkable], [sentences[i] for i in checkable]) if checkable else []
        for i, gain in zip(checkable, gains):
            result[i] = gain
        return result

    def _score(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        return [None if gain is None else 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, self.slope * (gain - self.midpoint)))))
                for gain in self.raw_scores(evidence, sentences)]
