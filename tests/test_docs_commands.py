"""Every shell command shown in README.md and docs/ is run, so that no example can rot.

Each fenced ``bash`` block is preceded by a marker that says how it is run:

* ``<!-- commands: run -->``: as written;
* ``<!-- commands: dry-run -->``: ``snakemake`` as a dry run (``-n`` after the program name,
  which changes nothing else in how the line is read); ``python -m replaykit ...`` with
  ``--help``; anything else is syntax-checked (``bash -n``);
* ``<!-- commands: fails -->``: ``snakemake`` as a dry run that must fail (the card's form);
* ``<!-- commands: help -->``: commands that need assets this machine lacks (full scale, a
  cluster) or never end (``tail -f``): ``snakemake`` and ``python -m replaykit`` with
  ``--help``, ``pytest`` with ``--collect-only`` (the marker expression must select tests),
  anything else syntax-checked;
* blocks between ``<!-- main-command -->`` / ``<!-- test-command -->`` markers are run by
  tests/test_setup.py and .ci/run.

Commands run in a copy of the workflow (with ``.venv`` linked to this venv), so they never
touch the repository's results/; the default workflow profile applies, as for a user.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, VENV_BIN, copy_workflow

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MODES = ("run", "dry-run", "fails", "help")
_BLOCK = re.compile(r"^([ \t]*)```bash\n(.*?)^\1```", re.S | re.M)
_MARKER = re.compile(r"<!-- commands: ([a-z-]+) -->\s*$")


def blocks() -> list[tuple[str, str, str]]:
    """``(where, mode, text)`` of every bash block; mode ``setup`` for the set-up commands."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in _BLOCK.finditer(text):
            before = text[: m.start()].rstrip().splitlines()
            last = before[-1].strip() if before else ""
            line = text[: m.start()].count("\n") + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            if last in ("<!-- main-command -->", "<!-- test-command -->"):
                found.append((where, "setup", m.group(2)))
                continue
            marker = _MARKER.search(last)
            found.append((where, marker.group(1) if marker else "", m.group(2)))
    return found


def commands(text: str) -> list[list[str]]:
    """The block's commands as argument lists: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if shlex.split(line, comments=True)]


def is_snakemake(argv: list[str]) -> bool:
    return Path(argv[0]).name == "snakemake"


def is_replaykit(argv: list[str]) -> bool:
    return Path(argv[0]).name.startswith("python") and argv[1:3] == ["-m", "replaykit"]


def adapt(argv: list[str], mode: str) -> list[str] | None:
    """The command to run for ``mode``, or None for a syntax check only."""
    if mode == "run":
        return argv
    if is_snakemake(argv):
        return [argv[0], "--help"] if mode == "help" else [argv[0], "-n", *argv[1:]]
    if is_replaykit(argv):
        return [*argv, "--help"]
    if mode == "help" and Path(argv[0]).name == "pytest":
        return [*argv, "--collect-only", "-q"]
    return None


def test_every_bash_block_is_marked():
    unmarked = [where for where, mode, _ in blocks() if mode not in (*MODES, "setup")]
    assert not unmarked, f"bash blocks without <!-- commands: {'|'.join(MODES)} -->: {unmarked}"
    assert sum(mode == "setup" for _, mode, _ in blocks()) == 2


def test_commands_split_as_a_shell_would():
    assert commands("snakemake a \\\n    --config 'x={\"a\": 1}'   # note\n\n") == [
        ["snakemake", "a", "--config", 'x={"a": 1}']
    ]
    assert adapt(["snakemake", "--cores", "1", "--", "t"], "dry-run") == ["snakemake", "-n", "--cores", "1", "--", "t"]
    assert adapt(["sed", "-i", "s/a/b/", "f"], "dry-run") is None


def test_files_named_in_commands_exist():
    """A path a command names (a patch, a config file, a profile) is in the repository."""
    for where, _mode, text in blocks():
        for argv in commands(text):
            for arg in argv:
                for path in re.findall(r"((?:patches|config|profiles)/[\w./-]+\.(?:diff|yaml))", arg):
                    assert (ROOT / path).exists(), f"{where}: {path} does not exist"
    assert "patches/beta02.diff" in (ROOT / "docs/operations.md").read_text()


@pytest.fixture(scope="session")
def user_copy(tmp_path_factory) -> Path:
    """What a clone holds (git's tracked and not-ignored files), with ``.venv`` linked; one per
    pytest-xdist worker (session scope: the commands, dry runs, spread over the workers)."""
    import shutil

    work = tmp_path_factory.mktemp("docs")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            src, dest = ROOT / name, work / name
            if src.is_file():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)
    else:  # not a git checkout: the workflow and what the docs name
        copy_workflow(work)
        for name in ("profiles", "patches", "tests", "docs", "scripts"):
            shutil.copytree(ROOT / name, work / name)
        for name in ("README.md", "pyproject.toml"):
            shutil.copy2(ROOT / name, work / name)
    (work / ".venv").symlink_to(VENV_BIN.parent)
    return work


RUNNABLE = [(where, mode, text) for where, mode, text in blocks() if mode in MODES]


@pytest.mark.slow
@pytest.mark.parametrize("where, mode, text", RUNNABLE, ids=[w for w, _, _ in RUNNABLE])
def test_documented_commands_run(user_copy, where, mode, text):
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for argv in commands(text):
        run = adapt(argv, mode)
        if run is None:
            check = subprocess.run(["bash", "-n", "-c", shlex.join(argv)], capture_output=True, text=True)
            assert check.returncode == 0, f"{where}: {shlex.join(argv)}: {check.stderr}"
            continue
        result = subprocess.run(
            ["bash", "-c", shlex.join(run)], cwd=user_copy, env=env, capture_output=True, text=True, timeout=600
        )
        shown = f"{where}: {shlex.join(run)}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        if mode == "fails":
            assert result.returncode != 0, shown
            assert "dictionary update sequence" in result.stderr + result.stdout, shown
        else:
            assert result.returncode == 0, shown


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_and_anchors_exist():
    """Every relative link of README.md and docs/ names a file that exists (and a heading of
    it, when it has an anchor)."""
    for path in DOCS + [ROOT / "config/README.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            name, _, anchor = target.partition("#")
            dest = (path.parent / name).resolve() if name else path
            assert dest.exists(), f"{path.relative_to(ROOT)}: link to {target}: no such file"
            if anchor and dest.suffix == ".md":
                headings = [_anchor(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)]
                assert anchor in headings, f"{path.relative_to(ROOT)}: link to {target}: no such heading"
