"""Bootstrap intervals over questions and seeds (the study's statistics; docs/statistics.md states the protocol).

Every metric is held as a numerator and a denominator per (seed, question) cell, so one function serves all of
them: accuracy is correct answers over answers, step hallucination unsupported over checkable sentences,
a decomposition class 100 x [question in the class] over 1. A method's estimate is the mean over its seeds of
each seed's pooled ratio sum(num) / sum(den) over the questions.

The bootstrap resamples questions as clusters (all samples and sentences of a question move together, by a
multinomial count per question) and, independently, seeds with replacement within each method. A paired
difference between two methods uses the same question draw for both (same questions), and each method's own
seed draw. The interval is the percentile interval of the replicates. All functions are pure; randomness comes
from a numpy Generator the caller seeds.
"""

from __future__ import annotations

import numpy as np

LEVEL = 0.95
"""Default coverage of the intervals."""


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    count = np.sum(~np.isnan(values), axis=axis)
    total = np.nansum(values, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.where(count > 0, count, 1), np.nan)


def seed_mean(num: np.ndarray, den: np.ndarray) -> float:
    """The estimate: mean over seeds (rows) of each seed's sum(num) / sum(den) over questions (columns);
    seeds whose denominators add up to 0 are left out (NaN when all are)."""
    num, den = np.atleast_2d(np.asarray(num, float)), np.atleast_2d(np.asarray(den, float))
    return float(_nanmean(_ratio(num.sum(1), den.sum(1)), axis=0))


def question_draws(n_questions: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, n_questions) counts: how often each question is drawn in each resample (n draws with
    replacement out of n questions, i.e. a multinomial with equal probabilities)."""
    if n_questions < 1:
        raise ValueError("the bootstrap needs at least one question")
    return rng.multinomial(n_questions, np.full(n_questions, 1.0 / n_questions), size=n_resamples).astype(float)


def seed_draws(n_seeds: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, n_seeds) row indices of seeds drawn with replacement."""
    if n_seeds < 1:
        raise ValueError("the bootstrap needs at least one seed")
    return rng.integers(0, n_seeds, size=(n_resamples, n_seeds))


