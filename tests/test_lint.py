"""The workflow passes `snakemake --lint` and `snakefmt --check` (STYLE: Snakemake workflows), the
package and tests `ruff check` and `ruff format --check` (pyproject.toml: [tool.ruff])."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_snakemake_lint_is_clean():
    out = subprocess.run(
        [str(BIN / "snakemake"), "--lint", "--workflow-profile", "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Congratulations, your workflow is in a good condition!" in out.stdout + out.stderr, out.stdout + out.stderr


def test_snakefmt_check_is_clean():
    out = subprocess.run(
        [str(BIN / "snakefmt"), "--check", "Snakefile", "rules"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_check_is_clean():
    """`ruff check .` (package, tests, recipes, bench, scripts) with the rule set and line length
    of pyproject.toml's [tool.ruff]."""
    out = subprocess.run([str(BIN / "ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_ruff_format_is_clean():
    """`ruff format --check .`: every Python file outside the shipped recipes/ is as the formatter
    writes it at pyproject.toml's line length (recipes/ keeps the bytes candidate patches apply to)."""
    out = subprocess.run(
        [str(BIN / "ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
