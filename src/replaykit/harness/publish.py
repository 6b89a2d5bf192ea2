"""Atomic publication of checkpoints, vouched for by the publication ledger, and the retention rule.

A checkpoint is a complete directory ``checkpoint-<progress>/``. It is copied under a
temporary name (``.tmp-checkpoint-<progress>``, outside the ``checkpoint-N`` pattern) and
renamed into place, so it appears whole or not at all. Publication and its record are one
recoverable step: the ledger (``publications.jsonl``) first gets the entry with the copy's
tree hash as ``pending``, then the copy is renamed into place, then the entries beyond
retention are removed, then the entry is marked ``published``. A kill anywhere in between
leaves a pending entry that :func:`reconcile` settles before a resumed attempt starts: the
checkpoint is recorded when its bytes match the pending entry's hash, and discarded when they
do not or when no entry names it, so every retained checkpoint is vouched for by the ledger.
After each publication only the ``keep`` (3) greatest progress values are retained; a removed
checkpoint is first renamed to ``.tmp-trash-...`` so that a crash mid-delete never leaves a
partial ``checkpoint-N``. The ledger holds every publication with its cumulative count.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from .fileio import atomic_write_text, tree_paths
from .hashing import sha256_tree

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
LEDGER = "publications.jsonl"
PENDING, PUBLISHED = "pending", "published"  # states of a ledger entry
KEEP = 3
# Fault injection for the resume tests: the process publishing checkpoint-<N> dies right
# after that publication, before any record is written (see _fault_after).
FAULT_ENV = "REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH"


def published(root: str | Path) -> list[int]:
    """Progress values of the published checkpoints under ``root``, ascending."""
    root = Path(root)
    if not root.is_dir():
        return []
    # a symlink named checkpoint-N is never a checkpoint (it could point at another run's)
    found = (CHECKPOINT_RE.match(p.name) for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    return sorted(int(m.group(1)) for m in found if m)


def retained_after(existing: list[int], new: int, keep: int = KEEP) -> list[int]:
    """The retention rule: the ``keep`` greatest progress values of ``existing + [new]``."""
    return sorted(set(existing) | {new})[-keep:]


def read_ledger(root: str | Path) -> list[dict]:
    """The publication ledger, every entry (``state`` ``pending`` or ``published``; an entry
    without one, written before states existed, is published). A last line cut short by a
    kill during its append is dropped (the ledger is rewritten whole now, so only an old
    ledger can hold one)."""
    path = Path(root) / LEDGER
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines):
                raise
    return entries


def published_entries(root: str | Path) -> list[dict]:
    """The ledger's published entries (a pending one is settled by :func:`reconcile`)."""
    return [e for e in read_ledger(root) if e.get("state", PUBLISHED) == PUBLISHED]


