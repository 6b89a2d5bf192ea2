"""Starting and stopping the process group of candidate code (the replay's ``train.py``, an
exploration probe) or of a step that reads a candidate's files, one way for all of them.

The process runs in its own session (so its whole group can be signalled), gets a
parent-death signal (it dies with the job that started it; a ``kill -9`` of Snakemake leaves
no orphan), reads nothing from stdin, and writes stdout and stderr into one pipe the caller
drains. :func:`stop_group` ends it: SIGTERM to the group, then SIGKILL after
:data:`GRACE_S` (or SIGKILL at once when no grace is owed: the replay's cutoff).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
GRACE_S = 10.0  # SIGTERM -> SIGKILL grace for a process group
POLL_S = 0.2

# glibc malloc settings for training (the operator's own values win): no mmap for large
# blocks and no trimming, so the buffers a training step frees are reused by the next step
# instead of going back to the kernel and being faulted in again, zeroed, page by page. Only
# addresses change, not the arithmetic: the embedded dpo replay's adapters are byte-identical;
# its system time fell from 4.5 s to 1.4 s over 4 steps and a step from 9.7 s to 9.0 s
# (bench/results-2026-12-01-main-job.md). Memory a run frees is kept for its reuse (peak RSS
# 3.7 GB instead of 3.1 GB there); MALLOC_MMAP_MAX_=65536 restores glibc's default.
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40)}


def set_parent_death_signal(sig: int) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def training_env(threads: int, **extra: str) -> dict[str, str]:
    """The environment of a training process before the sandbox filters it: this process's,
    :data:`MALLOC_ENV` unless the operator set those, unbuffered output, no bytecode files
    written, ``OMP_NUM_THREADS`` = ``threads``, ``PYTHONHASHSEED`` = 0, and ``extra``.

    ``PYTHONHASHSEED`` is fixed (whatever the operator set) so that a set iterates in the same
    order in every run of the same seed: PEFT writes ``adapter_config.json``'s
    ``target_modules`` as ``list(set)``, which otherwise differs from run to run (issue 28)."""
    env = {**MALLOC_ENV, **os.environ}
    env.update(
        PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads), PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", **extra
    )
    return env


def start_group(
    argv: list[str], *, cwd: str | Path, env: dict[str, str], preexec: Callable[[], None] | None = None
) -> subprocess.Popen:
    """Start ``argv`` in its own process group with a parent-death SIGKILL, and ``preexec()``
    run in the child before it (the job's resource limits: :meth:`.limits.Confinement.preexec`);
    stdout and stderr go to ``proc.stdout`` (bytes)."""

    def child() -> None:
        set_parent_death_signal(signal.SIGKILL)
        if preexec is not None:
            preexec()

    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=child,
    )


def stop_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL after ``grace_s`` (at once, without a
    SIGTERM, when ``grace_s`` is 0: nothing it could catch); nothing if it ended."""
    if proc.poll() is not None:
        return
    try:
        if grace_s <= 0:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except ProcessLookupError:
        pass


def wait_until(
    proc: subprocess.Popen,
    until_unix: float,
    tick: Callable[[float], None] | None = None,
    before_stop: Callable[[], None] | None = None,
    grace_s: float = GRACE_S,
) -> bool:
    """Wait for ``proc``; stop its group (:func:`stop_group` with ``grace_s``) when
    ``until_unix`` passes first (returns True then, after calling ``before_stop()``).
    ``tick(now)`` is called about every :data:`POLL_S` while it runs."""
    while proc.poll() is None:
        now = time.time()
        if now > until_unix:
            if before_stop is not None:
                before_stop()
            stop_group(proc, grace_s)
            return True
        if tick is not None:
            tick(now)
        time.sleep(POLL_S)
    return False
