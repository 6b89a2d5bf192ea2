"""The replay driver: run a workspace's training entry point under the budget.

The driver verifies the fixed assets against their manifest, decides between a fresh
formal replay and a resume of the same replay, starts ``train.py`` of the workspace in its
own process group (with a parent-death signal, so it dies with its job), enforces the
outer limit, checks retention, and writes the replay record last.

Recipe contract (what ``train.py --request request.json`` receives and must produce):

* knobs in ``configs/<profile>.yaml``; ``overrides`` replace keys it has (checked first);
* request keys: ``fixed_start``, ``public_dir``, ``publish_dir``, ``state_dir``, ``seed``,
  ``deadline_unix`` (internal deadline, unix s), ``export_reserve_s``, ``profile``,
  ``overrides``, ``threads``, ``keep``, ``resume``.
* publish checkpoints with :func:`replaykit.harness.publish.publish_checkpoint`;
* write ``<state_dir>/train_result.json`` with ``stop_reason``, ``steps``,
  ``train_start_unix``, ``train_end_unix``, ``publish_s``, on failure ``error``, and
  optionally ``history``: the training curve, ``[{"progress": int, "<name>": float, ...}]``
  over all attempts (copied into the record as ``train_history``; the report plots it);
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
from .explore import exploration_of
from .fileio import atomic_write_json, read_json
from .frozen import digest as frozen_digest
from .frozen import first_difference, frozen_files
from .hashing import sha256_bytes, sha256_file, sha256_tree
from .progress import Relay, save_every, terminal_from_env
from .provenance import git_commit, library_versions, utc_now
from .publish import KEEP, published, read_ledger
from .sandbox import NO_ISOLATION_ADVISORY, process_env, python_roots, wrap
from .workspace import special_entries

_PR_SET_PDEATHSIG = 1
GRACE_S = 10.0  # SIGTERM -> SIGKILL grace for the training process group
HEARTBEAT_S = 5.0  # how often the driver records that the current attempt is alive
MAX_RECEIPT_BYTES = 16 << 20  # train_result.json / publications.jsonl written by candidate code


class ReplayError(RuntimeError):
    """The recipe failed (non-zero exit, NaN loss, nothing published, retention broken)."""


def set_parent_death_signal(sig: int) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def verify_assets(
    manifest_path: str | Path, fixed_start: str | Path, split: str = "public", fixed_start_too: bool = True
) -> dict:
    """Re-hash the fixed start and every asset file of ``split`` against the manifest.

    The replay verifies the public split (it never opens hidden files); scoring verifies the
    hidden one, so a replay that tampered with it is caught. Raises :class:`InputError`
    naming the file that is missing or whose SHA-256 differs.
    """
    manifest_path = Path(manifest_path)
    manifest = read_json(manifest_path, required=("fixed_start", "files"))
    fixed_start = Path(fixed_start)
    expected = manifest["fixed_start"]["files"] if fixed_start_too else {}
    for rel, digest in expected.items():
        path = fixed_start / rel
        if not path.is_file():
            raise InputError(path, "-", f"fixed-start file missing (listed in {manifest_path})")
        if sha256_file(path) != digest:
            raise InputError(path, "sha256", f"does not match the asset manifest {manifest_path}")
    base = manifest_path.parent
    for rel, entry in manifest["files"].items():
        if entry.get("split") != split:
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


def check_overrides(workspace: Path, profile: str, overrides: dict) -> None:
    """Recipe contract: knobs live in ``configs/<profile>.yaml`` of the workspace; overrides
    may only replace keys it has. Checked before anything is removed or started."""
    import yaml

    path = workspace / "configs" / f"{profile}.yaml"
    if not path.is_file():
        raise InputError(path, "-", f"recipe profile {profile!r} not found in the workspace")
    knobs = yaml.safe_load(path.read_text()) or {}
    for key, value in overrides.items():
        if key not in knobs:
            raise InputError("config", f"recipe.overrides.{key}", f"not a key of {path}")
        if isinstance(value, dict):
            for sub in value:
                if not isinstance(knobs[key], dict) or sub not in knobs[key]:
                    raise InputError("config", f"recipe.overrides.{key}.{sub}", f"not a key of {path}")


def asset_fingerprint(manifest: dict) -> str:
    """What a replay reads from its assets: the fixed start and public files (their hashes),
    not the manifest's own bytes (its creation time changes when the assets are rebuilt)."""
    public = {k: v["sha256"] for k, v in manifest["files"].items() if v.get("split") == "public"}
    return sha256_bytes(
        json.dumps({"fixed_start": manifest["fixed_start"]["files"], "public": public}, sort_keys=True).encode()
    )


