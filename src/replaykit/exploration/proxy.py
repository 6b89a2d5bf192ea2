"""Score an exploration's checkpoint on the proxy split with the frozen loader and evaluator
(the ``validate`` and ``score --split proxy`` steps of the workflow), in the sandbox, under
the GPU lock; its receipt."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from ..harness.errors import InputError
from ..harness.fileio import read_json
from ..harness.hashing import sha256_tree
from ..harness.lock import FileLock
from ..harness.slots import GpuSlot, take_slot
from ..isolation import RunPaths, plan
from .probe import lock_receipt, run_logged
from .record import Exploration


def proxy_plan(exploration: Exploration, checkpoint: Path, out: Path):
    """The isolation plan of a proxy score (:func:`replaykit.isolation.plan`, frozen code only):
    the checkpoint, the manifest and the exploration's frozen-code record read-only, ``out``
    writable."""
    info = exploration.info
    run = RunPaths(
        fixed_start=Path(info["fixed_start"]),
        public_dir=Path(info["public_dir"]),
        read_only=(checkpoint, Path(info["manifest"]), exploration.dir / "frozen-code.json"),
        writable=(out,),
        frozen_only=True,
    )
    return plan(info["task"], info.get("data", {}), exploration.settings(), run)


def _steps(ex: Exploration, checkpoint: Path, out: Path) -> list[list[str]]:
    """``python -m replaykit validate`` and ``score --split proxy`` of ``checkpoint`` (absolute
    paths: the steps run in the sandbox)."""
    from ..tasks import get_task

    info = ex.info
    # -P: the working folder (proxy/<k>, in the exploration, which the agent can write) is not
    # put on sys.path, so no module planted there is imported as the frozen package; -s: no
    # user site-packages (of a HOME the agent chose)
    py = [sys.executable, "-P", "-s", "-m", "replaykit"]
    frozen = str((ex.dir / "frozen-code.json").resolve())
    fixed_start, manifest = str(Path(info["fixed_start"]).resolve()), str(Path(info["manifest"]).resolve())
    items = Path(info["public_dir"]).resolve().parent / get_task(info["task"]).split_file("proxy")
    marker = str(out / "marker.json")
    validate = [*py, "validate", "--task", info["task"], "--checkpoint", str(checkpoint), "--fixed-start", fixed_start]
    validate += ["--cfg", json.dumps(info["validation"]), "--frozen", frozen, "--out", marker]
    score = [*py, "score", "--task", info["task"], "--split", "proxy", "--frozen", frozen, "--checkpoint"]
    score += [str(checkpoint), "--marker", marker, "--fixed-start", fixed_start, "--manifest", manifest]
    score += ["--items", str(items), "--cfg", json.dumps(info["evaluation"]), "--workspace"]
    score += [str(ex.workspace.resolve()), "--out-dir", str(out)]
    # the steps use the proxy's GPU slot (its environment and device nodes), none of their own
    return [validate + ["--no-gpu-slot"], score + ["--no-gpu-slot"]]


def _run_steps(ex: Exploration, checkpoint: Path, out: Path, slot: GpuSlot) -> dict:
    """Run the two steps in the proxy plan's sandbox on ``slot``'s device; the plan's
    description. Raises :class:`InputError` naming the step that failed (its last line) or the
    budget's end."""
    sandbox = replace(proxy_plan(ex, checkpoint, out), devices=slot.device_files())
    env = sandbox.environment(dict(os.environ, OMP_NUM_THREADS=str(ex.info["threads"]), **slot.environ()))
    described = sandbox.describe()
    for step in _steps(ex, checkpoint, out):
        code, stop, described["limits"] = run_logged(
            sandbox.argv(step, chdir=out),
            cwd=out,
            env=env,
            log=out / "log.txt",
            ends_unix=ex.info["ends_unix"],
            echo=False,
            confinement=sandbox.confine(),
        )
        if code != 0:
            last = (out / "log.txt").read_text().strip().splitlines() or [f"exit {code}"]
            why = "the budget ended during scoring" if stop == "budget" else last[-1]
            raise InputError(checkpoint, step[3], why)
    return described


