"""Live progress of a replay: the training process's output, relayed line by line.

Every line ``train.py`` writes (stdout and stderr together) goes to the replay log, cleaned:
a tqdm-style line redrawn with carriage returns keeps only what a terminal would show last,
ANSI colour codes are dropped, and a warning line already written once is written again
only as a count at the end. The recipes' progress lines are parsed on the way::

    [train] step 8/24 loss 0.6931 ... elapsed 95 s      (Trainer recipes: dpo, rm)
    [train] epoch 3/40 reward_mean ... loss 0.01234 ... (ddpo, digress)
    [publish] checkpoint-8 (publication 1, retained [8])

and, when the environment names a file descriptor (``REPLAYKIT_PROGRESS_FD``; the replay
rule passes the job's own stderr there, i.e. the terminal Snakemake runs in or the SLURM
job's log), one compact line goes there at most every ``every_s`` seconds and at each
publication::

    [progress] dpo/shipped-seed42: step 8/24 (33%) loss 0.6931 | elapsed 1m52s,
    deadline in 8m08s | next checkpoint-16 (published: 8) | log: logs/dpo/shipped-seed42/replay.log

The relay never stops training: a line it cannot parse is written to the log unchanged,
and the pipe is drained to the end whatever the training process writes. It is hardened
against hostile output: control characters (ANSI sequences other than colours, OSC title or
clipboard writes, C1 codes) are written as visible escapes (``\x1b``), so they reach neither
the log nor, through Snakemake's ``show-failed-logs``, the operator's terminal as controls; a
line that starts with the driver's own tags (``[replay]``, ``[progress]``) is marked
``(train.py)``; a line is cut at :data:`MAX_LINE_BYTES`, the log at :data:`MAX_LOG_BYTES`,
and the warnings remembered at :data:`MAX_WARNINGS`; publication lines reach the terminal at
most once a second.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

PROGRESS_FD_ENV = "REPLAYKIT_PROGRESS_FD"
EVERY_S = 30.0  # at most one progress line per this many seconds (publications always shown)

MAX_LINE_BYTES = 64 * 1024  # a longer line is cut (the rest dropped, the count noted)
MAX_LOG_BYTES = 256 * 1024**2  # after this, the log says so and the rest is only counted
MAX_WARNINGS = 10_000  # distinct warning lines remembered for de-duplication
PUBLISH_EVERY_S = 1.0  # publication progress lines: at most one per second
DRIVER_TAGS = ("[replay]", "[progress]")  # lines only the driver writes
TAIL_LINES = 40  # the last lines kept (a failed job's limit verdict reads them)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # C0 but tab, DEL, C1
_PROGRESS = re.compile(r"^\[train\] (step|epoch) (\d{1,9})/(\d{1,9})\b")
_LOSS = re.compile(r"\bloss (-?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|nan|inf)(?![\w.])", re.I)
_PUBLISH = re.compile(r"^\[publish\] checkpoint-(\d{1,9})\b")
_WARNING = re.compile(r"warn", re.I)


def escape_controls(text: str) -> str:
    """``text`` with every control character but tab written as a visible escape
    (``"\\x1b"``), so it cannot act on a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def clean(raw: str) -> str:
    """One output line as a terminal shows it: the text after the last carriage return
    (tqdm redraws its bar with ``\\r``; a trailing ``\\r`` is ignored), ANSI escape codes
    removed, trailing whitespace stripped."""
    segments = [s for s in raw.rstrip("\r\n").split("\r") if s.strip()]
    return escape_controls(_ANSI.sub("", segments[-1] if segments else "")).rstrip()


