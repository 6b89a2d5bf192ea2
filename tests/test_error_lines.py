"""Error lines name a real field or none (issue 28): ``<file>: <field>: <message>``, or
``<file>: <message>`` when the file as a whole is bad; never a ``-`` where a field belongs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, copy_workflow, snakemake
from replaykit.harness.errors import InputError

SOURCES = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "recipes").rglob("*.py")])


def placeholders(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line`` (relative to ``root``) of each ``InputError(path, "-", ...)`` and each string
    holding ``: -:``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "InputError":
            field = (
                node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "field"), None)
            )
            if isinstance(field, ast.Constant) and field.value in ("-", ""):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ": -:" in node.value:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_error_line_has_a_placeholder_for_its_field():
    found = [where for path in SOURCES for where in placeholders(path)]
    assert not found, f"a '-' where a field name belongs (name the field, or pass None): {found}"


def test_the_scan_finds_a_placeholder(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('raise InputError(p, "-", "no rows")\nraise SystemExit(f"{p}: -: empty")\n')
    assert placeholders(bad, tmp_path) == ["bad.py:1", "bad.py:2"]


@pytest.mark.parametrize(
    "field, line",
    [(None, "data/items.jsonl: no rows"), ("tasks.dpo.seeds", "data/items.jsonl: tasks.dpo.seeds: no rows")],
)
def test_an_error_line_names_its_field_or_none(field, line):
    assert str(InputError("data/items.jsonl", field, "no rows")) == line


def replaykit(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replaykit", *args], cwd=work, capture_output=True, text=True, timeout=120
    )


def test_status_on_a_fresh_checkout_says_nothing_has_run(tmp_path):
    """No results/ yet (a fresh clone): one line and exit 0; the tiny runs' folder is named once
    it exists; a --results folder of the user's own that does not exist is still an error."""
    copy_workflow(tmp_path)
    out = replaykit(tmp_path, "status", "soup")
    assert (out.returncode, out.stdout, out.stderr) == (0, "results: nothing has run yet\n", "")
    (tmp_path / "tiny/results").mkdir(parents=True)  # config/test.yaml's workdir: tiny
    out = replaykit(tmp_path, "status")
    assert out.stdout == "results: nothing has run yet; the tiny runs: status --results tiny/results\n"
    assert replaykit(tmp_path, "status", "--results", "tiny/results").stdout == "tiny/results: no runs\n"
    out = replaykit(tmp_path, "status", "nosuch")
    assert out.returncode == 2 and out.stderr.startswith("error: command line: task: 'nosuch': unknown task")
    out = replaykit(tmp_path, "status", "--results", "elsewhere")
    assert out.returncode == 2 and out.stderr == "error: elsewhere: --results: not a folder (the workflow's results/)\n"


def test_a_target_no_rule_makes_gets_one_line_with_the_targets(tmp_path):
    """``results/soup/finall`` (a typo): one error line listing the target forms, not Snakemake's
    MissingRuleException; a file inside final/ (built as a whole) names final/."""
    copy_workflow(tmp_path)
    out = snakemake(tmp_path, "-n", "results/soup/finall")
    assert out.returncode == 1 and "MissingRule" not in out.stdout + out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(
        "error: results/soup/finall: no rule makes this target; targets are results/<task>/ "
        "(task: ddpo, digress, dpo, rm, soup) + one of assets/public, "
    )
    per_task = line.split(" + one of ")[1].split("; or ")[0].split(", ")
    assert {"final", "report.html", "<run>/official.json", "<run>/replay/record.json"} <= set(per_task)
    assert "results/frozen-code.json" in line
    out = snakemake(tmp_path, "-n", "results/soup/final/summary.jsn")
    assert "it is inside results/soup/final, which is built as a whole;" in out.stderr
    # an option's value is no target (a new user's `--report results/dpo/snakemake-report.html`,
    # as docs/operations.md shows it, had been refused as a target no rule makes)
    out = snakemake(tmp_path, "-n", "--report", "results/soup/snakemake-report.html", "results/soup/final")
    assert "no rule makes this target" not in out.stderr, out.stderr[-2000:]
