"""RewardBench v1 scoring against a table computed by hand, and the weighted paired bootstrap."""

import math

import numpy as np
import pytest

from replaykit.harness.stats import paired_bootstrap
from replaykit.tasks.rm import rewardbench


def rows(subset, n, correct):
    return [{"subset": subset, "correct": int(i < correct)} for i in range(n)]


# Hand table. Fixed counts c_k from allenai/reward-bench rewardbench/constants.py.
#   Chat:      alpacaeval-easy 3/4 (c=100), mt-bench-easy 1/2 (c=28)
#              -> (100 * 0.75 + 28 * 0.5) / 128 = 89 / 128            = 69.53125 %
#   Chat Hard: llmbar-natural 2/2 (c=100)                             = 100 %
#   Reasoning: math-prm 1/4 (c=984, not 4), hep-python 1/2 (c=164)
#              -> (984 * 0.25 + 164 * 0.5) / 1148 = 328 / 1148 = 2/7  = 28.571428... %
#   Safety:    xstest-should-respond 1/1 (c=154), donotanswer 0/1 (c=136)
#              -> 154 / 290                                           = 53.103448... %
#   score = (69.53125 + 100 + 28.5714286 + 53.1034483) / 4            = 62.8015317 %
#   Var(Chat) = (100/128)^2 * .75*.25/4 + (28/128)^2 * .5*.5/2        = 0.0345916748
#   Var(Reasoning) = (984/1148)^2 * .75*.25/4 + (164/1148)^2 * .25/2  = 0.0369897959
#   Var(Chat Hard) = Var(Safety) = 0 (p = 1 or 0 in every subset)
#   SE = 100 * sqrt(0.0345916748 + 0.0369897959) / 4                  = 6.6886784 %
HAND = (
    rows("alpacaeval-easy", 4, 3)
    + rows("mt-bench-easy", 2, 1)
    + rows("llmbar-natural", 2, 2)
    + rows("math-prm", 4, 1)
    + rows("hep-python", 2, 1)
    + rows("xstest-should-respond", 1, 1)
    + rows("donotanswer", 1, 0)
)


def test_score_matches_the_hand_table():
    result = rewardbench.score(HAND)
    assert result["sections"]["Chat"]["score"] == pytest.approx(69.53125)
    assert result["sections"]["Chat Hard"]["score"] == pytest.approx(100.0)
    assert result["sections"]["Reasoning"]["score"] == pytest.approx(200 / 7)
    assert result["sections"]["Safety"]["score"] == pytest.approx(15400 / 290)
    assert result["score"] == pytest.approx(62.80153171)
    assert result["se"] == pytest.approx(6.6886784, abs=1e-6)
    assert result["sections"]["Chat"]["se"] == pytest.approx(100 * math.sqrt(0.0345916748), abs=1e-6)
    assert result["sections"]["Safety"]["se"] == 0.0
    # the unweighted accuracy (9/16) differs: the fixed counts, not the rows, set the weights
    assert sum(r["correct"] for r in HAND) / len(HAND) == pytest.approx(0.5625)


def test_row_weights_reproduce_the_score():
    result = rewardbench.score(HAND)
    total = 100 * sum(result["weights"][r["subset"]] * r["correct"] for r in HAND)
    assert total == pytest.approx(result["score"])
    # math-prm: one row of 4 in a section weighing 984 / 1148, a quarter of the score
    assert result["weights"]["math-prm"] == pytest.approx(984 / 1148 / 4 / 4)


def test_reference_quirks_are_kept():
    counts = rewardbench.EXAMPLE_COUNTS
    assert counts["math-prm"] == 984  # 447 rows in the file
    # the reference's XSTest counts are each other's row counts (154 should-refuse rows, 250 should-respond)
    assert (counts["xstest-should-refuse"], counts["xstest-should-respond"]) == (250, 154)
    assert sum(len(v) for v in rewardbench.SUBSET_MAPPING.values()) == len(counts) == 23
    # a section with no rows scores 0 and still counts in the mean of 4
    only_chat = rewardbench.score(rows("alpacaeval-easy", 2, 2))
    assert only_chat["score"] == pytest.approx(25.0)
    assert only_chat["sections"]["Safety"] == {"score": 0.0, "se": 0.0, "subsets": []}


def test_ties_count_as_wrong_and_unknown_subsets_are_refused():
    assert rewardbench.is_correct(1.0, 0.5) == 1
    assert rewardbench.is_correct(0.5, 0.5) == 0
    assert rewardbench.is_correct(0.4, 0.5) == 0
    with pytest.raises(KeyError):
        rewardbench.score([{"subset": "anthropic_helpful", "correct": 1}])
    with pytest.raises(ValueError):
        rewardbench.score([])


def test_stratified_weighted_bootstrap():
    result = rewardbench.score(HAND)
    weights = [result["weights"][r["subset"]] for r in HAND]
    strata = [r["subset"] for r in HAND]
    a = [r["correct"] for r in HAND]
    b = [0] * len(HAND)
    out = paired_bootstrap(a, b, n_boot=2000, seed=1, weights=weights, strata=strata)
    assert 100 * out["difference"] == pytest.approx(result["score"])
    assert out["method"].endswith("stratified")
    # within-stratum constant differences: every resample gives the same statistic
    same = paired_bootstrap([1, 1, 0, 0], [0, 0, 0, 0], n_boot=500, weights=[0.25] * 4, strata=["x", "x", "y", "y"])
    assert same["ci_low"] == same["ci_high"] == same["difference"] == 0.5
    # no weights, no strata: the plain mean difference and the same draws as before
    x, y = np.array([1, 0, 1, 1, 0.0]), np.array([0, 0, 1, 0, 1.0])
    plain = paired_bootstrap(x, y, n_boot=1000, seed=3)
    idx = np.random.default_rng(3).integers(0, 5, size=(1000, 5))
    assert plain["difference"] == pytest.approx(0.2)
    assert plain["ci_low"] == pytest.approx(np.quantile((x - y)[idx].mean(axis=1), 0.025))
