"""An exclusive lock on a file that notices when the file is deleted or replaced while held:
the one lock of the exploration's GPU lock and of the GPU slots (:mod:`.slots`).

``flock`` locks an inode, not a path. Once the lock file is deleted (``rm explore/.gpu.lock``
on the host), the next opener creates a new inode and locks that at once, while the first
holder still holds the old one: two holders, and ``flock`` says nothing. So a
:class:`FileLock`

* compares the held descriptor's inode with the path's (``os.fstat`` against ``os.stat``)
  when it takes the lock (and retries on the path's file if they differ), every
  :data:`WATCH_S` seconds while it holds it (a daemon thread), and when it lets go;
* looks, at the same times, for a *rival*: another process holding a ``flock`` (the kernel's
  table, ``/proc/locks``) on a file that this path named -- its descriptor
  (``/proc/<pid>/fd/<n>``) links to the path, or to ``<path> (deleted)``, with another inode;
* records each finding once (:attr:`FileLock.events`; ``lock_replaced`` is true when there
  is one), so that the holder whose file was deleted and the process that locked the new
  file both say so in their receipts.

A deletion from the host cannot be prevented (the holder runs on the host, as the one who
deletes); it is caught here while both hold a lock, and otherwise afterwards, from
overlapping intervals in the receipts.

The holder record (what a waiter reads as ``waited_for``) is written by the harness into the
locked file itself, through the held descriptor, so it belongs to that inode: the holder's pid,
its process start time, a random nonce, a hash of the host name, and the caller's ``who``.
A waiter checks it against the kernel: the record's pid must hold the ``flock`` on that inode
and have the same start time, else ``verified`` is false. The holder's own receipt carries the
same nonce (``holder``), so a holder record written by anyone else (for instance copied from
another probe's receipt into the lock file) does not match the receipt it names.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from .errors import InputError

POLL_S = 0.2  # a waiter tries again this often
WATCH_S = 2.0  # a holder checks its file this often (an fstat, a stat and /proc/locks: ~0.1 ms)
RECORD_BYTES = 4096  # the holder record's size limit (it is read by waiters)


def process_start_unix(pid: int) -> float | None:
    """When process ``pid`` started (s since the epoch, to the kernel's clock tick), None
    when it is gone or not readable (``/proc/<pid>/stat`` field 22 after boot time)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # fields after the command, from field 3
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line[:6] == "btime "
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def host_sha256() -> str:
    """SHA-256 of this host's name (first 16 hex digits): which machine, without naming it."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:16]


def flock_holders() -> list[tuple[int, int]]:
    """``(pid, inode)`` of every ``flock`` lock the kernel lists as granted (``/proc/locks``;
    waiters, marked ``->``, and POSIX locks left out)."""
    out = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and "->" not in line:
            try:
                out.append((int(parts[4]), int(parts[5].rsplit(":", 1)[1])))
            except (ValueError, IndexError):
                continue
    return out


def _descriptor_of(pid: int, path: str, inode: int) -> str | None:
    """The ``/proc/<pid>/fd/<n>`` of process ``pid`` that links to ``path`` (or to
    ``<path> (deleted)``) and is inode ``inode``; None when it has none (or is not readable)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for name in names:
        link = f"/proc/{pid}/fd/{name}"
        try:
            target = os.readlink(link)
            if target in (path, f"{path} (deleted)") and os.stat(link).st_ino == inode:
                return link
        except OSError:
            continue
    return None


def _read_record(fd_or_path) -> dict | None:
    """A holder record (JSON) from a descriptor (read at offset 0) or a path; None if none."""
    try:
        if isinstance(fd_or_path, int):
            raw = os.pread(fd_or_path, RECORD_BYTES, 0)
        else:
            with open(fd_or_path, "rb") as f:
                raw = f.read(RECORD_BYTES)
    except OSError:
        return None
    if not raw.strip():
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return {"unreadable": raw[:200].decode("utf-8", "replace")}
    return doc if isinstance(doc, dict) else {"unreadable": str(doc)[:200]}


def verify_holder(record: dict | None, inode: int) -> dict | None:
    """``record`` (a holder record read from the file of inode ``inode``) with ``verified``:
    true when its pid holds the ``flock`` on that inode now and started when it says."""
    if record is None:
        return None
    pid = record.get("pid")
    holds = isinstance(pid, int) and (pid, inode) in flock_holders()
    started = process_start_unix(pid) if holds else None
    same = started is not None and abs(started - float(record.get("start_unix") or 0)) < 0.05
    return {**record, "verified": bool(holds and same)}


def describe_holder(record: dict | None) -> str:
    """A holder record in a few words: what it is (its ``who``), its pid, and whether the kernel
    confirms it (``unverified`` otherwise)."""
    if not record:
        return "an unknown holder (no record)"
    hidden = ("nonce", "start_unix", "host_sha256", "inode", "acquired_unix", "verified", "pid")
    what = " ".join(f"{k}={v}" for k, v in record.items() if k not in hidden)
    return f"{what} (pid {record.get('pid')}{'' if record.get('verified') else ', unverified'})"


class FileLock:
    """An exclusive ``flock`` on ``path`` whose deletion or replacement while held is detected.

    Args:
        path: the lock file (created if missing; never deleted by the lock).
        who: what the holder is, for waiters and receipts (e.g. exploration and probe id, or
            task, run and rule); copied into the holder record.

    Attributes (after :meth:`acquire` / :meth:`try_acquire`):
        inode: the locked file's inode.
        acquired_unix, released_unix: when it took and let go of the lock (s since the epoch).
        waited_s: seconds it waited for another holder (0.0 when it got the lock at once).
        waited_for: the holder record it found while waiting (:func:`verify_holder`), or None.
        events: findings while held, in order: ``{"unix", "event", "detail", ...}`` with event
            ``deleted`` (the path is gone), ``replaced`` (the path is another inode),
            ``rival`` (another process holds a flock on a file of this path: its pid, inode
            and holder record), ``moved`` (at acquire: the opened file was no longer the
            path's; taken again on the path's file).
    """

    def __init__(self, path: str | Path, who: dict):
        self.path = Path(os.path.realpath(Path(path).parent)) / Path(path).name
        self.who = dict(who)
        self.fd: int | None = None
        self.inode: int | None = None
        self.nonce = secrets.token_hex(16)
        self.acquired_unix: float | None = None
        self.released_unix: float | None = None
        self.waited_s = 0.0
        self.waited_for: dict | None = None
        self.events: list[dict] = []
        self._seen: set = set()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._mutex = threading.Lock()

    # ---------------------------------------------------------------- taking and letting go

    def holder(self) -> dict:
        """This process's holder record (written into the locked file)."""
        pid = os.getpid()
        return {
            **self.who,
            "pid": pid,
            "start_unix": process_start_unix(pid),
            "nonce": self.nonce,
            "host_sha256": host_sha256(),
            "inode": self.inode,
            "acquired_unix": self.acquired_unix,
        }

    def try_acquire(self) -> bool:
        """Take the lock if it is free (True), else remember its holder and return False."""
        for _ in range(10):  # the path's file changed between open and flock: take the new one
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # whom it waits for: the first holder whose record it could read
                self.waited_for = self.waited_for or verify_holder(_read_record(fd), os.fstat(fd).st_ino)
                os.close(fd)
                return False
            held = os.fstat(fd)
            if self._path_inode() == held.st_ino:
                break
            self._event("moved", f"inode {held.st_ino} was no longer {self.path} when locked; locking the path again")
            os.close(fd)
        else:
            raise InputError(self.path, "lock", "the lock file keeps changing under the lock: refusing to run")
        self.fd, self.inode, self.acquired_unix = fd, held.st_ino, time.time()
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.holder(), sort_keys=True).encode(), 0)
        self.check()
        return True

    def acquire(
        self, wait: bool = True, deadline_unix: float = float("inf"), *, on_wait=None, watch_s: float | None = WATCH_S
    ) -> FileLock:
        """Take the lock, waiting for it (polling every :data:`POLL_S`) unless ``wait`` is
        False, until ``deadline_unix``; then check the file every ``watch_s`` seconds while
        held (None: only at acquire and release). ``on_wait(record)`` is called once when it
        first has to wait.

        Raises:
            InputError: the lock is held and ``wait`` is False, or still held at the deadline.
        """
        t0, at_once = time.time(), True
        while not self.try_acquire():
            at_once = False
            if not wait or time.time() >= deadline_unix:
                why = "held" if not wait else "still held when the budget ended"
                raise InputError(self.path, "lock", f"GPU lock {why} by {describe_holder(self.waited_for)}")
            if on_wait is not None:
                on_wait(self.waited_for)
                on_wait = None
            time.sleep(POLL_S)
        self.waited_s = 0.0 if at_once else self.acquired_unix - t0
        if watch_s is not None:
            self.watch(watch_s)
        return self

    def watch(self, every_s: float = WATCH_S) -> None:
        """Check the file every ``every_s`` seconds while held (a daemon thread)."""

        def loop():
            while not self._stop.wait(every_s):
                self.check()

        self._watcher = threading.Thread(target=loop, name=f"lock-watch {self.path.name}", daemon=True)
        self._watcher.start()

    def release(self) -> dict:
        """Check the file a last time, let go of the lock (the file stays) and return
        :meth:`record`. Calling it again changes nothing."""
        if self.fd is not None:
            self._stop.set()
            if self._watcher is not None:
                self._watcher.join(timeout=5)
            self.check()
            self.released_unix = time.time()
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        return self.record()

    def __enter__(self) -> FileLock:
        return self if self.fd is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    # ---------------------------------------------------------------- what is recorded

    @property
    def replaced(self) -> bool:
        """Whether the lock file was deleted or replaced, or a rival held it, while held."""
        return any(e["event"] != "moved" for e in self.events)

    def record(self) -> dict:
        """The lock's receipt fields: ``lock``, ``inode``, ``acquired_unix``,
        ``released_unix``, ``waited_s``, ``waited_for``, ``lock_replaced``, ``lock_events``,
        ``holder`` (this process's holder record, with its nonce)."""
        return {
            "lock": str(self.path),
            "inode": self.inode,
            "acquired_unix": self.acquired_unix,
            "released_unix": self.released_unix,
            "waited_s": self.waited_s,
            "waited_for": self.waited_for,
            "lock_replaced": self.replaced,
            "lock_events": list(self.events),
            "holder": self.holder() if self.inode is not None else None,
        }

    def check(self) -> bool:
        """Compare the held inode with the path's and look for rivals; record what is new.
        Returns whether the lock is still the path's and alone."""
        if self.fd is None or self.inode is None:
            return True
        now = self._path_inode()
        if now is None:
            self._event("deleted", f"{self.path} was deleted while held (inode {self.inode})")
        elif now != self.inode:
            self._event("replaced", f"{self.path} is inode {now}, not the held inode {self.inode}", inode=now)
        for rival in self.rivals():
            self._event(
                "rival",
                f"pid {rival['pid']} holds a lock on inode {rival['inode']} of {self.path} at the same time",
                **rival,
            )
        return not self.replaced

    def rivals(self) -> list[dict]:
        """Other processes holding a ``flock`` on another file of this path (a deleted or the
        replacing one): ``{"pid", "inode", "deleted", "holder"}`` (their holder record,
        :func:`verify_holder`)."""
        out, me, path = [], os.getpid(), str(self.path)
        for pid, inode in flock_holders():
            if pid == me or inode == self.inode:
                continue
            link = _descriptor_of(pid, path, inode)
            if link is not None:
                deleted = os.readlink(link).endswith(" (deleted)")
                out.append(
                    {"pid": pid, "inode": inode, "deleted": deleted, "holder": verify_holder(_read_record(link), inode)}
                )
        return out

    def _path_inode(self) -> int | None:
        try:
            return os.stat(self.path).st_ino
        except FileNotFoundError:
            return None

    def _event(self, event: str, detail: str, **extra) -> None:
        key = (event, extra.get("pid"), extra.get("inode"))
        with self._mutex:
            if key in self._seen:
                return
            self._seen.add(key)
            self.events.append({"unix": time.time(), "event": event, "detail": detail, **extra})
