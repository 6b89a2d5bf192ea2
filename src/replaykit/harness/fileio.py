"""Atomic writes and checked reads of JSON / JSON-lines files.

Every file a rule produces is written to a temporary name in the same directory and
renamed into place, so a reader (or a crash) never sees half a file.
"""

from __future__ import annotations

import contextvars
import ctypes
import errno
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import InputError

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace`` (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes → stable hashes)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    """Write one JSON object per line, atomically."""
    text = "".join(json.dumps(row, sort_keys=True, allow_nan=False) + "\n" for row in rows)
    return atomic_write_text(path, text)


# The files read while :func:`recording_reads` is active: path -> SHA-256 of the bytes read.
_READS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("replaykit_reads", default=None)


@contextmanager
def recording_reads():
    """Record every file :func:`read_json` and :func:`read_jsonl` read inside the block: yields
    a dict, ``{path as given (normalised): SHA-256 of the bytes read}``. A product records it
    as the files it was made from (``inputs_sha256``), which ``status`` and the workflow
    compare with the files on disk (:mod:`.verify`)."""
    reads: dict[str, str] = {}
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def _read_text(path: Path) -> str:
    """The text of ``path`` (UTF-8), its SHA-256 recorded when :func:`recording_reads` is on."""
    data = path.read_bytes()
    reads = _READS.get()
    if reads is not None:
        reads[os.path.normpath(str(path))] = hashlib.sha256(data).hexdigest()
    return data.decode("utf-8")


def read_json(path: str | Path, required: Iterable[str] = ()) -> Any:
    """Read a JSON file; raise :class:`InputError` naming the file and field when it is
    missing, unparsable, or lacks one of the ``required`` top-level keys."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    try:
        obj = json.loads(_read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"not valid JSON ({exc})") from None
    for key in required:
        if not isinstance(obj, dict) or key not in obj:
            raise InputError(path, key, "required field missing")
    return obj


def read_jsonl(
    path: str | Path, required: Iterable[str] = (), allow_empty: bool = False, unique: str | None = None
) -> list[dict]:
    """Read JSON lines; raise :class:`InputError` for a bad line (``line N``), a row missing
    a ``required`` key (``line N.key``), a repeated value of the ``unique`` key (compared as
    strings; ``line N.key``), or an empty file unless ``allow_empty``."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    required = list(required)
    rows, seen = [], set()
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {number}", f"not valid JSON ({exc.msg})") from None
        for key in required:
            if key not in row:
                raise InputError(path, f"line {number}.{key}", "required field missing")
        if unique is not None:
            if str(row[unique]) in seen:
                raise InputError(path, f"line {number}.{unique}", f"duplicate {unique} {row[unique]!r}")
            seen.add(str(row[unique]))
        rows.append(row)
    if not rows and not allow_empty:
        raise InputError(path, None, "no rows (empty set)")
    return rows


def tree_paths(root: str | Path, pattern: str = "*", unlistable: list[Path] | None = None) -> list[Path]:
    """Every path under ``root`` whose name matches ``pattern`` (``fnmatch``, as
    ``Path.rglob(pattern)``), at any depth; symbolic links are listed, never entered.

    The walk keeps its own stack of folders: Python 3.11's ``rglob`` recurses once per folder
    level and raised RecursionError on a tree about 1,000 deep, which a candidate can leave in
    the folders it writes (its replay state, its checkpoints, an exploration's run folder).
    A folder that cannot be listed (no permission, its entries' paths over ``PATH_MAX``) raises
    OSError, or is appended to ``unlistable`` when that list is given (as
    :func:`.workspace.special_entries` does, to report it)."""
    root = Path(root)
    out, folders = [], [root] if root.is_dir() else []
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if fnmatch.fnmatchcase(entry.name, pattern):
                        out.append(Path(entry.path))
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(Path(entry.path))
        except OSError:
            if unlistable is None:
                raise
            unlistable.append(folder)
    return out


