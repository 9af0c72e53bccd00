"""Step verifiers behind one interface (see base.Verifier) and a factory from the config."""

from __future__ import annotations

from .base import Verifier, labels_from_scores, pair_key
from .lexical import LexicalVerifier

VERIFIERS = {"lexical": LexicalVerifier}


def build_verifier(config) -> Verifier:
    """Instantiate the verifier named in a VerifierConfig."""
    try:
        cls = VERIFIERS[config.name]
    except KeyError:
        raise ValueError(f"unknown verifier {config.name!r}; available: {', '.join(sorted(VERIFIERS))}") from None
    return cls()


__all__ = ["Verifier", "LexicalVerifier", "build_verifier", "labels_from_scores", "pair_key", "VERIFIERS"]
