"""Receipts that are checked, not only written (issue 15): a changed checkpoint, a deleted
record, marker, score or official.json are found when the DAG is built and rebuilt; a
resume never trains past the recipe's end; `python -m replaykit status` reports from the
receipts alone. Each case ends by checking that the official result, the markers and the
record agree with the files on disk, with hashes computed here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (
    ROOT,
    VENV_BIN,
    copy_run,
    copy_workflow,
    jobs_run,
    orphans_after,
    snakemake,
    tiny_config,
    write_config,
)
from replaykit.harness.hashing import HashCache, sha256_tree

DPO = "results/dpo/final"
DPO_RUN = Path("results/dpo/shipped-seed42")
SOUP = "results/soup/final"
SOUP_RUN = Path("results/soup/shipped-seed42")
GPU = ("--cores", "1", "--resources", "gpu=1")


def read(path):
    return json.loads(Path(path).read_text())


def file_sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree_sha(root) -> str:
    """The record's tree hash, recomputed: SHA-256 of ``relpath\\0sha256\\n`` lines, in
    path order, of every file under ``root``."""
    root = Path(root)
    lines = "".join(
        f"{p.relative_to(root).as_posix()}\0{file_sha(p)}\n" for p in sorted(root.rglob("*")) if p.is_file()
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def flip_middle_byte(path: Path) -> None:
    """Flip one bit of the middle byte in place (same size), as a user's stray write would."""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // 2)
        byte = handle.read(1)[0]
        handle.seek(size // 2)
        handle.write(bytes([byte ^ 1]))
    assert path.stat().st_size == size


def status(work, *tasks) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "replaykit", "status", *tasks],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_receipts_agree(
    work: Path, task: str, run: Path, tampered: tuple[int, ...] = (), final_current: bool = True
) -> dict:
    """The record, markers, scores, official.json and final/ agree with the files on disk;
    a checkpoint in ``tampered`` differs from its record and is marked invalid. With
    ``final_current`` False, final/ is not checked (a failed run keeps the previous one)."""
    record = read(work / run / "replay/record.json")
    official = read(work / run / "official.json")
    assert official["record_sha256"] == file_sha(work / run / "replay/record.json")
    assert sorted(c["progress"] for c in official["checkpoints"]) == record["retained"]
    for entry in official["checkpoints"]:
        p = entry["progress"]
        actual = tree_sha(work / run / f"replay/checkpoint-{p}")
        recorded = record["checkpoints"][str(p)]["sha256"]
        assert (actual != recorded) == (p in tampered)
        marker_path = work / run / f"validation/checkpoint-{p}.json"
        marker = read(marker_path)
        assert marker["checkpoint_sha256"] == actual and marker["recorded_sha256"] == recorded
        if p in tampered:
            assert marker["valid"] is False and "changed after publication" in marker["reason"]
        scores = work / run / f"final-scores/checkpoint-{p}"
        assert (scores / ".complete").exists()
        summary = read(scores / "summary.json")
        assert summary["checkpoint_sha256"] == actual and summary["marker_sha256"] == file_sha(marker_path)
        assert entry["marker_sha256"] == file_sha(marker_path)
        assert entry["summary_sha256"] == file_sha(scores / "summary.json")
        assert entry["valid"] == marker["valid"]
    final = work / f"results/{task}/final"
    if final.exists() and final_current:
        summary = read(final / "summary.json")
        assert (final / ".complete").exists()
        assert summary["lineage"]["record_sha256"] == file_sha(work / run / "replay/record.json")
        assert summary["officials_sha256"][str(run / "official.json")] == file_sha(work / run / "official.json")
        best = official["official"]
        assert summary["official"]["progress"] == best["progress"] and best["progress"] not in tampered
        assert summary["value"] == best["value"]
    return record


def build(work, target, *args, check=True):
    return snakemake(work, target, *GPU, *args, check=check)


# ---------------------------------------------------------------- the hash cache


