"""Nothing a user already has is lost (issue 28): products are built aside and swapped in, a
failed run keeps what the last one produced, and the failed job's own error line reaches the
terminal with its log's path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from unittest import mock

import pytest
import yaml

from conftest import copy_run, snakemake
from replaykit.harness.fileio import built_aside
from replaykit.harness.hashing import sha256_tree
from replaykit.harness.joblogs import failure_lines

SOUP = "results/soup/final"
GPU = ("--cores", "1", "--resources", "gpu=1")


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), to compare byte for byte; the receipt
    check's hash cache (a speed-up, written on every invocation) aside."""
    files = (p for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".hash-cache.json")
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_built_aside_swaps_in_whole_and_a_failure_keeps_the_previous(tmp_path):
    target = tmp_path / "final"
    with built_aside(target) as new:  # first build: no previous folder
        (new / "summary.json").write_text("1")
    assert _tree(target) == {"summary.json": b"1"}
    before = _tree(target)
    with pytest.raises(RuntimeError), built_aside(target) as new:
        (new / "summary.json").write_text("half")
        raise RuntimeError("the build failed midway")
    assert _tree(target) == before  # byte-identical
    with built_aside(target) as new:
        (new / "report.md").write_text("2")
    assert _tree(target) == {"report.md": b"2"}  # the new one whole, nothing of the old left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]  # no leftover aside
    assert oct(target.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def test_a_killed_builders_aside_folder_is_removed_by_the_next_build(tmp_path):
    """SIGKILL inside ``built_aside`` leaves ``.final.new-<pid>@<host>+<ns>-*``; the next build
    removes it once that process is gone, and leaves a live process's, another host's and
    another pid namespace's (a container with the same host name) alone; a host name with a
    character a folder name cannot hold does not stop the build."""
    import signal
    import socket
    import subprocess
    import sys

    target = tmp_path / "final"
    from replaykit.harness.fileio import _where

    host = _where()  # <host>+<pid namespace>.<boot id>
    assert host.startswith(f"{socket.gethostname()}+{os.stat('/proc/self/ns/pid').st_ino}.")
    code = (
        "import os, sys, time; from replaykit.harness.fileio import built_aside\n"
        "with built_aside(sys.argv[1]) as new:\n"
        "    (new / 'half.json').write_text('{')\n    print(new.name, flush=True); time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    killed = child.stdout.readline().strip()
    assert killed.startswith(f".final.new-{child.pid}@{host}-"), killed
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (tmp_path / killed / "half.json").is_file()  # what a SIGKILL leaves
    live = tmp_path / f".final.new-{os.getpid()}@{host}-live"
    other = tmp_path / f".final.new-{child.pid}@elsewhere.example+1-x"
    container = tmp_path / f".final.new-{child.pid}@{socket.gethostname()}+1.0-w"  # its pid 'child.pid' may live
    old = tmp_path / f".final.old-{child.pid}@{host}-y"
    huge = tmp_path / f".final.new-{2**64}@{host}-z"  # no such pid can be asked about: kept
    # named before the namespace was: its pid may be another container's live process (second hostile test)
    legacy = tmp_path / f".final.new-{child.pid}@{socket.gethostname()}-v"
    for folder in (live, other, container, old, huge, legacy):
        folder.mkdir()
    with built_aside(target) as new:
        (new / "summary.json").write_text("1")
    kept = ["final", live.name, other.name, container.name, huge.name, legacy.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
    with mock.patch("socket.gethostname", return_value="rack/7"):
        with built_aside(target) as new:
            assert "@rack_7+" in new.name
            (new / "summary.json").write_text("2")
    assert (target / "summary.json").read_text() == "2"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_failure_lines_name_the_jobs_error_and_its_log(tmp_path):
    job_log = tmp_path / "workspace.log"
    job_log.write_text("[workspace] checking the patch\nerror: p.diff: does not apply to recipes/soup: x\n")
    snakemake_log = tmp_path / "snakemake.log"
    block = f"Error in rule workspace:\n    jobid: 3\n    log: {job_log} (check log file(s) for error details)\n"
    snakemake_log.write_text(f"Building DAG of jobs...\n{block}{block}Shutting down\n")  # repeated: said once
    assert failure_lines(snakemake_log) == [
        "error: p.diff: does not apply to recipes/soup: x",
        f"  (rule workspace failed; full log: {job_log})",
    ]
    assert failure_lines(tmp_path / "absent.log") == []
    assert failure_lines([snakemake_log]) == failure_lines(snakemake_log)  # as onerror gets it: a list


@pytest.mark.slow
def test_a_candidate_that_fails_keeps_final_and_says_why_on_the_terminal(soup_run, tmp_path):
    """The issue's case: final/ built, then the same target with a candidate whose patch does
    not apply. final/ and every official.json stay byte for byte; the terminal ends with the
    job's own error line and its log."""
    work = copy_run(soup_run, tmp_path / "w")
    before = {p: _tree(work / p) for p in ("results/soup/final", "results/soup/shipped-seed42")}
    patch = work / "bad.diff"
    patch.write_text("--- a/train.py\n+++ b/train.py\n@@ -1,1 +1,1 @@\n-no such line in train.py\n+x\n")
    config_path = work / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["tasks"]["soup"].update(candidate="bad", candidates={"bad": str(patch)})
    config_path.write_text(yaml.safe_dump(config))
    out = snakemake(work, SOUP, *GPU)
    assert out.returncode != 0
    lines = out.stderr.splitlines()
    # after Snakemake's block for the failed job, the job's own line and its log (then only
    # Snakemake's closing lines: where its own log is, the elapsed time, "WorkflowError")
    [at] = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert lines[at].startswith(f"error: {patch}: ") and "does not apply to recipes/soup" in lines[at]
    assert lines[at + 1] == "  (rule workspace failed; full log: logs/soup/bad-seed42/workspace.log)"
    assert len(lines) - at <= 8, out.stderr[-3000:]
    assert lines[at] == (work / "logs/soup/bad-seed42/workspace.log").read_text().strip().splitlines()[-1]
    # final/ is stale for the new candidate, and kept until its rebuild succeeds
    assert "receipts: results/soup/final: will be rebuilt; kept as it is until its rebuild succeeds" in lines
    assert "removed" not in out.stderr
    assert {p: _tree(work / p) for p in before} == before  # nothing lost, nothing half-overwritten
    assert sha256_tree(work / SOUP) == sha256_tree(soup_run / SOUP)
    # a hostile run of 2026-12-02: a run's workspace rebuilt because its recipe changed, and
    # refused (a symbolic link in the recipe), had lost the workspace its official result came
    # from; it is kept now (and workspace.json with it), as final/ is
    config["tasks"]["soup"].update(candidate="shipped", candidates={})
    config_path.write_text(yaml.safe_dump(config))
    (work / "recipes/soup/train-link.py").symlink_to("train.py")
    out = snakemake(work, SOUP, *GPU)
    assert out.returncode != 0 and "not a regular file in the shipped recipe" in out.stderr, out.stderr[-3000:]
    assert {p: _tree(work / p) for p in before} == before


@pytest.mark.slow
def test_a_final_job_killed_midway_gets_its_last_version_back(soup_run, tmp_path):
    """A hostile run of 2026-12-02: snakemake killed (-9) while rule ``final`` ran left
    Snakemake's copy of the last final/ in ``.snakemake/backups``; every later run then failed
    with Snakemake's traceback (FileExistsError). The next run puts the copy back in place of
    what the killed job left, in one line, and builds final/ again."""
    work = copy_run(soup_run, tmp_path / "w")
    backup = work / ".snakemake/backups" / SOUP
    shutil.copytree(work / SOUP, backup)  # as Snakemake copies an update() output before its job
    (work / SOUP / "summary.json").write_text('{"half": ')  # what the killed job left
    out = snakemake(work, SOUP, *GPU, "--forcerun", "final")  # (its job is marked incomplete)
    assert out.returncode == 0, out.stderr[-3000:]
    put_back = f"receipts: {SOUP}: its job was interrupted; put back as last finished (Snakemake's backup)"
    assert put_back in out.stderr.splitlines()
    assert not backup.exists() and _tree(work / SOUP) == _tree(soup_run / SOUP)


@pytest.mark.slow
def test_soup_kill_in_the_publication_gap_is_settled_by_the_next_attempt(soup_run, tmp_path):
    """Killed after checkpoint-3 was renamed into place, before the ledger said published; its
    bytes changed before the rerun. The next attempt discards it (no record vouches for those
    bytes) and publishes it again; the record's checkpoint is the republished one."""
    import json

    from replaykit.harness.publish import read_ledger

    work = copy_run(soup_run, tmp_path / "w")
    run = work / "results/soup/shipped-seed42"
    for name in ("replay", "replay-state", "validation", "final-scores", "replay-attempts.json"):
        path = run / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    target = "results/soup/shipped-seed42/replay/record.json"
    out = snakemake(work, target, *GPU, env={"REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH": "3:gap"})
    assert out.returncode != 0
    assert [e["state"] for e in read_ledger(run / "replay")] == ["pending"]
    changed = run / "replay/checkpoint-3/model.pt"
    data = bytearray(changed.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a change in the gap
    changed.write_bytes(bytes(data))
    snakemake(work, target, *GPU, check=True)
    log = (work / "logs/soup/shipped-seed42/replay.log").read_text()
    assert "[replay] checkpoint-3: discarded: its bytes differ from the pending entry" in log
    record = json.loads((work / target).read_text())
    assert record["retained"] == [3] and [e["state"] for e in record["publications"]] == ["published"]
    assert record["checkpoints"]["3"]["sha256"] == sha256_tree(run / "replay/checkpoint-3")
    assert record["publications"][0]["sha256"] == sha256_tree(run / "replay/checkpoint-3")
    first, again = record["attempts"]
    assert first["cause"] == "platform" and first["exit"] == 137
    assert [(c["progress"], c["verdict"]) for c in again["publication_checks"]] == [(3, "discarded")]
