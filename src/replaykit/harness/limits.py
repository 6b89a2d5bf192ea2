"""Resource limits of a sandboxed job: memory, processes and the size of a file it writes.

Every process that runs candidate code or reads a candidate's files in the sandbox -- the
formal replay's ``train.py``, an exploration probe, the exploration's proxy scoring, the
sandbox self-test -- runs under :class:`Limits`, so that a runaway candidate fails itself and
not the machine. The numbers come from the config's ``sandbox_limits`` (:class:`LimitSettings`:
defaults derived from the machine and the fixed start, each overridable); how each is enforced:

* **memory**: ``RLIMIT_DATA`` of every process of the job (``setrlimit`` in the child before it
  runs ``bwrap``; inherited by everything started inside). Since Linux 4.7 it bounds a
  process's private writable memory (heap, anonymous ``mmap``, thread stacks, the writable
  segments of loaded libraries), not its address space: the large ``PROT_NONE`` reservations
  CUDA and PyTorch make for unified addressing, device memory and shared mappings do not count.
  ``RLIMIT_AS`` would count those reservations and breaks CUDA's initialisation, so it is not
  used. An allocation past the limit fails (``MemoryError`` in Python, ``can't allocate
  memory`` in PyTorch), the process is not killed. The limit is per process: a job's
  DataLoader workers each get it. The sandbox's RAM-backed scratch folders (``/tmp``,
  ``$HOME``, ``/dev/shm``) are each capped at the same size (``bwrap --size``).
* **file size**: ``RLIMIT_FSIZE``: a write past it fails (``EFBIG``, "File too large", in
  Python, which ignores ``SIGXFSZ``; other programs are killed by ``SIGXFSZ``).
* **processes** (threads count, as the kernel counts them): a ``pids`` cgroup of the job's own,
  made as a child of this process's own cgroup (cgroup v2 when that cgroup delegates the
  ``pids`` controller, else the cgroup v1 ``pids`` hierarchy), where this process may make one
  (root, or a delegated subtree); otherwise ``RLIMIT_NPROC`` for a user other than root (it then
  counts all of that user's processes, the kernel's rule). The kernel does not apply
  ``RLIMIT_NPROC`` to root: with neither, the process limit is not enforced and the record
  says so (``processes: null`` and ``not_enforced``).

Which limit a failed job hit (:func:`classify`): the ``pids`` cgroup's ``max`` event counter,
death by ``SIGXFSZ``, or else the job's last output lines naming the error of a limit
(:data:`PATTERNS`). A job that hit a limit failed itself: the candidate's failure.

Sources: ``setrlimit(2)``, ``prlimit(1)``, the kernel's ``Documentation/admin-guide/cgroup-v2.rst``
(PID controller) and ``cgroup-v1/pids.rst``.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import signal
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import InputError
from .fileio import process_alive, tree_paths

GIB = 1024**3
MIN_FILE_BYTES = GIB  # the derived file-size limit is never below this
CGROUP_ROOT = Path("/sys/fs/cgroup")
HIT_KINDS = ("memory", "processes", "file_size")

# The last output lines of a failed job that name a limit's error (the last matching line wins).
# A CUDA "out of memory" is the GPU's, not this limit's, and matches none of them.
PATTERNS = {
    "memory": re.compile(
        r"\bMemoryError\b|_ArrayMemoryError|Cannot allocate memory|can't allocate memory|std::bad_alloc|"
        r"Unable to allocate|failed to map segment from shared object|\[Errno 12\]"
    ),
    "file_size": re.compile(r"File too large|\[Errno 27\]"),
    "processes": re.compile(r"Resource temporarily unavailable|can't start new thread|fork: retry|\[Errno 11\]"),
}


@dataclass(frozen=True)
class Limits:
    """The stated limits of one job (None: no limit).

    Attributes:
        memory_bytes: private writable memory per process (``RLIMIT_DATA``), bytes; also the
            size of each scratch folder.
        processes: processes and threads of the job together.
        file_bytes: size of any one file the job writes (``RLIMIT_FSIZE``), bytes.
    """

    memory_bytes: int | None = None
    processes: int | None = None
    file_bytes: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LimitSettings:
    """The config's ``sandbox_limits`` (config/schema.yaml): each limit an integer, ``auto``
    (derived, :meth:`resolve`) or ``none`` (no limit)."""

    memory_bytes: int | str = "auto"
    memory_fraction: float = 0.8
    processes: int | str = 4096
    file_bytes: int | str = "auto"
    file_factor: float = 4.0

    @classmethod
    def from_config(cls, block: dict | None) -> LimitSettings:
        """From the config's ``sandbox_limits`` mapping (missing keys take the defaults).
        Raises :class:`InputError` naming a key it does not know."""
        block = dict(block or {})
        unknown = sorted(set(block) - set(cls.__dataclass_fields__))
        if unknown:
            raise InputError("config", f"sandbox_limits.{unknown[0]}", "not a key of sandbox_limits")
        return cls(**block)

    def as_dict(self) -> dict:
        return asdict(self)

    def resolve(self, fixed_start: Path | None) -> Limits:
        """The numbers: ``memory_bytes`` ``auto`` = ``memory_fraction`` x :func:`machine_memory`;
        ``file_bytes`` ``auto`` = ``file_factor`` x the fixed start's size (the largest
        checkpoint a recipe can be expected to write is about the model it starts from; a
        float32 export of a bfloat16 model doubles it), at least :data:`MIN_FILE_BYTES`."""
        memory = _number(self.memory_bytes, lambda: int(self.memory_fraction * machine_memory()))
        files = _number(self.file_bytes, lambda: max(MIN_FILE_BYTES, int(self.file_factor * tree_bytes(fixed_start))))
        return Limits(memory, _number(self.processes, lambda: None), files)


def _number(value: int | str, auto) -> int | None:
    if value == "none":
        return None
    return auto() if value == "auto" else int(value)


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's physical memory, or its own
    cgroup's memory limit when that is lower (a SLURM job's, a container's)."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits = [physical]
    for path in _own_cgroup_files(("memory.max", "memory.limit_in_bytes")):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits)


def tree_bytes(path: Path | None) -> int:
    """Total size of the regular files under ``path`` (a file: its size; missing: 0)."""
    if path is None or not Path(path).exists():
        return 0
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in tree_paths(path) if p.is_file() and not p.is_symlink())


def _own_cgroups() -> list[tuple[str, Path]]:
    """``(controllers, folder)`` of this process's own cgroups: ``("", <v2 folder>)`` and, for
    cgroup v1, ``("pids", <folder>)``, ... (folders that exist)."""
    out = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            base = CGROUP_ROOT / name if name else _v2_root()
            if base is not None and (base / rel.lstrip("/")).is_dir():
                out.append((name, base / rel.lstrip("/")))
    return out


def _v2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or, on a hybrid system,
    ``/sys/fs/cgroup/unified``)."""
    for path in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (path / "cgroup.controllers").is_file():
            return path
    return None