def test_hash_cache_rereads_only_changed_files(tmp_path):
    ckpt = tmp_path / "checkpoint-1"
    ckpt.mkdir()
    (ckpt / "a.bin").write_bytes(b"a" * 1000)
    (ckpt / "b.bin").write_bytes(b"b" * 3000)
    cache = HashCache(tmp_path / "cache.json")
    assert cache.tree(ckpt) == tree_sha(ckpt) and cache.hashed_bytes == 4000
    cache.save()
    again = HashCache(tmp_path / "cache.json")
    assert again.tree(ckpt) == tree_sha(ckpt) and again.hashed_bytes == 0  # nothing re-read
    # a same-size change with the mtime put back is still seen (ctime moves on any write)
    st = (ckpt / "b.bin").stat()
    time.sleep(0.01)
    flip_middle_byte(ckpt / "b.bin")
    os.utime(ckpt / "b.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert again.tree(ckpt) == tree_sha(ckpt) != cache.entries[str(ckpt / "b.bin")][4]
    assert again.hashed_bytes == 3000  # only the changed file


# ---------------------------------------------------------------- soup (no Trainer)


@pytest.fixture
def soup_finished(soup_run):
    """conftest's ``soup_run`` (the soup-digits start of 3 ingredients, ``SOUP`` built with
    --cores 1): copied before use."""
    return soup_run


@pytest.mark.slow
def test_soup_deleted_receipts_are_rebuilt(soup_finished, tmp_path):
    work = copy_run(soup_finished, tmp_path / "w")
    before = assert_receipts_agree(work, "soup", SOUP_RUN)
    assert before["retained"] == [3]
    cases = [
        (
            SOUP_RUN / "validation/checkpoint-3.json",
            {"validate", "score", "official", "audit", "final"},
        ),
        (SOUP_RUN / "final-scores/checkpoint-3/summary.json", {"score", "official", "audit", "final"}),
        (SOUP_RUN / "official.json", {"official", "audit", "final"}),
        (Path(SOUP) / ".complete", {"final"}),
    ]
    for path, rules in cases:
        (work / path).unlink()
        out = build(work, SOUP)
        assert set(jobs_run(out)) == rules, (path, out.stderr[-2000:])
        assert f"receipts: {path.parent if path.name == '.complete' else path}: " in out.stderr
        assert_receipts_agree(work, "soup", SOUP_RUN)
    out = build(work, SOUP, "-n")
    assert "Nothing to be done" in out.stdout + out.stderr and "receipts:" not in out.stderr
    assert status(work).returncode == 0


@pytest.mark.slow
def test_an_edited_audit_is_made_again_before_final_takes_it(soup_finished, tmp_path):
    """Second hostile pass (2026-12-05): an ``audit.json`` edited by hand (a confirmed finding
    turned into none_found), then an ordinary ``snakemake results/soup/final``: only ``final``
    ran, took the edited file as newer input and recorded its hash, and ``status`` said
    verified. The audit writes its receipt (``audit.json.sha256``) now; the workflow finds the
    edit, runs the audit again and then ``final``, and the verdicts are the receipts' again."""
    work = copy_run(soup_finished, tmp_path / "w")
    audit = work / SOUP_RUN / "audit.json"
    original = json.loads(audit.read_text())
    receipt = (work / SOUP_RUN / "audit.json.sha256").read_text()
    assert receipt == f"{file_sha(audit)}  audit.json\n"  # sha256sum's format
    forged = {**original, "platform": {**original["platform"], "verdict": "none_found", "evidence": ["FORGED"]}}
    forged["task_defect"] = {**original["task_defect"], "evidence": ["FORGED"]}
    audit.write_text(json.dumps(forged))
    told = status(work, "soup")
    assert (
        told.returncode == 1 and f"{SOUP_RUN / 'audit.json'}: tampered: edited since the audit wrote it" in told.stdout
    )
    out = build(work, SOUP)
    assert set(jobs_run(out)) == {"audit", "final"}, out.stderr[-2000:]
    assert f"receipts: {SOUP_RUN / 'audit.json'}: tampered" in out.stderr
    again = json.loads(audit.read_text())
    assert {k: again[k]["verdict"] for k in original if isinstance(original[k], dict) and "verdict" in original[k]} == {
        k: original[k]["verdict"] for k in original if isinstance(original[k], dict) and "verdict" in original[k]
    }
    assert "FORGED" not in audit.read_text() and "FORGED" not in (work / SOUP / "summary.json").read_text()
    assert status(work).returncode == 0


@pytest.mark.slow
def test_an_edited_reference_or_score_rows_are_scored_again_before_final_takes_them(soup_finished, tmp_path):
    """Hostile (2026-12-05), on the tiny soup run: the fixed-start reference's value edited
    (0.45 -> 0.99) and every ``score`` of the official checkpoint's ``rows.jsonl`` set to 1, then
    ``rm -r final`` and a rerun: ``final/`` published fixed start 0.9900 and a significant
    McNemar gain, and ``status`` said verified. Now ``status`` says both files tampered; the rerun
    scores the reference and the checkpoint again, and ``final/`` holds what they score, every
    file it read recorded with the SHA-256 it has on disk."""
    work = copy_run(soup_finished, tmp_path / "w")
    ref = Path("results/soup/reference/fixed-start/final-scores")
    rows = SOUP_RUN / "final-scores/checkpoint-3/rows.jsonl"
    before = read(work / SOUP / "summary.json")
    value = read(work / ref / "summary.json")["value"]
    edited = read(work / ref / "summary.json")
    (work / ref / "summary.json").write_text(json.dumps({**edited, "value": 0.99}))
    lines = (work / rows).read_text().splitlines()
    (work / rows).write_text("".join(json.dumps({**json.loads(r), "score": 1}) + "\n" for r in lines))
    told = status(work, "soup")
    assert told.returncode == 1, told.stdout
    assert f"{ref / 'summary.json'}: tampered: edited since it was written" in told.stdout
    assert f"{rows}: tampered: edited since it was written" in told.stdout
    shutil.rmtree(work / SOUP)
    out = build(work, SOUP)
    assert set(jobs_run(out)) == {"reference_fixed_start", "score", "official", "audit", "final"}, out.stderr[-3000:]
    assert f"receipts: {ref / 'summary.json'}: tampered" in out.stderr
    after = read(work / SOUP / "summary.json")
    assert after["references"]["fixed_start"]["value"] == value != 0.99
    assert after["comparisons"] == before["comparisons"]  # the same rows, scored again
    assert "0.9900" not in (work / SOUP / "report.md").read_text()
    assert all(digest == file_sha(work / name) for name, digest in after["inputs_sha256"].items())
    assert {str(ref / "summary.json"), str(ref / "rows.jsonl"), str(rows)} <= set(after["inputs_sha256"])
    assert status(work).returncode == 0


@pytest.mark.slow
def test_a_dry_run_beside_a_running_instance_leaves_the_receipts_alone(soup_finished, tmp_path):
    """A new user's finding: ``snakemake -n`` started while another instance builds (its lock
    files in ``.snakemake/locks/``) re-verified the receipts of a score folder being written,
    marked it stale and set files aside, so the next run re-scored a finished checkpoint. With
    another instance's lock the receipts are left to it (one line says so); without one the
    same dry run marks the half-written folder stale, as before."""
    work = copy_run(soup_finished, tmp_path / "w")
    (work / SOUP_RUN / "final-scores/checkpoint-3/.complete").unlink()  # as while the score job writes
    before = {
        p: file_sha(p) for p in sorted((work / "results").rglob("*")) if p.is_file() and p.name != ".hash-cache.json"
    }
    locks = work / ".snakemake/locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text(str(work / "results/soup/final"))  # as Snakemake writes them
    out = build(work, SOUP, "-n", check=False)
    assert "receipts: not re-verified: another Snakemake instance holds this folder's lock" in out.stderr
    after = {
        p: file_sha(p) for p in sorted((work / "results").rglob("*")) if p.is_file() and p.name != ".hash-cache.json"
    }
    assert after == before
    shutil.rmtree(locks)
    out = build(work, SOUP, "-n")
    assert f"receipts: {SOUP_RUN / 'final-scores/checkpoint-3'}" in out.stderr, out.stderr[-2000:]


@pytest.mark.slow
def test_a_config_file_that_changes_nothing_a_replay_reads_reruns_nothing(soup_finished, tmp_path):
    """Issue 27: the replay's parameters do not name the config files (the sandbox shows none), so
    one more --configfile that sets what is set already leaves every finished job as it is."""
    extra = tmp_path / "extra.yaml"  # (the finished folder itself: its .snakemake/ holds the jobs' params)
    extra.write_text("isolation: bwrap\nsandbox_hide: []\n")
    out = build(soup_finished, SOUP, "--configfile", str(extra), "-n")
    assert out.returncode == 0 and "Nothing to be done" in out.stdout + out.stderr, out.stdout[-2000:]


@pytest.mark.slow
def test_soup_deleted_record_reruns_the_replay_without_recomputing(soup_finished, tmp_path):
    work = copy_run(soup_finished, tmp_path / "w")
    marker_mtime = (work / SOUP_RUN / "validation/checkpoint-3.json").stat().st_mtime_ns
    (work / SOUP_RUN / "replay/record.json").unlink()
    lines = status(work, "soup")
    assert lines.returncode == 1 and "soup/shipped-seed42: missing" in lines.stdout
    out = build(work, SOUP)
    assert set(jobs_run(out)) == {"replay", "official", "audit", "final"}
    log = (work / "logs/soup/shipped-seed42/replay.log").read_text()
    assert "checkpoint-3 is already published; nothing to compute" in log
    record = assert_receipts_agree(work, "soup", SOUP_RUN)
    assert record["retained"] == [3] and record["steps"] == 3 and record["publication_count"] == 1
    assert record["resumed"] is True
    assert (work / SOUP_RUN / "validation/checkpoint-3.json").stat().st_mtime_ns == marker_mtime  # not re-validated
    # official.json was set aside, not deleted (Snakemake reruns nothing for a deleted checkpoint
    # output otherwise), and the copy set aside is dropped once the rebuild succeeded
    assert "official.json: set aside as results/soup/shipped-seed42/.receipts/official.json.previous" in out.stderr
    assert not list((work / SOUP_RUN / ".receipts").glob("*.previous"))


@pytest.mark.slow
def test_soup_changed_checkpoint_never_gives_a_stale_official(soup_finished, tmp_path):
    work = copy_run(soup_finished, tmp_path / "w")
    flip_middle_byte(work / SOUP_RUN / "replay/checkpoint-3/model.pt")
    out = build(work, SOUP, "-n")  # a dry run says what is stale and removes nothing
    assert "validation/checkpoint-3.json: stale: checkpoint changed after publication" in out.stderr
    assert (work / SOUP / ".complete").exists()
    final_before = sha256_tree(work / SOUP)
    out = build(work, SOUP, check=False)
    # the only checkpoint is now invalid: no official result; the last final/ is kept as it was
    # (a failed run deletes nothing) and the receipts say it is stale
    assert out.returncode != 0 and sha256_tree(work / SOUP) == final_before
    assert "soup/final: stale" in status(work, "soup").stdout
    assert (work / "logs/soup/final.log").read_text().strip().splitlines()[-1] == (
        "error: results/soup/shipped-seed42/official.json: official: no valid checkpoint: there is"
        " no official result; a checkpoint changed after its publication: start a fresh formal"
        " replay: rm -r results/soup/shipped-seed42/replay"
        " results/soup/shipped-seed42/replay-state, then rerun"
    )
    assert read(work / SOUP_RUN / "official.json")["official"] is None
    assert_receipts_agree(work, "soup", SOUP_RUN, tampered=(3,), final_current=False)
    report = status(work, "soup")
    assert report.returncode == 1 and "checkpoint-3: tampered" in report.stdout
    # the documented repair: a fresh formal replay of the run
    shutil.rmtree(work / SOUP_RUN / "replay")
    shutil.rmtree(work / SOUP_RUN / "replay-state")
    build(work, SOUP)
    assert_receipts_agree(work, "soup", SOUP_RUN)
    assert status(work, "soup").returncode == 0


@pytest.mark.slow
def test_soup_resume_at_its_last_publication_and_before_it(soup_finished, tmp_path):
    work = copy_run(soup_finished, tmp_path / "w")
    for d in ("replay", "replay-state", "validation", "final-scores"):
        shutil.rmtree(work / SOUP_RUN / d)
    target = str(SOUP_RUN / "replay/record.json")
    env = {"REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH": "3"}  # dies right after publishing checkpoint-3
    out = run_env(work, env, target, *GPU)
    assert out.returncode != 0 and not (work / target).exists()
    assert (work / SOUP_RUN / "replay/checkpoint-3").is_dir()
    build(work, target)  # last step: already published, nothing recomputed
    record = read(work / target)
    assert record["retained"] == [3] and record["publication_count"] == 1 and record["steps"] == 3
    # one step before the end: killed before its only publication -> computed and published once
    (work / target).unlink()
    shutil.rmtree(work / SOUP_RUN / "replay/checkpoint-3")
    (work / SOUP_RUN / "replay/publications.jsonl").unlink()
    build(work, target)
    record = read(work / target)
    assert record["retained"] == [3] and record["publication_count"] == 1 and record["resumed"] is True
    assert "already published" not in (work / "logs/soup/shipped-seed42/replay.log").read_text()
    build(work, SOUP)
    assert_receipts_agree(work, "soup", SOUP_RUN)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


@pytest.mark.slow
def test_a_new_replay_that_fails_costs_the_old_one_nothing(soup_finished, tmp_path):
    """A changed config (here the budget) makes a new formal replay of the same run. When it
    fails, every file of the old replay's publications and state is kept, byte for byte, in
    ``superseded/`` (the record only is Snakemake's declared output, which it removes before
    the job); putting them back under the old config resumes the old replay and publishes
    the same checkpoints without training them again."""
    import yaml

    work = copy_run(soup_finished, tmp_path / "w")
    run = work / SOUP_RUN
    old = {f"{d}/{k}": v for d in ("replay", "replay-state") for k, v in _files(run / d).items()}
    record = read(run / "replay/record.json")
    config = yaml.safe_load((work / "config/config.yaml").read_text())
    changed = yaml.safe_load((work / "config/config.yaml").read_text())
    changed["tasks"]["soup"]["budget"]["internal_deadline_s"] -= 1
    write_config(work, changed)
    # (the copy has no Snakemake metadata of the run, so the changed parameter is forced)
    target = str(SOUP_RUN / "replay/record.json")
    out = run_env(work, {"REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH": "3"}, target, *GPU, "--forcerun", "replay")
    assert out.returncode != 0 and "nothing deleted" in (work / "logs/soup/shipped-seed42/replay.log").read_text()
    (kept,) = (run / "superseded").iterdir()
    moved = _files(kept)
    assert {k: moved.get(k) for k in old if k != "replay/record.json"} == {
        k: v for k, v in old.items() if k != "replay/record.json"
    }
    assert "replay-attempts.json" in moved
    # put back under the old config: the same replay, resumed at its end
    for name in ("replay", "replay-state"):
        shutil.rmtree(run / name)
    (run / "replay-attempts.json").unlink()
    for path in kept.iterdir():
        os.replace(path, run / path.name)
    write_config(work, config)
    build(work, SOUP)
    again = read(run / "replay/record.json")
    assert again["resumed"] is True and again["checkpoints"] == record["checkpoints"]
    assert again["publication_count"] == record["publication_count"]
    assert_receipts_agree(work, "soup", SOUP_RUN)


def test_supersede_moves_every_file_and_deletes_nothing(tmp_path):
    """The move itself: every file under its own name, byte for byte; nothing to keep moves
    nothing; a second replaced replay in the same second gets its own folder; an identity the
    candidate could have forged names no other place."""
    from replaykit.harness.replay import supersede

    run = tmp_path / "run"
    pub, state, attempts = run / "replay", run / "replay-state", run / "replay-attempts.json"
    (pub / "checkpoint-3").mkdir(parents=True)
    (pub / "checkpoint-3" / "adapter_model.safetensors").write_bytes(b"w3")
    (pub / "publications.jsonl").write_text("{}\n")
    state.mkdir()
    (state / "identity.json").write_text('{"identity": "abcdef0123456789ff"}')
    attempts.write_text("[]")
    (pub / "link").symlink_to("/etc/hostname")  # planted by a candidate: moved as a link
    before = _files(run)
    kept = supersede(pub, state, attempts, now=0.0)
    assert kept == run / "superseded" / "19700101T000000Z-abcdef012345"
    assert _files(kept) == before
    assert (kept / "replay/link").is_symlink() and os.readlink(kept / "replay/link") == "/etc/hostname"
    assert list(pub.iterdir()) == [] and list(state.iterdir()) == [] and not attempts.exists()
    assert supersede(pub, state, attempts, now=0.0) is None
    (pub / "x").write_text("1")
    (state / "identity.json").write_text('{"identity": ["../x"]}')
    second = supersede(pub, state, attempts, now=0.0)
    assert second == run / "superseded" / "19700101T000000Z-unknown"
    (pub / "y").write_text("2")
    (state / "identity.json").write_text('{"identity": ["../x"]}')
    assert supersede(pub, state, attempts, now=0.0).name == "19700101T000000Z-unknown-2"
    # the state removed by hand (the documented repair), its attempts left: kept, no identity
    shutil.rmtree(state)
    attempts.write_text("[]")
    assert supersede(pub, state, attempts, now=0.0).name == "19700101T000000Z-unknown-3"
    assert not attempts.exists() and state.is_dir()
    assert sorted(p.name for p in (run / "superseded").iterdir()) == [
        "19700101T000000Z-abcdef012345",
        "19700101T000000Z-unknown",
        "19700101T000000Z-unknown-2",
        "19700101T000000Z-unknown-3",
    ]


@pytest.mark.parametrize("kind", ["link", "file"])
def test_supersede_refuses_a_superseded_that_is_a_link_or_a_file_and_moves_nothing(tmp_path, kind):
    """A ``superseded`` that is a link (hostile test: the old checkpoints left the run folder
    for the link's target, said to be in the run) or a file (a raw NotADirectoryError) is one
    InputError naming it; the old replay stays where it is. A state's identity.json that is no
    JSON object with a string ``identity`` (the candidate writes the state) reads as none."""
    from replaykit.harness.errors import InputError
    from replaykit.harness.replay import recorded_identity, supersede

    run = tmp_path / "run"
    pub, state, attempts = run / "replay", run / "replay-state", run / "replay-attempts.json"
    (pub / "checkpoint-3").mkdir(parents=True)
    (pub / "checkpoint-3/adapter_model.safetensors").write_bytes(b"w3")
    state.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    if kind == "link":
        (run / "superseded").symlink_to(outside)
    else:
        (run / "superseded").write_text("")
    before = _files(run)
    with pytest.raises(InputError) as err:
        supersede(pub, state, attempts, now=0.0)
    assert err.value.path == str(run / "superseded") and "link or a file" in err.value.message
    assert _files(run) == before and list(outside.iterdir()) == []
    for text in ("[]", "not json", '{"identity": 5}', "[" * 100000):
        (state / "identity.json").write_text(text)
        assert recorded_identity(state) == ""
    (state / "identity.json").unlink()  # a FIFO (would hang the reader) or a link to /dev/zero: not read
    os.mkfifo(state / "identity.json")
    assert recorded_identity(state) == ""
    (state / "identity.json").unlink()
    (state / "identity.json").symlink_to("/dev/zero")
    assert recorded_identity(state) == ""
    (state / "identity.json").unlink()
    (state / "identity.json").write_text('{"identity": "ab12"}')
    assert recorded_identity(state) == "ab12" and recorded_identity(tmp_path / "none") == ""


def run_env(work, env: dict, *args) -> subprocess.CompletedProcess:
    cmd = [str(VENV_BIN / "snakemake"), "--workflow-profile", "none", *args]
    full = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **env)
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=full)


