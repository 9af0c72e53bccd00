"""Step verifiers behind one interface (see base.Verifier) and a factory from the config.

| name      | what it reads                          | needs                               |
|-----------|----------------------------------------|-------------------------------------|
| lexical   | numbers, names, words found in evidence| nothing (offline default)           |
| embedding | max cosine to an evidence sentence     | the bundled all-MiniLM-L6-v2 (offline) |
| likelihood| how much the evidence raises an LM's log-probs of the sentence | the bundled SmolLM2 (offline) |
| nli       | an NLI cross-encoder's P(entailment)   | a hub model or local folder         |
| hhem      | Vectara HHEM-2.1 (the FSPO paper's)    | the hub and trust_remote_code=True  |
| llm       | a chat model's P(Yes) as a judge       | a local model or an OpenAI-compatible server |
| kb        | the sentence's claims checked against the kbqa facts parsed from the evidence (None on other data) | nothing (offline) |
"""

from __future__ import annotations

from fspo_lite.scoring.verifiers.base import Verifier, labels_from_scores, pair_key
from fspo_lite.scoring.verifiers.embedding import EmbeddingVerifier
from fspo_lite.scoring.verifiers.kb import KBVerifier
from fspo_lite.scoring.verifiers.lexical import LexicalVerifier
from fspo_lite.scoring.verifiers.likelihood import LikelihoodVerifier
from fspo_lite.scoring.verifiers.llm_judge import LLMJudgeVerifier
from fspo_lite.scoring.verifiers.nli import CrossEncoderVerifier, HHEMVerifier

VERIFIERS = {
    "lexical": LexicalVerifier,
    "embedding": EmbeddingVerifier,
    "likelihood": LikelihoodVerifier,
    "nli": CrossEncoderVerifier,
    "hhem": HHEMVerifier,
    "llm": LLMJudgeVerifier,
    "kb": KBVerifier,
}


def build_verifier(config, logprob_pass=None) -> Verifier:
    """Instantiate the verifier named in a VerifierConfig. `logprob_pass`: the log-prob seam a judge model scores
    through (`fspo_lite.speed.judge_logprob_pass(config.speed)` from callers above the speed layer); None: the
    reference pass."""
    try:
        cls = VERIFIERS[config.name]
    except KeyError:
        raise ValueError(f"unknown verifier {config.name!r}; available: {', '.join(sorted(VERIFIERS))}") from None
    if getattr(cls, "takes_logprob_pass", False):
        return cls.from_config(config, logprob_pass=logprob_pass)
    return cls.from_config(config) if hasattr(cls, "from_config") else cls()


__all__ = [
    "Verifier", "LexicalVerifier", "EmbeddingVerifier", "CrossEncoderVerifier", "HHEMVerifier", "LLMJudgeVerifier",
    "LikelihoodVerifier", "KBVerifier",
    "build_verifier", "labels_from_scores", "pair_key", "VERIFIERS",
]
