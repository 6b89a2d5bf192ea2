"""The sandbox's self-test: run the canary (:mod:`.canary`) in a run's isolation plan, with real
things to reach outside it, and judge what it reached.

:func:`run_self_test` plants, outside the working directory, what a hostile candidate would look
for -- a copy of a final-split file laid out as another checkout's ``results/``, the same file in
an ``HF_HOME``-style dataset cache, a Unix socket listener (a path and an abstract name) and a TCP
listener on the host's loopback -- checks from the host that each is really there (a file it
can read, listeners it can connect to), starts the canary as a replay starts ``train.py``
(:mod:`.launch`, under the plan's limits), and records every attempt with its verdict. The
listeners count what connected to them, so a socket escape is caught by the host even if the
canary said otherwise. The workflow runs it as rule ``sandbox_self_test``
(``results/sandbox-self-test/<task>.json``); ``final/summary.json``, ``report.md`` and
``report.html`` carry its verdicts (:func:`self_test_section`), and a failed self-test stops the
task's scoring with one line naming the escape (:class:`SelfTestFailed`).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .fileio import atomic_write_json, read_json
from .hashing import sha256_file
from .launch import start_group, stop_group
from .limits import tail_lines
from .provenance import fingerprint, utc_now
from .receipts import read_verified_json
from .sandbox import IsolationPlan

CANARY = Path(__file__).with_name("canary.py")
MAX_PRINTED = 1000  # final files fingerprinted (the first, in path order)
TIMEOUT_S = 120.0
# The standard places a copy of a final split is kept in, besides a sibling checkout and the
# dataset caches named by the environment (a missing one is simply not there).
STANDARD_PLACES = ("/srv", "/var/tmp", "/opt", "/mnt", "/media", "/data", "/scratch", "/home", "/root", "/tmp")
WELL_KNOWN_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/dbus/system_bus_socket",
    "/tmp/.X11-unix/X0",
    "/run/systemd/private",
    "/run/user/0/bus",
)
CACHE_VARIABLES = ("HF_HOME", "HF_DATASETS_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "TORCH_HOME")


class SelfTestFailed(RuntimeError):
    """The canary reached something: one line naming the first escape."""


@dataclass
class Targets:
    """What the canary tries to reach (host paths).

    Attributes:
        final: final-split files and folders (the task's ``results/<task>/assets/hidden``, its
            local final sources, a fixed start that is raw data).
        package_data: ``(package, file)`` of the task's final package data, and its installed
            copies (host paths).
        frozen: files of the frozen package (opened for writing).
        read_only_dirs: folders that must not take a new file (frozen package, working
            directory, public split, fixed start).
        public: what the sandbox shows on purpose (the public split, a fixed start that is not
            data): a final file with the same bytes as one of them (rm's ``overlap.json``, written
            to both splits) is public, and finding it is no escape.
    """

    final: list[Path]
    package_data: list[tuple[str, str]] = field(default_factory=list)
    package_data_files: list[Path] = field(default_factory=list)
    frozen: list[Path] = field(default_factory=list)
    read_only_dirs: list[Path] = field(default_factory=list)
    public: list[Path] = field(default_factory=list)


class Listeners:
    """A Unix socket (a path and an abstract name) and a TCP socket on 127.0.0.1, listening on
    the host; each connection is counted (the control connections of :meth:`check` apart)."""

    def __init__(self, folder: Path):
        self.path = str(folder / "host.sock")
        self.abstract = f"replaykit-selftest-{os.getpid()}-{os.urandom(4).hex()}"
        self.sockets = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX), socket.socket()]
        self.sockets[0].bind(self.path)
        self.sockets[1].bind("\0" + self.abstract)
        self.sockets[2].bind(("127.0.0.1", 0))
        self.port = self.sockets[2].getsockname()[1]
        self.accepted: dict[str, int] = {}
        for s, name in zip(self.sockets, ("unix", "abstract", "tcp"), strict=True):
            s.listen(16)
            threading.Thread(target=self._accept, args=(s, name), daemon=True).start()

    def _accept(self, s: socket.socket, name: str) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            self.accepted[name] = self.accepted.get(name, 0) + 1
            conn.close()

    def check(self) -> dict[str, int]:
        """Connect to each from the host (so a refused connection inside means the sandbox);
        returns the counts before the canary runs. Raises OSError when one is not listening."""
        for kind, address in ((socket.AF_UNIX, self.path), (socket.AF_UNIX, "\0" + self.abstract)):
            with socket.socket(kind) as s:
                s.connect(address)
        socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
        deadline = time.monotonic() + 5
        while sum(self.accepted.values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        return dict(self.accepted)

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def fingerprints(paths: Iterable[Path]) -> list[list]:
    """``[size, head sha256]`` (:func:`.canary.head_print`) of the non-empty files under
    ``paths`` (at most :data:`MAX_PRINTED`)."""
    from .canary import head_print

    files = []
    for path in paths:
        files += (
            [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
        )
    return [head_print(str(p)) for p in files[:MAX_PRINTED] if p.stat().st_size > 0]


def plant(final: list[Path], folder: Path, task: str, public: list[list] = ()) -> list[Path]:
    """Copies of the smallest non-empty final file outside the working directory (one whose
    fingerprint is not among ``public``'s: a file both splits hold is no secret), as another
    checkout's ``results/<task>/assets/hidden/`` and in an ``HF_HOME``-style dataset cache."""
    from .canary import head_print

    files = [p for f in final for p in ([f] if f.is_file() else f.rglob("*") if f.is_dir() else []) if p.is_file()]
    files = [p for p in files if p.stat().st_size > 0 and head_print(str(p)) not in public]
    if not files:
        return []
    source = min(files, key=lambda p: (p.stat().st_size, str(p)))
    copies = [
        folder / "other-checkout" / "results" / task / "assets" / "hidden" / source.name,
        folder / "hf-home" / "datasets" / f"{task}-final" / source.name,
    ]
    for copy in copies:
        copy.parent.mkdir(parents=True)
        shutil.copyfile(source, copy)
    return copies


def search_places(extra: Iterable[str] = ()) -> list[str]:
    """Where the canary looks for copies: the standard places, the working directory's parent
    (sibling checkouts), the dataset caches the environment names, and ``extra``."""
    env = [os.environ.get(v) for v in CACHE_VARIABLES]
    home = os.path.expanduser("~/.cache/huggingface")
    places = [*STANDARD_PLACES, str(Path.cwd().resolve().parent), *filter(None, env), home, *extra]
    return list(dict.fromkeys(places))


def _request(plan: IsolationPlan, targets: Targets, run: Path, planted: dict, listeners: Listeners) -> dict:
    final_files = [str(p) for f in targets.final for p in ([f] if f.is_file() else f.rglob("*")) if p.is_file()]
    public = fingerprints(targets.public)
    return {
        "state_dir": str(run / "state"),
        "final_files": final_files[:MAX_PRINTED],
        "final_dirs": [str(f) for f in targets.final if f.is_dir()],
        "final_prints": [p for p in fingerprints(targets.final + targets.package_data_files) if p not in public],
        "copies": [str(p) for p in planted["copies"]],
        "search": search_places([planted["folder"]]),
        "package_data": [list(p) for p in targets.package_data],
        "package_data_files": [str(p) for p in targets.package_data_files],
        "frozen_files": [str(p) for p in targets.frozen],
        "read_only_dirs": [str(p) for p in [*targets.read_only_dirs, run / "workspace"]],
        "tcp": [["127.0.0.1", listeners.port]],
        "dns": ["pypi.org", "github.com"],
        "unix_sockets": [listeners.path],
        "abstract_sockets": [listeners.abstract],
        "well_known_sockets": list(WELL_KNOWN_SOCKETS),
        "limits": (plan.limits.as_dict() if plan.limits else {}),
    }


def _launch(plan: IsolationPlan, run: Path, request_path: Path) -> tuple[int, list[str], dict]:
    """Run the canary as a replay's ``train.py``; (exit status, its last lines, the limits)."""
    workspace, log = run / "workspace", run / "state" / "log.txt"
    argv = plan.argv([sys.executable, "train.py", "--request", str(request_path)], chdir=workspace)
    with plan.confine() as confinement, open(log, "wb") as sink:
        proc = start_group(argv, cwd=workspace, env=plan.environment(dict(os.environ)), preexec=confinement.preexec)
        try:
            for line in iter(proc.stdout.readline, b""):
                sink.write(line)
            proc.wait(timeout=TIMEOUT_S)
        finally:
            stop_group(proc, grace_s=2)
        limits = confinement.describe()
    return proc.returncode, tail_lines(log), limits


def run_self_test(plan: IsolationPlan, targets: Targets, run: Path, task: str) -> dict:
    """Run the canary in ``plan`` (whose workspace is ``run/workspace``, read-only, and writable
    folder ``run/state``, both made here and removed at the end) against ``targets``; the verdict.

    Returns ``{"passed", "escaped": [names], "attempts": [...], "listeners": {...},
    "planted": [...], "sandbox": the plan as run, "seconds", "ran_at", "fingerprint"}``; an
    attempt is ``{"escape", "target", "blocked", "detail"}``. Raises :class:`SelfTestFailed`
    when the canary itself did not run (its last line), and OSError when a listener could not be
    reached from the host."""
    t0, run = time.time(), run.resolve()
    (run / "workspace").mkdir(parents=True)
    (run / "state").mkdir()
    shutil.copyfile(CANARY, run / "workspace" / "train.py")
    folder = Path(tempfile.mkdtemp(prefix="replaykit-selftest-", dir=_outside()))
    listeners = Listeners(folder)
    try:
        planted = {"folder": str(folder), "copies": plant(targets.final, folder, task, fingerprints(targets.public))}
        control = listeners.check()
        request_path = run / "state" / "request.json"
        atomic_write_json(request_path, _request(plan, targets, run, planted, listeners))
        code, tail, limits = _launch(plan, run, request_path)
        time.sleep(0.1)  # a connection made just before the canary ended is counted
        reached = {k: v - control.get(k, 0) for k, v in listeners.accepted.items() if v > control.get(k, 0)}
        if code != 0 or not (run / "state" / "canary.json").is_file():
            raise SelfTestFailed(f"the canary did not run (exit {code}): {(tail or ['no output'])[-1]}")
        attempts = read_json(run / "state" / "canary.json")["attempts"]
    finally:
        listeners.close()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(run, ignore_errors=True)
    attempts += [
        {"escape": "host_listener", "target": k, "blocked": False, "detail": f"{n} connection(s)"}
        for k, n in reached.items()
    ]
    escaped = list(dict.fromkeys(a["escape"] for a in attempts if not a["blocked"]))
    return {
        "passed": not escaped,
        "escaped": escaped,
        "attempts": attempts,
        "listeners": {"unix": listeners.path, "abstract": "@" + listeners.abstract, "tcp": listeners.port},
        "planted": [str(p) for p in planted["copies"]],
        "sandbox": {**plan.describe(), "limits": limits},
        "seconds": time.time() - t0,
        "ran_at": utc_now(),
        "fingerprint": fingerprint(),
    }


def _outside() -> str:
    """A folder outside the working directory for the planted copies: ``/var/tmp`` where it
    can be written (a standard place an old run is kept in), else the temporary folder."""
    cwd = Path.cwd().resolve()
    for folder in ("/var/tmp", tempfile.gettempdir()):
        real = Path(folder).resolve()
        if os.access(real, os.W_OK) and not (real == cwd or cwd in real.parents or real in cwd.parents):
            return str(real)
    return tempfile.gettempdir()


def failure_line(verdict: dict) -> str:
    """One line naming the first escape of a failed self-test."""
    first = next(a for a in verdict["attempts"] if not a["blocked"])
    more = len(verdict["escaped"]) - 1
    return f"sandbox self-test: escape {first['escape']}: {first['target']}: {first['detail']}" + (
        f" (and {more} more kind(s): {', '.join(verdict['escaped'][1:])})" if more > 0 else ""
    )


def self_test_section(path: str | Path | None, records: Iterable[dict] = ()) -> dict | None:
    """``sandbox_self_test`` of ``final/summary.json``: the self-test's verdicts (each kind of
    escape, blocked or not), the sandbox's version and the paths it showed, its limits, where it
    ran, and the runs whose replay ran on another host or bubblewrap than the self-test
    (``replays_elsewhere``, from the replay records' ``fingerprint``; records without one are
    listed as unknown). None without a self-test file."""
    if not path:
        return None
    doc = read_verified_json(path)  # its receipt <task>.json.sha256 vouches for it
    verdicts: dict[str, bool] = {}
    for a in doc.get("attempts", []):
        verdicts[a["escape"]] = verdicts.get(a["escape"], True) and a["blocked"]
    mine = doc.get("fingerprint") or {}
    elsewhere = []
    for record in records:
        theirs = record.get("fingerprint")
        if theirs is None:
            elsewhere.append({"run": record.get("run"), "why": "its record has no fingerprint"})
        elif (theirs.get("hostname_sha256"), theirs.get("bwrap")) != (mine.get("hostname_sha256"), mine.get("bwrap")):
            elsewhere.append({"run": record.get("run"), "why": "another host or bubblewrap version"})
    sandbox = doc.get("sandbox") or {}
    return {
        "file": str(path),
        "sha256": sha256_file(path),
        "isolation": doc.get("isolation"),
        "passed": doc.get("passed"),
        "escapes": [{"escape": k, "blocked": v} for k, v in verdicts.items()],
        "bwrap": mine.get("bwrap"),
        "ran_at": doc.get("ran_at"),
        "shown": {k: sandbox.get(k, []) for k in ("system", "read_only", "writable", "masked")},
        "limits": sandbox.get("limits"),
        "fingerprint": mine,
        "replays_elsewhere": elsewhere,
    }