# ---------------------------------------------------------------- dpo (Trainer)


@pytest.fixture
def dpo_finished(dpo_run):
    """conftest's ``dpo_run`` (``DPO`` built with --cores 2, then the proxy): copied before use."""
    return dpo_run


@pytest.mark.slow
def test_dpo_changed_checkpoint_is_revalidated_and_rescored(dpo_finished, tmp_path):
    work = copy_run(dpo_finished, tmp_path / "w")
    assert_receipts_agree(work, "dpo", DPO_RUN)
    official = read(work / DPO_RUN / "official.json")["official"]["progress"]
    flip_middle_byte(work / DPO_RUN / f"replay/checkpoint-{official}/adapter_model.safetensors")
    started = time.time()
    out = build(work, DPO)
    assert set(jobs_run(out)) == {"validate", "score", "official", "audit", "final"}
    assert jobs_run(out)["validate"] == 1 and jobs_run(out)["score"] == 2  # its final and proxy scores
    assert_receipts_agree(work, "dpo", DPO_RUN, tampered=(official,))
    assert read(work / DPO / "summary.json")["official"]["progress"] != official
    assert "invalid: checkpoint changed after publication" in (work / DPO / "report.md").read_text()
    out = build(work, DPO)
    assert "Nothing to be done" in out.stdout + out.stderr
    print(f"rebuild after a changed checkpoint: {time.time() - started:.0f} s")


@pytest.mark.slow
def test_dpo_deleted_record_marker_and_score_are_rebuilt(dpo_finished, tmp_path):
    work = copy_run(dpo_finished, tmp_path / "w")
    mtimes = {p: p.stat().st_mtime_ns for p in (work / DPO_RUN).glob("validation/*.json")}
    (work / DPO_RUN / "replay/record.json").unlink()
    out = build(work, DPO)
    assert set(jobs_run(out)) == {"replay", "official", "audit", "final"}
    log = (work / "logs/dpo/shipped-seed42/replay.log").read_text()
    assert "[train] resumed at step 5 of 5: no training (max_steps)" in log and "step 6" not in log
    record = assert_receipts_agree(work, "dpo", DPO_RUN)
    assert record["steps"] == 5 and record["retained"] == [3, 4, 5] and record["publication_count"] == 5
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # the same checkpoints: not re-validated
    (work / DPO_RUN / "validation/checkpoint-4.json").unlink()
    (work / DPO_RUN / "final-scores/checkpoint-5/.complete").unlink()
    out = build(work, DPO)
    # checkpoint-4 re-validated, then scored on both splits; checkpoint-5's final score
    assert jobs_run(out) == {"validate": 1, "score": 3, "official": 1, "audit": 1, "final": 1}
    assert_receipts_agree(work, "dpo", DPO_RUN)
    # the run's proxy.json (built beside final/, not by it) still holds checkpoint-4's old proxy score
    told = status(work, "dpo")
    proxy_score = DPO_RUN / "proxy-scores/checkpoint-4/summary.json"
    assert told.returncode == 1, told.stdout
    assert f"{DPO_RUN / 'proxy.json'}: stale: made from another {proxy_score}" in told.stdout
    snakemake(work, str(DPO_RUN / "proxy.json"), *GPU)
    assert status(work, "dpo").returncode == 0


