import pytest

from replaykit.harness.select import best_valid

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
