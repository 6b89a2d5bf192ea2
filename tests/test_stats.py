"""Statistics against values computed by hand (the arithmetic is in each comment)."""

import math

import numpy as np
import pytest

from replaykit.harness.stats import (
    ZERO_WIDTH,
    binomial_se,
    ci_verdict,
    exact_mcnemar,
    holm,
    interval_reading,
    mean_sd,
    normalisation_undefined,
    normalised_score,
    paired_bootstrap,
    percentile_p_value,
    probability_of_improvement,
)


def test_binomial_se_224_of_413():
    # p = 224/413 = 0.542373; p(1-p) = 0.248205; /413 = 6.00981e-4; sqrt = 0.0245149
    assert binomial_se(224, 413) == pytest.approx(0.0245149, abs=5e-7)
    assert round(binomial_se(224, 413), 5) == 0.02451


def test_binomial_se_edges():
    assert binomial_se(0, 10) == 0.0
    assert binomial_se(5, 10) == pytest.approx(math.sqrt(0.25 / 10))
    with pytest.raises(ValueError):
        binomial_se(0, 0)


def test_mean_sd_by_hand():
    # mean 2.5; squared deviations 2.25+0.25+0.25+2.25 = 5; /3 = 1.6667; sqrt = 1.290994
    out = mean_sd([1, 2, 3, 4])
    assert out == {"n": 4, "mean": 2.5, "sd": pytest.approx(1.290994, abs=1e-6)}
    assert mean_sd([0.7])["sd"] is None


def test_paired_bootstrap_constant_shift_is_exact():
    rng = np.random.default_rng(1)
    b = rng.random(50)
    out = paired_bootstrap(b + 0.25, b, n_boot=500, seed=3)
    assert out["difference"] == pytest.approx(0.25)
    assert out["ci_low"] == pytest.approx(0.25) and out["ci_high"] == pytest.approx(0.25)


def test_paired_bootstrap_matches_normal_approximation():
    # 120 of 400 rows differ by +1, the rest by 0: mean 0.3, SE sqrt(0.3*0.7/400) = 0.022913,
    # so the 95 % interval is about 0.3 -/+ 1.96*0.022913 = [0.2551, 0.3449].
    a = np.array([1.0] * 120 + [0.0] * 280)
    b = np.zeros(400)
    out = paired_bootstrap(a, b, n_boot=20_000, seed=0)
    assert out["difference"] == pytest.approx(0.3)
    assert out["ci_low"] == pytest.approx(0.2551, abs=0.006)
    assert out["ci_high"] == pytest.approx(0.3449, abs=0.006)


def test_paired_bootstrap_rejects_unpaired():
    with pytest.raises(ValueError):
        paired_bootstrap([1, 2], [1])


def test_exact_mcnemar_by_hand():
    # discordant: 8 where only a is right, 2 where only b: p = 2 * (C(10,0)+C(10,1)+C(10,2)) / 2^10
    # = 2 * 56 / 1024 = 0.109375
    a = [True] * 8 + [False] * 2 + [True] * 5
    b = [False] * 8 + [True] * 2 + [True] * 5
    out = exact_mcnemar(a, b)
    assert (out["a_only"], out["b_only"]) == (8, 2)
    assert out["p_value"] == pytest.approx(0.109375)


def test_normalised_score_spec_references():
    # SPEC dpo: fixed start 0.397094, shipped 0.508475; (0.45 - 0.397094) / 0.111381 = 0.475000
    assert normalised_score(0.45, 0.397094, 0.508475, "maximize") == pytest.approx(0.475000, abs=1e-6)
    assert normalised_score(0.508475, 0.397094, 0.508475, "maximize") == pytest.approx(1.0)
    # minimised metric (NLL): fixed 80, shipped 70, candidate 65 -> (65-80)/(70-80) = 1.5
    assert normalised_score(65, 80, 70, "minimize") == pytest.approx(1.5)
    assert normalised_score(80, 80, 70, "minimize") == 0.0 and normalisation_undefined(80, 70, "minimize") is None


