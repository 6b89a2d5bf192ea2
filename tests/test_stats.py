"""Statistics against values computed by hand (the arithmetic is in each comment)."""

import math

import numpy as np
import pytest

from replaykit.harness.stats import binomial_se, exact_mcnemar, mean_sd, normalised_score, paired_bootstrap


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
    assert normalised_score(0.45, 0.397094, 0.508475) == pytest.approx(0.475000, abs=1e-6)
    assert normalised_score(0.508475, 0.397094, 0.508475) == pytest.approx(1.0)
    assert normalised_score(0.3, 0.3, 0.3) is None
    # minimised metric (NLL): fixed 80, shipped 70, candidate 65 -> (65-80)/(70-80) = 1.5
    assert normalised_score(65, 80, 70) == pytest.approx(1.5)