def wait_for(path: Path, text: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s")


@pytest.mark.slow
def test_dpo_kill_after_the_last_publication_resumes_without_training(tiny_llama, tmp_path):
    """The issue's case: kill -9 of snakemake right after `[publish] checkpoint-5` of a
    `max_steps: 5` replay, before the record; then --unlock and --rerun-incomplete. Saved at
    step 5 only (one publication: one validation and two scorings after the recovery, not 3
    and 6; the kill and the resume are the same)."""
    work = copy_workflow(tmp_path)
    cfg = tiny_config(tiny_llama)
    cfg["tasks"]["dpo"]["recipe"]["overrides"]["save_steps"] = 5
    write_config(work, cfg)
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH="5:hang",
    )  # holds the job after the publication
    proc = subprocess.Popen(
        [str(VENV_BIN / "snakemake"), DPO, *GPU, "--workflow-profile", "none"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    log = work / "logs/dpo/shipped-seed42/replay.log"
    wait_for(log, "[publish] checkpoint-5", 300)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert orphans_after(str(work), 12) == []  # within the driver's SIGTERM grace
    assert not (work / DPO_RUN / "replay/record.json").exists()
    snakemake(work, "--unlock", check=True)
    build(work, DPO, "--rerun-incomplete")
    log = log.read_text()
    assert "[train] resumed at step 5 of 5: no training (max_steps)" in log and "step 6" not in log
    record = assert_receipts_agree(work, "dpo", DPO_RUN)
    assert record["steps"] == 5 and record["retained"] == [5] and record["publication_count"] == 1
    assert record["resumed"] is True and [h["progress"] for h in record["train_history"]] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_dpo_kill_one_step_before_the_end_trains_only_the_last_step(tiny_llama, tmp_path):
    work = copy_workflow(tmp_path)
    write_config(work, tiny_config(tiny_llama))
    target = str(DPO_RUN / "replay/record.json")
    out = run_env(work, {"REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH": "4"}, target, *GPU)
    assert out.returncode != 0 and (work / DPO_RUN / "replay/checkpoint-4").is_dir()
    assert not (work / DPO_RUN / "replay/checkpoint-5").exists()
    build(work, target)
    log = (work / "logs/dpo/shipped-seed42/replay.log").read_text()
    assert "resuming from" in log and "[train] step 5/5" in log and "step 4/5" not in log and "step 6" not in log
    record = read(work / target)
    assert record["steps"] == 5 and record["retained"] == [3, 4, 5] and record["publication_count"] == 5


@pytest.mark.slow
@pytest.mark.parametrize("killed_after", [4, 3])  # rm's tiny max_steps is 4: its last step, one before
def test_rm_resume_never_trains_past_max_steps(tiny_llama, tmp_path, killed_after):
    from conftest import rm_config

    work = copy_workflow(tmp_path)
    write_config(work, rm_config(tiny_llama))
    target = "results/rm/shipped-seed42/replay/record.json"
    out = run_env(work, {"REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH": str(killed_after)}, target, *GPU)
    assert out.returncode != 0 and not (work / target).exists()
    build(work, target)
    log = (work / "logs/rm/shipped-seed42/replay.log").read_text()
    assert "step 5" not in log
    if killed_after == 4:
        assert "[train] resumed at step 4 of 4: no training (max_steps)" in log and "[train] step" not in log
    else:
        assert "[train] step 4/4" in log and "[train] step 3/4" not in log
    record = read(work / target)
    assert record["steps"] == 4 and record["retained"] == [2, 3, 4] and record["publication_count"] == 4
    for p in record["retained"]:
        assert record["checkpoints"][str(p)]["sha256"] == tree_sha(
            work / f"results/rm/shipped-seed42/replay/checkpoint-{p}"
        )


# ---------------------------------------------------------------- check_run by hand (fast)


def seal(folder: Path) -> None:
    """A folder's ``.complete`` as the steps write it, computed here: ``sha256sum``'s line for
    every file of the folder whose name starts with no dot."""
    names = sorted(p.name for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith("."))
    (Path(folder) / ".complete").write_text("".join(f"{file_sha(Path(folder) / n)}  {n}\n" for n in names))


def receipt(path: Path) -> None:
    """``<path>.sha256`` as the steps write it (``sha256sum``'s format), computed here."""
    Path(f"{path}.sha256").write_text(f"{file_sha(path)}  {Path(path).name}\n")


def fake_run(root: Path) -> Path:
    """A run with one retained checkpoint and every receipt written by hand, as the steps would."""
    run = root / "results/t/shipped-seed1"
    ckpt = run / "replay/checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "w.bin").write_bytes(b"\x00" * 64)
    tree = tree_sha(ckpt)
    record = run / "replay/record.json"
    record.write_text(json.dumps({"retained": [2], "checkpoints": {"2": {"sha256": tree}}}))
    marker = run / "validation/checkpoint-2.json"
    marker.parent.mkdir()
    marker.write_text(json.dumps({"valid": True, "checkpoint_sha256": tree, "recorded_sha256": tree}))
    scores = run / "final-scores/checkpoint-2"
    scores.mkdir(parents=True)
    summary = {
        "metric": "m",
        "direction": "maximize",
        "value": 0.5,
        "n": 2,
        "diagnostics": {},
        "uncertainty": {"value": 0.1, "kind": "se"},
        "advisories": [],
        "checkpoint_sha256": tree,
        "marker_sha256": file_sha(marker),
    }
    (scores / "summary.json").write_text(json.dumps(summary))
    (scores / "rows.jsonl").write_text('{"id": "a", "score": 1}\n{"id": "b", "score": 0}\n')
    seal(scores)
    official = run / "official.json"
    official.write_text(
        json.dumps(
            {
                "record_sha256": file_sha(record),
                "official": {"value": 0.5, "se": 0.1, "progress": 2, "checkpoint_sha256": tree},
                "checkpoints": [
                    {
                        "progress": 2,
                        "marker_sha256": file_sha(marker),
                        "summary_sha256": file_sha(scores / "summary.json"),
                    }
                ],
            }
        )
    )
    receipt(official)
    final = root / "results/t/final"
    final.mkdir()
    (final / "summary.json").write_text(
        json.dumps(
            {
                **summary,
                "official": {
                    "official": "results/t/shipped-seed1/official.json",
                    "progress": 2,
                    "checkpoint_sha256": tree,
                },
                "seeds": {"per_seed": [{"seed": 1, "value": 0.5, "official": "results/t/shipped-seed1/official.json"}]},
                "officials_sha256": {"results/t/shipped-seed1/official.json": file_sha(official)},
                "inputs_sha256": {"results/t/shipped-seed1/official.json": file_sha(official)},
            }
        )
    )
    seal(final)
    return run


def test_status_hashes_every_file_itself_and_a_forged_hash_cache_fools_it_not(tmp_path, monkeypatch):
    """Hostile (2026-12-02): a flipped byte of a checkpoint, then its ``.hash-cache.json`` entry
    rewritten to the file's new stat key with the old digest, and ``status`` said verified. The
    cache lies in the run folder, writable by whoever edits the run: ``status`` reads no cache."""
    from replaykit.harness.hashing import HashCache
    from replaykit.harness.verify import CACHE, check_run, status_lines

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel = Path("results/t/shipped-seed1")
    cache = HashCache(rel / CACHE)
    assert {f.state for f in check_run(rel, cache)} == {"verified"}
    cache.save()
    weights = run / "replay/checkpoint-2/w.bin"
    digest = file_sha(weights)
    flip_middle_byte(weights)
    entries = json.loads((rel / CACHE).read_text())
    st = weights.stat()
    entries[str(weights.resolve())] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest]
    (rel / CACHE).write_text(json.dumps(entries))
    assert {f.state for f in check_run(rel, HashCache(rel / CACHE))} == {"verified"}  # the forgery works there
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[0] == "t/shipped-seed1: stale (1 of 2 receipts verified)", lines


@pytest.mark.parametrize(
    "edit, reason",
    [
        ({"value": 0.99}, "summary.json: value 0.99 is not its official.json's 0.5"),
        (
            {"uncertainty": {"value": 0.01, "kind": "se"}},
            "summary.json: uncertainty 0.01 is not its official.json's 0.1",
        ),
        ({"official": {"progress": 1}}, "summary.json: progress 1 is not its official.json's 2"),
        ({"seeds": {"per_seed": [{"seed": 1, "value": 0.9}]}}, "summary.json: seed 1: value 0.9 is not"),
        ({"report": "| value | 0.99 |\n"}, "report.md: not the report rendered with summary.json"),
    ],
    ids=["value", "uncertainty", "progress", "seed", "report"],
)
def test_an_edited_final_number_is_tampered_for_status(tmp_path, monkeypatch, edit, reason):
    """Hostile (2026-12-03): ``final/summary.json``'s value (or ``report.md``'s) edited by hand,
    and ``status`` said verified: only the official.json hashes were compared. Now the headline
    and each seed's value are compared with the official.json files they come from, and
    ``report.md`` with the hash recorded when it was rendered."""
    from replaykit.harness.verify import check_final, status_lines

    fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    final = Path("results/t/final")
    (final / "report.md").write_text("| value | 0.5 |\n")
    summary = json.loads((final / "summary.json").read_text())
    summary["report_sha256"] = file_sha(final / "report.md")
    (final / "summary.json").write_text(json.dumps(summary))
    seal(final)  # as final/ is written; the edits below leave .complete as it is
    officials = ["results/t/shipped-seed1/official.json"]
    assert check_final(final, officials).state == "verified"
    if "report" in edit:
        (final / "report.md").write_text(edit["report"])
    else:
        for key, value in edit.items():
            summary[key] = {**summary[key], **value} if key == "official" else value
            if key == "seeds":
                summary[key]["per_seed"][0]["official"] = officials[0]
        (final / "summary.json").write_text(json.dumps(summary))
    finding = check_final(final, officials)
    assert finding.state == "tampered" and finding.reason.startswith(reason), finding.reason
    assert finding.invalidates == [str(final)]  # the workflow rebuilds final/ from the officials
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[-2] == "t/final: stale (0 of 1 receipts verified)", lines


def test_check_run_by_hand(tmp_path, monkeypatch):
    from replaykit.harness.verify import check_final, check_run, mark_stale, stamp_of, status_lines

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel = Path("results/t/shipped-seed1")
    assert {f.state for f in check_run(rel)} == {"verified"}
    assert check_final("results/t/final", [str(rel / "official.json")]).state == "verified"
    assert status_lines("results") == (
        [
            "t/shipped-seed1: verified (5 of 5 receipts verified)",
            "t/final: verified (1 of 1 receipts verified)",
        ],
        True,
    )
    # from another folder (README's `status --results tiny/results`): the official.json names
    # the final summary records are read from the results folder's workflow folder
    monkeypatch.chdir(tmp_path.parent)
    assert status_lines(tmp_path / "results") == (
        ["t/shipped-seed1: verified (5 of 5 receipts verified)", "t/final: verified (1 of 1 receipts verified)"],
        True,
    )
    monkeypatch.chdir(tmp_path)
    # a changed checkpoint: its marker is stale, and so is everything built from it
    flip_middle_byte(run / "replay/checkpoint-2/w.bin")
    findings = check_run(rel)
    stale = [f for f in findings if f.state != "verified"]
    assert [(f.path, f.state) for f in stale] == [(str(rel / "validation/checkpoint-2.json"), "stale")]
    assert "changed after publication" in stale[0].reason
    scores = rel / "final-scores/checkpoint-2"
    assert stale[0].invalidates == [
        str(rel / "validation/checkpoint-2.json"),
        str(scores / "summary.json"),
        str(scores / ".complete"),
        str(rel / "official.json"),
    ]
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[0] == "t/shipped-seed1: stale (1 of 2 receipts verified)"
    official_bytes = (run / "official.json").read_bytes()
    assert mark_stale(findings, "now") == stale[0].invalidates
    # nothing removed: a stamp per product, an input of its rule, says why it is rebuilt
    assert (run / "official.json").read_bytes() == official_bytes and (run / "replay/checkpoint-2").is_dir()
    stamp = json.loads(stamp_of(rel / "official.json").read_text())
    assert stamp == {"stale_since": "now", "receipts": [stale[0].line()]}
    assert stamp_of(rel / "official.json") == rel / ".receipts/official.json"
    (run / "official.json").unlink()
    assert check_final("results/t/final", [str(rel / "official.json")]).state == "stale"
    # a deleted record: official.json (which names it) must be rebuilt
    run2 = fake_run(tmp_path / "b")
    (run2 / "replay/record.json").unlink()
    [missing] = check_run(run2)
    assert missing.state == "missing" and missing.invalidates == [str(run2 / "official.json")]


def test_a_final_stamp_written_for_another_configs_officials_does_not_apply(tmp_path, monkeypatch):
    """A dry run with another candidate (new-user trial, 2026-12-05) marked final/ stale, and
    `status` then said so under the config that built it: final/'s stamp records the
    official.json files it was found stale against, and applies only to a final/ of those."""
    from replaykit.harness.verify import check_final, mark_stale, stamp_applies, stamp_of, status_lines

    fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    shipped = "results/t/shipped-seed1/official.json"
    other = ["results/t/beta-seed1/official.json", shipped]  # the other config's final/ is built from these
    finding = check_final("results/t/final", other)
    assert (finding.state, finding.reason) == ("stale", "results/t/beta-seed1/official.json is missing")
    time.sleep(0.01)  # the stamp newer than final/'s receipt, as a later invocation writes it
    assert mark_stale([finding], "now", {"results/t/final": other}) == ["results/t/final"]
    stamp = json.loads(stamp_of("results/t/final").read_text())
    assert stamp["officials"] == sorted(other)
    assert stamp_applies("results/t/final", list(reversed(other)))  # the other config: rebuild
    assert not stamp_applies("results/t/final", [shipped])  # the config that built it: nothing to do
    assert status_lines("results", ["t"])[1]  # status: final/ as its own summary names it, verified
    # a stamp for the officials final/ is built from (its receipts were being rebuilt) is reported
    mark_stale([finding], "now", {"results/t/final": [shipped]})
    lines, ok = status_lines("results", ["t"])
    assert not ok and "marked stale by the workflow" in lines[-1] and stamp_applies("results/t/final", [shipped])


def test_status_of_an_unknown_task_or_folder_is_refused_and_a_known_task_without_runs_named(tmp_path):
    (tmp_path / "results/gone").mkdir(parents=True)  # runs of a task whose plug-in was removed
    out = status(tmp_path, "dpo", "nosuch")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: command line: task: 'nosuch': unknown task (known: ddpo, digress, dpo, rm")
    out = status(tmp_path, "dpo", "gone")
    assert (out.returncode, out.stdout.strip()) == (0, "results: no runs of dpo, gone")
    out = status(tmp_path, "--results", "elsewhere")
    assert (
        out.returncode == 2
        and out.stderr.strip() == "error: elsewhere: --results: not a folder (the workflow's results/)"
    )


def test_status_says_final_is_stale_when_its_run_is_not_verified_or_the_workflow_marked_it(tmp_path, monkeypatch):
    """New user (2026-12-04): with its official run's record deleted, ``status`` said the run
    missing and ``final/`` verified; with the workflow's stale stamp for ``final/`` written (a
    later invocation found it made from another official.json), still verified. Both now make
    ``final/`` stale; a stamp older than ``final/``'s ``.complete`` (rebuilt since) does not."""
    import os

    from replaykit.harness.verify import status_lines

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert status_lines("results", ["t"]) == (
        ["t/shipped-seed1: verified (5 of 5 receipts verified)", "t/final: verified (1 of 1 receipts verified)"],
        True,
    )
    stamp = Path("results/t/.receipts/final")
    stamp.parent.mkdir()
    stamp.write_text(json.dumps({"stale_since": "then", "receipts": ["results/t/final: stale: made from another x"]}))
    done = Path("results/t/final/.complete")
    os.utime(stamp, ns=(done.stat().st_mtime_ns - 10**9,) * 2)  # older: final/ rebuilt since
    assert status_lines("results", ["t"])[1] is True
    os.utime(stamp, ns=(done.stat().st_mtime_ns + 10**9,) * 2)
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[1:] == [
        "t/final: stale (0 of 1 receipts verified)",
        f"  results/t/final: stale: marked stale by the workflow ({stamp}): "
        "results/t/final: stale: made from another x",
    ], lines
    stamp.unlink()
    (run / "replay/record.json").unlink()
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[-2:] == [
        "t/final: stale (0 of 1 receipts verified)",
        "  results/t/final: stale: built from results/t/shipped-seed1, whose receipts are not verified",
    ], lines


def test_status_vouches_for_a_final_only_through_runs_of_its_own_task(tmp_path, monkeypatch):
    """Hostile re-test (2026-12-04): final/'s summary repointed (hashes unchanged) at a copy of
    its run under another task's folder, then the real run's record deleted: status said the
    final verified. Now a named run outside ``results/<task>/`` makes it stale; an
    ``officials_sha256`` that is not a mapping is stale too (was an AttributeError)."""
    from replaykit.harness.verify import status_lines

    fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    shutil.copytree("results/t/shipped-seed1", "results/u/shipped-seed1")
    summary_path = Path("results/t/final/summary.json")
    text = summary_path.read_text().replace("results/t/shipped-seed1", "results/u/shipped-seed1")
    summary_path.write_text(text)
    seal(summary_path.parent)  # its receipt rewritten too: the runs it names are what is checked
    Path("results/t/shipped-seed1/replay/record.json").unlink()
    lines, ok = status_lines("results", ["t"])
    assert (
        not ok and lines[-1] == "  results/t/final: stale: built from results/u/shipped-seed1, not a run of results/t"
    )
    summary = json.loads(text)
    summary["officials_sha256"] = ["results/u/shipped-seed1/official.json"]
    summary_path.write_text(json.dumps(summary))
    assert status_lines("results", ["t"])[0][-1] == (
        "  results/t/final: stale: its summary names no official.json hashes"
    )


def test_status_tells_a_running_replay_from_a_stopped_one(tmp_path, monkeypatch):
    """A run with published checkpoints and no record (new user, 2026-12-03: ``status`` said
    "not replayed yet" while the replay trained, and after it was killed): its attempts file
    tells which -- seen alive within a minute (the driver writes every 5 s), ended with a
    cause, or never ended (the driver killed) -- and how many checkpoints a rerun resumes from."""
    from replaykit.harness.verify import status_lines, unrecorded

    monkeypatch.chdir(tmp_path)
    run = Path("results/dpo/shipped-seed42")
    for progress in (8, 16):
        (run / "replay" / f"checkpoint-{progress}").mkdir(parents=True)
    assert unrecorded(run, now=1000.0) == "not replayed yet (2 checkpoints published)"
    attempt = {"attempt": 1, "started_unix": 900.0, "last_seen_unix": 997.0, "ended_unix": None}
    attempt.update(exit=None, cause="unknown", cause_detail="no end recorded yet")
    (run / "replay-attempts.json").write_text(json.dumps([attempt]))
    assert unrecorded(run, now=1000.0) == "replaying now (attempt 1, seen 3 s ago; 2 checkpoints published)"
    assert unrecorded(run, now=1057.0).startswith("replaying now (attempt 1, seen 60 s ago")
    assert unrecorded(run, now=1058.0) == (
        "stopped before its record (attempt 1: no end recorded: its driver was killed, or its machine lost; "
        "2 checkpoints published); running the workflow again resumes it"
    )
    ended = {**attempt, "attempt": 2, "ended_unix": 998.0, "exit": 130, "cause": "platform", "cause_detail": "SIGINT"}
    (run / "replay-attempts.json").write_text(json.dumps([attempt, ended]))
    assert unrecorded(run, now=1000.0) == (
        "stopped before its record (attempt 2: SIGINT; 2 checkpoints published); running the workflow again resumes it"
    )
    lines, ok = status_lines("results")
    assert not ok and lines == [
        "dpo/shipped-seed42: missing (0 of 1 receipts verified)",
        f"  {run / 'replay' / 'record.json'}: missing: {unrecorded(run)}",
    ]


def test_an_audit_edited_after_final_is_tampered_for_status_and_not_shown_as_the_audit(tmp_path, monkeypatch):
    """Hostile (2026-12-05): ``agent_behaviour`` set to none_found by hand in a run's
    ``audit.json`` (it was confirmed); ``audit`` printed the edit and exited 0, and ``status``
    said ``final/`` verified although ``final/summary.json`` records another SHA-256 of that
    file. Both now compare the file with the hash ``final/`` recorded, for the official run's
    audit and the others'."""
    from replaykit.audit import show
    from replaykit.harness.audit.checks import SECTIONS
    from replaykit.harness.verify import check_final

    fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    audit = Path("results/t/shipped-seed1/audit.json")
    sections = {s: {"verdict": "none_found", "evidence": [], "checks": []} for s in SECTIONS}
    sections["agent_behaviour"] = {"verdict": "confirmed", "evidence": ["submitted early"], "checks": []}
    audit.write_text(json.dumps(sections))
    final = Path("results/t/final")
    summary = json.loads((final / "summary.json").read_text())
    summary["audit"] = {"run": "shipped-seed1", "path": str(audit), "sha256": file_sha(audit), "others": []}
    (final / "summary.json").write_text(json.dumps(summary))
    seal(final)
    officials = ["results/t/shipped-seed1/official.json"]
    assert check_final(final, officials).state == "verified"
    lines, confirmed = show("t", None, "results")
    assert confirmed and lines[1:] == [
        f"  {s}: {sections[s]['verdict']}" + (" -- submitted early" if s == "agent_behaviour" else "") for s in SECTIONS
    ]
    recorded = file_sha(audit)
    sections["agent_behaviour"] = {"verdict": "none_found", "evidence": [], "checks": []}
    audit.write_text(json.dumps(sections))
    finding = check_final(final, officials)
    assert finding.state == "tampered" and finding.reason == (
        f"{audit}: not the audit final/ was made with (its hash differs from summary.json's)"
    )
    lines, confirmed = show("t", None, "results")
    assert confirmed and lines == [
        f"t/shipped-seed1 ({audit}):",
        f"  {audit}: edited since it was written (SHA-256 {file_sha(audit)[:12]}, final/summary.json recorded "
        f"{recorded[:12]}): its verdicts are not the audit's; run the snakemake command that built it again, "
        "which sees the edit and audits the run again",
    ]
    # third pass: before final/ exists, the audit's own receipt (audit.json.sha256) tells the
    # edit; a file that is no audit, or gone, is one line too, never a traceback
    summary.pop("audit")
    (final / "summary.json").write_text(json.dumps(summary))
    receipt = Path(f"{audit}.sha256")
    receipt.write_text(f"{recorded}  audit.json\n")
    lines, confirmed = show("t", None, "results")
    assert confirmed and lines[1].startswith(f"  {audit}: edited since it was written (SHA-256 ")
    assert f"audit.json.sha256 recorded {recorded[:12]}" in lines[1]
    for text in ("{}", "[]", "3", "\xff\xfe"):
        audit.write_text(text, errors="surrogateescape")
        receipt.write_text(f"{file_sha(audit)}  audit.json\n")
        lines, confirmed = show("t", None, "results")
        assert confirmed and lines[1:] == [
            f"  {audit}: not an audit (no verdict of task_defect, protocol_exposure, agent_behaviour, platform)"
        ], (text, lines)
    audit.unlink()
    audit.mkdir()  # no file
    lines, confirmed = show("t", None, "results")
    assert confirmed and lines[1:] == [
        f"  {audit}: not an audit (no verdict of task_defect, protocol_exposure, agent_behaviour, platform)"
    ]
    audit.rmdir()
    audit.write_text(json.dumps(sections))
    # another run's audit, recorded under "others", is checked the same way
    summary["audit"] = {"run": "x", "path": "results/t/x/audit.json", "sha256": "0" * 64, "others": []}
    summary["audit"]["others"] = [{"run": "shipped-seed1", "path": str(audit), "sha256": recorded}]
    (final / "summary.json").write_text(json.dumps(summary))
    assert check_final(final, officials).reason.startswith("results/t/x/audit.json: not the audit")


def test_audit_names_the_folder_its_evidence_paths_are_relative_to(tmp_path, monkeypatch):
    """New user (2026-12-05): ``audit soup --results tiny/results`` headed each run with
    ``tiny/results/...`` while its evidence said ``results/soup/...`` (the workflow's working
    directory, ``tiny/``), which from the launch folder points at the real runs. A first line
    now names that folder; from inside it, nothing is added."""
    from replaykit.audit import show
    from replaykit.harness.audit.checks import SECTIONS

    fake_run(tmp_path / "tiny")
    sections = {s: {"verdict": "none_found", "evidence": ["results/t/x.json:1: ok"], "checks": []} for s in SECTIONS}
    Path(tmp_path / "tiny/results/t/shipped-seed1/audit.json").write_text(json.dumps(sections))
    monkeypatch.chdir(tmp_path)
    lines, confirmed = show("t", None, "tiny/results")
    assert not confirmed and lines[:2] == [
        "(evidence paths are relative to tiny/, the workflow's working directory)",
        "t/shipped-seed1 (tiny/results/t/shipped-seed1/audit.json):",
    ]
    monkeypatch.chdir(tmp_path / "tiny")
    assert show("t", None, "results")[0][0] == "t/shipped-seed1 (results/t/shipped-seed1/audit.json):"


# ------------------------------------------------- every file a published number comes from


def scores_of(run: Path) -> Path:
    return run / "final-scores/checkpoint-2"


def test_edited_score_rows_are_tampered_for_status_and_refused_by_their_readers(tmp_path, monkeypatch):
    """Hostile (2026-12-05): every ``score`` of a checkpoint's ``rows.jsonl`` set to 1, ``final/``
    rebuilt: its paired McNemar test read a significant gain, and ``status`` said verified (no
    receipt named the rows). The score's ``.complete`` lists the SHA-256 of ``rows.jsonl`` and
    ``summary.json`` now: ``status`` says the rows tampered, the workflow scores the checkpoint
    again (the stamps of the score, ``official.json`` and ``final/``), and a reader of the rows
    refuses them in one line."""
    from replaykit.harness.errors import InputError
    from replaykit.harness.results import paired_comparison
    from replaykit.harness.verify import check_run, reverify, stamp_of, status_lines

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel, scores = Path("results/t/shipped-seed1"), scores_of(Path("results/t/shipped-seed1"))
    listed = (scores / ".complete").read_text().splitlines()
    assert listed == [
        f"{file_sha(scores / 'rows.jsonl')}  rows.jsonl",
        f"{file_sha(scores / 'summary.json')}  summary.json",
    ]
    assert paired_comparison(scores, scores, n_boot=10, seed=0)["difference"] == 0.0
    recorded = file_sha(scores / "rows.jsonl")
    (scores_of(run) / "rows.jsonl").write_text('{"id": "a", "score": 1}\n{"id": "b", "score": 1}\n')
    bad = [f for f in check_run(rel) if f.state != "verified"]
    assert [(f.path, f.state) for f in bad] == [(str(scores / "rows.jsonl"), "tampered")]
    assert bad[0].reason == (
        f"edited since it was written (SHA-256 {file_sha(scores / 'rows.jsonl')[:12]}, "
        f"{scores / '.complete'} recorded {recorded[:12]})"
    )
    assert bad[0].invalidates == [str(scores / "summary.json"), str(scores / ".complete"), str(rel / "official.json")]
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[:2] == ["t/shipped-seed1: stale (3 of 4 receipts verified)", f"  {bad[0].line()}"]
    assert lines[-1] == "  results/t/final: stale: built from results/t/shipped-seed1, whose receipts are not verified"
    with pytest.raises(InputError) as refused:
        paired_comparison(scores, scores, n_boot=10, seed=0)
    assert str(refused.value).startswith(f"{scores / 'rows.jsonl'}: tampered: edited since it was written")
    # the workflow's step: the score, official.json and final/ are made again (their stamps)
    said = []
    products = reverify([str(rel)], {"results/t/final": [str(rel / "official.json")]}, say=said.append)
    assert products == [*bad[0].invalidates, "results/t/final"]
    assert stamp_of(scores / "summary.json").is_file() and stamp_of("results/t/final").is_file()
    assert said[0] == f"receipts: {bad[0].line()}"
    # a receipt that names no file (written before receipts listed them, or emptied) vouches for nothing
    (scores / ".complete").write_text("")
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.path, finding.state) == (str(scores / ".complete"), "stale")
    with pytest.raises(InputError, match="records no SHA-256 of it"):
        paired_comparison(scores, scores, n_boot=10, seed=0)
    # nor does a receipt of the kind a lone file has (only the folder's .complete vouches for rows)
    (scores / ".complete").unlink()
    receipt(scores / "rows.jsonl")
    with pytest.raises(InputError, match=rf"no receipt \({scores / '.complete'} is not there\)"):
        paired_comparison(scores, scores, n_boot=10, seed=0)


def record_rows(run: Path) -> None:
    """``official.json`` recording its score's rows as ``official`` writes it now (``rows_sha256``),
    with ``final/`` recording the rows it read; receipts rewritten."""
    doc = read(run / "official.json")
    doc["checkpoints"][0]["rows_sha256"] = file_sha(scores_of(run) / "rows.jsonl")
    (run / "official.json").write_text(json.dumps(doc))
    receipt(run / "official.json")
    final = run.parent / "final"
    summary = read(final / "summary.json")
    official = "results/t/shipped-seed1/official.json"
    summary["officials_sha256"][official] = summary["inputs_sha256"][official] = file_sha(run / "official.json")
    summary["inputs_sha256"]["results/t/shipped-seed1/final-scores/checkpoint-2/rows.jsonl"] = file_sha(
        scores_of(run) / "rows.jsonl"
    )
    (final / "summary.json").write_text(json.dumps(summary))
    seal(final)


@pytest.mark.parametrize("name", ["summary.json", "rows.jsonl"])
def test_a_score_rewritten_with_its_receipt_is_tampered_and_scored_again(tmp_path, monkeypatch, name):
    """Hostile (2026-12-05): a score's ``summary.json`` value 0.4 -> 0.95 (or its ``rows.jsonl``
    rewritten: the McNemar comparison flipped to a significant gain), and its ``.complete`` line
    recomputed: the score passed its own receipt, ``status`` called ``official.json`` (or
    ``final/``) stale only, and the rerun rebuilt them FROM THE EDITED SCORE. The hashes are
    unkeyed, but ``official.json`` recorded the score's before the edit: the score is
    ``tampered`` and its stamp written, so it is scored again from its checkpoint; ``official.json``
    and ``final/`` follow from the new score."""
    from replaykit.harness.verify import check_run, reverify, stamp_of, status_lines

    run = fake_run(tmp_path)
    record_rows(run)
    monkeypatch.chdir(tmp_path)
    rel, scores = Path("results/t/shipped-seed1"), scores_of(Path("results/t/shipped-seed1"))
    assert all(f.state == "verified" for f in check_run(rel))
    assert status_lines("results", ["t"])[1]
    recorded = file_sha(scores / name)
    if name == "summary.json":
        doc = read(scores / name)
        doc["value"] = 0.95
        (scores / name).write_text(json.dumps(doc))
    else:
        (scores / name).write_text('{"id": "a", "score": 1}\n{"id": "b", "score": 1}\n')
    seal(scores)  # the receipt recomputed consistently
    bad = [f for f in check_run(rel) if f.state != "verified"]
    assert [(f.path, f.state) for f in bad] == [(str(scores / name), "tampered")]
    assert bad[0].reason.startswith(
        f"its downstream record disagrees: {rel / 'official.json'} recorded SHA-256 {recorded[:12]}, "
        f"it is {file_sha(scores / name)[:12]}"
    )
    assert bad[0].invalidates == [str(scores / "summary.json"), str(scores / ".complete"), str(rel / "official.json")]
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[:2] == ["t/shipped-seed1: stale (3 of 4 receipts verified)", f"  {bad[0].line()}"]
    said = []
    products = reverify([str(rel)], {"results/t/final": [str(rel / "official.json")]}, say=said.append)
    assert products == [*bad[0].invalidates, "results/t/final"]
    assert stamp_of(scores / "summary.json").is_file()  # scored again, not official.json rebuilt from it
    assert said[0] == f"receipts: {bad[0].line()}"


def test_score_rows_rewritten_with_their_receipt_are_blamed_by_final_too(tmp_path, monkeypatch):
    """An ``official.json`` made before it recorded its score's rows cannot tell a consistent
    rewrite of ``rows.jsonl`` and its ``.complete`` line; ``final/``, which recorded the rows it
    read (``inputs_sha256``), can: the rows are ``tampered`` and the score is scored again
    (never ``final/`` rebuilt from them). So is an edited fixed-start reference, and an
    ``official.json`` rewritten with its receipt is made again from its scores."""
    from replaykit.harness.verify import check_final, reverify, stamp_of, status_lines

    run = fake_run(tmp_path)
    ref, _ = fake_task_products(tmp_path)
    monkeypatch.chdir(tmp_path)
    final = read(run.parent / "final/summary.json")
    final["inputs_sha256"]["results/t/shipped-seed1/final-scores/checkpoint-2/rows.jsonl"] = file_sha(
        scores_of(run) / "rows.jsonl"
    )
    (run.parent / "final/summary.json").write_text(json.dumps(final))
    seal(run.parent / "final")
    rel, scores = Path("results/t/shipped-seed1"), scores_of(Path("results/t/shipped-seed1"))
    officials = [str(rel / "official.json")]
    assert check_final("results/t/final", officials).state == "verified"
    (scores / "rows.jsonl").write_text('{"id": "a", "score": 1}\n{"id": "b", "score": 1}\n')
    seal(scores)
    finding = check_final("results/t/final", officials)
    assert (finding.path, finding.state) == (str(scores / "rows.jsonl"), "tampered")
    assert finding.invalidates == [
        str(scores / "summary.json"),
        str(scores / ".complete"),
        str(rel / "official.json"),
        "results/t/final",
    ]
    lines, ok = status_lines("results", ["t"])
    assert not ok and f"  {finding.line()}" in lines
    products = reverify([str(rel)], {"results/t/final": officials}, say=lambda _: None)
    assert products == finding.invalidates and stamp_of(scores / "summary.json").is_file()
    # the fixed-start reference: scored again
    seal(scores)
    (scores / "rows.jsonl").write_text('{"id": "a", "score": 1}\n{"id": "b", "score": 0}\n')
    seal(scores)
    assert check_final("results/t/final", officials).state == "verified"
    doc = read(ref / "summary.json")
    doc["value"] = 0.99
    (ref / "summary.json").write_text(json.dumps(doc))
    seal(ref)
    finding = check_final("results/t/final", officials)
    assert (finding.path, finding.state) == (str(ref.relative_to(tmp_path) / "summary.json"), "tampered")
    assert finding.invalidates[:2] == [str(ref.relative_to(tmp_path) / n) for n in ("summary.json", ".complete")]
    # official.json rewritten with its receipt: made again from its scores
    doc = read(run / "official.json")
    doc["official"]["value"] = 0.99
    (run / "official.json").write_text(json.dumps(doc))
    receipt(run / "official.json")
    doc = read(ref / "summary.json")
    doc["value"] = 0.45
    (ref / "summary.json").write_text(json.dumps(doc))
    seal(ref)
    finding = check_final("results/t/final", officials)
    assert (finding.path, finding.state, finding.invalidates) == (
        str(rel / "official.json"),
        "tampered",
        [str(rel / "official.json"), "results/t/final"],
    )


def test_an_edited_official_json_is_tampered_and_final_refuses_it(tmp_path, monkeypatch):
    """``official.json`` was vouched for only by ``final/``'s hash of it, so an edit followed by a
    rebuild of ``final/`` was taken as the new official result. It has its receipt
    ``official.json.sha256`` now: ``status`` says tampered, the workflow rebuilds it, and
    ``final`` refuses it in one line."""
    from replaykit.harness.errors import InputError
    from replaykit.harness.results import final_summary
    from replaykit.harness.verify import check_run

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel = Path("results/t/shipped-seed1")
    assert (rel / "official.json.sha256").read_text() == f"{file_sha(rel / 'official.json')}  official.json\n"
    doc = read(run / "official.json")
    doc["official"]["value"] = 0.99
    (run / "official.json").write_text(json.dumps(doc))
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.path, finding.state, finding.invalidates) == (
        str(rel / "official.json"),
        "tampered",
        [str(rel / "official.json")],
    )
    official = str(rel / "official.json")
    with pytest.raises(InputError, match=rf"^{official}: tampered: edited since it was written"):
        final_summary(officials=[official], fixed_start_scores=None, shipped_official=official, published={}, n_boot=10)
    (rel / "official.json.sha256").unlink()  # no receipt at all: made again, never read
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.state, finding.reason) == (
        "stale",
        f"no receipt ({rel / 'official.json.sha256'} is not there)",
    )


