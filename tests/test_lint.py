"""The workflow passes `snakemake --lint` and `snakefmt --check` (STYLE: Snakemake workflows), the
package and tests `ruff check` and `ruff format --check` (pyproject.toml: [tool.ruff])."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """The venv's ``name`` (a linter of the ``test`` extra), or a skip that says how to get it:
    README's main command installs the workflow without the extra."""
    path = BIN / name
    if not path.is_file():
        pytest.skip(f"{name} is not installed in this venv: it comes with the `test` extra (pip install -e '.[test]')")
    return str(path)


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
        [tool("snakefmt"), "--check", "Snakefile", "rules"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_check_is_clean():
    """`ruff check .` (package, tests, recipes, bench, scripts) with the rule set and line length
    of pyproject.toml's [tool.ruff]."""
    out = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_ruff_format_is_clean():
    """`ruff format --check .`: every Python file outside the shipped recipes/ is as the formatter
    writes it at pyproject.toml's line length (recipes/ keeps the bytes candidate patches apply to)."""
    out = subprocess.run(
        [tool("ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_a_linter_missing_from_the_venv_skips_naming_the_test_extra():
    """README's main command installs no `test` extra: the lint tests skip, saying how to get it."""
    with pytest.raises(pytest.skip.Exception) as skipped:
        tool("ruff-not-here")
    assert str(skipped.value) == (
        "ruff-not-here is not installed in this venv: it comes with the `test` extra (pip install -e '.[test]')"
    )
