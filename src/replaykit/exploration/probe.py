"""Run the recipe (or any command) of an exploration's workspace in the sandbox, under the GPU
lock, killed when the budget ends; its receipt."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from ..harness.errors import InputError
from ..harness.hashing import sha256_tree
from ..harness.launch import start_group, training_env, wait_until
from ..harness.progress import escape_controls
from ..harness.protocol import KEEP, ReplayRequest
from ..isolation import RunPaths, plan
from .lock import GpuLock
from .record import Exploration


def probe_plan(exploration: Exploration, run_dir: Path):
    """The isolation plan of a probe (:func:`replaykit.isolation.plan`): the workspace and the
    probe's run folder writable, earlier probes read-only."""
    info = exploration.info
    run = RunPaths(
        fixed_start=Path(info["fixed_start"]),
        public_dir=Path(info["public_dir"]),
        read_only=(exploration.dir / "runs",),
        writable=(exploration.workspace, run_dir),
    )
    return plan(info["task"], info.get("data", {}), exploration.settings(), run)


def run_logged(argv: list[str], *, cwd: Path, env: dict, log: Path, ends_unix: float, echo: bool) -> tuple[int, str]:
    """Run ``argv`` in its own process group (:mod:`replaykit.harness.launch`), its output to
    ``log`` (and stdout when ``echo``: controls shown as escapes, not run); stop it at
    ``ends_unix``. Returns (exit status, ``exit`` or ``budget``)."""
    with open(log, "ab") as sink:
        proc = start_group(argv, cwd=cwd, env=env)

        def pump():
            for line in iter(proc.stdout.readline, b""):
                sink.write(line)
                sink.flush()
                if echo:  # the candidate's bytes reach the operator's terminal
                    print(escape_controls(line.decode("utf-8", errors="replace").rstrip("\r\n")), flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stop = "budget" if wait_until(proc, ends_unix) else "exit"
        code = proc.wait()
        reader.join(timeout=5)
    return code, stop


def _request(ex: Exploration, run_dir: Path) -> Path:
    """The probe's ``request.json``: a replay's request, ``publish/`` and ``state/`` in its run
    folder, a deadline that leaves the replay's export reserve before the budget's end."""
    info = ex.info
    publish, state = run_dir / "publish", run_dir / "state"
    publish.mkdir()
    state.mkdir()
    reserve = float(info["replay_budget"]["export_reserve_s"])
    now = time.time()
    request = ReplayRequest(
        fixed_start=Path(info["fixed_start"]).resolve(),
        public_dir=Path(info["public_dir"]).resolve(),
        publish_dir=publish,
        state_dir=state,
        seed=info["seed"],
        deadline_unix=min(
            now + float(info["replay_budget"]["internal_deadline_s"]),
            info["ends_unix"] - min(reserve, ex.left_s(now) / 4),
        ),
        export_reserve_s=reserve,
        profile=info["profile"],
        overrides=info["overrides"],
        threads=info["threads"],
        keep=KEEP,
        resume=False,
    )
    return request.write(run_dir / "request.json")


def run_probe(
    exploration: Exploration, command: list[str] | None = None, *, wait: bool = True, echo: bool = True
) -> dict:
    """Run ``command`` (default: the recipe, ``python train.py --request <request.json>``) in
    the sandbox (:func:`probe_plan`) under the GPU lock, killed when the budget ends; append and
    return its receipt.

    The default run's request is a replay's (:class:`replaykit.harness.protocol.ReplayRequest`),
    with ``publish_dir``/``state_dir`` in ``runs/probe-<k>/``. Inside, ``REPLAYKIT_RUN_DIR``
    names the probe's run directory and ``REPLAYKIT_REQUEST`` its request. Receipt: id, command,
    the sandbox's plan (every path shown), waited_s, waited_for, lock_acquired_unix,
    released_unix, seconds, returncode, stop (``exit`` or ``budget``), the checkpoints it left
    (path, SHA-256), budget used and left (s).

    Raises:
        InputError: the exploration was submitted, the budget has ended, or the lock is refused
            (``wait=False``).
    """
    info, ex = exploration.info, exploration
    ex.require_open("probes")
    ex.require_budget("probes")
    run_dir = ex.new_dir("runs", "probe-").resolve()
    lock = GpuLock(info["lock"], {"exploration": str(ex.dir), "id": run_dir.name, "pid": os.getpid()})
    try:
        lock.acquire(wait, info["ends_unix"])
    except InputError:
        run_dir.rmdir()  # a refused probe leaves nothing
        raise
    try:
        ex.require_open("probes")  # again: it may have been submitted while this one waited
        ex.require_budget("probes")
        request_path = _request(ex, run_dir)
        command = list(command or [sys.executable, "train.py", "--request", str(request_path)])
        sandbox = probe_plan(ex, run_dir)
        env = training_env(info["threads"], REPLAYKIT_RUN_DIR=str(run_dir), REPLAYKIT_REQUEST=str(request_path))
        workspace = ex.workspace.resolve()
        code, stop = run_logged(
            sandbox.argv(command, chdir=workspace),
            cwd=workspace,
            env=sandbox.environment(env),
            log=run_dir / "log.txt",
            ends_unix=info["ends_unix"],
            echo=echo,
        )
    finally:
        released = time.time()
        lock.release()
    checkpoints = {
        str(p.relative_to(ex.dir)): sha256_tree(p) for p in sorted(run_dir.rglob("checkpoint-*")) if p.is_dir()
    }
    receipt = {"kind": "probe", "id": run_dir.name, "command": command, "isolation": info["isolation"]}
    receipt.update(sandbox=sandbox.describe(), returncode=code, stop=stop, checkpoints=checkpoints)
    receipt["log"] = str(run_dir.relative_to(ex.dir) / "log.txt")
    return ex.add_receipt({**receipt, **lock.times(released), **ex.budget_at(released)})
