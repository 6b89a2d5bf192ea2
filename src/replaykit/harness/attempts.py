"""The attempts of one formal replay: one entry per start, each with its own log and the cause
of its end.

The replay driver keeps them in ``results/<task>/<run>/replay-attempts.json``, beside the
run's folders and outside the sandbox (candidate code can write ``replay/`` and
``replay-state/`` only), rewritten atomically at the start, every few seconds while training
runs (the last time the attempt was seen alive counts against the one budget of all
attempts) and at the end. The replay record copies them (``attempts``, oldest first)::

    {"attempt": 1, "started_unix": float, "last_seen_unix": float, "ended_unix": float | None,
     "exit": int | None, "cause": "completed" | "deadline" | "candidate" | "platform" | "unknown",
     "cause_detail": str, "log": "logs/<task>/<run>/replay.attempt-1.log" | None,
     "limit_hit": str | None}

``cause``: ``completed`` (the recipe's end), ``deadline`` (stopped at the internal deadline or
at the outer limit), ``candidate`` (the recipe failed: an error of its own, a non-finite loss,
nothing published, retention broken, a resource limit hit, or still running at the internal
deadline + export reserve, where the driver stopped it: ``stop_reason overtime``, the record
written all the same), ``platform`` (the sandbox did not
start, SIGKILL without an error of the recipe's own -- the kernel's out-of-memory killer --,
SIGTERM or SIGINT from a scheduler or an operator, or no end recorded: the driver was killed or
its node lost, found at the next start), ``unknown`` (the driver itself failed). Another
helper's fields (``gpu_slot``) are kept as they are.

Each attempt's output is teed into its own log (:func:`tee_attempt_log`): Snakemake removes a
job's ``log:`` file (``replay.log``) before the job runs again, so ``replay.log`` holds the
current attempt and ``replay.attempt-N.log`` every attempt.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path

from .fileio import atomic_write_json, read_json

CAUSES = ("completed", "deadline", "candidate", "platform", "unknown")
FILE = "replay-attempts.json"  # in the run's folder: results/<task>/<run>/replay-attempts.json
OPEN_DETAIL = "no end recorded yet"
SIGNAL_EXITS = {128 + s: s for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}


def attempt_log_name(log_name: str | None, number: int) -> str | None:
    """``logs/<task>/<run>/replay.log`` -> ``logs/<task>/<run>/replay.attempt-<number>.log``."""
    if not log_name:
        return None
    log = Path(log_name)
    return str(log.with_name(f"{log.stem}.attempt-{number}{log.suffix}"))


def _settled(entry: dict, number: int) -> dict:
    """An earlier attempt as the next start finds it: one without an end (the driver was
    killed, its node lost) becomes ``platform``; one written before attempts had causes (only
    a start and a last-seen time) becomes ``unknown``."""
    entry = {"attempt": number, "log": None, "limit_hit": None, **entry}
    entry.setdefault("last_seen_unix", entry["started_unix"])
    if "cause" not in entry:
        entry.update(ended_unix=None, exit=None, cause="unknown", cause_detail="recorded before attempts had causes")
    elif entry.get("ended_unix") is None:
        entry.update(
            cause="platform",
            cause_detail=(
                "no end was recorded: the replay job was killed (kill -9, node loss) while it ran; "
                f"last seen alive {entry['last_seen_unix'] - entry['started_unix']:.0f} s after its start"
            ),
        )
    return entry


class Attempts:
    """The attempts of one replay, oldest first; the current one is the last.

    Args:
        path: the attempts file (:data:`FILE` in the run's folder).
        started_unix: when the current attempt started.
        log_name: the current job's log (``replay.log``), or None when there is none.
        earlier: the earlier attempts of the same replay (empty for a fresh formal replay).
    """

    def __init__(self, path: Path, started_unix: float, log_name: str | None, earlier: list[dict]):
        self.path = Path(path)
        self.previous = [_settled(e, i) for i, e in enumerate(earlier, start=1)]
        number = len(self.previous) + 1
        self.current = {
            "attempt": number,
            "started_unix": started_unix,
            "last_seen_unix": started_unix,
            "ended_unix": None,
            "exit": None,
            "cause": "unknown",
            "cause_detail": OPEN_DETAIL,
            "log": attempt_log_name(log_name, number),
            "limit_hit": None,
        }

    @staticmethod
    def earlier(path: Path, legacy: Path | None = None) -> list[dict]:
        """The attempts recorded in ``path`` (or, when it does not exist, in ``legacy``: the
        state folder's ``attempts.json`` of older replays); ``[]`` when neither exists."""
        for candidate in (path, legacy):
            if candidate is not None and Path(candidate).is_file():
                entries = read_json(candidate)
                return entries if isinstance(entries, list) else []
        return []

    @property
    def entries(self) -> list[dict]:
        return self.previous + [self.current]

    @property
    def previous_s(self) -> float:
        """Seconds of the one budget earlier attempts used (a killed one: up to when it was last seen)."""
        return sum(a["last_seen_unix"] - a["started_unix"] for a in self.previous)

    def write(self) -> None:
        atomic_write_json(self.path, self.entries)

    def heartbeat(self, now: float) -> None:
        """Record that the current attempt is alive at ``now``."""
        self.current["last_seen_unix"] = now
        self.write()

    def end(self, now: float, exit_status: int | None, cause: str, detail: str, limit_hit: str | None = None) -> dict:
        """Record the current attempt's end (once more replaces it). Returns the entry."""
        if cause not in CAUSES:
            raise ValueError(f"cause must be one of {CAUSES}, got {cause!r}")
        self.current.update(
            last_seen_unix=now, ended_unix=now, exit=exit_status, cause=cause, cause_detail=detail, limit_hit=limit_hit
        )
        self.write()
        return self.current


def signal_cause(status: int) -> tuple[str, str] | None:
    """``(cause, detail)`` of a process that ended by a signal with no error of its own
    (``status``: ``128 + signal`` as a shell or bubblewrap reports it, or ``-signal`` as
    Python's ``Popen`` does), else None."""
    number = -status if status < 0 else SIGNAL_EXITS.get(status)
    if number is None:
        return None
    name = signal.Signals(number).name
    why = {
        signal.SIGKILL: "the kernel's out-of-memory killer, a scheduler or an operator",
        signal.SIGTERM: "a scheduler's TIMEOUT or an operator",
        signal.SIGINT: "Ctrl-C",
        signal.SIGHUP: "the terminal closed",
    }.get(number, "a signal")
    return "platform", f"{name} ({why}), without an error of the recipe's own"


class _Tee(io.TextIOBase):
    """Writes to several text streams (the job's log and the attempt's own)."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        self.flush()
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def fileno(self) -> int:
        return self.streams[0].fileno()


def tee_attempt_log(path: str | None, job_log: str | None) -> None:
    """From now on, write this process's stdout and stderr also to ``path`` (the attempt's own
    log), which first gets what ``job_log`` (the job's log, this process's stdout) holds so
    far. Nothing when ``path`` is None."""
    if path is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 (open for the process's life)
    if job_log and os.path.isfile(job_log):
        handle.write(Path(job_log).read_text(encoding="utf-8", errors="replace"))
    sys.stdout = _Tee(sys.stdout, handle)
    sys.stderr = _Tee(sys.stderr, handle)
