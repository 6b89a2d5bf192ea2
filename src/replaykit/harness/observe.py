"""The replay's timing as the driver sees it from outside the sandbox.

The recipe's own account of its time -- ``train_result.json`` (stop reason, training clock,
publishing time) and the times in ``publications.jsonl`` -- is written by candidate code, which
can write anything there (a hostile tester published 76 s after the internal deadline, then
rewrote both files to say it stopped 2 s before it). The driver therefore keeps its own account,
in the attempt's entry of ``replay-attempts.json`` (the run's folder, which the sandbox cannot
write), under ``observed``:

* ``cutoff_unix``: the internal deadline + the export reserve of this attempt (on the one
  budget of all attempts). Training stops at the internal deadline so that export finishes
  inside the reserve (SPEC, budget): a checkpoint must be whole by the cutoff.
* ``first_seen``: progress -> when the driver first saw ``checkpoint-<progress>`` in the
  publish folder (it looks every :data:`LOOK_S` seconds while the training process runs);
* ``at_cutoff``: when the training process was still running at the cutoff, the driver's
  fingerprint of every checkpoint present then (:func:`fingerprint`: each entry's ``lstat``,
  nothing opened or followed), taken at its first look after the cutoff (at most
  :data:`~.launch.POLL_S` later, plus the time the fingerprint takes: the only tolerance, and
  it is in the recipe's favour), ``at_cutoff_unix`` (when it began) and ``at_cutoff_s`` (how
  long it took);
* ``process_ended_unix``: when the driver saw the training process end;
* ``late``: progress -> why, once judged (:func:`judge`): every checkpoint on disk afterwards
  that was not there at the cutoff, or whose fingerprint changed since. A checkpoint is late
  for good: it is not eligible for the official result (the record marks it, its validation
  marker says invalid, the audit's ``budget_held`` says confirmed naming it).

A write to a file moves its ctime, which no call can set back, and a rename moves the renamed
entry's, so a checkpoint filled in, swapped or renamed into place after the cutoff differs from
its fingerprint even where its folder was made before. One write does not: through a shared
memory mapping, to a page already dirty, the kernel stamps no new mtime or ctime (a hostile
tester dirtied its mapped ``model.pt`` 2 s before the cutoff and wrote other weights through it
2.5 s after). So the fingerprint is the second line only: the first is that the driver kills the
training process group right after it (:func:`.replay.supervise`), so nothing is written after
the cutoff at all, through any mapping; what changes in the moment the kill takes is late.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

from .publish import published

LOOK_S = 1.0  # how often the driver looks for new checkpoints (first_seen)


def fingerprint(root: str | Path) -> str | None:
    """SHA-256 of ``(relative path, type, inode, size, mtime_ns, ctime_ns)`` of ``root`` and
    every entry below it, by ``lstat`` (links are not followed, no file is opened: a FIFO or a
    huge file costs nothing); None when ``root`` is gone or changes while it is walked."""
    rows = []
    root = Path(root)

    def row(rel: str, st: os.stat_result) -> None:
        rows.append([rel, stat.S_IFMT(st.st_mode), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])

    try:
        row(".", os.lstat(root))
        folders = [(root, "")]
        while folders:
            folder, prefix = folders.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    rel = prefix + entry.name
                    st = entry.stat(follow_symlinks=False)
                    row(rel, st)
                    if stat.S_ISDIR(st.st_mode):
                        folders.append((Path(entry.path), rel + "/"))
    except OSError:  # removed (retention) or replaced while walked
        return None
    return hashlib.sha256(json.dumps(sorted(rows)).encode()).hexdigest()


def listed(publish_dir: str | Path) -> list[int]:
    """The progress values of the ``checkpoint-N`` folders under ``publish_dir``; ``[]`` when it
    cannot be listed (candidate code can take the permission away)."""
    try:
        return published(publish_dir)
    except OSError:
        return []


def fingerprints(publish_dir: str | Path) -> dict[str, str | None]:
    """``{progress: fingerprint}`` of every ``checkpoint-N`` under ``publish_dir`` now (none when
    the folder cannot be listed: then nothing found later was there at the cutoff)."""
    return {str(p): fingerprint(Path(publish_dir) / f"checkpoint-{p}") for p in listed(publish_dir)}


def judge(publish_dir: str | Path, observed: dict) -> dict[str, str]:
    """Which checkpoints on disk now are late by ``observed`` (one attempt's record): those not
    there at its cutoff or changed since; ``{}`` when the training process had ended before the
    cutoff (no ``at_cutoff``). Sets ``observed["late"]`` and returns it."""
    at_cutoff = observed.get("at_cutoff")
    late = {}
    if isinstance(at_cutoff, dict):
        deadline, cutoff = observed.get("deadline_unix"), observed.get("cutoff_unix")
        reserve = f"export reserve {cutoff - deadline:.0f} s" if deadline and cutoff else "export reserve"
        for progress, now in fingerprints(publish_dir).items():
            seen = (observed.get("first_seen") or {}).get(progress)
            if progress not in at_cutoff:
                when = f"first seen {seen - deadline:.1f} s after the internal deadline" if seen and deadline else ""
                late[progress] = f"published after the internal deadline + {reserve}" + (f" ({when})" if when else "")
            elif at_cutoff[progress] is None or now != at_cutoff[progress]:
                late[progress] = f"changed after the internal deadline + {reserve}"
    observed["late"] = late
    return late


class Watch:
    """The driver's watch over one attempt's publish folder (the entry ``observed``).

    Args:
        publish_dir: the replay's publish folder.
        observed: the attempt's ``observed`` dict (filled in place: the attempts file keeps it).
        deadline_unix: this attempt's internal deadline.
        export_reserve_s: the budget's export reserve.
        started_unix: when the training process started.
    """

    def __init__(
        self, publish_dir: Path, observed: dict, deadline_unix: float, export_reserve_s: float, started_unix: float
    ):
        self.publish_dir = Path(publish_dir)
        self.observed = observed
        observed.update(
            deadline_unix=deadline_unix,
            cutoff_unix=deadline_unix + export_reserve_s,
            look_s=LOOK_S,
            process_started_unix=started_unix,
            first_seen={},
            at_cutoff=None,
            at_cutoff_unix=None,
            at_cutoff_s=None,
            process_ended_unix=None,
        )
        self._next_look = 0.0
        for p in listed(self.publish_dir):  # an earlier attempt's: seen before this one started
            observed["first_seen"][str(p)] = None

    @property
    def cutoff_unix(self) -> float:
        return self.observed["cutoff_unix"]

    def look(self, now: float) -> bool:
        """Note checkpoints not seen before (every :data:`LOOK_S`) and, on the first look after
        the cutoff, fingerprint every checkpoint present. Returns True when it fingerprinted."""
        if now >= self._next_look:
            self._next_look = now + LOOK_S
            for p in listed(self.publish_dir):
                self.observed["first_seen"].setdefault(str(p), now)
        if now >= self.cutoff_unix and self.observed["at_cutoff"] is None:
            self.cut(now)
            return True
        return False

    def cut(self, now: float) -> None:
        """Fingerprint every checkpoint present (once): what the cutoff found."""
        if self.observed["at_cutoff"] is not None:
            return
        self.observed["at_cutoff"] = fingerprints(self.publish_dir)
        self.observed["at_cutoff_unix"] = now
        self.observed["at_cutoff_s"] = time.time() - now

    def ended(self, now: float) -> None:
        """The training process has ended at ``now``: a last look (first_seen), no fingerprint."""
        for p in listed(self.publish_dir):
            self.observed["first_seen"].setdefault(str(p), now)
        self.observed["process_ended_unix"] = now
