"""Atomic publication of checkpoints and the retention rule.

A checkpoint is a complete directory ``checkpoint-<progress>/``. It is copied under a
temporary name (``.tmp-checkpoint-<progress>``, outside the ``checkpoint-N`` pattern) and
renamed into place, so it appears whole or not at all. After each publication only the
``keep`` (3) greatest progress values are retained; a removed checkpoint is first renamed
to ``.tmp-trash-...`` so that a crash mid-delete never leaves a partial ``checkpoint-N``.
Every publication is recorded in ``publications.jsonl`` with its cumulative count.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from .fileio import atomic_write_text
from .hashing import sha256_tree

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
LEDGER = "publications.jsonl"
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
    """The publication ledger. A last line cut short by a kill during its append is dropped
    (its checkpoint was renamed into place before the append, and is still listed on disk)."""
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


def _fsync_tree(root: Path) -> None:
    """Flush every file to disk and give the tree the usual modes (scratch folders from
    ``mkdtemp`` are 0700 and some writers make 0600 files; readers of results need more)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(root, 0o777 & ~umask)
    for path in root.rglob("*"):
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def publish_checkpoint(src: str | Path, root: str | Path, progress: int, keep: int = KEEP) -> dict:
    """Publish the directory ``src`` as ``root/checkpoint-<progress>`` and apply retention.

    Args:
        src: a complete checkpoint directory (copied, not moved).
        root: the replay's publication directory.
        progress: a strictly increasing integer (step, epoch, ...).
        keep: how many checkpoints to retain (the greatest progress values).

    Returns:
        The ledger entry: progress, sha256 (tree hash), count (cumulative publications),
        time (unix seconds), retained (progress values after retention).

    Raises:
        ValueError: ``progress`` is not greater than every progress published before.
        OSError: the copy failed (e.g. ``ENOSPC``); the partial copy is removed and the
            checkpoints published before are untouched.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ledger = read_ledger(root)
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
    digest = sha256_tree(tmp)
    os.rename(tmp, root / f"checkpoint-{progress}")
    retained = retained_after(published(root), progress, keep)
    for old in published(root):
        if old not in retained:
            trash = root / f".tmp-trash-{old}"
            os.rename(root / f"checkpoint-{old}", trash)
            shutil.rmtree(trash)
    entry = {
        "progress": progress,
        "sha256": digest,
        "count": len(ledger) + 1,
        "time": time.time(),
        "retained": retained,
    }
    # rewritten whole (atomically), so a line cut short by a kill never corrupts later ones
    atomic_write_text(root / LEDGER, "".join(json.dumps(e, sort_keys=True) + "\n" for e in ledger + [entry]))
    _fault_after(progress)
    return entry


def _fault_after(progress: int) -> None:
    """Fault injection for tests (:data:`FAULT_ENV`): ``<progress>`` exits 137 at once,
    ``<progress>:hang`` waits to be killed; in both the publication is whole and no record
    is written."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec.split(":")[0] != str(progress):
        return
    print(f"[publish] checkpoint-{progress} (fault injection: {spec})", flush=True)
    if spec.endswith(":hang"):
        while True:
            time.sleep(1)
    os._exit(137)