def test_an_edited_proxy_score_is_tampered_and_not_taken_into_official(tmp_path, monkeypatch):
    """A proxy score edited by hand was picked into ``official.json``'s proxy_selected at the next
    rebuild. Its receipt is checked now (``status``: tampered; ``official`` and ``proxy-table``
    refuse it), and ``official.json`` records its SHA-256, which ``status`` compares too."""
    from replaykit.harness.errors import InputError
    from replaykit.harness.receipts import read_complete_summary
    from replaykit.harness.results import proxy_table
    from replaykit.harness.verify import check_run

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel = Path("results/t/shipped-seed1")
    proxy = rel / "proxy-scores/checkpoint-2"
    shutil.copytree(scores_of(rel), proxy)
    doc = read(run / "official.json")
    doc["checkpoints"][0]["proxy_summary_sha256"] = file_sha(proxy / "summary.json")
    (run / "official.json").write_text(json.dumps(doc))
    receipt(run / "official.json")
    assert [f.state for f in check_run(rel)] == ["verified"] * 6
    summary = read(proxy / "summary.json")
    summary["value"] = 0.99
    (proxy / "summary.json").write_text(json.dumps(summary))
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.path, finding.state) == (str(proxy / "summary.json"), "tampered")
    assert str(rel / "official.json") in finding.invalidates and str(rel / "proxy.json") in finding.invalidates
    for read_it in (lambda: read_complete_summary(proxy), lambda: proxy_table([proxy], tmp_path / "p.json")):
        with pytest.raises(InputError, match="tampered: edited since it was written"):
            read_it()
    assert not (tmp_path / "p.json").exists()
    # the receipt rewritten too: official.json's hash of the proxy score still tells, and the
    # proxy score (not official.json from it) is made again
    seal(proxy)
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.path, finding.state) == (str(proxy / "summary.json"), "tampered")
    assert finding.reason.startswith(f"its downstream record disagrees: {rel / 'official.json'} recorded SHA-256")
    assert finding.invalidates == [
        str(proxy / "summary.json"),
        str(proxy / ".complete"),
        str(rel / "official.json"),
        str(rel / "proxy.json"),
    ]