def score_proxy(exploration: Exploration, checkpoint: str | Path | None = None, *, wait: bool = True) -> dict:
    """Score ``checkpoint`` (a directory inside the exploration; default: the newest probe's last,
    :meth:`Exploration.last_checkpoint`) with the frozen loader and the frozen proxy evaluator
    under the GPU lock, in the sandbox (:func:`proxy_plan`).

    Receipt: id, checkpoint, checkpoint_sha256, valid, reason, metric, value, se (the
    evaluator's uncertainty), n, summary path, the sandbox's plan, the lock's fields
    (:func:`~.probe.lock_receipt`), ``gpu_slot``, budget used and left (s). A scoring that
    failed gets a receipt too (``failed: true``, ``valid: false``, ``reason``, its ``log``,
    the lock's fields), then its error is raised.

    Raises:
        InputError: the exploration was submitted, the budget has ended, the checkpoint is not a
            directory of this exploration (or no probe published one), the lock is refused, or
            the evaluator failed (its last line).
    """
    info, ex = exploration.info, exploration
    ex.require_open("proxy scores")
    ex.require_budget("proxy scores")
    resolved = Path(checkpoint).resolve() if checkpoint else ex.last_checkpoint().resolve()
    if not resolved.is_dir() or ex.dir.resolve() not in resolved.parents:
        raise InputError(checkpoint, None, f"not a checkpoint directory inside {ex.dir}")
    if not re.fullmatch(r"checkpoint-\d+", resolved.name):  # the frozen loader reads N from the name
        raise InputError(checkpoint, None, "not a checkpoint directory (a published checkpoint-N folder)")
    rel = resolved.relative_to(ex.dir.resolve()).as_posix()
    published = [
        r["checkpoints"][rel] for r in ex.receipts() if r.get("kind") == "probe" and rel in (r.get("checkpoints") or {})
    ]
    if not published:
        raise InputError(
            checkpoint, None, "not a checkpoint a probe published (none of receipts.jsonl's probes lists it)"
        )
    digest = sha256_tree(resolved)
    if digest not in published:
        raise InputError(checkpoint, None, "changed since its probe published it (its SHA-256 is not the receipt's)")
    out = ex.new_dir("proxy", "").resolve()
    who = {"exploration": str(ex.dir), "id": f"proxy-{out.name}"}
    lock = FileLock(info["lock"], who)
    try:
        lock.acquire(wait, info["ends_unix"])
    except InputError:
        out.rmdir()
        raise
    failed = None
    with lock, take_slot(who, info.get("gpus")) as slot:
        ex.require_open("proxy scores")
        ex.require_budget("proxy scores")
        if planted := sorted(p.name for p in out.iterdir()):  # written while it waited for the lock
            raise InputError(out, None, f"the scoring's folder is not empty ({', '.join(planted[:5])}): not scored")
        if sha256_tree(resolved) != digest:  # changed while it waited for the lock
            raise InputError(checkpoint, None, "changed while its scoring waited for the GPU lock: not scored")
        try:
            sandbox = _run_steps(ex, resolved, out, slot)
        except InputError as exc:
            failed = exc
    receipt = {"kind": "proxy", "id": out.name, "checkpoint": str(resolved.relative_to(ex.dir.resolve()))}
    if failed is not None:  # a receipt all the same: its lock interval and log are the audit's evidence
        receipt.update(checkpoint_sha256=digest, valid=False, reason=f"scoring failed: {failed.message}", failed=True)
        receipt.update(log=str(ex.dir / "proxy" / out.name / "log.txt"), gpu_slot=slot.record())
        ex.add_receipt({**receipt, **lock_receipt(lock), **ex.budget_at(lock.released_unix)})
        raise failed
    marker, summary = read_json(out / "marker.json"), read_json(out / "summary.json")
    receipt.update(checkpoint_sha256=digest, valid=marker["valid"], reason=marker["reason"])
    receipt.update(metric=summary["metric"], value=summary["value"], se=summary["uncertainty"]["value"])
    receipt.update(uncertainty_kind=summary["uncertainty"]["kind"], n=summary["n"], sandbox=sandbox)
    receipt.update(summary=str(ex.dir / "proxy" / out.name / "summary.json"), gpu_slot=slot.record())
    return ex.add_receipt({**receipt, **lock_receipt(lock), **ex.budget_at(lock.released_unix)})