def _write_ledger(root: Path, entries: list[dict]) -> None:
    # rewritten whole (atomically), so a line cut short by a kill never corrupts later ones
    atomic_write_text(root / LEDGER, "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))


def _trash(root: Path, progress: int) -> None:
    """Remove ``checkpoint-<progress>``: renamed out of the pattern first, so a crash
    mid-delete never leaves a partial ``checkpoint-N``."""
    trash = root / f".tmp-trash-{progress}"
    if trash.exists():
        shutil.rmtree(trash)
    os.rename(root / f"checkpoint-{progress}", trash)
    shutil.rmtree(trash)


def _fsync_tree(root: Path) -> None:
    """Flush every file to disk and give the tree the usual modes (scratch folders from
    ``mkdtemp`` are 0700 and some writers make 0600 files; readers of results need more)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(root, 0o777 & ~umask)
    for path in tree_paths(root):
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def publish_checkpoint(src: str | Path, root: str | Path, progress: int, keep: int = KEEP) -> dict:
    """Publish the directory ``src`` as ``root/checkpoint-<progress>`` and apply retention.

    Steps (module docstring): copy aside and hash, ledger entry ``pending``, rename into
    place, retention, entry ``published``.

    Args:
        src: a complete checkpoint directory (copied, not moved).
        root: the replay's publication directory.
        progress: a strictly increasing integer (step, epoch, ...).
        keep: how many checkpoints to retain (the greatest progress values).

    Returns:
        The ledger entry: progress, sha256 (tree hash), count (cumulative publications),
        time (unix seconds), retained (progress values after retention), state.

    Raises:
        ValueError: ``progress`` is not greater than every progress published before.
        OSError: the copy or the rename failed (e.g. ``ENOSPC``); the partial copy and its
            pending entry are removed and the checkpoints published before are untouched.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ledger = published_entries(root)
    previous = [entry["progress"] for entry in ledger] + published(root)
    if previous and progress <= max(previous):
        raise ValueError(f"progress must strictly increase: {progress} <= {max(previous)}")
    tmp = root / f".tmp-checkpoint-{progress}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        shutil.copytree(src, tmp)
        _fsync_tree(tmp)
    except OSError:  # e.g. the disk filled during export: free what was copied, keep the others
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    entry = {
        "progress": progress,
        "sha256": sha256_tree(tmp),
        "count": len(ledger) + 1,
        "time": time.time(),
        "retained": retained_after(published(root), progress, keep),
        "state": PENDING,
    }
    _write_ledger(root, ledger + [entry])
    try:
        os.rename(tmp, root / f"checkpoint-{progress}")
    except OSError:
        _write_ledger(root, ledger)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fault_after(progress, "gap")
    for old in published(root):
        if old not in entry["retained"]:
            _trash(root, old)
    entry["state"] = PUBLISHED
    _write_ledger(root, ledger + [entry])
    _fault_after(progress)
    return entry


def reconcile(root: str | Path) -> list[dict]:
    """Settle what a publication cut short left under ``root`` (before a resumed attempt):
    a pending entry whose checkpoint is on disk with the entry's tree hash is marked
    published and its retention applied; one whose checkpoint differs is discarded with it;
    one whose checkpoint never arrived is dropped; a ``checkpoint-N`` that no entry names is
    discarded. A published entry is not checked here (the replay driver compares every
    retained checkpoint with it when the attempt ends).

    Returns one verdict per settled checkpoint, ``{"progress", "verdict": "recorded" |
    "discarded" | "dropped", "reason", "sha256"}`` (``sha256``: the tree hash found on disk,
    None when there was none); ``[]`` when there was nothing to settle.
    """
    root = Path(root)
    on_disk, verdicts, kept = published(root), [], []

    def settle(progress: int, found: str | None, verdict: str, reason: str) -> None:
        if verdict == "discarded":
            _trash(root, progress)
        verdicts.append({"progress": progress, "verdict": verdict, "reason": reason, "sha256": found})

    for entry in read_ledger(root):
        progress = entry["progress"]
        if entry.get("state", PUBLISHED) == PUBLISHED:
            kept.append(entry)
            continue
        found = sha256_tree(root / f"checkpoint-{progress}") if progress in on_disk else None
        if found is None:
            settle(progress, None, "dropped", "cut short before its rename: its pending entry is dropped")
        elif found == entry["sha256"]:
            kept.append({**entry, "state": PUBLISHED})
            settle(progress, found, "recorded", "cut short after its rename; its bytes match its pending entry")
        else:
            settle(progress, found, "discarded", "its bytes differ from the pending entry written before its rename")
    named = {e["progress"] for e in kept}
    for progress in [p for p in published(root) if p not in named]:  # on disk now: settled ones are gone
        found = sha256_tree(root / f"checkpoint-{progress}")
        settle(progress, found, "discarded", "no ledger entry vouches for it")
    if verdicts:
        _write_ledger(root, kept)
    retained = kept[-1]["retained"] if kept else []
    for progress in published(root):
        if progress not in retained:  # the retention of a publication recorded here, never applied
            _trash(root, progress)
    return verdicts


def _fault_after(progress: int, point: str = "") -> None:
    """Fault injection for tests (:data:`FAULT_ENV`): ``<progress>`` exits 137 right after
    the publication of that progress, ``<progress>:hang`` waits there to be killed (in both
    the publication is whole and no record is written); ``<progress>:gap`` exits 137 in the
    publication gap, after the rename and before the ledger marks it published."""
    spec = os.environ.get(FAULT_ENV, "")
    number, _, mode = spec.partition(":")
    if number != str(progress) or (mode == "gap") != (point == "gap"):
        return
    print(f"[publish] checkpoint-{progress} (fault injection: {spec})", flush=True)
    if spec.endswith(":hang"):
        while True:
            time.sleep(1)
    os._exit(137)