def fake_task_products(root: Path) -> tuple[Path, Path]:
    """The fixed-start reference score and the sandbox self-test of task ``t``, each with its
    receipt, and ``final/`` recording that it read them (resealed)."""
    ref = root / "results/t/reference/fixed-start/final-scores"
    ref.mkdir(parents=True)
    (ref / "rows.jsonl").write_text('{"id": "a", "score": 1}\n{"id": "b", "score": 0}\n')
    (ref / "summary.json").write_text(
        json.dumps(
            {
                "metric": "m",
                "direction": "maximize",
                "value": 0.45,
                "uncertainty": {"value": 0.1, "kind": "se"},
                "n": 2,
                "diagnostics": {},
                "advisories": [],
            }
        )
    )
    seal(ref)
    test = root / "results/sandbox-self-test/t.json"
    test.parent.mkdir(parents=True)
    test.write_text(json.dumps({"passed": True, "attempts": [{"escape": "read", "blocked": True}]}))
    receipt(test)
    final = root / "results/t/final"
    summary = read(final / "summary.json")
    for path in (ref / "summary.json", ref / "rows.jsonl", test):
        summary["inputs_sha256"][str(path.relative_to(root))] = file_sha(path)
    (final / "summary.json").write_text(json.dumps(summary))
    seal(final)
    return ref, test


