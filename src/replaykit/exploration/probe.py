"""Run the recipe (or any command) of an exploration's workspace in the sandbox, under the GPU
lock, killed when the budget ends; its receipt."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from ..harness.errors import InputError
from ..harness.fileio import tree_paths
from ..harness.hashing import sha256_file, sha256_tree
from ..harness.launch import start_group, training_env, wait_until
from ..harness.limits import Confinement, failure_line, tail_lines
from ..harness.lock import FileLock
from ..harness.progress import escape_controls
from ..harness.protocol import KEEP, ReplayRequest
from ..harness.provenance import fingerprint
from ..harness.slots import take_slot
from ..harness.workspace import special_entries
from ..isolation import RunPaths, plan
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


def run_logged(
    argv: list[str], *, cwd: Path, env: dict, log: Path, ends_unix: float, echo: bool, confinement: Confinement
) -> tuple[int, str, dict]:
    """Run ``argv`` in its own process group (:mod:`replaykit.harness.launch`) under
    ``confinement``'s limits (closed at the end), its output to ``log`` (and stdout when
    ``echo``: controls shown as escapes, not run); stop it at ``ends_unix``. Returns (exit
    status, ``exit`` or ``budget``, the limits as the receipt lists them, a hit named)."""
    with confinement, open(log, "ab") as sink:
        proc = start_group(argv, cwd=cwd, env=env, preexec=confinement.preexec)

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
        sink.flush()
        hit, evidence = confinement.verdict(code, tail_lines(log)) if stop == "exit" else (None, None)
        limits = confinement.describe(hit, evidence)
    if hit:
        line = f"[explore] {failure_line(hit, limits)}\n"
        with open(log, "a") as sink:
            sink.write(line)
        print(line, end="", flush=True) if echo else None
    return code, stop, limits


def lock_receipt(lock: FileLock) -> dict:
    """A receipt's fields of the exploration's GPU lock (:class:`~replaykit.harness.lock.FileLock`,
    once released): how long it waited (0.0: at once) and for whom (the holder record, checked:
    ``verified``), when it held the lock and for how many seconds, the lock file's inode, whether
    the file was deleted or replaced, or another process held a lock on it, while held
    (``lock_replaced``, ``lock_events``), and this holder's record (``lock_holder``, its nonce)."""
    r = lock.record()
    return {
        "waited_s": r["waited_s"],
        "waited_for": r["waited_for"],
        "lock_acquired_unix": r["acquired_unix"],
        "released_unix": r["released_unix"],
        "seconds": r["released_unix"] - r["acquired_unix"],
        "lock_inode": r["inode"],
        "lock_replaced": r["lock_replaced"],
        "lock_events": r["lock_events"],
        "lock_holder": r["holder"],
    }


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
    names the probe's run directory and ``REPLAYKIT_REQUEST`` its request, and
    ``CUDA_VISIBLE_DEVICES`` the GPU slot it holds (:mod:`replaykit.harness.slots`). Receipt: id,
    command, the sandbox's plan (every path shown), the lock's fields (:func:`lock_receipt`), the
    log (``runs/probe-<k>.log``, outside the probe's writable folder) and its SHA-256,
    returncode, stop (``exit`` or ``budget``), the checkpoints it left (path, SHA-256; none
    that is, holds or lies under a symbolic link), ``special_files`` (what it left in its run
    folder that is no regular file or folder: named, never read), ``gpu_slot``, budget used and
    left (s).

    Raises:
        InputError: the exploration was submitted, the budget has ended, or the lock is refused
            (``wait=False``).
    """
    info, ex = exploration.info, exploration
    ex.require_open("probes")
    ex.require_budget("probes")
    run_dir = ex.new_dir("runs", "probe-").resolve()
    who = {"exploration": str(ex.dir), "id": run_dir.name}
    lock = FileLock(info["lock"], who)
    try:
        lock.acquire(wait, info["ends_unix"])
    except InputError:
        run_dir.rmdir()  # a refused probe leaves nothing
        raise
    with lock, take_slot(who, info.get("gpus")) as slot:
        ex.require_open("probes")  # again: it may have been submitted while this one waited
        ex.require_budget("probes")
        request_path = _request(ex, run_dir)
        command = list(command or [sys.executable, "train.py", "--request", str(request_path)])
        sandbox = replace(probe_plan(ex, run_dir), devices=slot.device_files())
        env = training_env(
            info["threads"], REPLAYKIT_RUN_DIR=str(run_dir), REPLAYKIT_REQUEST=str(request_path), **slot.environ()
        )
        workspace = ex.workspace.resolve()
        # the log lies beside the probe's writable folder, not in it: the probe reads it (runs/
        # is shown read-only) but cannot delete, replace or rewrite it (a hostile probe of
        # 2026-12-03 rewrote its own log.txt to hide what it printed)
        log = run_dir.parent / f"{run_dir.name}.log"
        code, stop, limits = run_logged(
            sandbox.argv(command, chdir=workspace),
            cwd=workspace,
            env=sandbox.environment(env),
            log=log,
            ends_unix=info["ends_unix"],
            echo=echo,
            confinement=sandbox.confine(),
        )
    # what the probe left that is no regular file or folder (a symbolic link, a FIFO): named in
    # the receipt and never read, as the formal replay refuses it (a hostile probe of 2026-12-02
    # linked the hidden split into its run folder)
    special = special_entries(run_dir)

    def regular(rel: str) -> bool:  # neither special nor inside or holding a special entry
        return not any(s == rel or s.startswith(rel + "/") or rel.startswith(s + "/") for s in special)

    checkpoints = {
        str(p.relative_to(ex.dir)): sha256_tree(p)
        for p in sorted(tree_paths(run_dir, "checkpoint-*"))
        if p.is_dir() and regular(p.relative_to(run_dir).as_posix())
    }
    receipt = {"kind": "probe", "id": run_dir.name, "command": command, "isolation": info["isolation"]}
    receipt.update(sandbox={**sandbox.describe(), "limits": limits}, returncode=code, stop=stop)
    receipt.update(special_files=special)
    receipt.update(checkpoints=checkpoints, limit_hit=limits["hit"], fingerprint=fingerprint())
    receipt.update(log=str(log.relative_to(ex.dir)), log_sha256=sha256_file(log), gpu_slot=slot.record())
    return ex.add_receipt({**receipt, **lock_receipt(lock), **ex.budget_at(lock.released_unix)})
