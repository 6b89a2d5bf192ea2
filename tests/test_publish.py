import json
import os
import stat

import pytest

from replaykit.harness.hashing import sha256_tree
from replaykit.harness.publish import publish_checkpoint, published, read_ledger, retained_after


def _src(tmp_path, content):
    src = tmp_path / f"src-{content}"
    src.mkdir()
    (src / "weights.bin").write_text(content)
    return src


def test_retention_rule_by_hand():
    assert retained_after([], 1) == [1]
    assert retained_after([1, 2, 3], 4) == [2, 3, 4]
    assert retained_after([10, 20, 30], 40, keep=2) == [30, 40]


def test_publish_five_keeps_three_greatest(tmp_path):
    root = tmp_path / "replay"
    for progress in (2, 4, 6, 8, 10):
        entry = publish_checkpoint(_src(tmp_path, str(progress)), root, progress)
    assert published(root) == [6, 8, 10]
    assert entry["count"] == 5 and entry["retained"] == [6, 8, 10]
    ledger = read_ledger(root)
    assert [e["progress"] for e in ledger] == [2, 4, 6, 8, 10]
    assert [e["count"] for e in ledger] == [1, 2, 3, 4, 5]
    assert (root / "checkpoint-10" / "weights.bin").read_text() == "10"
    assert ledger[-1]["sha256"] == sha256_tree(root / "checkpoint-10")
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp")]


def test_progress_must_strictly_increase(tmp_path):
    root = tmp_path / "replay"
    publish_checkpoint(_src(tmp_path, "a"), root, 5)
    with pytest.raises(ValueError):
        publish_checkpoint(_src(tmp_path, "b"), root, 5)
    with pytest.raises(ValueError):
        publish_checkpoint(_src(tmp_path, "c"), root, 3)


def test_leftover_temporary_is_not_a_checkpoint(tmp_path):
    root = tmp_path / "replay"
    (root / ".tmp-checkpoint-7").mkdir(parents=True)  # a crash between copy and rename
    (root / "checkpoint-x").mkdir()
    assert published(root) == []
    publish_checkpoint(_src(tmp_path, "a"), root, 7)
    assert published(root) == [7]
    assert json.loads((root / "publications.jsonl").read_text().splitlines()[0])["progress"] == 7


def test_published_checkpoints_get_the_usual_modes(tmp_path):
    src = tmp_path / "scratch"
    src.mkdir(mode=0o700)
    (src / "weights.bin").write_bytes(b"w")
    os.chmod(src / "weights.bin", 0o600)  # what mkdtemp / some writers leave
    old = os.umask(0o022)
    try:
        publish_checkpoint(src, tmp_path / "out", 1)
    finally:
        os.umask(old)
    published_dir = tmp_path / "out" / "checkpoint-1"
    assert stat.S_IMODE(published_dir.stat().st_mode) == 0o755
    assert stat.S_IMODE((published_dir / "weights.bin").stat().st_mode) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_disk_full_during_export_keeps_published_checkpoints(tmp_path):
    import errno
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        root = disk / "replay"
        small = tmp_path / "small"
        small.mkdir()
        (small / "adapter.bin").write_bytes(b"x" * 10_000)
        first = publish_checkpoint(small, root, 1)
        big = tmp_path / "big"
        big.mkdir()
        (big / "adapter.bin").write_bytes(os.urandom(2_000_000))  # twice the disk
        with pytest.raises(OSError) as failure:
            publish_checkpoint(big, root, 2)
        assert os.strerror(errno.ENOSPC) in str(failure.value)  # shutil.Error gathers the copy's OSErrors
        assert published(root) == [1]
        assert sorted(p.name for p in root.iterdir()) == ["checkpoint-1", "publications.jsonl"]  # partial copy removed
        assert sha256_tree(root / "checkpoint-1") == first["sha256"]
        assert [e["progress"] for e in read_ledger(root)] == [1]
        # once space is back (the partial copy was freed), publication goes on
        assert publish_checkpoint(small, root, 3)["retained"] == [1, 3]
    finally:
        subprocess.run(["umount", str(disk)])


