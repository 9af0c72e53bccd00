"""Benchmark metrics as pure functions of graded outcomes (hand-checked in tests/test_eval_metrics.py).

Nothing here reads a model: the harness produces log-likelihoods, texts and grades, and these
functions turn them into the numbers the papers report.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

CORRECT, INCORRECT, NOT_ATTEMPTED = "CORRECT", "INCORRECT", "NOT_ATTEMPTED"
GRADES = (CORRECT, INCORRECT, NOT_ATTEMPTED)
DECOMPOSITION = ("all_correct", "partial_correct", "partial_not_attempt", "all_not_attempt", "all_attempt_wrong")
"""The seed-004 outcome classes of one question's k answers, in the slides' order of meaning."""


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def mc1(best_logprob: float, incorrect_logprobs: Sequence[float]) -> float:
    """1.0 when the best answer's summed log-likelihood is at least every incorrect one's (lm-eval's
    argmax over [best, *incorrect] keeps the first of tied maxima, i.e. the best answer), else 0.0."""
    return float(all(best_logprob >= value for value in incorrect_logprobs))


def mc2(true_logprobs: Sequence[float], false_logprobs: Sequence[float]) -> float:
    """Normalised probability mass on the true answers: sum p(true) / (sum p(true) + sum p(false)),
    with p = exp(summed log-likelihood), computed in log space so long answers do not underflow."""
    if not true_logprobs:
        return 0.0
    if not false_logprobs:
        return 1.0
    true_mass, false_mass = _logsumexp(true_logprobs), _logsumexp(false_logprobs)
    total = _logsumexp([true_mass, false_mass])
    return 0.0 if total == -math.inf else math.exp(true_mass - total)


def simpleqa_grade(correct: bool, not_attempted: bool) -> str:
    """SimpleQA's three grades from a graded answer: declining is NOT_ATTEMPTED, whatever the gold."""
    if not_attempted:
        return NOT_ATTEMPTED
    return CORRECT if correct else INCORRECT


def simpleqa_summary(grades: Sequence[str]) -> dict[str, float]:
    """Shares of CORRECT / INCORRECT / NOT_ATTEMPTED, correct given attempted, and the F-score
    (harmonic mean of overall correct and correct given attempted; 0 when either is 0)."""
    counts = Counter(grades)
    unknown = set(counts) - set(GRADES)
    if unknown:
        raise ValueError(f"unknown grades {sorted(unknown)}; expected {GRADES}")
    n = len(grades)
    if n == 0:
        return {"correct": math.nan, "incorrect": math.nan, "not_attempted": math.nan,
                "correct_given_attempted": math.nan, "f_score": math.nan}
    correct, incorrect = counts[CORRECT] / n, counts[INCORRECT] / n
    attempted = counts[CORRECT] + counts[INCORRECT]
    given_attempted = counts[CORRECT] / attempted if attempted else 0.0
    f_score = 2 * correct * given_attempted / (correct + given_attempted) if correct + given_attempted else 0.0
    return {"correct": correct, "incorrect": incorrect, "not_attempted": counts[NOT_ATTEMPTED] / n,
            "correct_given_attempted": given_attempted, "f_score": f_score}


def decomposition_class(grades: Sequence[str]) -> str:
    """The seed-004 class of one question from the grades of its k answers:

    all_correct (every answer correct), partial_correct (some correct, the others mixed), partial_not_attempt
    (none correct, some declined, some wrong), all_not_attempt (every answer declined), all_attempt_wrong
    (every answer attempted and wrong)."""
    if not grades:
        raise ValueError("a question needs at least one graded answer")
    counts = Counter(grades)
    if counts[CORRECT] == len(grades):
        return "all_correct"
    if counts[CORRECT]:
        return "partial_correct"
    if counts[NOT_ATTEMPTED] == len(grades):
        return "all_not_attempt"
    if counts[NOT_ATTEMPTED]:
        return "partial_not_attempt"
    return "all_attempt_wrong"


def decomposition(per_question: Sequence[Sequence[str]]) -> dict[str, float]:
    """Percent of questions in each decomposition class (the five add up to 100)."""
    counts = Counter(decomposition_class(grades) for grades in per_question)
    n = len(per_question)
    return {name: (100.0 * counts[name] / n if n else math.nan) for name in DECOMPOSITION}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


_YES = re.compile(r"\byes\b", re.IGNORECASE)
_NO = re.compile(r"\bno\b", re.IGNORECASE)


def parse_judgement(text: str | None) -> bool | None:
    """HaluEval's reading of a Yes/No reply: True (Yes), False (No), None when it holds both or neither."""
    if not isinstance(text, str):
        return None
    yes, no = bool(_YES.search(text)), bool(_NO.search(text))
    return yes if yes != no else None


def halueval_correct(reply: str | None, is_hallucinated: bool) -> bool:
    """A judgement is correct when it parses and says Yes exactly for hallucinated candidates."""
    judgement = parse_judgement(reply)
    return judgement is not None and judgement == bool(is_hallucinated)


def mean(values: Sequence[float]) -> float:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else math.nan


def sentence_counts(labels: Sequence[int]) -> dict[str, int]:
    """One response's reasoning sentences by a judge's labels (+1 supported, -1 unsupported, 0 not checkable):
    supported, unsupported, checkable (= supported + unsupported) and all sentences."""
    supported, unsupported = sum(1 for x in labels if x > 0), sum(1 for x in labels if x < 0)
    return {"supported": supported, "unsupported": unsupported, "checkable": supported + unsupported,
            "sentences": len(labels)}


def ratio_of_sums(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """sum(numerators) / sum(denominators), NaN when the denominators add up to 0 (e.g. the step
    hallucination rate: unsupported over checkable sentences, pooled over responses)."""
    total = sum(denominators)
    return sum(numerators) / total if total else math.nan