def wait_for_paths(paths: Iterable[str | Path], latency_s: float, poll_s: float = 0.5, on_wait=None) -> list[Path]:
    """Wait up to ``latency_s`` seconds until every path exists; return those still missing.

    For shared filesystems (NFS, Lustre) where a file written on one node becomes visible
    on another seconds later, in the spirit of Snakemake's ``--latency-wait`` (which covers
    only declared outputs). Published checkpoints are renamed into place whole, so the
    directory is the unit of visibility. ``on_wait(missing)`` is called once, before the
    first sleep. Returns ``[]`` at once when all exist; never raises for missing paths.
    """
    pending = [Path(p) for p in paths]
    deadline = time.monotonic() + max(0.0, latency_s)
    while True:
        pending = [p for p in pending if not p.exists()]
        if not pending or time.monotonic() >= deadline:
            return pending
        if on_wait is not None:
            on_wait(pending)
            on_wait = None
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


_RENAME_EXCHANGE = 2  # renameat2(2) flag, <linux/fs.h>
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap the two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``, glibc >= 2.28).
    Raises OSError (ENOSYS, EINVAL: not supported by the kernel or the filesystem)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        raise OSError(errno.ENOSYS, "renameat2 is not available", str(a))
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one of another user counts; so does a pid
    too large to ask about: nothing is judged gone that could not be asked)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _where() -> str:
    """``<host>+<pid namespace>.<boot>``: where a pid means one process. Two containers may
    share a host name, their pid namespaces (the inode of ``/proc/self/ns/pid``) differ; two
    machines' main namespaces have one inode, their boots (``/proc/sys/kernel/random/boot_id``)
    differ. Characters a folder name cannot hold become ``_``."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = "0"
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]
    except OSError:
        boot = "0"
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())
    return f"{host}+{namespace}.{boot}"


def remove_dead_asides(target: str | Path, kind: str) -> None:
    """Remove the folders ``.<name>.<kind>-<pid>@<host>+<ns>-*`` beside ``target``
    (:func:`aside_dir`) that a process of this host and pid namespace left and that is gone
    (killed before it cleaned up: SIGKILL, power loss). A live process's, another host's or
    another pid namespace's (a container's) are kept, and so are those named before the pid
    namespace was (``<pid>@<host>-*``): their pid cannot be told from another container's."""
    target = Path(target)
    here = _where()
    prefix = f".{target.name}.{kind}-"
    for sibling in target.parent.glob(glob.escape(prefix) + "*"):
        pid, _, where = sibling.name[len(prefix) :].rsplit("-", 1)[0].partition("@")
        if where == here and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(sibling, ignore_errors=True)


def aside_dir(target: str | Path, kind: str = "new") -> Path:
    """A new empty sibling folder of ``target`` to build it in,
    ``.<name>.<kind>-<pid>@<host>+<pid namespace>-*`` (mode 0777 less the umask), after
    :func:`remove_dead_asides` of the same kind."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_asides(target, kind)
    owner = f"{os.getpid()}@{_where()}"
    new = Path(tempfile.mkdtemp(prefix=f".{target.name}.{kind}-{owner}-", dir=target.parent))
    os.chmod(new, 0o777 & ~_UMASK)  # mkdtemp makes 0700; readers of results need more
    return new


@contextmanager
def built_aside(target: str | Path):
    """Build the directory ``target`` aside, then swap it in whole.

    Yields an empty sibling folder (``.<name>.new-<pid>@<host>+<ns>-*``) to build in. When the
    block ends normally, the new folder replaces ``target`` in one atomic exchange
    (``renameat2``; where the filesystem lacks it, two renames) and the previous one is
    removed; when it raises, the new folder is removed and ``target`` is left byte for byte
    as it was. A builder killed before either leaves its folder; the next build of ``target``
    on this host removes it once its process is gone (:func:`remove_dead_asides`).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_asides(target, "old")  # the two-rename fallback's
    new = aside_dir(target, "new")
    try:
        yield new
        if not target.exists():
            os.rename(new, target)
            return
        try:
            _exchange(new, target)  # new now holds the previous folder
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
                raise
            old = target.with_name(f".{target.name}.old-{new.name[len(f'.{target.name}.new-') :]}")
            os.rename(target, old)
            os.rename(new, target)
            new = old
        shutil.rmtree(new, ignore_errors=True)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
