"""Uncertainty and comparison statistics used by every task's final summary."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


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


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 10_000,
                     seed: int = 0, confidence: float = 0.95, weights: Sequence[float] | None = None,
                     strata: Sequence[str] | None = None) -> dict:
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
    return {"difference": float(contrib.sum()), "ci_low": float(low), "ci_high": float(high),
            "confidence": confidence, "n": int(a.size), "n_boot": n_boot, "seed": seed, "method": method}


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


def normalised_score(value: float, fixed_start: float, shipped: float) -> float | None:
    """``(value - fixed_start) / (shipped - fixed_start)``: fixed start = 0, shipped = 1.

    ``None`` when the two references are equal (the scale is undefined). The same formula
    serves either metric direction: a minimised metric's shipped value is below its fixed
    start, so the ratio is still 1 at the shipped value and positive for improvements.
    """
    span = shipped - fixed_start
    if span == 0:
        return None
    return (value - fixed_start) / span
