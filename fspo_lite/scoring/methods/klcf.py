"""KLCF dual-fact rewards (docs/algorithms.md section 5; docs/methods.md).

Offline, each training question gets a checklist: the claims of the base model's own sampled
answers that the verifier supports, de-duplicated (`build_checklist`; the command is
`python -m fspo_lite klcf-checklist`, fspo_lite.drivers.checklist). Online, a response earns

    recall    = share of its question's checklist facts that it states,
    precision = mean P(supported | evidence, claim) over its own claims,
    reward    = w_recall * recall + w_precision * precision (+ w_rm * reward model score).

The checklist matcher is the configured verifier with the response as the evidence and the
checklist fact as the sentence. The weights are not published: they are config values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from fspo_lite.scoring.claims import ClaimExtractor, content_words
from fspo_lite.scoring.methods.statements import extract_statements
from fspo_lite.scoring.verifiers import Verifier
from fspo_lite.text import near_duplicate_flags, word_jaccard


CHECKLIST_KIND = "klcf-checklist"


def load_checklists(path: str | Path | None) -> dict[str, list[str]]:
    """{question id: checklist facts} from a file written by `python -m fspo_lite klcf-checklist`."""
    if not path or not Path(path).exists():
        raise FileNotFoundError(
            f"reward.method=klcf needs a checklist file (klcf.checklist_path={path!r} does not exist); "
            "build it with: python -m fspo_lite klcf-checklist --config <your config>"
        )
    try:
        stored = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a KLCF checklist file (not JSON text: {error})") from None
    kind = stored.get("kind") if isinstance(stored, dict) else type(stored).__name__
    if kind != CHECKLIST_KIND:
        raise ValueError(f"{path} is not a KLCF checklist file (kind={kind!r})")
    return {qid: entry["checklist"] for qid, entry in stored["questions"].items()}


def content_word_set(claim: str) -> frozenset[str]:
    """The claim's content words (`claims.content_words`: lower-cased, stopwords dropped), as a set."""
    return frozenset(content_words(claim))


def claim_overlap(first: str, second: str) -> float:
    """Jaccard overlap of two claims' content-word sets (1.0 for two claims with none)."""
    return word_jaccard(content_word_set(first), content_word_set(second))


def dedupe_claims(claims: Sequence[str], overlap: float = 0.8) -> list[str]:
    """The claims without near-duplicates (content-word overlap >= `overlap` with an earlier claim, as in
    `text.near_duplicate_flags`): the first of every group is kept."""
    return [claim for claim, duplicate in zip(claims, near_duplicate_flags(claims, overlap, content_word_set))
            if not duplicate]


def build_checklist(texts: Sequence[str], evidence: str, extractor: ClaimExtractor, verifier: Verifier,
                    threshold: float = 0.5, overlap: float = 0.8, question: str = "") -> list[str]:
    """A question's checklist: claims of its sampled responses with P(supported | evidence) > threshold
    (judged beyond the question, which goes to the verifier as context), de-duplicated. No evidence gives
    an empty checklist."""
    if not evidence:
        return []
    _, statements = extract_statements(texts, extractor)
    claims = [s.text for response in statements for s in response]
    if not claims:
        return []
    probabilities = verifier.score([evidence] * len(claims), claims, [question] * len(claims))
    return dedupe_claims([c for c, p in zip(claims, probabilities) if p is not None and p > threshold], overlap)


def checklist_recall(match_probabilities: Sequence[float | None], threshold: float = 0.5) -> float:
    """Share of checklist facts judged stated (P > threshold); 0 for an empty checklist."""
    if not match_probabilities:
        return 0.0
    return sum(1 for p in match_probabilities if p is not None and p > threshold) / len(match_probabilities)


def claim_precision(probabilities: Sequence[float | None]) -> float:
    """Mean P(supported) over a response's checkable claims; 0 when it makes none."""
    checked = [p for p in probabilities if p is not None]
    return sum(checked) / len(checked) if checked else 0.0


def klcf_reward(recall: float, precision: float, config, reward_model_score: float = 0.0, outcome: float = 0.0) -> float:
    """w_recall * recall + w_precision * precision + w_rm * reward model score + w_outcome * outcome (KLCFConfig)."""
    return (config.recall_weight * recall + config.precision_weight * precision
            + config.reward_model_weight * reward_model_score + config.outcome_weight * outcome)


def klcf_scores(texts: Sequence[str], checklists: Sequence[Sequence[str]], evidence: Sequence[str],
                questions: Sequence[str], extractor: ClaimExtractor, verifier: Verifier, match_threshold: float = 0.5
                ) -> list[tuple[float, float, int]]:
    """(recall, precision, number of claims) per response, with one matcher and one verifier call per batch.
    Both calls pass the question as context, so a fact or claim is judged on what it adds beyond it."""
    match_pairs = [(i, fact) for i, facts in enumerate(checklists) for fact in facts]
    matches = verifier.score([texts[i] for i, _ in match_pairs], [f for _, f in match_pairs],
                             [questions[i] for i, _ in match_pairs]) if match_pairs else []
    _, statements = extract_statements(texts, extractor)
    claim_pairs = [(i, s.text) for i, response in enumerate(statements) if evidence[i] for s in response]
    supports = verifier.score([evidence[i] for i, _ in claim_pairs], [c for _, c in claim_pairs],
                              [questions[i] for i, _ in claim_pairs]) if claim_pairs else []
    matched: list[list[float | None]] = [[] for _ in texts]
    supported: list[list[float | None]] = [[] for _ in texts]
    for (i, _), p in zip(match_pairs, matches):
        matched[i].append(p)
    for (i, _), p in zip(claim_pairs, supports):
        supported[i].append(p)
    return [(checklist_recall(m, match_threshold), claim_precision(s), len(s)) for m, s in zip(matched, supported)]


class RewardModel:
    """Interface: a general (helpfulness) reward model scoring (question, response) pairs."""

    def score(self, questions: Sequence[str], responses: Sequence[str]) -> list[float]:
        raise NotImplementedError


class SequenceClassifierRewardModel(RewardModel):
    """A local transformers sequence-classification model with one output (e.g. a Skywork reward model
    saved to a folder); the pair is rendered through its chat template when it has one."""

    def __init__(self, path: str, batch_size: int = 8):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path).eval()
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.batch_size = batch_size

    def _render(self, question: str, response: str) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": response}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return f"Question: {question}\nAnswer: {response}"

    def score(self, questions: Sequence[str], responses: Sequence[str]) -> list[float]:
        import torch

        texts = [self._render(q, r) for q, r in zip(questions, responses)]
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(texts[start : start + self.batch_size], return_tensors="pt", padding=True,
                                       truncation=True, max_length=2048)
                scores += self.model(**batch).logits[:, 0].float().tolist()
        return scores


def build_reward_model(path: str | None) -> RewardModel | None:
    """klcf.reward_model: None (off) or a local sequence-classification model folder."""
    return SequenceClassifierRewardModel(path) if path else None