def duration(seconds: float) -> str:
    """``95`` -> ``1m35s``; ``3725`` -> ``1h02m05s``; negative values count as 0."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


@dataclass
class Progress:
    """What the progress lines have said so far.

    ``every`` is the publication cadence in the progress unit (None: unknown); the recipes
    also publish at the last step or epoch (``total``)."""

    unit: str | None = None
    done: int = 0
    total: int = 0
    loss: float | None = None
    published: list[int] = field(default_factory=list)
    every: int | None = None

    def update(self, line: str) -> str | None:
        """Read one cleaned line; return ``"progress"``, ``"publish"`` or None (not ours)."""
        if m := _PROGRESS.match(line):
            self.unit, self.done, self.total = m.group(1), int(m.group(2)), int(m.group(3))
            if loss := _LOSS.search(line[m.end() :]):
                self.loss = float(loss.group(1))
            return "progress"
        if m := _PUBLISH.match(line):
            self.published.append(int(m.group(1)))
            return "publish"
        return None

    def next_publication(self) -> int | None:
        """The progress value of the next checkpoint: the first multiple of ``every`` that is
        at least ``done`` and after the last publication (a recipe prints its step line just
        before it publishes that step), capped at ``total``; None when unknown or when the
        last checkpoint is published."""
        if not self.total:
            return None
        low = max(self.done, max(self.published) + 1 if self.published else 1)
        if low > self.total:
            return None
        if not self.every:
            return self.total
        return min(-(-low // self.every) * self.every, self.total)


def format_line(label: str, p: Progress, *, elapsed_s: float, deadline_left_s: float, log: str | None = None) -> str:
    """The compact progress line (see the module docstring)."""
    parts = [f"{p.unit} {p.done}/{p.total} ({100 * p.done // p.total}%)" if p.total else "running"]
    if p.loss is not None:
        parts[0] += f" loss {p.loss:.4g}"
    parts.append(f"elapsed {duration(elapsed_s)}, deadline in {duration(deadline_left_s)}")
    nxt = p.next_publication()
    shown = ", ".join(map(str, p.published[-3:])) or "none"
    if not p.total:  # a recipe without step/epoch lines (soup): publications only
        parts.append(f"published: {shown}")
    else:
        parts.append((f"next checkpoint-{nxt}" if nxt is not None else "training done") + f" (published: {shown})")
    if log:
        parts.append(f"log: {log}")
    return f"[progress] {label}: " + " | ".join(parts)


class Relay:
    """Writes cleaned training output to ``log`` and progress lines to ``terminal``.

    Args:
        log: the replay log (the driver's stdout).
        terminal: where progress lines go, or None for none.
        label: ``<task>/<run>``.
        started_unix: when this attempt started; ``spent_s``: earlier attempts' seconds.
        deadline_unix: the internal deadline.
        every: the publication cadence (see :class:`Progress`), or None.
        every_s: minimum seconds between two progress lines (publications always shown).
        log_name: the log's path, shown on each progress line.
        clock: the time source (tests pass a fake one).
        published: checkpoints published before this attempt (a resumed replay's), ascending.
    """

    def __init__(
        self,
        log: IO[str],
        terminal: IO[str] | None,
        *,
        label: str,
        started_unix: float,
        deadline_unix: float,
        spent_s: float = 0.0,
        every: int | None = None,
        every_s: float = EVERY_S,
        log_name: str | None = None,
        clock: Callable[[], float] = time.time,
        published: list[int] | None = None,
    ):
        self.log, self.terminal, self.label = log, terminal, label
        self.started_unix, self.deadline_unix, self.spent_s = started_unix, deadline_unix, spent_s
        self.every_s, self.log_name, self.clock = every_s, log_name, clock
        self.progress = Progress(every=every, published=list(published or []))
        self.seen_warnings: set[str] = set()
        self.dropped = 0
        self.cut = 0  # bytes dropped from over-long lines
        self.log_bytes = 0
        self._last_publish_emit: float | None = None
        self._dropping = False
        self._last_emit: float | None = None
        self._last_state: tuple | None = None
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)  # the last lines, for the exit's verdict

    def feed(self, raw: str) -> None:
        """Take one raw line of training output."""
        line = clean(raw)
        if not line:
            return
        self.tail.append(line[:1024])
        # a repeated warning is dropped with its indented continuation (the source line
        # Python prints under it)
        if self._dropping and line[:1].isspace():
            self.dropped += 1
            return
        self._dropping = False
        if _WARNING.search(line):
            if line in self.seen_warnings:
                self.dropped += 1
                self._dropping = True
                return
            if len(self.seen_warnings) < MAX_WARNINGS:
                self.seen_warnings.add(line)
        if line.startswith(DRIVER_TAGS):  # only the driver writes these
            line = "(train.py) " + line
        self._write_log(line)
        try:
            kind = self.progress.update(line)
        except (ValueError, OverflowError):  # a line that looks like ours but is not
            kind = None
        now = self.clock()
        if kind == "publish":
            if self._last_publish_emit is None or now - self._last_publish_emit >= PUBLISH_EVERY_S:
                self._last_publish_emit = now
                self.emit(now)
        elif kind == "progress" and (self._last_emit is None or now - self._last_emit >= self.every_s):
            self.emit(now)

    def _write_log(self, line: str) -> None:
        """Append ``line`` to the log unless the log has reached :data:`MAX_LOG_BYTES`."""
        if self.log_bytes > MAX_LOG_BYTES:
            return
        self.log_bytes += len(line) + 1
        if self.log_bytes > MAX_LOG_BYTES:
            line = f"[replay] the log reached {MAX_LOG_BYTES} bytes: further training output is not written"
        self.log.write(line + "\n")
        self.log.flush()

    def emit(self, now: float | None = None) -> str:
        """Write the progress line now (to the terminal, when there is one); return it."""
        now = self.clock() if now is None else now
        text = format_line(
            self.label,
            self.progress,
            elapsed_s=self.spent_s + now - self.started_unix,
            deadline_left_s=self.deadline_unix - now,
            log=self.log_name,
        )
        self._last_emit, self._last_state = now, self._state()
        if self.terminal is not None:
            try:
                self.terminal.write(text + "\n")
                self.terminal.flush()
            except OSError:  # a closed terminal never stops training
                self.terminal = None
        return text

    def _state(self) -> tuple:
        """What a progress line says, less the clock: a line saying it again is not written."""
        p = self.progress
        return (p.unit, p.done, p.total, p.loss, tuple(p.published))

    def close(self) -> None:
        """The last progress line (unless the last one written said the same, e.g. the last
        checkpoint's line just before), and how many repeated warning lines were left out."""
        if self.progress.total and self._state() != self._last_state:
            self.emit()
        if self.dropped:
            self.log.write(f"[replay] {self.dropped} lines of repeated warnings left out of this log\n")
        if self.cut:
            self.log.write(f"[replay] {self.cut} bytes of lines over {MAX_LINE_BYTES} bytes left out of this log\n")
        self.log.flush()

    def pump(self, stream: IO[bytes]) -> None:
        """Feed every line of a binary stream (the training process's pipe), each cut at
        :data:`MAX_LINE_BYTES`; the stream is read to its end even if feeding fails."""
        cutting = False
        try:
            while raw := stream.readline(MAX_LINE_BYTES):
                whole = raw.endswith(b"\n")
                if cutting:  # the rest of an over-long line
                    self.cut += len(raw) - whole  # the newline is no lost text
                    cutting = not whole
                    continue
                if not whole and len(raw) >= MAX_LINE_BYTES:
                    cutting = True
                self.feed(raw.decode("utf-8", errors="replace"))
        except Exception as exc:  # never leave the training process blocked on a full pipe
            self.log.write(
                f"[replay] progress relay stopped ({type(exc).__name__}: {exc}); "
                "further training output is not written\n"
            )
            self.log.flush()
            while stream.read(MAX_LINE_BYTES):
                pass

    def announce(self) -> str:
        """The first line on the terminal: which replay started and where its full log is
        (Snakemake's own job block, with inputs, outputs and resources, stays as it is)."""
        done = self.progress.published
        started = f"training resumed after checkpoint-{max(done)}" if done else "training started"
        text = f"[progress] {self.label}: {started}" + (f"; full log: {self.log_name}" if self.log_name else "")
        if self.terminal is not None:
            try:
                self.terminal.write(text + "\n")
                self.terminal.flush()
            except OSError:
                self.terminal = None
        return text

    def start(self, stream: IO[bytes]) -> threading.Thread:
        """Announce the replay, then pump ``stream`` in a daemon thread (join it after the
        process has exited)."""
        self.announce()
        thread = threading.Thread(target=self.pump, args=(stream,), name="replay-relay", daemon=True)
        thread.start()
        return thread


def terminal_from_env() -> IO[str] | None:
    """The stream named by ``REPLAYKIT_PROGRESS_FD`` (e.g. ``3``), or None when unset or not open."""
    fd = os.environ.get(PROGRESS_FD_ENV, "")
    if not fd.isdigit():
        return None
    try:
        return os.fdopen(int(fd), "w", buffering=1, closefd=False)
    except OSError:
        return None