def _own_cgroup_files(names: Iterable[str]) -> list[Path]:
    return [folder / name for _, folder in _own_cgroups() for name in names if (folder / name).is_file()]


_serial = itertools.count(1)


class PidsCgroup:
    """A ``pids`` cgroup of one job, a child of this process's own cgroup (v2 when it delegates
    ``pids`` to its children, else v1's ``pids`` hierarchy). :meth:`make` returns None where no
    such folder can be made (no root and no delegated subtree; a read-only cgroup mount)."""

    def __init__(self, folder: Path, version: int):
        self.folder, self.version = folder, version

    @classmethod
    def make(cls, maximum: int) -> PidsCgroup | None:
        name = f"replaykit-{os.getpid()}-{next(_serial)}"
        for controllers, parent in _own_cgroups():
            v2 = controllers == "" and "pids" in _read(parent / "cgroup.subtree_control").split()
            if not (v2 or controllers == "pids"):
                continue
            _sweep(parent)
            try:
                (parent / name).mkdir()
            except OSError:
                continue
            group = cls(parent / name, 2 if v2 else 1)
            try:
                (group.folder / "pids.max").write_text(str(maximum))
            except OSError:
                group.remove()
                continue
            return group
        return None

    def join(self) -> None:
        """Move the calling process into the cgroup (the job's child, before it runs bwrap)."""
        with open(self.folder / "cgroup.procs", "w") as procs:
            procs.write(str(os.getpid()))

    def max_events(self) -> int:
        """How often a fork was refused at the limit (``pids.events``: ``max N``)."""
        for line in _read(self.folder / "pids.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self, wait_s: float = 3.0) -> None:
        """Remove the folder once the job's processes are gone (they die with the sandbox's
        PID namespace; waits up to ``wait_s`` for the last ones)."""
        ends = time.monotonic() + wait_s
        while True:
            try:
                self.folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > ends:
                    return
                time.sleep(0.05)


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups of jobs whose driver is gone (killed before it could)."""
    for child in parent.glob("replaykit-*-*"):
        pid = child.name.split("-")[1]
        if pid.isdigit() and not process_alive(int(pid)):
            try:
                child.rmdir()
            except OSError:
                pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class Confinement:
    """How one job's :class:`Limits` are enforced: made before the job starts, its
    :meth:`preexec` run in the job's child process, its :meth:`verdict` read after the job
    ended, :meth:`close` last (a context manager does that).

    Args:
        limits: the stated limits (None: none).
    """

    def __init__(self, limits: Limits | None):
        self.limits = limits or Limits()
        self.cgroup = PidsCgroup.make(self.limits.processes) if self.limits.processes else None
        self.nproc = self.limits.processes is not None and self.cgroup is None and os.geteuid() != 0

    def __enter__(self) -> Confinement:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def preexec(self) -> None:
        """Set the rlimits of the calling process and join the job's cgroup (in the child,
        before ``exec``; everything the job starts inherits them)."""
        for key, value in self.rlimits().items():
            resource.setrlimit(key, (value, value))
        if self.cgroup is not None:
            self.cgroup.join()

    def rlimits(self) -> dict[int, int]:
        out = {}
        if self.limits.memory_bytes is not None:
            out[resource.RLIMIT_DATA] = self.limits.memory_bytes
        if self.limits.file_bytes is not None:
            out[resource.RLIMIT_FSIZE] = self.limits.file_bytes
        if self.nproc:
            out[resource.RLIMIT_NPROC] = self.limits.processes
        return out

    def enforced(self) -> dict:
        """How each limit is enforced (None: no limit or not enforced)."""
        processes = None
        if self.cgroup is not None:
            processes = f"cgroup v{self.cgroup.version} pids ({self.cgroup.folder})"
        elif self.nproc:
            processes = "RLIMIT_NPROC (counts all processes of this user)"
        return {
            "memory": "RLIMIT_DATA per process" if self.limits.memory_bytes is not None else None,
            "processes": processes,
            "file_size": "RLIMIT_FSIZE" if self.limits.file_bytes is not None else None,
        }

    def verdict(self, returncode: int, tail: Iterable[str]) -> tuple[str | None, str | None]:
        """``(limit hit, evidence)`` of a job that ended with ``returncode`` and whose last
        output lines are ``tail``: :func:`classify` with this job's counters."""
        events = self.cgroup.max_events() if self.cgroup is not None else 0
        return classify(returncode, tail, pids_max_events=events, limits=self.stated())

    def stated(self) -> Limits:
        """The limits as enforced: a process limit nothing enforces is None."""
        enforced = self.cgroup is not None or self.nproc
        return Limits(self.limits.memory_bytes, self.limits.processes if enforced else None, self.limits.file_bytes)

    def describe(self, hit: str | None = None, evidence: str | None = None) -> dict:
        """The record's ``limits``: ``memory_bytes``, ``processes``, ``file_bytes`` (as
        enforced), ``hit`` and its ``evidence``, ``enforced_by`` and, for a stated limit nothing
        enforces, ``not_enforced`` saying why."""
        doc = {**self.stated().as_dict(), "hit": hit, "evidence": evidence, "enforced_by": self.enforced()}
        if self.limits.processes is not None and self.stated().processes is None:
            doc["not_enforced"] = {
                "processes": f"{self.limits.processes} stated; the kernel does not apply RLIMIT_NPROC to root "
                "and no pids cgroup could be made here"
            }
        return doc

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()