@pytest.mark.parametrize(
    "fixed, shipped, direction, relation",
    [
        (0.3, 0.3, "maximize", "equals"),  # 0 / 0
        (0.45, 0.40, "maximize", "is below"),  # tiny soup: 0.35 would read (0.35-0.45)/(0.40-0.45) = 2.0
        (80.0, 80.0, "minimize", "equals"),
        (70.0, 80.0, "minimize", "is above"),  # shipped NLL above the fixed start's: worse
    ],
)
def test_normalised_score_undefined_unless_shipped_is_better(fixed, shipped, direction, relation):
    assert normalised_score(0.35 if direction == "maximize" else 90.0, fixed, shipped, direction) is None
    reason = normalisation_undefined(fixed, shipped, direction)
    assert reason.startswith("normalised score undefined") and f"({shipped:.4f}) {relation} the fixed start" in reason
    with pytest.raises(ValueError):
        normalised_score(0.3, fixed, shipped, "max")


def test_ci_verdict_margins_and_zero_width():
    assert ci_verdict(0.06, 0.2, "maximize", margin=0.05) == "established gain of more than 0.05"
    assert ci_verdict(0.04, 0.2, "maximize", margin=0.05) == "not established (CI reaches +0.05, the margin)"
    assert ci_verdict(-0.2, -0.01, "maximize", margin=0.05) == "established loss"
    # non-inferiority, margin 0.02: a loss of at most 0.02 accepted
    ni = {"hypothesis": "non-inferiority", "margin": 0.02}
    assert ci_verdict(-0.01, 0.03, "maximize", **ni) == "non-inferior (margin 0.02)"
    assert ci_verdict(-0.03, 0.03, "maximize", **ni).startswith("non-inferiority not established (CI reaches -0.02")
    # minimised (NLL), margin 0.5: the candidate's NLL may be at most 0.5 higher
    assert ci_verdict(-1.0, 0.4, "minimize", hypothesis="non-inferiority", margin=0.5) == "non-inferior (margin 0.5)"
    assert ci_verdict(-1.0, 0.6, "minimize", hypothesis="non-inferiority", margin=0.5).startswith("non-inferiority not")
    assert ci_verdict(-3.0, -1.0, "minimize", margin=0.5) == "established gain of more than 0.5"
    with pytest.raises(ValueError):
        ci_verdict(0.0, 1.0, "maximize", hypothesis="non-inferiority")  # needs a margin > 0
    # a zero-width interval (every replicate equal) establishes nothing, on either side of 0
    assert ci_verdict(-0.05, -0.05, "maximize") == ZERO_WIDTH == ci_verdict(0.25, 0.25, "minimize")
    assert ZERO_WIDTH.startswith("not established")


def test_interval_reading_draws_no_verdict():
    # the tiny soup's t-interval over identical seeds: [-0.05, -0.05] once read "established loss"
    assert interval_reading(-0.05, -0.05, "maximize").startswith("zero width: every seed gave the same difference")
    assert interval_reading(-0.2, -0.1, "maximize").startswith("below 0 (the loss side)")
    assert interval_reading(-0.2, -0.1, "minimize").startswith("below 0 (the gain side)")
    assert interval_reading(-0.2, 0.1, "maximize") == "spans 0"
    for text in (interval_reading(-0.2, -0.1, "maximize"), interval_reading(0.0, 0.0, "maximize")):
        assert "established" not in text


def test_percentile_p_value_by_hand():
    r = [0.0, 1.0, 2.0, 3.0, 4.0]  # Q(q) = 4q
    # above 0.5: sup{q: 4q <= 0.5} = 0.125 -> p = 0.25; below 3.5: inf{q: 4q >= 3.5} = 0.875 -> p = 0.25
    assert percentile_p_value(r, 0.5, "above") == pytest.approx(0.25)
    assert percentile_p_value(r, 3.5, "below") == pytest.approx(0.25)
    assert percentile_p_value(r, -1.0, "above") == 0.0 and percentile_p_value(r, 5.0, "below") == 0.0
    assert percentile_p_value(r, 4.0, "above") == 1.0 and percentile_p_value(r, 0.0, "below") == 1.0
    assert percentile_p_value(r, 2.0, "above") == 1.0  # sup q = 0.5 -> 2 * 0.5


