"""Uncertainty and comparison statistics used by every task's final summary."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def decimal(value: float, digits: int = 4, signed: bool = False) -> str:
    """``value`` with ``digits`` decimals, never a negative zero: a value that rounds to zero
    (``-0.0``, ``-3e-17``) reads ``0.0000`` (``+0.0000`` when ``signed``), as a minimised metric's
    oracle gap of ``-1 * 0.0`` would otherwise read ``-0.0000``."""
    rounded = round(float(value), digits) + 0.0  # -0.0 + 0.0 is +0.0 (IEEE 754)
    return f"{rounded:{'+' if signed else ''}.{digits}f}"


def binomial_se(successes: int, n: int) -> float:
    """Standard error of a proportion, ``sqrt(p (1 - p) / n)`` with ``p = successes / n``.

    Example: 224/413 -> 0.02451. Raises ValueError when ``n < 1``.
    """
    if n < 1:
        raise ValueError("binomial_se needs n >= 1")
    p = successes / n
    return math.sqrt(p * (1.0 - p) / n)


def mean_se(values: Sequence[float]) -> float:
    """Standard error of the mean, ``sd(ddof=1) / sqrt(n)``; 0 for fewer than 2 values."""
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return 0.0
    return float(values.std(ddof=1) / math.sqrt(values.size))


def mean_sd(values: Sequence[float]) -> dict:
    """``{n, mean, sd}`` with the sample SD (ddof=1; ``None`` when n < 2)."""
    values = np.asarray(values, dtype=float)
    return {
        "n": int(values.size),
        "mean": float(values.mean()) if values.size else None,
        "sd": float(values.std(ddof=1)) if values.size > 1 else None,
    }


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    n_boot: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    weights: Sequence[float] | None = None,
    strata: Sequence[str] | None = None,
) -> dict:
    """Percentile bootstrap CI of ``sum_i w_i (a_i - b_i)`` resampling rows (the same rows in both).

    Without ``weights`` (``w_i = 1/n``) the statistic is ``mean(a - b)``. With ``strata``, rows
    are resampled within each stratum, so each stratum keeps its size -- and a metric whose
    rows are weighted by stratum (e.g. RewardBench's subset weights) is recomputed exactly on
    every resample.

    Args:
        a, b: per-row scores of two systems on the same rows, length n >= 1.
        n_boot: bootstrap resamples.
        seed: seed of the resampling generator (numpy PCG64).
        confidence: two-sided level of the interval.
        weights: per-row weight of the statistic (equal within a stratum).
        strata: per-row stratum label.

    Returns:
        ``{difference, ci_low, ci_high, confidence, n, n_boot, seed, method}``.

    Raises:
        ValueError: different lengths or no rows.

    Source: Efron & Tibshirani (1993), ch. 13 (percentile interval) and sec. 3.6 (stratified
    resampling); paired resampling as in Koehn (2004), "Statistical significance tests for
    machine translation evaluation".
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_bootstrap needs two equal-length, non-empty arrays ({a.shape} vs {b.shape})")
    w = np.full(a.size, 1.0 / a.size) if weights is None else np.asarray(weights, dtype=float)
    labels = np.zeros(a.size, dtype=int) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
    if w.shape != a.shape or labels.shape != a.shape:
        raise ValueError("paired_bootstrap: weights and strata need one value per row")
    contrib = w * (a - b)
    rng = np.random.default_rng(seed)
    stats = np.zeros(n_boot)
    for label in np.unique(labels):
        members = contrib[labels == label]
        idx = rng.integers(0, members.size, size=(n_boot, members.size))
        stats += members[idx].sum(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    method = "paired percentile bootstrap over rows" + (", stratified" if strata is not None else "")
    return {
        "difference": float(contrib.sum()),
        "ci_low": float(low),
        "ci_high": float(high),
        "confidence": confidence,
        "n": int(a.size),
        "n_boot": n_boot,
        "seed": seed,
        "method": method,
    }


def exact_mcnemar(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """Exact McNemar test for paired binary outcomes (two-sided binomial test on the
    discordant pairs, p = 1/2). Returns ``{a_only, b_only, p_value}``.

    Source: McNemar (1947); exact form as a sign test, e.g. Fagerland et al. (2013).
    """
    from scipy.stats import binomtest

    a = np.asarray(a, dtype=bool)
    b = np.asarray(b, dtype=bool)
    a_only = int((a & ~b).sum())
    b_only = int((~a & b).sum())
    discordant = a_only + b_only
    p = 1.0 if discordant == 0 else float(binomtest(a_only, discordant, 0.5).pvalue)
    return {"a_only": a_only, "b_only": b_only, "p_value": p, "method": "exact McNemar (binomial on discordant pairs)"}


DIRECTIONS = ("maximize", "minimize")
WORDS = {"maximize": "maximised", "minimize": "minimised"}


def _sign(direction: str) -> float:
    """+1 for a maximised metric, -1 for a minimised one (a gain is ``sign × difference > 0``).
    Raises ValueError for another direction."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    return 1.0 if direction == "maximize" else -1.0


def normalisation_undefined(fixed_start: float, shipped: float, direction: str) -> str | None:
    """Why ``(value - fixed_start) / (shipped - fixed_start)`` is no score here, or None when
    it is one: it needs the shipped reference to be *better* than the fixed start in the
    metric's direction. When the shipped reference equals the fixed start the scale is
    0 / 0; when it is worse the scale is reversed, and a candidate worse than both would read
    above 1 (tiny soup: fixed start 0.45, shipped 0.40, a candidate at 0.35 would get 2.0).

    Raises ValueError for an unknown direction.
    """
    gain = _sign(direction) * (shipped - fixed_start)
    if gain > 0:
        return None
    relation = "equals" if gain == 0 else ("is below" if direction == "maximize" else "is above")
    return (
        f"normalised score undefined: the shipped reference ({decimal(shipped)}) {relation} the fixed start "
        f"({decimal(fixed_start)}) of this {WORDS[direction]} metric, so fixed start = 0 and shipped = 1 is no scale "
        "on which higher means better"
    )


def normalised_score(value: float, fixed_start: float, shipped: float, direction: str) -> float | None:
    """``(value - fixed_start) / (shipped - fixed_start)``: fixed start = 0, shipped = 1.

    Defined only when the shipped reference is better than the fixed start in the metric's
    ``direction`` (:func:`normalisation_undefined` says why not; then None). Either direction
    uses the same ratio: for a minimised metric both differences are negative for an
    improvement, so the ratio is still 1 at the shipped value and above 1 beyond it.
    Examples: maximise, fixed 0.397094, shipped 0.508475, value 0.45 -> 0.475; minimise,
    fixed 80, shipped 70, value 65 -> 1.5; maximise, fixed 0.45, shipped 0.40 -> None.
    Raises ValueError for an unknown direction.
    """
    if normalisation_undefined(fixed_start, shipped, direction):
        return None
    return (value - fixed_start) / (shipped - fixed_start)


# --- Matched ablation: candidate vs shipped over K seeds and n shared rows (issue 16) ---

Z_975 = 1.959963984540054  # standard normal 97.5 % quantile (two-sided 95 %)
Z_80 = 0.8416212335729143  # standard normal 80 % quantile (power 0.8)


def _row_groups(n: int, weights, strata, clusters) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Resampling units of :func:`hierarchical_bootstrap`: per stratum, the cluster ids in it;
    each cluster's row indices; each stratum's total weight ``W_h = sum_{i in h} w_i``."""
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=float)
    s = np.zeros(n, dtype=int) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
    c = np.arange(n) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    if w.shape != (n,) or s.shape != (n,) or c.shape != (n,):
        raise ValueError("hierarchical_bootstrap: weights, strata and clusters need one value per row")
    stratum_of_cluster = np.full(c.max() + 1, -1)
    for cluster, stratum in zip(c, s):
        if stratum_of_cluster[cluster] not in (-1, stratum):
            raise ValueError("hierarchical_bootstrap: a cluster spans two strata")
        stratum_of_cluster[cluster] = stratum
    totals = []
    for h in range(s.max() + 1):
        if not np.allclose(w[s == h], w[s == h][0], rtol=1e-9, atol=0.0):
            raise ValueError("hierarchical_bootstrap: weights must be equal within a stratum")
        totals.append(w[s == h].sum())
    groups = [np.flatnonzero(stratum_of_cluster == h) for h in range(s.max() + 1)]
    return groups, c, np.asarray(totals)


def _two_stage_replicates(sums, sizes, groups, totals, n_boot: int, seed: int, chunk: int):
    """The replicates of :func:`hierarchical_bootstrap` (``sums[k, c]``: seed k's summed
    differences in cluster c; ``sizes[c]``: its rows): per replicate, the statistic with seeds
    and rows drawn, and with the rows alone drawn (every seed kept)."""
    k = sums.shape[0]
    rng = np.random.default_rng(seed)
    stats, row_only = [], []
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        t = np.zeros((m, k))  # t[r, k]: seed k's statistic on replicate r's rows
        for w_h, g in zip(totals, groups):
            counts = rng.multinomial(g.size, np.full(g.size, 1.0 / g.size), size=m)
            t += w_h * (counts @ sums[:, g].T) / (counts @ sizes[g])[:, None]
        seeds = rng.multinomial(k, np.full(k, 1.0 / k), size=m)
        stats.append((seeds * t).sum(1) / k)
        row_only.append(t.mean(1))
    return np.concatenate(stats), np.concatenate(row_only)


def hierarchical_bootstrap(
    a,
    b,
    n_boot: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    weights=None,
    strata=None,
    clusters=None,
    chunk: int = 256,
    keep_replicates: bool = False,
) -> dict:
    """Two-stage percentile bootstrap CI of the mean over seeds of ``sum_i w_i (a_ki - b_ki)``.

    Data: ``a[k, i]`` is the candidate's score of row ``i`` in its replay with seed ``k``,
    ``b[k, i]`` the shipped recipe's, for K seeds and the same n rows. The statistic is
    ``D = (1/K) sum_k T_k`` with ``T_k = sum_h W_h mean_{i in h}(a_ki - b_ki)`` (``W_h``: the
    total weight of stratum ``h``; one stratum and ``w_i = 1/n`` by default, so ``T_k`` is
    the mean row difference of seed k).

    Which rows are paired, and why: ``a[k, i]`` with ``b[k, i]`` -- the same row scored by the
    candidate and the shipped recipe trained with the same seed. Both systems see every row,
    so a row's difficulty cancels in ``a - b`` (the paired design of
    :func:`paired_bootstrap`); matching the seed number is only a fixed pairing of two
    independent replays (any fixed matching gives the same ``D``).

    One replicate: stage 1 draws K seeds with replacement; stage 2 draws the rows -- clusters
    with replacement within each stratum, each stratum keeping its cluster count -- and the
    *same* row draw serves every seed of the replicate, because all seeds are scored on the
    same rows (seeds and rows are crossed, not nested). The replicate's statistic is the
    mean over the drawn seeds of ``sum_h W_h (sum of drawn rows' differences in h) / (number
    of drawn rows in h)``. Under ``d_ki = mu + s_k + r_i + e_ki`` the variance of D is
    ``var_s / K + var_r / n + var_e / (K n)``; this scheme estimates the first two terms
    (each with the plug-in factor (K-1)/K resp. (n-1)/n) and ``var_e / (K n)`` about twice,
    which is small when n is large (Owen 2007, "The pigeonhole bootstrap"). With few seeds the
    seed term is underestimated (factor (K-1)/K, normal tails): read it beside
    :func:`t_interval`. Resampling each seed's rows independently instead (a nested scheme)
    would understate ``var_r / n`` K-fold.

    Args:
        a, b: K × n arrays (K >= 1 seeds, n >= 1 rows, row i the same row in every seed).
        n_boot: replicates; seed: seed of the generator (numpy PCG64); confidence: two-sided.
        weights, strata: as in :func:`paired_bootstrap` (rm: RewardBench subsets, the weighted
            score recomputed); clusters: per-row labels drawn whole (soup: an image's class),
            each inside one stratum.
        chunk: replicates drawn at once (memory ``chunk × clusters``).
        keep_replicates: also return the replicates (``replicates``, an array of n_boot), e.g.
            for :func:`percentile_p_value`.

    Returns:
        ``{difference, per_seed, ci_low, ci_high, se, row_variance, seed_variance, confidence,
        k, n, clusters, n_boot, seed, method}``: ``per_seed`` the K values ``T_k``; ``se`` the
        SD of the replicates; ``row_variance`` the variance of ``mean_k T_k`` when only the
        rows are resampled (stage 2 alone); ``seed_variance`` the sample variance (ddof 1) of
        the ``T_k`` (None when K = 1).

    Raises:
        ValueError: shapes differ or are empty, a weight differs within a stratum, a cluster
        spans two strata.

    Source: Davison & Hinkley (1997), sec. 3.8 (two-stage resampling of hierarchical data);
    Owen (2007), Ann. Appl. Stat. 1(2) (crossed random effects); Efron & Tibshirani (1993)
    ch. 13 (percentile interval).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 2 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"hierarchical_bootstrap needs two equal K × n arrays ({a.shape} vs {b.shape})")
    k, n = a.shape
    groups, cluster_of_row, totals = _row_groups(n, weights, strata, clusters)
    n_clusters = cluster_of_row.max() + 1
    sums = np.zeros((k, n_clusters))
    np.add.at(sums.T, cluster_of_row, (a - b).T)  # sums[k, c] = sum of seed k's differences in cluster c
    sizes = np.bincount(cluster_of_row, minlength=n_clusters).astype(float)
    per_seed = sum(w_h * sums[:, g].sum(1) / sizes[g].sum() for w_h, g in zip(totals, groups))
    stats, row_only = _two_stage_replicates(sums, sizes, groups, totals, n_boot, seed, chunk)
    kinds = "".join(text for text, on in ((", clustered", clusters), (", stratified", strata)) if on is not None)
    method = "two-stage percentile bootstrap: seeds, then rows shared by all seeds" + kinds
    out = {**_interval(stats, per_seed, confidence), "row_variance": float(row_only.var(ddof=1))}
    out = {**out, "k": k, "n": n, "clusters": int(n_clusters), "n_boot": n_boot, "seed": seed, "method": method}
    return {**out, "replicates": stats} if keep_replicates else out


def _interval(stats: np.ndarray, per_seed: np.ndarray, confidence: float) -> dict:
    """The percentile interval and SD of the replicates ``stats``, with the per-seed values."""
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    k = len(per_seed)
    return {
        "difference": float(per_seed.mean()),
        "per_seed": [float(v) for v in per_seed],
        "ci_low": float(low),
        "ci_high": float(high),
        "se": float(stats.std(ddof=1)),
        "seed_variance": float(per_seed.var(ddof=1)) if k > 1 else None,
        "confidence": confidence,
    }


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict | None:
    """Student-t interval of the mean of K independent values (here: per-seed differences).

    ``mean ± t_{K-1, (1+confidence)/2} · sd / sqrt(K)`` with the sample SD (ddof 1). It sees
    the rows only through each seed's value, so the row sampling shared by all seeds is not in
    it. Returns ``{mean, ci_low, ci_high, sd, k, df, confidence}``, or None when K < 2.

    Example: [1, 2, 3] -> mean 2, sd 1, t_{2, 0.975} = 4.302653 -> [-0.484138, 4.484138].
    Source: Student (1908); any statistics text.
    """
    from scipy.stats import t as student_t

    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return None
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    half = float(student_t.ppf((1.0 + confidence) / 2.0, values.size - 1)) * sd / math.sqrt(values.size)
    return {
        "mean": mean,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "sd": sd,
        "k": int(values.size),
        "df": int(values.size - 1),
        "confidence": confidence,
    }


HYPOTHESES = ("superiority", "non-inferiority")
ZERO_WIDTH = "not established (zero-width interval: no variation was observed, so nothing to judge it against)"


def decision_threshold(direction: str, hypothesis: str = "superiority", margin: float = 0.0) -> float:
    """The difference (candidate − shipped, metric units) the CI must clear: ``+margin`` in the
    gain direction for superiority, ``-margin`` (a loss of at most the margin) for
    non-inferiority. Example: minimise, non-inferiority, margin 0.5 -> +0.5 (an NLL at most
    0.5 higher). Raises ValueError for an unknown direction or hypothesis, a negative margin,
    or non-inferiority without a positive margin.

    Source: the margin forms of ICH E9 / E10 (superiority and non-inferiority trials), e.g.
    Piaggio et al. (2012), JAMA 308(24), "Reporting of noninferiority and equivalence trials".
    """
    sign = _sign(direction)
    if hypothesis not in HYPOTHESES:
        raise ValueError(f"hypothesis must be one of {', '.join(HYPOTHESES)}, got {hypothesis!r}")
    if margin < 0 or (hypothesis == "non-inferiority" and margin <= 0):
        raise ValueError(f"margin must be >= 0 (> 0 for non-inferiority), got {margin!r}")
    return sign * (margin if hypothesis == "superiority" else -margin)


def ci_verdict(
    ci_low: float, ci_high: float, direction: str, *, hypothesis: str = "superiority", margin: float = 0.0
) -> str:
    """The verdict an interval of candidate − shipped supports, in words.

    Superiority (margin m >= 0): ``established gain`` when the whole CI is beyond ``+m`` in the
    gain direction (above for a maximised metric, below for a minimised one), ``established
    loss`` when it is wholly on the loss side of 0, else ``not established (CI spans 0)`` (or
    ``... reaches the margin``). Non-inferiority (margin m > 0): ``non-inferior (margin m)`` when
    the CI excludes losses of m or more, else ``non-inferiority not established``. A CI touching
    the threshold does not exclude it. A zero-width CI (every replicate equal: no variation
    seen across seeds or rows) establishes nothing: :data:`ZERO_WIDTH`.
    Raises ValueError as :func:`decision_threshold`.
    """
    sign, theta = _sign(direction), decision_threshold(direction, hypothesis, margin)
    low, high = sorted((sign * ci_low, sign * ci_high))  # in gain units: larger is better
    if ci_low == ci_high:
        return ZERO_WIDTH
    if hypothesis == "non-inferiority":
        if low > sign * theta:
            return f"non-inferior (margin {margin:g})"
        return f"non-inferiority not established (CI reaches {theta:+g}, a loss of the margin {margin:g})"
    if low > sign * theta:
        return "established gain" if margin == 0 else f"established gain of more than {margin:g}"
    if high < 0:
        return "established loss"
    return "not established (CI spans 0)" if margin == 0 else f"not established (CI reaches {theta:+g}, the margin)"


def interval_reading(ci_low: float, ci_high: float, direction: str) -> str:
    """Where a secondary interval (the t-interval over seeds) lies, in words that draw no verdict
    of their own (the verdict is the decision interval's): ``above 0``, ``below 0``, ``spans 0``
    or, for a zero-width interval, why it holds no uncertainty. The gain side is named
    (``gain side`` / ``loss side``) from ``direction``. Raises ValueError for another direction."""
    sign = _sign(direction)
    if ci_low == ci_high:
        return (
            "zero width: every seed gave the same difference, and a t-interval holds no rows' "
            "variance, so it says nothing either way"
        )
    if ci_low > 0 or ci_high < 0:
        side = "gain" if sign * ci_low > 0 else "loss"
        return f"{'above' if ci_low > 0 else 'below'} 0 (the {side} side); the verdict is the bootstrap interval's"
    return "spans 0"


def percentile_p_value(replicates: Sequence[float], threshold: float, side: str) -> float:
    """The p-value that the percentile interval of ``replicates`` inverts: the least α at which
    the two-sided level-(1 − α) interval (numpy's linear quantiles) lies wholly above
    ``threshold`` (``side="above"``) or wholly below it (``"below"``), capped at 1.

    Above: ``p = 2 · sup{q : Q(q) <= threshold}`` with ``Q`` the interpolated quantile
    function, so ``Q(α/2) > threshold`` exactly when ``p < α``; below: ``p = 2 · (1 − inf{q :
    Q(q) >= threshold})``. So a verdict read from the interval and one read from ``p < α``
    agree, and :func:`holm` can adjust ``p`` for several comparisons.
    Example: replicates 0, 1, 2, 3, 4 (Q(q) = 4q), threshold 0.5, above -> q = 0.125, p = 0.25.

    Source: Efron & Tibshirani (1993), sec. 15.4 (achieved significance level from a bootstrap
    confidence interval). Raises ValueError for another side or no replicates.
    """
    s = np.sort(np.asarray(replicates, dtype=float))
    if s.size == 0 or side not in ("above", "below"):
        raise ValueError(f"percentile_p_value needs replicates and side 'above' or 'below', got {side!r}")
    last = s.size - 1
    if side == "above":
        if threshold < s[0]:
            return 0.0
        j = int(np.searchsorted(s, threshold, side="right")) - 1  # s[j] <= threshold < s[j + 1]
        if j >= last:  # every replicate at or below the threshold
            return 1.0
        return min(1.0, 2.0 * (j + (threshold - s[j]) / (s[j + 1] - s[j])) / last)
    if threshold > s[-1]:
        return 0.0
    k = int(np.searchsorted(s, threshold, side="left"))  # s[k - 1] < threshold <= s[k]
    if k == 0:  # every replicate at or above the threshold
        return 1.0
    return min(1.0, 2.0 * (1.0 - (k - 1 + (threshold - s[k - 1]) / (s[k] - s[k - 1])) / last))


def holm(p_values: Sequence[float | None], alpha: float) -> dict:
    """Holm's step-down adjustment of ``m`` p-values for ``m`` comparisons.

    Sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted values are ``p~_(i) = min(1,
    max_{j <= i} (m − j + 1) p_(j))``; comparison i is rejected (its verdict stands) when
    ``p~_i < alpha`` (strict, as a CI touching its threshold excludes nothing), which rejects
    exactly ``H_(1) .. H_(k−1)`` with k the first i where ``p_(i) >= alpha / (m − i + 1)``. The
    family-wise error rate is at most alpha whatever the dependence between comparisons (here
    they share the shipped runs). A missing p-value (a comparison with no verdict) counts as 1.

    Returns ``{m, alpha, adjusted, reject}`` in the input order. Example: 0.01, 0.04, 0.03 at
    0.05 -> adjusted 0.03, 0.06, 0.06; only the first is rejected.
    Source: Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J.
    Statist. 6(2), 65-70.
    """
    p = np.array([1.0 if v is None else float(v) for v in p_values])
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return {
        "m": int(m),
        "alpha": alpha,
        "adjusted": [float(v) for v in adjusted],
        "reject": [bool(v < alpha) for v in adjusted],
    }


def probability_of_improvement(
    candidate: Sequence[float],
    shipped: Sequence[float],
    direction: str,
    n_boot: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """P(candidate better than shipped) over runs, with a percentile bootstrap CI.

    ``P = (1 / (K M)) sum_i sum_j S(x_i, y_j)`` over every pair of a candidate run ``x_i`` (K)
    and a shipped run ``y_j`` (M), ``S = 1`` when ``x_i`` is better in ``direction``, ``1/2`` on
    a tie, 0 otherwise: the Mann-Whitney U statistic over K M, the chance that a random
    candidate replay beats a random shipped one. The pairs are every (i, j), not only the
    same-seed ones: two replays with the same seed are independent draws (see
    :func:`hierarchical_bootstrap`). The CI resamples the K candidate runs and the M shipped runs
    independently, with replacement. Example: candidate 1, 2, 3 and shipped 2, 2, 0
    (maximise): 1 + 2 + 3 = 6 of 9 pairs -> 0.6667. Runs that do not depend on the seed give
    0, 1/2 or 1 with a zero-width CI.

    Returns ``{value, ci_low, ci_high, pairs, n_boot, seed, confidence, method}``; raises
    ValueError for an empty side or an unknown direction.
    Source: Agarwal et al. (2021), "Deep reinforcement learning at the edge of the statistical
    precipice", NeurIPS, sec. 4 (probability of improvement; rliable's stratified bootstrap).
    """
    sign = _sign(direction)
    x, y = sign * np.asarray(candidate, dtype=float), sign * np.asarray(shipped, dtype=float)
    if x.size == 0 or y.size == 0:
        raise ValueError("probability_of_improvement needs at least one run on each side")
    wins = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])  # K × M
    rng = np.random.default_rng(seed)
    cx = rng.multinomial(x.size, np.full(x.size, 1.0 / x.size), size=n_boot)
    cy = rng.multinomial(y.size, np.full(y.size, 1.0 / y.size), size=n_boot)
    stats = np.einsum("rk,km,rm->r", cx, wins, cy) / (x.size * y.size)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return {
        "value": float(wins.mean()),
        "ci_low": float(low),
        "ci_high": float(high),
        "pairs": int(x.size * y.size),
        "n_boot": n_boot,
        "seed": seed,
        "confidence": confidence,
        "method": "Mann-Whitney P(X > Y) over all run pairs; percentile bootstrap of runs per side",
    }


def detectable_difference(
    seed_variance: float | None,
    row_variance: float,
    k: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float | None:
    """Minimal detectable difference of a two-sided level-``alpha`` test at ``power``:
    ``(z_{1-alpha/2} + z_power) · sqrt(seed_variance / k + row_variance)``.

    ``seed_variance``: variance of one seed's difference (sample variance over seeds);
    ``row_variance``: variance of the seed-averaged difference from the shared rows (it does
    not shrink with more seeds). Normal approximation; None when the seed variance is unknown
    (one seed). Example: 0.01, 0.0004, k 4 -> 2.801585 · sqrt(0.0029) = 0.150869.
    Source: e.g. Cohen (1988), ch. 2 (power of a z test).
    """
    from scipy.stats import norm

    if seed_variance is None:
        return None
    z = float(norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power))
    return z * math.sqrt(seed_variance / k + row_variance)


def seeds_for_power(
    difference: float,
    seed_variance: float | None,
    row_variance: float,
    alpha: float = 0.05,
    power: float = 0.8,
    max_seeds: int = 10_000,
) -> int | None:
    """Fewest seeds K whose :func:`detectable_difference` is at most ``|difference|``:
    ``K = ceil(seed_variance / ((|difference| / z)^2 - row_variance))``, z = z_{1-alpha/2} +
    z_power, at least 2 (a t-interval needs two).

    None when it cannot be reached by seeds alone: the seed variance is unknown (one seed),
    the difference is 0, or the rows' variance alone already exceeds ``(difference / z)^2``
    (more rows are needed), or K would exceed ``max_seeds``. Normal approximation with the
    observed variances taken as the truth (a planning figure, not a guarantee).
    Example: d 0.2, seed variance 0.01, row variance 0.0004, z 2.801585 ->
    0.01 / (0.0050963 - 0.0004) = 2.129 -> 3 seeds.
    """
    from scipy.stats import norm

    if seed_variance is None or difference == 0:
        return None
    z = float(norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power))
    room = (abs(difference) / z) ** 2 - row_variance
    if room <= 0:
        return None
    needed = max(2, math.ceil(seed_variance / room - 1e-12))
    return needed if needed <= max_seeds else None