def test_an_edited_fixed_start_reference_or_self_test_is_tampered_and_refused(tmp_path, monkeypatch):
    """Hostile (2026-12-05): the fixed-start reference's value edited 0.45 -> 0.99, ``final/``
    removed and rebuilt: it published fixed start 0.9900, and ``status`` said verified (nothing
    looked at the reference). Its ``.complete`` lists its files' SHA-256 now, as the self-test's
    ``<task>.json.sha256`` does: ``status`` says tampered naming the file and ``final/`` stale,
    also after a rebuild that took the edit (its ``inputs_sha256``); the workflow scores the
    reference again; ``final`` refuses the edited file."""
    from replaykit.harness.errors import InputError
    from replaykit.harness.receipts import read_complete_summary
    from replaykit.harness.selftest import self_test_section
    from replaykit.harness.verify import check_task, reverify, stamp_of, status_lines

    fake_run(tmp_path)
    ref, test = fake_task_products(tmp_path)
    monkeypatch.chdir(tmp_path)
    ref, test = ref.relative_to(tmp_path), test.relative_to(tmp_path)
    assert status_lines("results", ["t"]) == (
        [
            "t/shipped-seed1: verified (5 of 5 receipts verified)",
            "t/reference/fixed-start: verified (1 of 1 receipts verified)",
            "t/sandbox-self-test: verified (1 of 1 receipts verified)",
            "t/final: verified (1 of 1 receipts verified)",
        ],
        True,
    )
    recorded = file_sha(ref / "summary.json")
    (ref / "summary.json").write_text((ref / "summary.json").read_text().replace("0.45", "0.99"))
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[1:3] == [
        "t/reference/fixed-start: stale (0 of 1 receipts verified)",
        f"  {ref / 'summary.json'}: tampered: edited since it was written (SHA-256 "
        f"{file_sha(ref / 'summary.json')[:12]}, {ref / '.complete'} recorded {recorded[:12]})",
    ]
    assert lines[-1] == f"  results/t/final: stale: made from another {ref / 'summary.json'}"
    with pytest.raises(InputError) as refused:
        read_complete_summary(ref)  # what final (and the ablation) read it with
    assert str(refused.value).startswith(f"{ref / 'summary.json'}: tampered: edited since it was written")
    # a final/ rebuilt from the edit (hashes and seal rewritten, as a rebuild without the check did)
    summary = read("results/t/final/summary.json")
    summary["inputs_sha256"][str(ref / "summary.json")] = file_sha(ref / "summary.json")
    Path("results/t/final/summary.json").write_text(json.dumps(summary))
    seal(Path("results/t/final"))
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[-1].startswith(
        f"  results/t/final: stale: made from {ref / 'summary.json'}, which its receipt does not vouch for (tampered: "
    )
    # the workflow's step: the reference is scored again (its rule's stamp), and final/ after it
    products = reverify(
        [], {"results/t/final": ["results/t/shipped-seed1/official.json"]}, ["results/t"], say=[].append
    )
    assert products == [str(ref / "summary.json"), str(ref / ".complete"), "results/t/final"]
    assert stamp_of(ref / "summary.json") == ref / ".receipts/summary.json" and stamp_of(ref / "summary.json").is_file()
    # the self-test, edited: tampered, made again, and final refuses it
    (test).write_text(json.dumps({"passed": True, "attempts": []}))
    findings = {f.path: f for f in check_task("results/t")}
    assert findings[str(test)].state == "tampered" and findings[str(test)].invalidates == [str(test)]
    with pytest.raises(InputError, match=rf"^{test}: tampered: edited since it was written"):
        self_test_section(test)


