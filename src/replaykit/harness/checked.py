"""Local data files checked once, not on every parse of the workflow.

The workflow checks a task's local data files when it starts (a bad row is refused before any
rule removes built assets), and Snakemake parses the workflow again in every job it runs (on
a cluster, in every job's own process). :func:`check_once` remembers which files passed which
check, keyed by the file's ``(size, mtime_ns, ctime_ns, inode)`` -- any write changes the
ctime, which no user call can set back, as in :class:`.hashing.HashCache` -- and by the code
doing the check (the name of the check and the size and mtime of every file of the
``replaykit`` package), so an unchanged file is not read again until the file or the checking
code changes. Only passes are remembered: a bad file is read, and refused, every time.

The record is a speed-up only (a missing or unreadable record means every file is checked);
it lives in Snakemake's folder of the working directory
(``.snakemake/replaykit-checked-inputs.json``), written atomically by :func:`remembering`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

RECORD = Path(".snakemake") / "replaykit-checked-inputs.json"

_active: dict | None = None  # {"path": Path, "entries": {...}, "changed": bool} inside remembering()


def _file_key(path: str | Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def code_key() -> str:
    """SHA-256 of ``(path, size, mtime_ns)`` of every ``.py`` file of the ``replaykit`` package
    (a stat each, no reads): changes whenever the checking code may have changed."""
    import replaykit

    root = Path(replaykit.__file__).resolve().parent
    lines = []
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        lines.append(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def check_once(path: str | Path, check: Callable[[str | Path], object]) -> None:
    """Run ``check(path)`` (which raises for a bad file) unless, inside :func:`remembering`,
    the same file, unchanged, already passed the same check with the same code."""
    if _active is None:
        check(path)
        return
    name = f"{os.path.abspath(path)}\0{check.__module__}.{check.__qualname__}"
    key = _file_key(path) + [_active["code"]]
    if _active["entries"].get(name) == key:
        return
    check(path)
    _active["entries"][name] = key
    _active["changed"] = True


@contextlib.contextmanager
def remembering(record: str | Path = RECORD) -> Iterator[None]:
    """Within this block :func:`check_once` reads and updates ``record`` (written on exit,
    atomically, when it changed and its folder exists)."""
    global _active
    record = Path(record)
    try:
        entries = json.loads(record.read_text()) if record.is_file() else {}
    except (OSError, ValueError):
        entries = {}
    outer, _active = (
        _active,
        {"entries": entries if isinstance(entries, dict) else {}, "changed": False, "code": code_key()},
    )
    try:
        yield
    finally:
        state, _active = _active, outer
        if state["changed"] and record.parent.is_dir():
            from .fileio import atomic_write_text

            live = {k: v for k, v in state["entries"].items() if os.path.exists(k.split("\0")[0])}
            atomic_write_text(record, json.dumps(live, sort_keys=True))
