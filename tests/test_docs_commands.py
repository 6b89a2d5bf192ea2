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
* ``<!-- commands: walkthrough -->``: a sequence that builds on itself (the exploration's,
  in docs/operations.md), run as written, in order, in a fresh copy of the checkout, by its own
  test (``test_exploration_walkthrough_runs_as_written``), which then checks what it printed and
  wrote;
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
WALKTHROUGH = "walkthrough"
TINY = ["--configfile", "config/test.yaml"]
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
    unmarked = [where for where, mode, _ in blocks() if mode not in (*MODES, WALKTHROUGH, "setup")]
    assert not unmarked, f"bash blocks without <!-- commands: {'|'.join(MODES)} -->: {unmarked}"
    assert sum(mode == "setup" for _, mode, _ in blocks()) == 2


def test_commands_split_as_a_shell_would():
    assert commands("snakemake a \\\n    --config 'x={\"a\": 1}'   # note\n\n") == [
        ["snakemake", "a", "--config", 'x={"a": 1}']
    ]
    assert adapt(["snakemake", "--cores", "1", "--", "t"], "dry-run") == ["snakemake", "-n", "--cores", "1", "--", "t"]
    assert adapt(["sed", "-i", "s/a/b/", "f"], "dry-run") is None


def submitted_patches(text: str) -> set[str]:
    """The patches a block's own ``explore <task> --name N`` ... ``explore submit`` write."""
    argvs = commands(text)
    if not any(is_replaykit(a) and a[3:5] == ["explore", "submit"] for a in argvs):
        return set()
    starts = [a for a in argvs if is_replaykit(a) and a[3:4] == ["explore"] and "--name" in a]
    return {f"patches/{a[4]}-{a[a.index('--name') + 1]}.diff" for a in starts}


def test_files_named_in_commands_exist():
    """A path a command names (a patch, a config file, a profile) is in the repository, or is
    the patch that the block's own exploration submits."""
    for where, _mode, text in blocks():
        made = submitted_patches(text)
        for argv in commands(text):
            for arg in argv:
                for path in re.findall(r"((?:patches|config|profiles)/[\w./-]+\.(?:diff|yaml))", arg):
                    assert (ROOT / path).exists() or path in made, f"{where}: {path} does not exist"
    assert "patches/beta02.diff" in (ROOT / "docs/operations.md").read_text()


@pytest.fixture(scope="session")
def user_copy(tmp_path_factory) -> Path:
    """What a clone holds (git's tracked and not-ignored files), with ``.venv`` linked; one per
    pytest-xdist worker (session scope: the commands, dry runs, spread over the workers)."""
    return clone(tmp_path_factory.mktemp("docs"))


def clone(work: Path) -> Path:
    """Copy into ``work`` what a clone holds (git's tracked and not-ignored files), ``.venv``
    linked to this venv."""
    import shutil

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


WALKTHROUGHS = [(where, text) for where, mode, text in blocks() if mode == WALKTHROUGH]


def run_as_written(argv: list[str], work: Path) -> subprocess.CompletedProcess:
    """``argv`` through bash in ``work``, the venv's bin first on PATH (as the docs assume)."""
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        ["bash", "-c", shlex.join(argv)], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )


def test_the_exploration_walkthrough_is_found():
    assert [where.split(":")[0] for where, _ in WALKTHROUGHS] == ["docs/operations.md"]


