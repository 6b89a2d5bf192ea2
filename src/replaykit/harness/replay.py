"""The replay driver: run a workspace's training entry point under the budget.

The driver verifies the fixed assets against their manifest, decides between a fresh
formal replay and a resume of the same replay, starts ``train.py`` of the workspace in its
own process group (with a parent-death signal, so it dies with its job), enforces the
outer limit, checks retention, and writes the replay record last.

Recipe contract (what ``train.py --request request.json`` receives and must produce):

* request keys: ``fixed_start``, ``public_dir``, ``publish_dir``, ``state_dir``, ``seed``,
  ``deadline_unix`` (internal deadline, unix s), ``export_reserve_s``, ``profile``,
  ``overrides``, ``threads``, ``keep``, ``resume``.
* publish checkpoints with :func:`replaykit.harness.publish.publish_checkpoint`;
* write ``<state_dir>/train_result.json`` with ``stop_reason``, ``steps``,
  ``train_start_unix``, ``train_end_unix``, ``export_end_unix`` and, on failure, ``error``;
* exit 0 when it stopped by itself (``max_steps`` or ``deadline``), non-zero otherwise.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .budget import Budget
from .errors import InputError
from .fileio import atomic_write_json, read_json
from .hashing import sha256_bytes, sha256_file, sha256_tree
from .provenance import git_commit, library_versions, utc_now
from .publish import KEEP, published, read_ledger

_PR_SET_PDEATHSIG = 1
GRACE_S = 10.0  # SIGTERM -> SIGKILL grace for the training process group


class ReplayError(RuntimeError):
    """The recipe failed (non-zero exit, NaN loss, nothing published, retention broken)."""


def set_parent_death_signal(sig: int) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def verify_assets(manifest_path: str | Path, fixed_start: str | Path) -> dict:
    """Re-hash the fixed start and every *public* asset against the manifest.

    Hidden (final-split) files are never opened here. Raises :class:`InputError` naming the
    file that is missing or whose SHA-256 differs.
    """
    manifest_path = Path(manifest_path)
    manifest = read_json(manifest_path, required=("fixed_start", "files"))
    fixed_start = Path(fixed_start)
    expected = manifest["fixed_start"]["files"]
    for rel, digest in expected.items():
        path = fixed_start / rel
        if not path.is_file():
            raise InputError(path, "-", f"fixed-start file missing (listed in {manifest_path})")
        if sha256_file(path) != digest:
            raise InputError(path, "sha256", f"does not match the asset manifest {manifest_path}")
    base = manifest_path.parent
    for rel, entry in manifest["files"].items():
        if entry.get("split") != "public":
            continue
        path = base / rel
        if not path.is_file():
            raise InputError(path, "-", f"asset missing (listed in {manifest_path})")
        if sha256_file(path) != entry["sha256"]:
            raise InputError(path, "sha256", f"does not match the asset manifest {manifest_path}")
    return manifest


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except ProcessLookupError:
        pass


def _fresh_start(publish_dir: Path, state_dir: Path) -> None:
    """A formal replay starts from nothing: remove publications and state of other replays."""
    for path in (publish_dir, state_dir):
        if path.exists():
            shutil.rmtree(path)
    publish_dir.mkdir(parents=True)
    state_dir.mkdir(parents=True)


def run_replay(*, task: str, run: str, workspace: str | Path, workspace_record: str | Path,
               manifest: str | Path, fixed_start: str | Path, public_dir: str | Path,
               publish_dir: str | Path, state_dir: str | Path, record_path: str | Path,
               budget: Budget, seed: int, profile: str, overrides: dict, threads: int,
               keep: int = KEEP) -> dict:
    """Run one formal replay (or resume the same one) and write its record.

    Returns the record. Raises :class:`InputError` for bad assets or workspace, and
    :class:`ReplayError` when the recipe fails; publications made before a failure are kept
    (they live outside Snakemake's declared outputs) and ``last-failure.json`` says why.
    """
    started_unix, started_at = time.time(), utc_now()
    workspace, publish_dir, state_dir = Path(workspace), Path(publish_dir), Path(state_dir)
    ws_info = read_json(workspace_record, required=("workspace_sha256", "patch_sha256"))
    if sha256_tree(workspace) != ws_info["workspace_sha256"]:
        raise InputError(workspace, "workspace_sha256", f"workspace differs from its record {workspace_record}")
    manifest_sha = sha256_file(manifest)
    verify_assets(manifest, fixed_start)

    identity_doc = {"task": task, "run": run, "workspace_sha256": ws_info["workspace_sha256"],
                    "asset_manifest_sha256": manifest_sha, "seed": seed, "budget": budget.as_dict(),
                    "profile": profile, "overrides": overrides, "keep": keep}
    identity = sha256_bytes(json.dumps(identity_doc, sort_keys=True).encode())
    identity_file = state_dir / "identity.json"
    resume = identity_file.exists() and read_json(identity_file).get("identity") == identity
    if not resume:
        _fresh_start(publish_dir, state_dir)
        atomic_write_json(identity_file, {"identity": identity, **identity_doc})
    (state_dir / "train_result.json").unlink(missing_ok=True)
    (publish_dir / "last-failure.json").unlink(missing_ok=True)
    for leftover in publish_dir.glob(".tmp-*"):  # a publication or removal cut short by a kill
        shutil.rmtree(leftover)

    request = {"fixed_start": str(Path(fixed_start).resolve()), "public_dir": str(Path(public_dir).resolve()),
               "publish_dir": str(publish_dir.resolve()), "state_dir": str(state_dir.resolve()),
               "seed": seed, "deadline_unix": started_unix + budget.internal_deadline_s,
               "export_reserve_s": budget.export_reserve_s, "profile": profile, "overrides": overrides,
               "threads": threads, "keep": keep, "resume": resume}
    request_path = atomic_write_json(state_dir / "request.json", request)

    print(f"[replay] {task}/{run}: {'resuming' if resume else 'fresh formal replay'}; "
          f"internal deadline {budget.internal_deadline_s:.0f} s, outer limit {budget.outer_limit_s:.0f} s", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
    proc = subprocess.Popen([sys.executable, "train.py", "--request", str(request_path.resolve())],
                            cwd=workspace, env=env, start_new_session=True,
                            preexec_fn=lambda: set_parent_death_signal(signal.SIGKILL))

    def on_signal(signum, _frame):
        _kill_group(proc)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    outer_hit = False
    while proc.poll() is None:
        if time.time() - started_unix > budget.outer_limit_s:
            outer_hit = True
            print("[replay] outer limit reached: stopping the training process group", flush=True)
            _kill_group(proc)
            break
        time.sleep(0.5)
    returncode = proc.wait()
    ended_unix = time.time()

    result_path = state_dir / "train_result.json"
    result = read_json(result_path) if result_path.exists() else {}
    ledger = read_ledger(publish_dir)
    retained = published(publish_dir)
    failure = None
    if outer_hit:
        result["stop_reason"] = "outer_limit"
    elif returncode != 0:
        failure = result.get("error") or f"train.py exited with status {returncode}"
    if failure is None and not retained:
        failure = "no checkpoint was published"
    if failure is None and len(retained) > keep:
        failure = f"retention broken: {len(retained)} checkpoints retained (keep {keep})"
    if failure is not None:
        atomic_write_json(publish_dir / "last-failure.json",
                          {"error": failure, "returncode": returncode, "time": utc_now(), "retained": retained})
        raise ReplayError(f"{workspace}/train.py: {failure}")

    wall_s = ended_unix - started_unix
    t0, t1, t2 = (result.get(k) for k in ("train_start_unix", "train_end_unix", "export_end_unix"))
    setup_s = (t0 - started_unix) if t0 else None
    train_s = (t1 - t0) if t0 and t1 else None
    export_s = (t2 - t1) if t1 and t2 else None
    accounted = sum(x for x in (setup_s, train_s, export_s) if x is not None)
    record = {
        "task": task, "run": run, "seed": seed, "identity": identity, "resumed": resume,
        "started_at": started_at, "ended_at": utc_now(), "wall_s": wall_s,
        "budget": budget.as_dict(),
        "utilisation": {
            "budget_fraction": wall_s / budget.outer_limit_s,
            "deadline_fraction": (train_s / budget.internal_deadline_s) if train_s is not None else None,
            "setup_s": setup_s, "train_s": train_s, "export_s": export_s,
            "idle_s": max(0.0, wall_s - accounted),
        },
        "stop_reason": result.get("stop_reason", "unknown"),
        "steps": result.get("steps"),
        "publications": ledger,
        "publication_count": len(ledger),
        "retained": retained,
        "checkpoints": {str(p): {"path": str(publish_dir / f"checkpoint-{p}"),
                                 "sha256": sha256_tree(publish_dir / f"checkpoint-{p}")} for p in retained},
        "workspace_sha256": ws_info["workspace_sha256"],
        "patch": ws_info.get("patch"), "patch_sha256": ws_info["patch_sha256"],
        "asset_manifest": str(manifest), "asset_manifest_sha256": manifest_sha,
        "profile": profile, "overrides": overrides, "threads": threads,
        "project": git_commit(Path(__file__).resolve().parent),
        "libraries": library_versions(),
        "train_metrics": result.get("metrics", {}),
    }
    atomic_write_json(record_path, record)
    print(f"[replay] done: stop_reason={record['stop_reason']} steps={record['steps']} "
          f"retained={retained} wall={wall_s:.1f} s", flush=True)
    return record