def test_percentile_p_value_agrees_with_the_interval():
    # a different method: the interval itself (numpy's quantiles) at many levels and thresholds
    rng = np.random.default_rng(5)
    replicates = np.round(rng.normal(0.1, 0.05, 999), 3)  # rounded: ties and flat stretches
    for threshold in (-0.05, 0.0, 0.02, 0.05, 0.1, 0.2):
        p_above, p_below = (percentile_p_value(replicates, threshold, side) for side in ("above", "below"))
        for alpha in np.linspace(0.001, 0.5, 200):
            low, high = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
            assert (low > threshold) == (p_above < alpha), (threshold, alpha)
            assert (high < threshold) == (p_below < alpha), (threshold, alpha)


def test_holm_three_candidates_by_hand():
    # sorted 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> running max 0.06)
    out = holm([0.01, 0.04, 0.03], 0.05)
    assert out["adjusted"] == pytest.approx([0.03, 0.06, 0.06]) and out["reject"] == [True, False, False]
    # step-down by hand: 0.01 <= 0.05/3, 0.02 <= 0.05/2, 0.03 <= 0.05/1: all three
    assert holm([0.03, 0.01, 0.02], 0.05) == {
        "m": 3,
        "alpha": 0.05,
        "adjusted": pytest.approx([0.04, 0.03, 0.04]),
        "reject": [True, True, True],
    }
    # a missing p-value counts as 1; adjusted values never exceed 1
    assert holm([None, 0.6], 0.05)["adjusted"] == [1.0, 1.0]
    assert holm([0.04], 0.05)["reject"] == [True] and holm([0.05], 0.05)["reject"] == [False]  # strict


def test_probability_of_improvement_by_hand():
    # candidate 1, 2, 3 vs shipped 2, 2, 0: wins 1 (1 > 0) + 2 (2 > 0, two ties of 1/2) + 3 = 6 of 9
    out = probability_of_improvement([1.0, 2.0, 3.0], [2.0, 2.0, 0.0], "maximize", n_boot=200)
    assert out["value"] == pytest.approx(6 / 9) and out["pairs"] == 9
    # minimised: the same pairs from the other side, 3 of 9 (ties stay 1/2)
    assert probability_of_improvement([1.0, 2.0, 3.0], [2.0, 2.0, 0.0], "minimize", n_boot=200)["value"] == (
        pytest.approx(3 / 9)
    )
    # runs that do not depend on the seed: 1 with a zero-width interval
    same = probability_of_improvement([0.5, 0.5], [0.4, 0.4], "maximize", n_boot=100)
    assert (same["value"], same["ci_low"], same["ci_high"]) == (1.0, 1.0, 1.0)


def test_probability_of_improvement_bootstrap_distribution():
    # candidate 1, 3 vs shipped 2: a replicate is the share of 3s among 2 runs drawn, so 0, 1/2
    # or 1 with probabilities 1/4, 1/2, 1/4 (cumulative 0.25, 0.75, 1). Quantiles 0.3 and 0.7
    # (a 40 % interval) lie inside the middle step, 0.2 and 0.8 (60 %) outside it; with 4,000
    # replicates the empirical shares are within 0.03 (4.4 SEs of a share 1/4) of these, which
    # keeps each quantile on its step.
    def ci(confidence):
        out = probability_of_improvement([1.0, 3.0], [2.0], "maximize", n_boot=4000, seed=3, confidence=confidence)
        return out["value"], out["ci_low"], out["ci_high"]

    assert ci(0.95) == (0.5, 0.0, 1.0)
    assert ci(0.4) == (0.5, 0.5, 0.5)
    assert ci(0.6) == (0.5, 0.0, 1.0)
