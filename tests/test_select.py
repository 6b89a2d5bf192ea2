import math

import pytest

from replaykit.harness.select import TIE_RULE, best_valid, proxy_selected

RESULTS = [
    {"progress": 8, "valid": True, "value": 0.40},
    {"progress": 16, "valid": False, "value": 0.90},  # invalid: never official, however good
    {"progress": 24, "valid": True, "value": 0.35},
]


def test_best_of_three_maximize():
    assert best_valid(RESULTS, "maximize")["progress"] == 8


def test_best_of_three_minimize():
    assert best_valid(RESULTS, "minimize")["progress"] == 24


def test_tie_goes_to_greater_progress():
    tied = [{"progress": 5, "valid": True, "value": 1.0}, {"progress": 9, "valid": True, "value": 1.0}]
    assert best_valid(tied, "maximize")["progress"] == 9


def test_no_valid_checkpoint():
    assert best_valid([{"progress": 1, "valid": False, "value": None}], "maximize") is None


def test_unknown_direction():
    with pytest.raises(ValueError):
        best_valid(RESULTS, "max")


def test_proxy_selected_ties_go_to_the_greater_progress():
    checkpoints = [
        {"progress": 8, "valid": True, "proxy_value": 0.6, "value": 0.40},
        {"progress": 16, "valid": True, "proxy_value": 0.6, "value": 0.38},  # ties 8 on the proxy: later wins
        {"progress": 24, "valid": False, "proxy_value": 0.9, "value": None},  # invalid: never chosen
    ]
    chosen = proxy_selected(checkpoints, "maximize")
    # official = checkpoint-8 (0.40 on the final split); proxy-selected = 16 -> gap 0.40 - 0.38
    assert (chosen["progress"], chosen["proxy_value"], chosen["final_value"]) == (16, 0.6, 0.38)
    assert chosen["oracle_gap"] == pytest.approx(0.02) and chosen["official_progress"] == 8
    assert TIE_RULE in chosen["rule"]


def test_proxy_selected_minimised_and_gap_sign():
    # digress-like NLL: lower is better on both splits; proxy tie 68 between 2 and 3 -> 3
    checkpoints = [
        {"progress": 1, "valid": True, "proxy_value": 70.0, "value": 69.0},
        {"progress": 2, "valid": True, "proxy_value": 68.0, "value": 71.0},
        {"progress": 3, "valid": True, "proxy_value": 68.0, "value": 70.0},
    ]
    chosen = proxy_selected(checkpoints, "minimize")
    # official = 1 (69.0); gap in the metric's direction: -(69 - 70) = +1 (never negative)
    assert chosen["progress"] == 3 and chosen["oracle_gap"] == pytest.approx(1.0)
    same = proxy_selected([{**checkpoints[0], "proxy_value": 60.0}, *checkpoints[1:]], "minimize")
    assert same["progress"] == 1 and same["oracle_gap"] == 0.0  # the proxy agrees with the final split
    # -1 * (69.0 - 69.0) is -0.0, which reports printed as -0.0000 (new user, 2026-12-05)
    assert math.copysign(1.0, same["oracle_gap"]) == 1.0


def test_proxy_selected_none_without_a_scored_valid_checkpoint():
    assert proxy_selected([{"progress": 1, "valid": False, "proxy_value": 0.5, "value": None}], "maximize") is None
    # a checkpoint without a proxy score is not ranked by it
    one = [{"progress": 1, "valid": True, "proxy_value": None, "value": 0.5}]
    assert proxy_selected(one, "maximize") is None
