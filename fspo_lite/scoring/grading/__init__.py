"""Answer grading: is a response's final answer right?

- `equivalence`: safe equivalence of math answers (`math_answers_equal`): exact quantities,
  normalised strings, then a symbolic check; nothing in model output is ever evaluated;
- `latex_tokens` and `latex_math`: the lexer and the fixed grammar that parse math answers into plain syntax
  trees, with `answer_parts` (parts joined by "or", inequalities read as intervals) and `units` (unit conversions,
  number words);
- `symbolic`: the sandboxed worker processes that compare those trees with sympy (and, for answers outside the
  grammar, LaTeX strings with Math-Verify), and `symbolic_worker`, the standalone script they run (started by file
  path, imports no fspo_lite);
- `outcome`: `grade_response`, the one reading (`final_answer`) and grading of a response, and the outcome reward
  built on it (answer F1 or EM for QA, equivalence for math, the format penalty), shared by training, evaluation
  and the base-model probes.

The names below are the package's public interface (`from fspo_lite.scoring.grading import ...`).
"""

from fspo_lite.scoring.grading.equivalence import (MAX_ANSWER_CHARS, TOO_LARGE, UNIT_WORDS, Quantity, TooLarge,
                                                   is_malformed, math_answers_equal, normalize_math_answer,
                                                   parse_plain_number, quantities_equal, read_quantity,
                                                   strip_latex_decorations, symbolically_equal)
from fspo_lite.scoring.grading.outcome import Outcome, final_answer, grade_answer, grade_response, outcome_reward

__all__ = [
    "MAX_ANSWER_CHARS", "TOO_LARGE", "UNIT_WORDS", "Outcome", "Quantity", "TooLarge", "final_answer", "grade_answer",
    "grade_response", "is_malformed",
    "math_answers_equal", "normalize_math_answer", "outcome_reward", "parse_plain_number", "quantities_equal",
    "read_quantity", "strip_latex_decorations", "symbolically_equal",
]
