"""The exploration's GPU lock: one probe or proxy score at a time, its waits recorded."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from ..harness.errors import InputError
from ..harness.provenance import utc_now

POLL_S = 0.2


class GpuLock:
    """The exploration's GPU lock: an exclusive ``flock`` on a file the sandbox cannot see.

    ``acquire`` waits (polling every 0.2 s) until ``deadline_unix`` or, with ``wait=False``,
    refuses at once. It sets ``waited_s`` (seconds) and ``waited_for`` (the holder's note).

    Raises:
        InputError: the lock is held and ``wait`` is False, or the deadline came first.
    """

    def __init__(self, path: str | Path, who: dict):
        self.path, self.who, self.fd = Path(path), who, None
        self.waited_s, self.waited_for, self.acquired_unix = 0.0, None, None

    def _holder(self) -> dict | None:
        try:
            return json.loads(self.path.with_name(self.path.name + ".holder").read_text())
        except (OSError, ValueError):
            return None

    def acquire(self, wait: bool, deadline_unix: float) -> GpuLock:
        t0 = time.time()
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                self.waited_for = self.waited_for or self._holder()
                if not wait or time.time() >= deadline_unix:
                    os.close(self.fd)
                    self.fd = None
                    why = "held" if not wait else "still held when the budget ended"
                    raise InputError(self.path, "lock", f"GPU lock {why} by {self._holder()}") from None
                time.sleep(POLL_S)
        self.acquired_unix = time.time()
        self.waited_s = self.acquired_unix - t0
        holder = self.path.with_name(self.path.name + ".holder")
        holder.write_text(json.dumps({**self.who, "since": utc_now()}))
        return self

    def times(self, released_unix: float) -> dict:
        """The receipt's lock fields: how long it waited and for whom, when it held the lock
        and for how many seconds (``released_unix``: when it let go)."""
        return {
            "waited_s": self.waited_s,
            "waited_for": self.waited_for,
            "lock_acquired_unix": self.acquired_unix,
            "released_unix": released_unix,
            "seconds": released_unix - self.acquired_unix,
        }

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
