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

It runs offline with the bundled SmolLM2-135M (two forward passes per sentence, the second one
short), or with any local causal LM through `verifier.model`. It is a likelihood signal, not an
entailment check: a sentence that merely reuses the evidence's words in a wrong relation can
still gain.
"""

from __future__ import annotations

import math

import torch

from ..logprobs import completion_logprobs
from ..models import resolve_device
from .base import Verifier, batches

EVIDENCE_TEMPLATE = "Evidence: {evidence}\nStatement:"
NO_EVIDENCE_TEMPLATE = "Statement:"


def mean_gain(with_evidence: torch.Tensor, without_evidence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per row: mean over the masked tokens of (log-prob with evidence - log-prob without)."""
    mask = mask.float()
    return ((with_evidence - without_evidence) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


class LikelihoodVerifier(Verifier):
    """P(supported) from the mean per-token log-likelihood gain that the evidence gives the sentence."""

    name = "likelihood"
    midpoint = 1.5819
    """Gain (nats per token) at which p = 0.5 (fitted on HaluEval-QA train, see docs/verifiers.md)."""
    slope = 1.6491
    """Steepness of the logistic map (fitted with the midpoint)."""

    def __init__(self, model=None, tokenizer=None, name: str = "smollm2-135m", device: str = "auto",
                 batch_size: int = 8, max_evidence_tokens: int = 400, midpoint: float | None = None,
                 slope: float | None = None, share_evidence: bool = True, **kwargs):
        super().__init__(**kwargs)
        if model is None:
            from ..config import ModelConfig
            from ..models import load_model, load_tokenizer

            model = load_model(ModelConfig(name=name, lora=False)).to(resolve_device(device))
            tokenizer = load_tokenizer(name)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_evidence_tokens = max_evidence_tokens
        self.midpoint = self.midpoint if midpoint is None else midpoint
        self.slope = self.slope if slope is None else slope
        self.share_evidence = share_evidence
        """Sentences of a batch with the same evidence share one pass over it (`fspo_lite.prompt_cache`: the
        same gains up to float rounding); the responses to one question bring several sentences with one evidence."""

    @classmethod
    def from_config(cls, config) -> "LikelihoodVerifier":
        return cls(name=config.model or "smollm2-135m", device=config.device, batch_size=config.batch_size,
                   max_evidence_tokens=config.max_evidence_tokens)

    def _encode(self, texts: list[str], left: bool, max_length: int | None = None):
        encoded = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False,
                                 truncation=max_length is not None, max_length=max_length,
                                 padding_side="left" if left else "right")
        device = next(self.model.parameters()).device
        return encoded["input_ids"].to(device), encoded["attention_mask"].to(device)

    @torch.no_grad()
    def gains(self, evidence: list[str], sentences: list[str]) -> list[float]:
        """The mean log-likelihood gain (nats per token) of each sentence from its evidence."""
        result = []
        for chunk in batches(list(range(len(sentences))), self.batch_size):
            evidence_ids = [self.tokenizer(evidence[i], add_special_tokens=False)["input_ids"][: self.max_evidence_tokens]
                            for i in chunk]
            contexts = [EVIDENCE_TEMPLATE.format(evidence=self.tokenizer.decode(ids)) for ids in evidence_ids]
            claim_ids, claim_mask = self._encode([" " + sentences[i].strip() for i in chunk], left=False)
            with_ids, with_mask = self._encode(contexts, left=True)
            bare_ids, bare_mask = self._encode([NO_EVIDENCE_TEMPLATE] * len(chunk), left=True)
            with_evidence, _ = completion_logprobs(self.model, with_ids, with_mask, claim_ids, claim_mask,
                                                   share_prompts=self.share_evidence)
            without_evidence, _ = completion_logprobs(self.model, bare_ids, bare_mask, claim_ids, claim_mask,
                                                      share_prompts=self.share_evidence)
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