def replicates(num: np.ndarray, den: np.ndarray, questions: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """(n_resamples,) bootstrap replicates of `seed_mean` for given draws: questions (B, Q) counts from
    `question_draws`, seeds (B, S') indices from `seed_draws`. num and den are (S, Q) or (S, Q, K); with a
    trailing stratum axis K the result is (B, K), one replicate per stratum."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if num.shape != den.shape:
        raise ValueError(f"numerators {num.shape} and denominators {den.shape} differ in shape")
    if num.ndim == 2:
        return replicates(num[..., None], den[..., None], questions, seeds)[:, 0]
    if questions.shape[1] != num.shape[1]:
        raise ValueError(f"{questions.shape[1]} question weights for {num.shape[1]} questions")
    # per resample b, seed s and stratum k: sum over questions of weight x value
    nums = np.einsum("bq,sqk->bsk", questions, num)
    dens = np.einsum("bq,sqk->bsk", questions, den)
    index = seeds[:, :, None]
    picked_num = np.take_along_axis(nums, np.broadcast_to(index, (*seeds.shape, num.shape[2])), axis=1)
    picked_den = np.take_along_axis(dens, np.broadcast_to(index, (*seeds.shape, num.shape[2])), axis=1)
    return _nanmean(_ratio(picked_num, picked_den), axis=1)


def interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (NaN replicates left out; (nan, nan) when all are)."""
    values = np.asarray(values, float)
    values = values[~np.isnan(values)]
    if not len(values):
        return (float("nan"), float("nan"))
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return (float(low), float(high))


def bootstrap_mean(num, den, n_resamples: int = 2000, rng: np.random.Generator | None = None,
                   level: float = LEVEL) -> dict:
    """One method's metric: {mean, low, high, seeds, questions} with questions as clusters and seeds resampled."""
    num, den = np.atleast_2d(np.asarray(num, float)), np.atleast_2d(np.asarray(den, float))
    rng = rng if rng is not None else np.random.default_rng(0)
    draws = replicates(num, den, question_draws(num.shape[1], n_resamples, rng),
                       seed_draws(num.shape[0], n_resamples, rng))
    low, high = interval(draws, level)
    return {"mean": seed_mean(num, den), "low": low, "high": high, "seeds": num.shape[0], "questions": num.shape[1]}


def paired_difference(num_a, den_a, num_b, den_b, n_resamples: int = 2000, rng: np.random.Generator | None = None,
                      level: float = LEVEL, relative: bool = False) -> dict:
    """Method a minus method b on the same questions (the columns must match): {diff, low, high} from a bootstrap
    that draws questions once for both and seeds within each method. With `relative`, also the relative change
    a / b - 1 ({relative, relative_low, relative_high})."""
    num_a, den_a = np.atleast_2d(np.asarray(num_a, float)), np.atleast_2d(np.asarray(den_a, float))
    num_b, den_b = np.atleast_2d(np.asarray(num_b, float)), np.atleast_2d(np.asarray(den_b, float))
    if num_a.shape[1] != num_b.shape[1]:
        raise ValueError(f"paired methods need the same questions: {num_a.shape[1]} vs {num_b.shape[1]}")
    rng = rng if rng is not None else np.random.default_rng(0)
    questions = question_draws(num_a.shape[1], n_resamples, rng)
    rep_a = replicates(num_a, den_a, questions, seed_draws(num_a.shape[0], n_resamples, rng))
    rep_b = replicates(num_b, den_b, questions, seed_draws(num_b.shape[0], n_resamples, rng))
    mean_a, mean_b = seed_mean(num_a, den_a), seed_mean(num_b, den_b)
    low, high = interval(rep_a - rep_b, level)
    result = {"a": mean_a, "b": mean_b, "diff": mean_a - mean_b, "low": low, "high": high}
    if relative:
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(rep_b != 0, rep_a / np.where(rep_b != 0, rep_b, 1.0) - 1, np.nan)
        result["relative"] = mean_a / mean_b - 1 if mean_b else float("nan")
        result["relative_low"], result["relative_high"] = interval(rel, level)
    return result


def interaction_difference(arms, n_resamples: int = 2000, rng: np.random.Generator | None = None,
                           level: float = LEVEL) -> dict:
    """The interaction of a 2x2, (a - b) - (c - d), on the same questions: `arms` is four (num, den) pairs of
    (seeds, questions) arrays, a, b, c, d in that order. One question draw serves all four arms (a question drawn
    twice counts twice in every arm), each arm draws its own seeds. {a, b, c, d, diff, low, high}."""
    pairs = [(np.atleast_2d(np.asarray(n, float)), np.atleast_2d(np.asarray(d, float))) for n, d in arms]
    if len(pairs) != 4:
        raise ValueError(f"an interaction needs four arms (a, b, c, d), not {len(pairs)}")
    if len({num.shape[1] for num, _ in pairs}) != 1:
        raise ValueError("the four arms of an interaction need the same questions: "
                         + " vs ".join(str(num.shape[1]) for num, _ in pairs))
    rng = rng if rng is not None else np.random.default_rng(0)
    questions = question_draws(pairs[0][0].shape[1], n_resamples, rng)
    reps = [replicates(num, den, questions, seed_draws(num.shape[0], n_resamples, rng)) for num, den in pairs]
    means = [seed_mean(num, den) for num, den in pairs]
    low, high = interval((reps[0] - reps[1]) - (reps[2] - reps[3]), level)
    return {**dict(zip("abcd", means)), "diff": (means[0] - means[1]) - (means[2] - means[3]), "low": low,
            "high": high}


def standardized_rates(num: np.ndarray, den: np.ndarray, weights: np.ndarray, usable: np.ndarray) -> np.ndarray:
    """Direct standardization: per stratum k the rate sum(num) / sum(den) (here already reduced to (..., K)
    arrays), combined as sum_k w_k rate_k over the `usable` strata, the weights renormalized over them."""
    w = np.where(usable, weights, 0.0)
    total = w.sum(axis=-1)
    rates = np.where(usable, np.nan_to_num(_ratio(num, den)), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (w * rates).sum(axis=-1) / np.where(total > 0, total, 1.0), np.nan)


def matched_difference(num_a, den_a, num_b, den_b, weights, n_resamples: int = 2000,
                       rng: np.random.Generator | None = None, level: float = LEVEL) -> dict:
    """A rate compared at matched length: arrays (S, Q, K) with K length strata (e.g. responses with 1, 2, ...
    reasoning sentences). Within each stratum each method's rate is its mean over seeds of the pooled ratio;
    both methods are standardized to the same stratum weights (`weights`, e.g. the pooled share of responses
    per stratum), using only strata where both methods have a denominator (in the data and in each replicate).
    Returns {a, b, diff, low, high, strata} with `strata` the number of strata used in the point estimate."""
    arrays = [np.asarray(x, float) for x in (num_a, den_a, num_b, den_b)]
    num_a, den_a, num_b, den_b = arrays
    weights = np.asarray(weights, float)
    rng = rng if rng is not None else np.random.default_rng(0)

    def per_stratum(num, den):  # (K,) mean over seeds of each seed's pooled rate per stratum
        return _nanmean(_ratio(num.sum(1), den.sum(1)), axis=0)

    point_a, point_b = per_stratum(num_a, den_a), per_stratum(num_b, den_b)
    usable = ~np.isnan(point_a) & ~np.isnan(point_b)
    std_a = float(standardized_rates(np.nan_to_num(point_a), np.ones_like(point_a), weights, usable))
    std_b = float(standardized_rates(np.nan_to_num(point_b), np.ones_like(point_b), weights, usable))
    questions = question_draws(num_a.shape[1], n_resamples, rng)
    rep_a = replicates(num_a, den_a, questions, seed_draws(num_a.shape[0], n_resamples, rng))
    rep_b = replicates(num_b, den_b, questions, seed_draws(num_b.shape[0], n_resamples, rng))
    both = ~np.isnan(rep_a) & ~np.isnan(rep_b) & usable[None, :]
    ones = np.ones_like(rep_a)
    diff = (standardized_rates(np.nan_to_num(rep_a), ones, weights[None, :], both)
            - standardized_rates(np.nan_to_num(rep_b), ones, weights[None, :], both))
    low, high = interval(diff, level)
    welch = welch_interval(matched_seed_values(num_a, den_a, weights, usable),
                           matched_seed_values(num_b, den_b, weights, usable), level)
    return {"a": std_a, "b": std_b, "diff": std_a - std_b, "low": low, "high": high, "strata": int(usable.sum()),
            "welch_low": welch["low"], "welch_high": welch["high"], "welch_p": welch["p"]}


def matched_seed_values(num, den, weights, usable) -> np.ndarray:
    """(S,) each seed's standardized rate at matched length, the values Welch's interval reads beside
    `matched_difference`: the seed's pooled rate per stratum (sum over questions of num / of den), combined with
    `weights` over the `usable` strata where the seed has a denominator (weights renormalized over them); NaN for a
    seed with none."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    num_k, den_k = num.sum(1), den.sum(1)  # (S, K)
    has = np.asarray(usable, bool)[None, :] & (den_k > 0)
    return standardized_rates(num_k, den_k, np.asarray(weights, float)[None, :], has)


def welch_interval(a, b, level: float = LEVEL) -> dict:
    """mean(a) - mean(b) with Welch's t interval over the values themselves (e.g. one value per seed): standard
    error sqrt(var_a / n_a + var_b / n_b) with sample variances (ddof 1), Welch-Satterthwaite degrees of freedom,
    and the two-sided p-value of Welch's t test. {diff, low, high, df, p}; NaN where a side has fewer than 2 values
    or both variances are 0 (no spread to build an interval from)."""
    from scipy import stats as sps

    a, b = (np.asarray(x, float) for x in (a, b))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    nan = {"diff": float("nan"), "low": float("nan"), "high": float("nan"), "df": float("nan"), "p": float("nan")}
    if len(a) < 2 or len(b) < 2:
        return {**nan, "diff": float(a.mean() - b.mean()) if len(a) and len(b) else float("nan")}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = float(a.mean() - b.mean())
    if va + vb == 0:
        return {**nan, "diff": diff}
    se = float(np.sqrt(va + vb))
    df = float((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)))
    t = float(sps.t.ppf(0.5 + level / 2, df))
    p = float(2 * sps.t.sf(abs(diff) / se, df))
    return {"diff": diff, "low": diff - t * se, "high": diff + t * se, "df": df, "p": p}


def welch_relative_interval(a, b, level: float = LEVEL) -> dict:
    """mean(a) / mean(b) - 1 with a Welch-type interval over the values themselves (one per seed): on the log
    scale, log(m_a / m_b) +- t(df) sqrt(u_a + u_b) with u = s^2 / (n m^2) (the delta method's variance of log m)
    and Welch-Satterthwaite df = (u_a + u_b)^2 / (u_a^2 / (n_a - 1) + u_b^2 / (n_b - 1)), mapped back by
    exp(.) - 1. {relative, low, high, df}; NaN bounds where a side has fewer than 2 values, a mean is not
    positive, or both variances are 0."""
    from scipy import stats as sps

    a, b = (np.asarray(x, float) for x in (a, b))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    out = {"relative": float("nan"), "low": float("nan"), "high": float("nan"), "df": float("nan")}
    if not len(a) or not len(b) or a.mean() <= 0 or b.mean() <= 0:
        return out
    out["relative"] = float(a.mean() / b.mean() - 1)
    if len(a) < 2 or len(b) < 2:
        return out
    ua, ub = a.var(ddof=1) / (len(a) * a.mean() ** 2), b.var(ddof=1) / (len(b) * b.mean() ** 2)
    if ua + ub == 0:
        return out
    df = float((ua + ub) ** 2 / (ua ** 2 / (len(a) - 1) + ub ** 2 / (len(b) - 1)))
    half = float(sps.t.ppf(0.5 + level / 2, df)) * float(np.sqrt(ua + ub))
    log_ratio = float(np.log(a.mean() / b.mean()))
    return {**out, "low": float(np.exp(log_ratio - half) - 1), "high": float(np.exp(log_ratio + half) - 1), "df": df}


def holm(p_values, alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise error `alpha`. The p-values sorted
    ascending are compared with alpha / m, alpha / (m - 1), ...; all up to the first that fails are rejected. NaN
    p-values are never rejected and do not count in m."""
    p = [float(x) for x in p_values]
    valid = sorted((value, i) for i, value in enumerate(p) if not np.isnan(value))
    m = len(valid)
    rejected = [False] * len(p)
    for rank, (value, i) in enumerate(valid):
        if value > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def agreement_scores(human, judge) -> dict:
    """How a judge's labels agree with hand labels on the same sentences (+1 supported, -1 unsupported; a judge's
    0 or None, not checkable, counts as a third category): agreement (share equal), Cohen's kappa, and the
    constant baseline (the share a judge answering 'unsupported' for every sentence would agree on)."""
    human = [int(h) for h in human]
    judge = [0 if j is None else int(np.sign(j)) for j in judge]
    n = len(human)
    if n == 0 or n != len(judge):
        return {"agree": float("nan"), "kappa": float("nan"), "constant": float("nan"), "n": n}
    observed = sum(h == j for h, j in zip(human, judge)) / n
    chance = sum((human.count(c) / n) * (judge.count(c) / n) for c in set(human) | set(judge))
    kappa = 1.0 if chance == 1.0 else (observed - chance) / (1 - chance)
    return {"agree": observed, "kappa": kappa, "constant": human.count(-1) / n, "n": n}


def exact_lower(successes: int, n: int, level: float = LEVEL) -> float:
    """The Clopper-Pearson lower bound of a share successes / n (two-sided `level`): the beta quantile
    B((1 - level) / 2; successes, n - successes + 1); with every trial a success it is ((1 - level) / 2) ** (1 / n).
    Where a bootstrap interval collapses to [1, 1] (no failure to resample), this says how low the share may be.
    0 when successes is 0; NaN when n is 0."""
    from scipy.stats import beta

    if n <= 0:
        return float("nan")
    if successes <= 0:
        return 0.0
    return float(beta.ppf((1 - level) / 2, successes, n - successes + 1))


def agreement_interval(questions, human, judge, n_resamples: int = 2000, rng: np.random.Generator | None = None,
                       level: float = LEVEL) -> dict:
    """`agreement_scores` with percentile intervals from a bootstrap over questions as clusters (every sentence of
    a drawn question moves with it): {agree, kappa, constant, n, and <name>_low / <name>_high for the three}."""
    rng = rng if rng is not None else np.random.default_rng(0)
    point = agreement_scores(human, judge)
    ids = sorted(set(questions))
    if not ids:
        return {**point, **{f"{k}_{s}": float("nan") for k in ("agree", "kappa", "constant") for s in ("low", "high")}}
    index = {q: i for i, q in enumerate(ids)}
    rows = np.array([index[q] for q in questions])
    members = [np.flatnonzero(rows == i) for i in range(len(ids))]
    human, judge = list(human), list(judge)
    draws = {k: [] for k in ("agree", "kappa", "constant")}
    for counts in question_draws(len(ids), n_resamples, rng):
        picked = np.concatenate([np.repeat(members[i], int(c)) for i, c in enumerate(counts) if c])
        scores = agreement_scores([human[k] for k in picked], [judge[k] for k in picked])
        for k in draws:
            draws[k].append(scores[k])
    result = dict(point)
    for k, values in draws.items():
        result[f"{k}_low"], result[f"{k}_high"] = interval(np.array(values, float), level)
    return result