def classify(
    returncode: int, tail: Iterable[str], *, pids_max_events: int = 0, limits: Limits | None = None
) -> tuple[str | None, str | None]:
    """Which limit a job hit: ``(kind, evidence)`` with kind one of :data:`HIT_KINDS`, or
    ``(None, None)`` when it succeeded (``returncode`` 0) or no limit explains its failure.

    Evidence, strongest first: the ``pids`` cgroup refused a fork (``pids_max_events``); the
    job died by ``SIGXFSZ`` (``returncode`` -25 or 153, bwrap's 128 + signal); the last line of
    ``tail`` that matches one of :data:`PATTERNS` of a limit that was set (``limits``; None:
    all of them)."""
    if returncode == 0:
        return None, None
    if pids_max_events:
        return "processes", f"pids cgroup refused {pids_max_events} fork(s) at its maximum"
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return "file_size", "killed by SIGXFSZ"
    set_ = {"memory": True, "processes": True, "file_size": True}
    if limits is not None:
        set_ = {
            "memory": limits.memory_bytes is not None,
            "processes": limits.processes is not None,
            "file_size": limits.file_bytes is not None,
        }
    for line in reversed(list(tail)):
        for kind, pattern in PATTERNS.items():
            if set_[kind] and pattern.search(line):
                return kind, f"output: {line.strip()[:300]}"
    return None, None


def failure_line(kind: str, limits: dict) -> str:
    """One line for a job that hit limit ``kind`` (``limits``: :meth:`Confinement.describe`)."""
    key = {"memory": "memory_bytes", "processes": "processes", "file_size": "file_bytes"}[kind]
    value = limits.get(key)
    shown = f"{value / GIB:.2f} GiB" if key != "processes" and value else str(value)
    return (
        f"the candidate hit the sandbox's {kind.replace('_', ' ')} limit ({key} = {shown}; "
        f"{limits.get('evidence')}); raise sandbox_limits.{key} in the config if it needs more"
    )


def tail_lines(path: Path, n: int = 40, max_bytes: int = 64 * 1024) -> list[str]:
    """The last ``n`` lines of the file at ``path`` (read from its last ``max_bytes``)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
            return f.read().decode("utf-8", errors="replace").splitlines()[-n:]
    except OSError:
        return []
