"""RLFH: fine-grained knowledge feedback turned into token rewards (docs/algorithms.md section 4; docs/methods.md).

For every atomic statement s of a response: a truthfulness label v_s from the verifier's support
probability (plus a hedge check) and an informativeness level i_s in 1..5. Then

    r_truth(s) = w_t * V[v_s] * |I[i_s]|                      on the token where s's content ends,
    r_info(S)  = w_i * ln(max(-0.9, sum_{s in S} I[i_s]) + 1)  on the last token of sentence S,

(granularity "token"); "sentence" puts all of S's rewards on S's last token, "paragraph" puts
everything on the final token. A statement that cannot be located inside its sentence goes to
its sentence's last token and is counted (`unlocated`); a reward with no token to carry it is
counted too (`unplaced`): nothing is dropped silently and nothing lands on token 0 by default.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Sequence

from fspo_lite.config import CHOICES
from fspo_lite.scoring.align import char_to_token_index
from fspo_lite.scoring.claims import ClaimExtractor, content_words
from fspo_lite.scoring.methods.caution import contains_answer
from fspo_lite.scoring.methods.statements import Statement, extract_statements
from fspo_lite.scoring.verifiers import Verifier

CORRECT, HEDGED_CORRECT, VAGUE, HEDGED_WRONG, WRONG = "Correct", "Hedged correct", "Vague", "Hedged wrong", "Wrong"
GRANULARITIES = CHOICES["rlfh.granularity"]
"""Where the rewards land (rlfh.granularity): the config's words, read from its one table."""
INFO_FLOOR = -0.9


def truth_map(config) -> dict[str, float]:
    """V: truthfulness label -> value, from an RLFHConfig."""
    return {CORRECT: config.truth_correct, HEDGED_CORRECT: config.truth_hedged_correct, VAGUE: config.truth_vague,
            HEDGED_WRONG: config.truth_hedged_wrong, WRONG: config.truth_wrong}


def info_map(config) -> dict[int, float]:
    """I: informativeness level -> value, from an RLFHConfig."""
    return {5: config.info_answer, 4: config.info_crucial, 3: config.info_relevant,
            2: config.info_supplementary, 1: config.info_useless}


def is_hedged(text: str, hedge_words: Sequence[str]) -> bool:
    """True when `text` contains one of the hedge words or phrases as whole words (case-insensitive)."""
    lowered = " ".join(re.findall(r"[^\W_]+(?:'[^\W_]+)?", (text or "").lower()))
    return any(re.search(rf"(?<!\S){re.escape(h.lower())}(?!\S)", lowered) for h in hedge_words if h.strip())


def truth_label(probability: float | None, hedged: bool, correct_threshold: float = 0.5,
                wrong_threshold: float = 0.2) -> str:
    """Map the verifier's P(supported) to an RLFH label: Correct above `correct_threshold`, Wrong at or
    below `wrong_threshold`, Vague between them or when nothing is checkable (None); hedged -> Hedged *."""
    if probability is None or wrong_threshold < probability <= correct_threshold:
        return VAGUE
    if probability > correct_threshold:
        return HEDGED_CORRECT if hedged else CORRECT
    return HEDGED_WRONG if hedged else WRONG


def truth_reward(label: str, info: int, truth_values: dict[str, float], info_values: dict[int, float],
                 truth_weight: float = 1.0) -> float:
    """r_truth(s) = w_t * V[label] * |I[info]|."""
    return truth_weight * truth_values[label] * abs(info_values[info])


def sentence_info_reward(infos: Sequence[int], info_values: dict[int, float], info_weight: float = 1.2) -> float:
    """r_info(S) = w_i * ln(max(-0.9, sum of I over the sentence's statements) + 1); 0 for no statements."""
    total = sum(info_values[i] for i in infos)
    return info_weight * math.log(max(INFO_FLOOR, total) + 1.0)


def _has_specific_detail(statement: str) -> bool:
    """A number anywhere, or a capitalised word that does not merely start the statement."""
    words = statement.split()
    return any(ch.isdigit() for ch in statement) or any(w[:1].isupper() for w in words[1:])


class InformativenessScorer:
    """Interface: rate how informative each statement is for the question, 5 (answers it) .. 1 (useless)."""

    name = "base"

    def score(self, question: str, answers: Sequence[str], statements: Sequence[str]) -> list[int]:
        raise NotImplementedError