class Attempts:
    """Wall time of earlier attempts of the same replay (a killed attempt counts up to its last
    heartbeat), so that the budget is one budget across resumes."""

    def __init__(self, path: Path, started_unix: float):
        self.path = path
        self.previous = read_json(path) if path.exists() else []
        self.current = {"started_unix": started_unix, "last_seen_unix": started_unix}

    @property
    def previous_s(self) -> float:
        return sum(a["last_seen_unix"] - a["started_unix"] for a in self.previous)

    def heartbeat(self, now: float) -> None:
        self.current["last_seen_unix"] = now
        atomic_write_json(self.path, self.previous + [self.current])


def run_replay(
    *,
    task: str,
    run: str,
    workspace: str | Path,
    workspace_record: str | Path,
    manifest: str | Path,
    fixed_start: str | Path,
    public_dir: str | Path,
    publish_dir: str | Path,
    state_dir: str | Path,
    record_path: str | Path,
    budget: Budget,
    seed: int,
    profile: str,
    overrides: dict,
    threads: int,
    keep: int = KEEP,
    isolation: str = "bwrap",
    hide: tuple = (),
    show: tuple = (),
    show_fixed_start: bool = True,
) -> dict:
    """Run one formal replay (or resume the same one) and write its record.

    The budget spans attempts: a resumed replay gets what earlier attempts left of the
    internal deadline and of the outer limit.

    ``train.py`` runs in the sandbox of :mod:`replaykit.harness.sandbox` (``isolation:
    bwrap``): it sees its workspace, the fixed start (unless ``show_fixed_start`` is False:
    the fixed start is raw data whose complement is the test set), the public split, the
    read-only paths in ``show`` and nothing of ``hide`` or the working directory; it can
    write only ``publish_dir`` and ``state_dir``. The frozen package is hashed before and
    after training: a change is a :class:`ReplayError`.

    Returns the record. Raises :class:`InputError` for bad assets, workspace or overrides
    (before anything is removed), and :class:`ReplayError` when the recipe fails; publications
    made before a failure are kept (they live outside Snakemake's declared outputs) and
    ``last-failure.json`` says why.
    """
    started_unix, started_at = time.time(), utc_now()
    workspace, publish_dir, state_dir = Path(workspace), Path(publish_dir), Path(state_dir)
    ws_info = read_json(workspace_record, required=("workspace_sha256", "patch_sha256"))
    if sha256_tree(workspace) != ws_info["workspace_sha256"]:
        raise InputError(workspace, "workspace_sha256", f"workspace differs from its record {workspace_record}")
    check_overrides(workspace, profile, overrides)
    manifest_sha = sha256_file(manifest)
    manifest_doc = verify_assets(manifest, fixed_start)

    identity_doc = {
        "task": task,
        "run": run,
        "workspace_sha256": ws_info["workspace_sha256"],
        "assets": asset_fingerprint(manifest_doc),
        "seed": seed,
        "budget": budget.as_dict(),
        "profile": profile,
        "overrides": overrides,
        "keep": keep,
    }
    identity = sha256_bytes(json.dumps(identity_doc, sort_keys=True).encode())
    identity_file = state_dir / "identity.json"
    # an earlier attempt's candidate code could have planted links the driver would follow:
    # such directories are never resumed from
    planted = [p for d in (publish_dir, state_dir) if d.is_dir() for p in special_entries(d)]
    resume = not planted and identity_file.exists() and read_json(identity_file).get("identity") == identity
    if planted:
        print(
            f"[replay] {planted[0]}: not a regular file in the replay's directories: starting a fresh formal replay",
            flush=True,
        )
    if not resume:
        _fresh_start(publish_dir, state_dir)
        atomic_write_json(identity_file, {"identity": identity, **identity_doc})
    (state_dir / "train_result.json").unlink(missing_ok=True)
    (publish_dir / "last-failure.json").unlink(missing_ok=True)
    for leftover in [*publish_dir.glob(".tmp-*"), *state_dir.glob(".export-*")]:  # cut short by a kill
        shutil.rmtree(leftover)
    attempts = Attempts(state_dir / "attempts.json", started_unix)
    attempts.heartbeat(started_unix)
    spent_s = attempts.previous_s
    deadline_unix = started_unix + budget.internal_deadline_s - spent_s
    outer_unix = started_unix + budget.outer_limit_s - spent_s

    request = {
        "fixed_start": str(Path(fixed_start).resolve()),
        "public_dir": str(Path(public_dir).resolve()),
        "publish_dir": str(publish_dir.resolve()),
        "state_dir": str(state_dir.resolve()),
        "seed": seed,
        "deadline_unix": deadline_unix,
        "export_reserve_s": budget.export_reserve_s,
        "profile": profile,
        "overrides": overrides,
        "threads": threads,
        "keep": keep,
        "resume": resume,
    }
    request_path = atomic_write_json(state_dir / "request.json", request)

    print(
        f"[replay] {task}/{run}: {'resuming' if resume else 'fresh formal replay'}; "
        f"{spent_s:.0f} s spent by earlier attempts; internal deadline in {deadline_unix - started_unix:.0f} s, "
        f"outer limit in {outer_unix - started_unix:.0f} s",
        flush=True,
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads), PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "train.py", "--request", str(request_path.resolve())]
    command = wrap(
        command,
        isolation,
        chdir=workspace.resolve(),
        hide=[Path.cwd(), *hide],
        read_only=[*python_roots(task), workspace, public_dir, *show, *([fixed_start] if show_fixed_start else [])],
        writable=[publish_dir, state_dir],
    )
    print(
        f"[replay] isolation: {isolation}" + ("" if isolation != "none" else f" ({NO_ISOLATION_ADVISORY})"), flush=True
    )
    frozen_before = frozen_files()
    proc = subprocess.Popen(
        command,
        cwd=workspace,
        env=process_env(env, isolation),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: set_parent_death_signal(signal.SIGKILL),
    )
    # training output -> this log, cleaned; a progress line -> the job's terminal
    relay = Relay(
        sys.stdout,
        terminal_from_env(),
        label=f"{task}/{run}",
        started_unix=started_unix,
        deadline_unix=deadline_unix,
        spent_s=spent_s,
        every=save_every(workspace, profile, overrides),
        log_name=os.environ.get("REPLAYKIT_LOG"),
    )
    relay_thread = relay.start(proc.stdout)

    def on_signal(signum, _frame):
        print(f"[replay] received signal {signum}: stopping the training process group", flush=True)
        _kill_group(proc)
        attempts.heartbeat(time.time())
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    outer_hit = False
    last_beat = started_unix
    while proc.poll() is None:
        now = time.time()
        if now > outer_unix:
            outer_hit = True
            print("[replay] outer limit reached: stopping the training process group", flush=True)
            _kill_group(proc)
            break
        if now - last_beat >= HEARTBEAT_S:
            attempts.heartbeat(now)
            last_beat = now
        time.sleep(0.5)
    returncode = proc.wait()
    relay_thread.join(timeout=10)
    relay.close()
    ended_unix = time.time()
    attempts.heartbeat(ended_unix)

    # the candidate could write these directories: nothing in them may be a link, FIFO or
    # device, and nothing the driver reads may be huge, before anything is read or hashed
    special = [f"{publish_dir.name}/{e}" for e in special_entries(publish_dir)]
    special += [f"{state_dir.name}/{e}" for e in special_entries(state_dir)]
    oversized = [
        p.name
        for p in (state_dir / "train_result.json", publish_dir / "publications.jsonl")
        if p.is_file() and p.stat().st_size > MAX_RECEIPT_BYTES
    ]
    if special or oversized:
        why = (
            f"{special[0]}: not a regular file (symlinks, FIFOs and devices are refused)"
            if special
            else f"{oversized[0]}: larger than {MAX_RECEIPT_BYTES} bytes"
        )
        atomic_write_json(
            publish_dir / "last-failure.json",
            {"error": why, "returncode": returncode, "time": utc_now(), "retained": []},
        )
        raise ReplayError(f"{workspace}/train.py: {why}")
    result_path = state_dir / "train_result.json"
    result = read_json(result_path) if result_path.exists() else {}
    ledger = read_ledger(publish_dir)
    retained = published(publish_dir)
    failure = None
    if outer_hit:
        result["stop_reason"] = "outer_limit"
    elif returncode != 0:
        failure = result.get("error") or f"train.py exited with status {returncode} (see the log above)"
    changed = first_difference(frozen_before, frozen_files())
    if changed is not None:
        failure = f"the frozen package changed during the replay: {changed}"
    elif sha256_tree(workspace) != ws_info["workspace_sha256"]:  # read-only in the sandbox
        failure = f"the workspace {workspace} changed during the replay"
    else:
        try:
            verify_assets(manifest, fixed_start, split="public", fixed_start_too=False)
        except InputError as exc:
            failure = f"the public split changed during the replay: {exc}"
    if failure is None and not retained:
        failure = "no checkpoint was published"
    for p in retained if failure is None else []:
        if special := special_entries(publish_dir / f"checkpoint-{p}"):
            failure = f"checkpoint-{p}/{special[0]}: not a regular file (symlinks, FIFOs and devices are refused)"
            break
    if failure is None and len(retained) > keep:
        failure = f"retention broken: {len(retained)} checkpoints retained (keep {keep})"
    hashes = {p: sha256_tree(publish_dir / f"checkpoint-{p}") for p in retained}
    ledger_sha = {e["progress"]: e.get("sha256") for e in ledger}
    moved = [p for p in retained if p in ledger_sha and ledger_sha[p] != hashes[p]]
    if failure is None and moved:  # a resume must not adopt a checkpoint changed on disk
        failure = (
            f"checkpoint-{moved[0]} differs from its publication in "
            f"{publish_dir}/publications.jsonl (changed after publication); "
            f"start a fresh formal replay: rm -r {publish_dir} {state_dir}"
        )
    if failure is not None:
        atomic_write_json(
            publish_dir / "last-failure.json",
            {"error": failure, "returncode": returncode, "time": utc_now(), "retained": retained},
        )
        raise ReplayError(f"{workspace}/train.py: {failure}")

    wall_s = ended_unix - started_unix
    total_s = spent_s + wall_s
    t0, t1 = result.get("train_start_unix"), result.get("train_end_unix")
    setup_s = (t0 - started_unix) if t0 else None
    train_s = (t1 - t0) if t0 and t1 else None
    publish_s = result.get("publish_s")
    accounted = sum(x for x in (setup_s, train_s) if x is not None)
    record = {
        "task": task,
        "run": run,
        "seed": seed,
        "identity": identity,
        "resumed": resume,
        "started_at": started_at,
        "ended_at": utc_now(),
        "wall_s": wall_s,
        "attempts": attempts.previous + [attempts.current],
        "budget": budget.as_dict(),
        "utilisation": {
            "wall_s_all_attempts": total_s,
            "budget_fraction": total_s / budget.outer_limit_s,
            "deadline_fraction": (spent_s + t1 - started_unix) / budget.internal_deadline_s if t1 else None,
            "setup_s": setup_s,
            "train_s": train_s,
            "publish_s": publish_s,
            "idle_s": max(0.0, wall_s - accounted),
        },
        "stop_reason": result.get("stop_reason", "unknown"),
        "steps": result.get("steps"),
        "publications": ledger,
        "publication_count": len(ledger),
        "retained": retained,
        "checkpoints": {str(p): {"path": str(publish_dir / f"checkpoint-{p}"), "sha256": hashes[p]} for p in retained},
        "workspace_record": str(workspace_record),
        "workspace_sha256": ws_info["workspace_sha256"],
        "patch": ws_info.get("patch"),
        "patch_sha256": ws_info["patch_sha256"],
        "exploration": exploration_of(ws_info.get("patch"), ws_info["patch_sha256"]),
        "asset_manifest": str(manifest),
        "asset_manifest_sha256": manifest_sha,
        "profile": profile,
        "overrides": overrides,
        "threads": threads,
        "project": git_commit(Path(__file__).resolve().parent),
        "isolation": isolation,
        "advisories": [NO_ISOLATION_ADVISORY] if isolation == "none" else [],
        "frozen_code_sha256": frozen_digest(frozen_before),
        "libraries": library_versions(),
        "train_metrics": result.get("metrics", {}),
        "train_history": result.get("history", []),
    }
    atomic_write_json(record_path, record)
    print(
        f"[replay] done: stop_reason={record['stop_reason']} steps={record['steps']} "
        f"retained={retained} wall={wall_s:.1f} s ({total_s:.1f} s over all attempts)",
        flush=True,
    )
    return record