@pytest.mark.slow
def test_exploration_walkthrough_runs_as_written(tmp_path):
    """docs/operations.md's exploration, every command as written, in a fresh copy of the
    checkout (tiny config; about 3 minutes): each exits 0, and what it prints and writes is
    checked against the files (hashes recomputed here)."""
    import json

    from replaykit.harness.hashing import sha256_file

    [(where, text)] = WALKTHROUGHS
    work = clone(tmp_path / "clone")
    out = {}
    for argv in commands(text):
        result = run_as_written(argv, work)
        assert result.returncode == 0, f"{where}: {shlex.join(argv)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        out[" ".join(argv[3:5]) if is_replaykit(argv) else argv[0]] = result.stdout
    ex, patch = work / "explore/soup/trial", work / "patches/soup-trial.diff"
    [probe, proxy] = [json.loads(line) for line in (ex / "receipts.jsonl").read_text().splitlines()]
    assert probe["returncode"] == 0 and proxy["checkpoint"] == max(probe["checkpoints"]) and proxy["tiny"] is True
    # status: one line for the budget, the probe and the proxy score, each as the receipts say
    status = out["explore status"].splitlines()
    submitted_at = json.loads((ex / "submission.json").read_text())["budget_used_s"]
    head = re.fullmatch(
        r"\[explore\] explore/soup/trial \(soup, tiny\): budget 900 s, used (\d+) s, left (\d+) s \(ends [\d:]+ UTC\)",
        status[0],
    )
    # status ran after the proxy score and before the submission
    assert head and round(proxy["budget_used_s"]) <= int(head[1]) <= round(submitted_at)
    assert int(head[1]) + int(head[2]) in (899, 900, 901)  # each rounded
    assert status[1] == f"  probe-1: exit 0 after {probe['seconds']:.1f} s; {proxy['checkpoint']}"
    assert status[2] == (
        f"  proxy 1: {proxy['checkpoint']}: {proxy['metric']} = "
        f"{proxy['value']:.4g} ± {proxy['se']:.4g} (n={proxy['n']})"
    )
    assert status[3] == "  not submitted"
    # submit: the patch's hash, and the formal replay's command with the doc's --config
    submitted = out["explore submit"]
    assert f"submitted patches/soup-trial.diff sha256 {sha256_file(patch)};" in submitted
    doc_config = commands(text)[-1][-1]
    assert submitted.rstrip().endswith(f"--configfile config/test.yaml --config '{doc_config}'")
    # the tiny runs stay in tiny/, and every output says they are tiny
    assert not (work / "results").exists() and (work / "tiny/results/soup/final/.complete").is_file()
    record = json.loads((work / "tiny/results/soup/trial-seed42/replay/record.json").read_text())
    assert record["exploration"]["linked"] and record["patch_sha256"] == sha256_file(patch)
    assert record["tiny"] is True and record["config_files"] == [
        {"path": name, "sha256": sha256_file(work / name)} for name in ("config/config.yaml", "config/test.yaml")
    ]
    summary = json.loads((work / "tiny/results/soup/final/summary.json").read_text())
    assert summary["tiny"] is True and summary["advisories"][0].startswith("tiny run: ")
    report = (work / "tiny/results/soup/final/report.md").read_text().splitlines()
    assert report[0] == "# soup: final result (tiny run)" and report[2].startswith("> **Warning**: tiny run: ")
    # after the submission: one line each, nothing run
    for argv, expected in (
        (["explore", "run"], "this exploration was submitted: no more probes"),
        (["explore", "proxy"], "this exploration was submitted: no more proxy scores"),
        (["explore", "submit"], "explore/soup/trial/submission.json: already submitted"),
    ):
        refused = run_as_written(["python", "-m", "replaykit", *argv, "-e", "explore/soup/trial"], work)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith("error: ") and expected in refused.stderr
    # one probe: its run folder and its log beside it (written by the host, read-only inside)
    assert sorted(p.name for p in (ex / "runs").iterdir()) == ["probe-1", "probe-1.log"]
    # without --configfile the embedded default's assets are named, which were not built here
    missing = run_as_written(["python", "-m", "replaykit", "explore", "soup", "--name", "other"], work)
    assert missing.returncode == 2 and missing.stderr == (
        "error: results/soup/assets/manifest.json: assets not built for this config: run "
        "`snakemake results/soup/assets/manifest.json --cores 1` first\n"
    )
    # with the tiny config the target is relative to its workdir (tiny/), as Snakemake reads it
    missing = run_as_written(["python", "-m", "replaykit", "explore", "rm", "--name", "t", *TINY], work)
    assert missing.returncode == 2 and missing.stderr == (
        "error: tiny/results/rm/assets/manifest.json: assets not built for this config: run "
        "`snakemake results/rm/assets/manifest.json --cores 1 --configfile config/test.yaml` first\n"
    )
    # an exploration named like a shipped patch (patches/soup-greedy.diff) is never written over
    shipped = (work / "patches/soup-greedy.diff").read_bytes()
    tiny = TINY
    assert (
        run_as_written(["python", "-m", "replaykit", "explore", "soup", "--name", "greedy", *tiny], work).returncode
        == 0
    )
    knobs = work / "explore/soup/greedy/workspace/configs/embedded.yaml"
    knobs.write_text(knobs.read_text().replace("method: uniform ", "method: greedy  "))
    clash = run_as_written(["python", "-m", "replaykit", "explore", "submit", "-e", "explore/soup/greedy"], work)
    assert clash.returncode == 2 and clash.stderr == (
        "error: patches/soup-greedy.diff: --patches: a patch of this name exists already; submit to another "
        "folder (--patches DIR, e.g. --patches explore/soup/greedy/patches) or move it away\n"
    )
    assert (work / "patches/soup-greedy.diff").read_bytes() == shipped
    moved = ["python", "-m", "replaykit", "explore", "submit", "-e", "explore/soup/greedy", "--patches", "mine"]
    assert run_as_written(moved, work).returncode == 0 and (work / "mine/soup-greedy.diff").is_file()