class RuleBasedInformativeness(InformativenessScorer):
    """5: states a gold answer; 4: shares >= `crucial_overlap` of the question's content words; 3: shares
    some; 2: carries a number or a capitalised name (a specific detail); 1: otherwise."""

    name = "rules"

    def __init__(self, crucial_overlap: float = 0.5):
        self.crucial_overlap = crucial_overlap

    def score(self, question: str, answers: Sequence[str], statements: Sequence[str]) -> list[int]:
        question_words = set(content_words(question))
        levels = []
        for statement in statements:
            shared = len(question_words & set(content_words(statement)))
            if contains_answer(statement, answers):
                levels.append(5)
            elif question_words and shared / len(question_words) >= self.crucial_overlap:
                levels.append(4)
            elif shared:
                levels.append(3)
            elif _has_specific_detail(statement):
                levels.append(2)
            else:
                levels.append(1)
        return levels


@dataclass
class ResponseFeedback:
    """RLFH's view of one response: its statements, their labels and rewards, and the per-token rewards."""

    sentences: list[tuple[int, int]] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    probabilities: list[float | None] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    infos: list[int] = field(default_factory=list)
    truth_rewards: list[float] = field(default_factory=list)
    info_rewards: list[float] = field(default_factory=list)
    """r_info per sentence."""
    token_rewards: list[float] = field(default_factory=list)
    unlocated: int = 0
    unplaced: int = 0


def place_rewards(
    offsets: Sequence[tuple[int, int]], length: int, sentences: Sequence[tuple[int, int]],
    statements: Sequence[Statement], truth_rewards: Sequence[float], info_rewards: Sequence[float],
    granularity: str = "token",
) -> tuple[list[float], int, int]:
    """(per-token rewards over the first `length` tokens, unlocated statements, unplaced rewards).

    `offsets` are the tokens' character ranges in the response text (fspo_lite.scoring.align). A reward
    goes to the token that holds the character just before its position (char_to_token_index).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown rlfh.granularity {granularity!r}; choose one of {', '.join(GRANULARITIES)}")
    values = [0.0] * length
    unlocated = sum(1 for s in statements if s.end is None)
    unplaced = 0

    def put(position: int | None, value: float) -> None:
        nonlocal unplaced
        if value == 0.0:
            return
        index = length - 1 if granularity == "paragraph" else (
            None if position is None else char_to_token_index(offsets[:length], position))
        if index is None or index < 0:
            unplaced += 1
        else:
            values[index] += value

    for (_, end), reward in zip(sentences, info_rewards):
        put(end, reward)
    for statement, reward in zip(statements, truth_rewards):
        sentence_end = sentences[statement.sentence][1]
        located = statement.end if granularity == "token" and statement.end is not None else sentence_end
        put(located, reward)
    return values, unlocated, unplaced


def rlfh_feedback(
    examples: Sequence, views: Sequence, lengths: Sequence[int], extractor: ClaimExtractor, verifier: Verifier,
    informativeness: InformativenessScorer, config,
) -> list[ResponseFeedback]:
    """Statement feedback and token rewards for a batch of responses (one extractor and one verifier call).

    `examples` holds one QAExample per response (its question, answers and evidence), `views` one
    verdicts.ResponseView (its text and the characters of each token), `lengths` its completion tokens;
    `config` is config.rlfh. Responses whose example has no evidence get no statement rewards (nothing to check
    against). The question goes to the verifier as context: a statement is judged on what it adds beyond it.
    """
    texts = [view.text for view in views]
    evidence, questions = [example.evidence for example in examples], [example.question for example in examples]
    all_sentences, all_statements = extract_statements(texts, extractor)
    pairs = [(i, s) for i, statements in enumerate(all_statements) if evidence[i] for s in statements]
    probabilities = verifier.score([evidence[i] for i, _ in pairs], [s.text for _, s in pairs],
                                   [questions[i] for i, _ in pairs]) if pairs else []
    by_response: dict[int, list[float | None]] = {}
    for (i, _), p in zip(pairs, probabilities):
        by_response.setdefault(i, []).append(p)
    truth_values, info_values = truth_map(config), info_map(config)
    feedback = []
    for i in range(len(texts)):
        statements = all_statements[i] if evidence[i] else []
        sentences = all_sentences[i] if evidence[i] else []
        probs = by_response.get(i, [])
        labels = [truth_label(p, is_hedged(s.text, config.hedge_words), config.correct_threshold,
                              config.wrong_threshold) for s, p in zip(statements, probs)]
        infos = (informativeness.score(questions[i], examples[i].answers, [s.text for s in statements]) if statements
                 else [])
        truths = [truth_reward(v, level, truth_values, info_values, config.truth_weight) for v, level in zip(labels, infos)]
        info_rewards = [
            sentence_info_reward([level for s, level in zip(statements, infos) if s.sentence == k], info_values,
                                 config.info_weight)
            for k in range(len(sentences))
        ]
        values, unlocated, unplaced = place_rewards(views[i].offsets, lengths[i], sentences, statements, truths,
                                                    info_rewards, config.granularity)
        feedback.append(ResponseFeedback(sentences, statements, probs, labels, infos, truths, info_rewards,
                                         values, unlocated, unplaced))
    return feedback
