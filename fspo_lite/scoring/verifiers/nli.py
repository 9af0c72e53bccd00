"""Cross-encoders: a model that reads evidence and sentence together and classifies the pair.

Two families behind one class:

- `nli`: any natural-language-inference sequence classifier from the hub or a local folder
  (labels such as entailment / neutral / contradiction). P(supported) is the softmax
  probability of the label that means "supported" (entailment, consistent, supported, true);
  a one-logit model is read through a sigmoid.
- `hhem`: Vectara's hallucination evaluation model (HHEM-2.1-open, the FSPO paper's verifier).
  It ships its own model code, so it loads only with `trust_remote_code=True`, which you must
  set yourself (`--set verifier.trust_remote_code=true`); its own `predict(pairs)` gives
  P(consistent). It also fetches the flan-t5-base tokenizer from the hub on first load.

Both need the hub (or a local copy), so neither is an offline default. The evidence is cut to
`max_evidence_tokens` tokens (the premise is truncated, never the sentence).
"""

from __future__ import annotations

import re

import torch

from fspo_lite.models.hub import HubUnavailable, hub_options
from fspo_lite.models.policy import ModelLoadError, resolve_device
from fspo_lite.scoring.verifiers.base import Verifier, batches

DEFAULT_NLI_MODEL = "cross-encoder/nli-deberta-v3-base"
HHEM_MODEL = "vectara/hallucination_evaluation_model"
SUPPORT_LABEL = re.compile(r"entail|consistent|support|^true$|factual", re.IGNORECASE)
NEGATED_LABEL = re.compile(r"(not|non|un|in)[_\s-]?(entail|consistent|support|factual)", re.IGNORECASE)


def support_label_index(id2label: dict) -> int | None:
    """Index of the label meaning "supported", found by name; None for a one-logit model.

    A two-label model with generic names (LABEL_0, LABEL_1) is read as (unsupported, supported).
    """
    names = {int(i): str(name) for i, name in id2label.items()}
    if len(names) <= 1:
        return None
    matches = [i for i, name in names.items() if SUPPORT_LABEL.search(name) and not NEGATED_LABEL.match(name)]
    if len(matches) == 1:
        return matches[0]
    if len(names) == 2:
        return 1
    raise ValueError(f"cannot tell which label means 'supported' among {sorted(names.values())}")


def _load_pretrained(loader, source: str, trust_remote_code: bool):
    try:
        options = hub_options(source)  # not cached and downloads off, or no hub: one line at once, not minutes
    except HubUnavailable as error:
        raise ModelLoadError(f"{error}. Offline verifiers: lexical, embedding, llm (with the bundled "
                             "smollm2-135m).") from None
    try:
        return loader.from_pretrained(source, trust_remote_code=trust_remote_code, **options)
    except OSError as error:
        raise ModelLoadError(
            f"could not load '{source}' (no network, a typo, or a gated model): {error}. Offline verifiers: "
            "lexical, embedding, llm (with the bundled smollm2-135m)."
        ) from error


class CrossEncoderVerifier(Verifier):
    """P(supported) from a sequence-classification model over (evidence, sentence) pairs."""

    name = "nli"

    def __init__(self, model: str = DEFAULT_NLI_MODEL, device: str = "auto", batch_size: int = 32,
                 max_evidence_tokens: int = 400, trust_remote_code: bool = False, **kwargs):
        super().__init__(**kwargs)
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model_name = model
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.max_evidence_tokens = max_evidence_tokens
        self.model = _load_pretrained(AutoModelForSequenceClassification, model, trust_remote_code).to(self.device).eval()
        self.tokenizer = None if hasattr(self.model, "predict") else _load_pretrained(AutoTokenizer, model, trust_remote_code)
        self.label_index = None if self.tokenizer is None else support_label_index(self.model.config.id2label)

    @classmethod
    def from_config(cls, config) -> "CrossEncoderVerifier":
        return cls(model=config.model or DEFAULT_NLI_MODEL, device=config.device, batch_size=config.batch_size,
                   max_evidence_tokens=config.max_evidence_tokens, trust_remote_code=config.trust_remote_code)

    @torch.no_grad()
    def _probabilities(self, evidence: list[str], sentences: list[str]) -> list[float]:
        if self.tokenizer is None:  # models with their own scoring entry point (HHEM)
            return [float(p) for p in self.model.predict(list(zip(evidence, sentences)))]
        encoded = self.tokenizer(evidence, sentences, truncation="only_first", padding=True, return_tensors="pt",
                                 max_length=self.max_evidence_tokens + 64).to(self.device)
        logits = self.model(**encoded).logits.float()
        if self.label_index is None:
            return torch.sigmoid(logits[:, 0]).tolist()
        return torch.softmax(logits, dim=-1)[:, self.label_index].tolist()

    def _score(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        result: list[float | None] = [None] * len(sentences)
        checkable = [i for i, s in enumerate(sentences) if s.strip() and evidence[i].strip()]
        for chunk in batches(checkable, self.batch_size):
            for i, p in zip(chunk, self._probabilities([evidence[i] for i in chunk], [sentences[i] for i in chunk])):
                result[i] = p
        return result


class HHEMVerifier(CrossEncoderVerifier):
    """Vectara HHEM-2.1-open: the FSPO paper's verifier (needs the hub and trust_remote_code)."""

    name = "hhem"

    def __init__(self, model: str = HHEM_MODEL, trust_remote_code: bool = False, max_evidence_tokens: int = 400,
                 **kwargs):
        if not trust_remote_code:
            raise ModelLoadError(
                f"the hhem verifier runs model code shipped with '{model}'; allow it explicitly with "
                "--set verifier.trust_remote_code=true (read that code first), or use verifier.name=nli"
            )
        super().__init__(model=model, trust_remote_code=trust_remote_code, max_evidence_tokens=max_evidence_tokens,
                         **kwargs)
        if not hasattr(self.model, "predict"):
            raise ModelLoadError(f"'{model}' has no predict(pairs) method; is it an HHEM checkpoint?")

    @classmethod
    def from_config(cls, config) -> "HHEMVerifier":
        return cls(model=config.model or HHEM_MODEL, device=config.device, batch_size=config.batch_size,
                   max_evidence_tokens=config.max_evidence_tokens, trust_remote_code=config.trust_remote_code)

    def _probabilities(self, evidence: list[str], sentences: list[str]) -> list[float]:
        # HHEM tokenizes inside predict(); cut the premise by words so long evidence stays bounded
        cut = [" ".join(e.split()[: self.max_evidence_tokens]) for e in evidence]
        return super()._probabilities(cut, sentences)
