"""The frozen package is verified by hash before validation and scoring (issue 14)."""

from __future__ import annotations

import json
import subprocess

from conftest import VENV_BIN
from replaykit.harness import frozen
from replaykit.harness.hashing import sha256_file
from replaykit.tasks import frozen_code


def test_record_lists_every_package_file_with_its_sha256():
    doc = frozen_code().record()
    evaluator = frozen.package_dir() / "tasks" / "soup" / "evaluator.py"
    assert doc["files"]["tasks/soup/evaluator.py"] == sha256_file(evaluator)
    assert "harness/sandbox.py" in doc["files"] and not any("__pycache__" in k for k in doc["files"])
    assert frozen.digest(doc["files"]) == doc["sha256"]


def test_validation_and_scoring_refuse_a_changed_package_naming_the_file(tmp_path):
    doc = frozen_code().record()
    doc["files"]["tasks/soup/evaluator.py"] = "0" * 64  # as if the evaluator had been edited since
    record = tmp_path / "frozen-code.json"
    record.write_text(json.dumps(doc))
    for step in (
        [
            "validate",
            "--task",
            "soup",
            "--checkpoint",
            str(tmp_path),
            "--fixed-start",
            str(tmp_path),
            "--out",
            str(tmp_path / "marker.json"),
        ],
        [
            "score",
            "--task",
            "soup",
            "--split",
            "final",
            "--fixed-start",
            str(tmp_path),
            "--items",
            str(tmp_path / "x"),
            "--manifest",
            str(tmp_path / "m"),
            "--out-dir",
            str(tmp_path),
        ],
    ):
        result = subprocess.run(
            [str(VENV_BIN / "python"), "-m", "replaykit", *step, "--frozen", str(record)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "tasks/soup/evaluator.py" in lines[0]
        assert "frozen code differs from" in lines[0] and "changed" in lines[0]
    assert not (tmp_path / "marker.json").exists()


def test_an_added_or_removed_file_is_named():
    assert frozen.first_difference({"a.py": "1"}, {"a.py": "1", "b.py": "2"}) == ("b.py", "added")
    assert frozen.first_difference({"a.py": "1", "b.py": "2"}, {"a.py": "1"}) == ("b.py", "removed")
    assert frozen.first_difference({"a.py": "1"}, {"a.py": "1"}) is None