def test_wait_for_paths_sees_a_late_checkpoint_and_reports_a_missing_one(tmp_path):
    import threading
    import time

    from replaykit.harness.fileio import wait_for_paths

    late, never = tmp_path / "checkpoint-2", tmp_path / "checkpoint-3"
    calls = []
    t0 = time.monotonic()
    threading.Timer(0.4, late.mkdir).start()
    assert wait_for_paths([late], latency_s=10, poll_s=0.05, on_wait=calls.append) == []
    waited = time.monotonic() - t0
    assert 0.4 <= waited < 5 and calls == [[late]]  # told once, returned soon after it appeared
    t0 = time.monotonic()
    assert wait_for_paths([late, never], latency_s=0.3, poll_s=0.05) == [never]
    assert time.monotonic() - t0 >= 0.3
    assert wait_for_paths([late], latency_s=0) == []  # present: no wait at all


def _publish_in_a_process(tmp_path, root, progresses, fault):
    """Publish ``progresses`` from a separate process that dies where ``fault`` says
    (:data:`replaykit.harness.publish.FAULT_ENV`); returns its exit status."""
    import subprocess
    import sys

    for p in progresses:
        _src(tmp_path, str(p))
    code = (
        "import sys; from pathlib import Path; from replaykit.harness.publish import publish_checkpoint\n"
        f"for p in {list(progresses)!r}: publish_checkpoint(Path({str(tmp_path)!r}) / f'src-{{p}}', {str(root)!r}, p)"
    )
    env = dict(os.environ, REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH=fault)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).returncode


def test_kill_in_the_publication_gap_is_recorded_on_reconcile(tmp_path):
    from replaykit.harness.publish import reconcile

    root = tmp_path / "replay"
    assert _publish_in_a_process(tmp_path, root, [1, 2, 3, 4], "4:gap") == 137
    # killed after checkpoint-4 was renamed into place, before its entry said published and
    # before retention removed checkpoint-1
    assert published(root) == [1, 2, 3, 4]
    assert [e.get("state") for e in read_ledger(root)] == ["published"] * 3 + ["pending"]
    verdicts = reconcile(root)
    assert [(v["progress"], v["verdict"]) for v in verdicts] == [(4, "recorded")]
    assert verdicts[0]["sha256"] == sha256_tree(root / "checkpoint-4")
    assert published(root) == [2, 3, 4]  # the recorded publication's retention, applied
    assert [(e["progress"], e["state"]) for e in read_ledger(root)][-1] == (4, "published")
    assert reconcile(root) == []  # settled once


def test_checkpoint_changed_in_the_gap_or_unrecorded_is_discarded(tmp_path):
    from replaykit.harness.publish import reconcile

    root = tmp_path / "replay"
    assert _publish_in_a_process(tmp_path, root, [1, 2], "2:gap") == 137
    (root / "checkpoint-2" / "weights.bin").write_text("changed before the resume")
    (root / "checkpoint-9").mkdir()  # renamed in by an older driver, never recorded
    (root / "checkpoint-9" / "weights.bin").write_text("9")
    verdicts = reconcile(root)
    assert sorted((v["progress"], v["verdict"]) for v in verdicts) == [(2, "discarded"), (9, "discarded")]
    assert published(root) == [1]  # only what the ledger vouches for stays
    assert [(e["progress"], e["state"]) for e in read_ledger(root)] == [(1, "published")]
    assert sha256_tree(root / "checkpoint-1") == read_ledger(root)[0]["sha256"]


def test_kill_before_the_rename_drops_the_pending_entry(tmp_path):
    from replaykit.harness.publish import _write_ledger, reconcile

    root = tmp_path / "replay"
    publish_checkpoint(_src(tmp_path, "1"), root, 1)
    # the state a kill between the pending entry and the rename leaves
    _write_ledger(root, read_ledger(root) + [{"progress": 2, "sha256": "0" * 64, "state": "pending"}])
    assert [(v["progress"], v["verdict"]) for v in reconcile(root)] == [(2, "dropped")]
    assert [e["progress"] for e in read_ledger(root)] == [1] and published(root) == [1]
