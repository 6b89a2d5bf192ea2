import json

import pytest

from replaykit.harness.budget import Budget
from replaykit.harness.errors import InputError
from replaykit.harness.receipts import read_complete_summary, status, write_summary

SUMMARY = {
    "metric": "m",
    "direction": "maximize",
    "value": 0.5,
    "uncertainty": {"value": 0.1, "kind": "binomial_se"},
    "n": 10,
    "diagnostics": {},
    "advisories": [],
}


def test_status_is_derived_from_the_receipt(tmp_path):
    assert status(tmp_path) == "incomplete"
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    assert status(tmp_path) == "incomplete"  # summary without receipt: not complete
    write_summary(tmp_path, SUMMARY)
    assert status(tmp_path) == "complete"
    assert read_complete_summary(tmp_path)["value"] == 0.5
    (tmp_path / "summary.json").write_text('{"metric": ')  # truncated after the receipt
    assert status(tmp_path) == "incomplete"
    assert "running" not in json.dumps(SUMMARY)


def test_bad_summary_names_the_field(tmp_path):
    bad = dict(SUMMARY, direction="up")
    with pytest.raises(InputError, match="direction"):
        write_summary(tmp_path, bad)
    with pytest.raises(InputError, match="value"):
        write_summary(tmp_path, dict(SUMMARY, value=float("nan")))
    assert not (tmp_path / ".complete").exists()


def test_budget_rules():
    b = Budget(43_200, 42_600, 600)
    assert b.runtime_minutes() == 720
    assert b.runtime_minutes(setup_s=120) == 722
    with pytest.raises(ValueError, match="exceeds"):
        Budget(900, 800, 200)
    with pytest.raises(ValueError):
        Budget(900, 0, 10)


def test_atomic_writes_get_the_usual_file_mode(tmp_path):
    import os

    from replaykit.harness.fileio import atomic_write_json

    umask = os.umask(0)
    os.umask(umask)
    path = atomic_write_json(tmp_path / "x.json", {"a": 1})
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary left behind
