"""Results of the lite reproduction and the study (notebook 04): read the runs, aggregate, test, write, plot.

- `lite`: the lite run report: held-out and training tables over seeds, the goal check, the summary markdown;
- `study`: the study's statistics (docs/statistics.md): cells, bootstrap intervals, paired and matched-length
  differences, the caution goal, the detail arm's question;
- `arms`: the added arms' two questions (a better verifier, a longer run): their pairs, checks and answers;
- `summary`: the study summary in markdown and `study_report`, which makes everything from a runs folder;
- `render`: summary.md rendered from summary.json (and the blind audit's audit.json), with the verdict on top;
- `plots`: the figures.

`from fspo_lite.drivers import report` then `report.summarize(...)`, `report.study_report(report.Study(...))`: the
names below.
"""

from fspo_lite.drivers.report.arms import (LONGER_QUESTION, VERIFIER_QUESTION, longer_answer, longer_check, pairs_table,
                                           question_metrics, questions_markdown, verifier_answer, verifier_check)
from fspo_lite.drivers.report.lite import (CURVES, HELDOUT_METRICS, OTHER_METRICS, PER_RESPONSE, QA_METRICS,
                                           TRAINING_DIAGNOSTICS, CommittedRuns, committed_runs, flip_example,
                                           goal_check, has_runs, load_heldout, run_row,
                                           load_training, summarize, summary_markdown, training_diagnostics)
from fspo_lite.drivers.report.plots import (curves_not_drawn, figures_not_drawn, judges_not_drawn, mass_not_drawn,
                                            plot_accuracy_vs_hallucination, plot_advantage_mass,
                                            plot_decomposition_by_method, plot_forest, plot_judges,
                                            plot_supported_unsupported, plot_training_curves, scatter_not_drawn)
from fspo_lite.drivers.report.evidence import other_prompt_arms, without_arms
from fspo_lite.drivers.report.flip_plot import flip_caption, plot_flip
from fspo_lite.drivers.report.render import summary_document, verdict, verdict_markdown, write_summary
from fspo_lite.drivers.report.study import (CAUTION_GOAL, DETAIL_ARM, LENGTH_STRATA, PERCENT_METRICS, caution_goal,
                                            detail_arm_check, format_interval, interval_side, is_share, judge_labels,
                                            judges_of, length_stratum, load_responses, matched_length, metric_cells,
                                            metric_scale, other_benchmark_cells, pair_differences, study_statistics,
                                            training_verifier)
from fspo_lite.drivers.report.summary import (Bootstrap, Study, added_arms, detail_answer, detail_markdown, direction,
                                              metric_order, say_less_reading, study_markdown, study_report)

__all__ = [
    "Bootstrap", "CAUTION_GOAL", "CommittedRuns", "committed_runs", "has_runs", "run_row", "CURVES", "DETAIL_ARM", "HELDOUT_METRICS", "LENGTH_STRATA", "LONGER_QUESTION",
    "OTHER_METRICS", "PERCENT_METRICS", "PER_RESPONSE", "QA_METRICS", "Study", "TRAINING_DIAGNOSTICS",
    "VERIFIER_QUESTION", "added_arms", "caution_goal", "detail_answer", "detail_arm_check", "interval_side",
    "longer_answer", "longer_check", "pairs_table", "question_metrics", "questions_markdown", "training_verifier",
    "verifier_answer", "verifier_check", "without_arms", "curves_not_drawn", "figures_not_drawn", "judges_not_drawn",
    "mass_not_drawn", "scatter_not_drawn", "detail_markdown", "direction", "flip_example", "format_interval",
    "goal_check", "is_share", "judge_labels", "judges_of", "length_stratum", "load_heldout", "load_responses",
    "load_training", "matched_length", "metric_cells", "metric_order", "metric_scale", "other_benchmark_cells", "other_prompt_arms",
    "pair_differences", "plot_accuracy_vs_hallucination", "plot_advantage_mass", "plot_decomposition_by_method",
    "plot_flip", "plot_forest", "plot_judges", "plot_supported_unsupported", "plot_training_curves",
    "say_less_reading", "study_markdown", "study_report", "study_statistics", "summarize", "summary_document",
    "summary_markdown", "training_diagnostics", "verdict", "verdict_markdown", "write_summary",
]