@pytest.mark.parametrize(
    "edit",
    [
        {"references": {"fixed_start": {"value": 0.99}}},
        {"seeds": {"mean": 0.99}},
        {"n": 999},
        {"comparisons": {"vs_fixed_start": {"mcnemar": {"p_value": 0.001}}}},
    ],
    ids=["references", "seeds.mean", "n", "comparisons"],
)
def test_every_field_of_final_summary_is_under_its_receipt(tmp_path, monkeypatch, edit):
    """Hostile (2026-12-05): ``references.*.value``, ``seeds.mean`` and ``n`` of
    ``final/summary.json`` edited, and ``status`` said verified: it compared the headline and the
    per-seed values only. ``final/.complete`` lists the SHA-256 of every file of ``final/`` now,
    so any edit of the summary is ``tampered``, and the workflow rebuilds ``final/``."""
    from replaykit.harness.verify import check_final, status_lines

    fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    final = Path("results/t/final")
    summary = read(final / "summary.json")
    summary.update(
        references={"fixed_start": {"value": 0.45}},
        comparisons={"vs_fixed_start": {"mcnemar": {"p_value": 1.0}}},
    )
    summary["seeds"]["mean"] = 0.5
    (final / "summary.json").write_text(json.dumps(summary))
    seal(final)
    officials = ["results/t/shipped-seed1/official.json"]
    assert check_final(final, officials).state == "verified"
    recorded = file_sha(final / "summary.json")
    for key, value in edit.items():
        summary[key] = {**summary[key], **value} if isinstance(value, dict) else value
    (final / "summary.json").write_text(json.dumps(summary))
    finding = check_final(final, officials)
    assert (finding.state, finding.reason, finding.invalidates) == (
        "tampered",
        f"summary.json: edited since it was written (SHA-256 {file_sha(final / 'summary.json')[:12]}, "
        f"{final / '.complete'} recorded {recorded[:12]})",
        [str(final)],
    )
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[-2:] == ["t/final: stale (0 of 1 receipts verified)", f"  {finding.line()}"]


def test_a_patch_edited_after_its_replay_is_stale(tmp_path, monkeypatch):
    """A finished candidate run's patch file was not compared with the ``patch_sha256`` its replay
    recorded: the run's numbers stood for a patch no longer on disk. Now one edited since is
    ``stale`` (its workspace, and so the replay and all after it, are made again) and one deleted
    is ``missing``."""
    from replaykit.harness.verify import check_run

    run = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    rel = Path("results/t/shipped-seed1")
    patch = Path("patches/t-x.diff")
    patch.parent.mkdir()
    patch.write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    record = read(run / "replay/record.json")
    record.update(patch=str(patch), patch_sha256=file_sha(patch))
    (run / "replay/record.json").write_text(json.dumps(record))
    doc = read(run / "official.json")
    doc["record_sha256"] = file_sha(run / "replay/record.json")
    (run / "official.json").write_text(json.dumps(doc))
    receipt(run / "official.json")
    findings = check_run(rel)
    assert {f.state for f in findings} == {"verified"} and str(patch) in [f.path for f in findings]
    patch.write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+c\n")
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.path, finding.state, finding.invalidates) == (str(patch), "stale", [str(rel / "workspace.json")])
    assert finding.reason.startswith(f"edited since {rel / 'replay/record.json'} replayed it")
    patch.unlink()
    [finding] = [f for f in check_run(rel) if f.state != "verified"]
    assert (finding.path, finding.state) == (str(patch), "missing")
