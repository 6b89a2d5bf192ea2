"""The replay driver: run a workspace's training entry point under the budget.

The driver verifies the fixed assets against their manifest, decides between a fresh
formal replay and a resume of the same replay, starts ``train.py`` of the workspace in its
own process group (:mod:`.launch`: a parent-death signal, so it dies with its job) inside
the run's isolation plan (:mod:`.sandbox`), stops it at the internal deadline + export reserve
(the cutoff) if it is still running, checks retention, and writes the replay record last.

Recipe contract (what ``train.py --request request.json`` receives and must produce; the
recipe's side is :mod:`replaykit.runtime`):

* knobs in ``configs/<profile>.yaml``; ``overrides`` replace keys it has (checked first);
* the request: :class:`.protocol.ReplayRequest`;
* publish checkpoints with :func:`replaykit.harness.publish.publish_checkpoint`;
* write ``<state_dir>/train_result.json`` (:class:`.protocol.TrainResult`): ``stop_reason``,
  ``steps``, ``train_start_unix``, ``train_end_unix``, ``publish_s``, on failure ``error``,
  and optionally ``history``: the training curve, ``[{"progress": int, "<name>": float,
  ...}]`` over all attempts (copied into the record as ``train_history``; the report plots it);
* exit 0 when it stopped by itself (``max_steps`` or ``deadline``), non-zero otherwise;
* end by the internal deadline + export reserve (the cutoff): the driver kills the training
  process group (SIGKILL, no grace: the reserve was the grace) if it is still running then.

What the recipe writes is its own account, and candidate code can write anything there. The
timing facts of the record are the driver's own (:mod:`.observe`): when it saw each checkpoint
appear, what was there at the internal deadline + export reserve, when the training process
ended. The driver kills the process group at that cutoff, so nothing is written after it,
not even through a shared memory mapping of a published file (a write to a page already dirty
moves no ctime, so no fingerprint sees it: a hostile tester's). A checkpoint published or
changed after the cutoff all the same (in the moment the kill takes) is *late*: the record
marks it (``checkpoints.<N>.late``), its validation marker says invalid and the audit's
``budget_held`` names it. ``stop_reason`` is the driver's (``overtime``: stopped at the
cutoff; ``outer_limit``: where the cutoff is the outer limit) or else the recipe's when it is
one of its own reasons; the recipe's account is kept under ``reported_by_recipe``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from .assets import verify_assets
from .attempts import FILE as ATTEMPTS_FILE
from .attempts import Attempts, signal_cause, tee_attempt_log
from .errors import InputError
from .fileio import atomic_write_json, read_json
from .frozen import digest as frozen_digest
from .frozen import first_difference
from .hashing import sha256_bytes, sha256_file, sha256_tree
from .launch import set_parent_death_signal, start_group, stop_group, training_env, wait_until
from .limits import Confinement, failure_line
from .observe import Watch, judge
from .profile import check_overrides, save_every
from .progress import Relay, terminal_from_env
from .protocol import ReplayRequest, ReplaySpec, StopReason, TrainResult
from .provenance import TINY_ADVISORY, fingerprint, git_commit, library_versions, utc_now, workflow_provenance
from .publish import published, published_entries, reconcile
from .sandbox import NO_ISOLATION_ADVISORY, SandboxUnavailable
from .slots import take_slot
from .submission import exploration_of
from .workspace import special_entries

HEARTBEAT_S = 5.0  # how often the driver records that the current attempt is alive
MAX_RECEIPT_BYTES = 16 << 20  # train_result.json / publications.jsonl written by candidate code


class ReplayError(RuntimeError):
    """The attempt failed: the recipe (non-zero exit, NaN loss, nothing published, retention
    broken) or the platform (the sandbox did not start, a kill without an error of the
    recipe's own). ``cause`` is the attempt's cause (:mod:`.attempts`)."""

    def __init__(self, message: str, cause: str = "candidate"):
        super().__init__(message)
        self.cause = cause


SUPERSEDED = "superseded"  # <run>/superseded/<UTC time>-<identity>/: a replay a newer one replaced


def recorded_identity(state_dir: Path) -> str:
    """The identity ``state_dir/identity.json`` records, or "" when there is none or it is not
    a JSON object with a string ``identity`` (a candidate may have written anything there)."""
    path = state_dir / "identity.json"
    # not followed or opened unless a small regular file: a FIFO would hang, /dev/zero fill memory
    if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
        return ""
    try:
        identity = read_json(path).get("identity", "")
    except (InputError, OSError, ValueError, AttributeError, RecursionError):  # not a JSON object
        return ""
    return identity if isinstance(identity, str) else ""


COMPILE_CACHE = "compile-cache"  # under state_dir: torch.compile's caches, kept across attempts


def compile_cache_env(state_dir: Path) -> dict[str, str]:
    """``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` under ``<state_dir>/compile-cache``.

    torch.compile's caches default to ``/tmp/torchinductor_<user>``, and the sandbox gives each
    attempt an empty ``/tmp``, so a resumed attempt compiled again from nothing: 67–89 s for
    digress's model at full scale against 9 s from a kept cache, with the same losses
    (bench/results-2026-12-04-digress-knobs.md). In the run's own state they last as long as the
    replay they belong to: a fresh formal replay moves the state aside (:func:`supersede`) and
    starts cold, and no other run reads them. A recipe that does not compile leaves at most an
    empty ``inductor/`` folder there (torch creates it when ``torch._dynamo`` is imported).
    """
    root = (state_dir / COMPILE_CACHE).resolve()
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


def supersede(publish_dir: Path, state_dir: Path, attempts_file: Path, now: float | None = None) -> Path | None:
    """A formal replay starts from nothing, and nothing of the replay it replaces is lost.

    The publications (``publish_dir``), trainer state (``state_dir``) and attempts of another
    replay of the run (a changed patch, budget, seed, recipe or assets) are moved whole, with
    their names, to ``<run>/superseded/<UTC time>-<its identity>/`` (``os.replace`` on the
    same filesystem; links a candidate planted move as links). A new replay that fails or is
    killed thus costs none of the old one's checkpoints; moving the folders back and rerunning
    with the old config resumes the old replay at its end, without training. Empty folders are
    just removed. Returns the folder they went to, or None when there was nothing to keep;
    ``publish_dir`` and ``state_dir`` exist and are empty afterwards. Raises InputError, moving
    nothing, when ``<run>/superseded`` is a link or a file; other I/O errors pass."""
    old = [p for p in (publish_dir, state_dir, attempts_file) if p.is_symlink() or p.exists()]
    keep = [p for p in old if p.is_symlink() or not p.is_dir() or any(p.iterdir())]
    kept = None
    if keep:
        root = publish_dir.parent / SUPERSEDED
        if root.is_symlink() or (root.exists() and not root.is_dir()):
            raise InputError(
                root,
                None,
                "not a folder of this run (a link or a file): the replay it would keep the old one in "
                "refuses it; move it away and rerun (the old replay is left where it is)",
            )
        ident = "".join(c for c in recorded_identity(state_dir) if c in "0123456789abcdef")[:12] or "unknown"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        kept = root / f"{stamp}-{ident}"
        n = 1
        while kept.exists() or kept.is_symlink():
            n += 1
            kept = root / f"{stamp}-{ident}-{n}"
        kept.mkdir(parents=True)
        for path in keep:
            os.replace(path, kept / path.name)
    for path in old:
        if path.is_dir() and not path.is_symlink() and path.exists():
            path.rmdir()  # empty: nothing was kept from it
    publish_dir.mkdir(parents=True)
    state_dir.mkdir(parents=True)
    return kept


def asset_fingerprint(manifest: dict) -> str:
    """What a replay reads from its assets: the fixed start and public files (their hashes),
    not the manifest's own bytes (its creation time changes when the assets are rebuilt)."""
    public = {k: v["sha256"] for k, v in manifest["files"].items() if v.get("split") == "public"}
    return sha256_bytes(
        json.dumps({"fixed_start": manifest["fixed_start"]["files"], "public": public}, sort_keys=True).encode()
    )


class Verified(NamedTuple):
    """The replay's inputs once checked: the workspace record and the asset manifest."""

    workspace_info: dict
    manifest_sha256: str
    manifest: dict


class Start(NamedTuple):
    """How this attempt starts: the replay's identity, fresh or resumed, and its clock."""

    identity: str
    resume: bool
    attempts: Attempts
    started_unix: float
    started_at: str
    spent_s: float  # by earlier attempts of the same replay
    deadline_unix: float  # the internal deadline
    outer_unix: float  # the outer limit
    publication_checks: list  # what publications cut short by an earlier attempt became (publish.reconcile)


class Launched(NamedTuple):
    """The training process group started by :func:`launch` and the relay of its output."""

    proc: object  # subprocess.Popen
    relay: Relay
    relay_thread: threading.Thread
    frozen_before: dict[str, str]
    confinement: Confinement  # the job's resource limits
    watch: Watch  # the driver's own account of the attempt's timing (observed)


class Exit(NamedTuple):
    """How the training process ended (:func:`supervise`)."""

    returncode: int
    outer_hit: bool
    ended_unix: float
    limits: dict  # the record's sandbox.limits: stated, enforced by, hit (Confinement.describe)
    overtime: bool  # the training process was still running at the internal deadline + export reserve
    stopped: bool  # the driver stopped the process group (at the cutoff, or at the outer limit)


class Outcome(NamedTuple):
    """What a successful replay left (:func:`interpret_exit`)."""

    result: TrainResult  # what the recipe reports (train_result.json), as it wrote it
    stop_reason: str  # the driver's (:func:`stop_reason`)
    ledger: list[dict]
    retained: list[int]
    hashes: dict[int, str]  # progress -> tree SHA-256 of each retained checkpoint


def verify_inputs(spec: ReplaySpec) -> Verified:
    """Check the workspace against its record, the overrides against the recipe profile and
    the fixed start and public split against the asset manifest, and the patch's exploration
    sidecar, before anything is removed or started. Raises :class:`InputError` naming what
    differs, is missing or is malformed."""
    ws_info = read_json(spec.workspace_record, required=("workspace_sha256", "patch_sha256"))
    if sha256_tree(spec.workspace) != ws_info["workspace_sha256"]:
        raise InputError(
            spec.workspace, "workspace_sha256", f"workspace differs from its record {spec.workspace_record}"
        )
    check_overrides(spec.workspace, spec.profile, spec.overrides)
    exploration_of(ws_info.get("patch"), ws_info["patch_sha256"])  # a malformed sidecar: before training
    manifest_sha = sha256_file(spec.manifest)
    manifest_doc = verify_assets(spec.manifest, spec.fixed_start)
    return Verified(ws_info, manifest_sha, manifest_doc)


def replay_identity(spec: ReplaySpec, verified: Verified) -> tuple[str, dict]:
    """What makes two attempts the same replay (task, run, workspace, assets, seed, budget,
    profile, overrides, keep): its SHA-256 and the document hashed."""
    identity_doc = {
        "task": spec.task,
        "run": spec.run,
        "workspace_sha256": verified.workspace_info["workspace_sha256"],
        "assets": asset_fingerprint(verified.manifest),
        "seed": spec.seed,
        "budget": spec.budget.as_dict(),
        "profile": spec.profile,
        "overrides": spec.overrides,
        "keep": spec.keep,
    }
    return sha256_bytes(json.dumps(identity_doc, sort_keys=True).encode()), identity_doc


def decide_start(spec: ReplaySpec, verified: Verified, started_unix: float, started_at: str) -> Start:
    """Resume the same replay when ``state_dir`` holds its identity, else start a fresh formal
    replay (publications, state and attempts of another replay moved aside: :func:`supersede`); settle publications an
    attempt cut short (:func:`~.publish.reconcile`) and clear what else it left; begin this
    attempt (:class:`~.attempts.Attempts`: an earlier one without an end becomes ``platform``)
    and its clock, with the budget earlier attempts left. Raises nothing of its own (I/O errors
    pass)."""
    publish_dir, state_dir = spec.publish_dir, spec.state_dir
    identity, identity_doc = replay_identity(spec, verified)
    identity_file = state_dir / "identity.json"
    # an earlier attempt's candidate code could have planted links the driver would follow:
    # such directories are never resumed from
    planted = [p for d in (publish_dir, state_dir) if d.is_dir() for p in special_entries(d)]
    resume = not planted and recorded_identity(state_dir) == identity
    if planted:
        print(
            f"[replay] {planted[0]}: not a regular file in the replay's directories: starting a fresh formal replay",
            flush=True,
        )
    attempts_file = publish_dir.parent / ATTEMPTS_FILE
    if not resume:
        kept = supersede(publish_dir, state_dir, attempts_file, started_unix)
        if kept is not None:
            print(
                f"[replay] another replay of this run (its publications, state and attempts) moved to {kept}:"
                " nothing deleted; to resume it, put them back and rerun with its config",
                flush=True,
            )
        atomic_write_json(identity_file, {"identity": identity, **identity_doc})
    (state_dir / "train_result.json").unlink(missing_ok=True)
    (publish_dir / "last-failure.json").unlink(missing_ok=True)
    checks = reconcile(publish_dir) if resume else []  # before the leftovers go: it may trash
    for check in checks:
        print(f"[replay] checkpoint-{check['progress']}: {check['verdict']}: {check['reason']}", flush=True)
    for leftover in [*publish_dir.glob(".tmp-*"), *state_dir.glob(".export-*")]:  # cut short by a kill
        shutil.rmtree(leftover)
    earlier = Attempts.earlier(attempts_file, legacy=state_dir / "attempts.json") if resume else []
    attempts = Attempts(attempts_file, started_unix, os.environ.get("REPLAYKIT_LOG"), earlier)
    attempts.current["publication_checks"] = checks
    for entry in attempts.previous:  # one whose driver died after its cutoff was never judged
        observed = entry.get("observed")
        if isinstance(observed, dict) and observed.get("at_cutoff") is not None and "late" not in observed:
            for progress, why in judge(publish_dir, observed).items():
                print(f"[replay] checkpoint-{progress}: late (attempt {entry['attempt']}): {why}", flush=True)
    attempts.heartbeat(started_unix)
    spent_s = attempts.previous_s
    return Start(
        identity=identity,
        resume=resume,
        attempts=attempts,
        started_unix=started_unix,
        started_at=started_at,
        spent_s=spent_s,
        deadline_unix=started_unix + spec.budget.internal_deadline_s - spent_s,
        outer_unix=started_unix + spec.budget.outer_limit_s - spent_s,
        publication_checks=checks,
    )


def launch(spec: ReplaySpec, start: Start) -> Launched:
    """Write the request, record the frozen code's hashes and start ``train.py`` of the
    workspace in its own process group inside the run's isolation plan; its output goes
    through a :class:`Relay` (log and terminal progress line). Raises
    :class:`.sandbox.SandboxUnavailable` when the sandbox cannot run and :class:`InputError`
    for an unknown isolation mode."""
    workspace, publish_dir, state_dir = spec.workspace, spec.publish_dir, spec.state_dir
    request = ReplayRequest(
        fixed_start=Path(spec.fixed_start).resolve(),
        public_dir=Path(spec.public_dir).resolve(),
        publish_dir=publish_dir.resolve(),
        state_dir=state_dir.resolve(),
        seed=spec.seed,
        deadline_unix=start.deadline_unix,
        export_reserve_s=spec.budget.export_reserve_s,
        profile=spec.profile,
        overrides=spec.overrides,
        threads=spec.threads,
        keep=spec.keep,
        resume=start.resume,
    )
    request_path = request.write(state_dir / "request.json")
    print(
        f"[replay] {spec.task}/{spec.run}: {'resuming' if start.resume else 'fresh formal replay'}; "
        f"{start.spent_s:.0f} s spent by earlier attempts; "
        f"internal deadline in {start.deadline_unix - start.started_unix:.0f} s, "
        f"outer limit in {start.outer_unix - start.started_unix:.0f} s",
        flush=True,
    )
    plan = spec.isolation
    argv = plan.argv([sys.executable, "train.py", "--request", str(request_path.resolve())], chdir=workspace.resolve())
    advisory = "" if plan.mode != "none" else f" ({NO_ISOLATION_ADVISORY})"
    print(f"[replay] isolation: {plan.mode}{advisory}", flush=True)
    for folder in plan.unshown_library_folders(os.environ):
        print(f"[replay] LD_LIBRARY_PATH folder {folder} is not shown in the sandbox (sandbox_show)", flush=True)
    frozen_before = spec.frozen.files()
    earlier = published(publish_dir)  # before the start: the relay counts new ones from their lines
    slot_env = spec.slot.environ() if spec.slot is not None else {}  # CUDA_VISIBLE_DEVICES: its one device
    confinement = plan.confine()
    try:
        env = plan.environment(training_env(spec.threads, **slot_env, **compile_cache_env(spec.state_dir)))
        proc = start_group(argv, cwd=workspace, env=env, preexec=confinement.preexec)
    except BaseException:
        confinement.close()
        raise
    observed = start.attempts.current.setdefault("observed", {})
    watch = Watch(publish_dir, observed, start.deadline_unix, spec.budget.export_reserve_s, time.time())
    # training output -> this log, cleaned; a progress line -> the job's terminal
    relay = Relay(
        sys.stdout,
        terminal_from_env(),
        label=f"{spec.task}/{spec.run}",
        started_unix=start.started_unix,
        deadline_unix=start.deadline_unix,
        spent_s=start.spent_s,
        every=save_every(workspace, spec.profile, spec.overrides),
        log_name=os.environ.get("REPLAYKIT_LOG"),
        published=earlier,
    )
    relay_thread = relay.start(proc.stdout)
    return Launched(proc, relay, relay_thread, frozen_before, confinement, watch)


def supervise(launched: Launched, start: Start) -> Exit:
    """Wait for the training process group: stop it at the internal deadline + export reserve
    (the cutoff, never after the outer limit: SIGKILL, no grace, once what is there has been
    fingerprinted), record a heartbeat of the attempt every ``HEARTBEAT_S``, watch the publish
    folder (:class:`~.observe.Watch`: when each checkpoint appears; at the cutoff, what is
    there), judge which checkpoints are late once it has ended (:func:`~.observe.judge`), and on
    SIGTERM, SIGINT or SIGHUP stop it and exit with ``128 + signal`` (SystemExit). Returns how
    it ended, once its output is relayed."""
    proc, attempts, watch = launched.proc, start.attempts, launched.watch

    def on_signal(signum, _frame):
        print(f"[replay] received signal {signum}: stopping the training process group", flush=True)
        stop_group(proc)
        launched.confinement.close()
        attempts.end(time.time(), 128 + signum, *signal_cause(128 + signum))
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    last_beat = [start.started_unix]

    def at_cutoff(now: float) -> None:
        print(
            f"[replay] internal deadline + export reserve reached ({now - start.started_unix:.0f} s after the start)"
            " and training is still running: stopping the training process group; what it publishes or changes"
            " from now on is late (not eligible for the official result)",
            flush=True,
        )
        attempts.heartbeat(now)
        last_beat[0] = now

    def beat(now: float) -> None:
        if watch.look(now):
            at_cutoff(now)
        if now - last_beat[0] >= HEARTBEAT_S:
            attempts.heartbeat(now)
            last_beat[0] = now

    stop_unix = min(watch.cutoff_unix, start.outer_unix)  # the cutoff; the outer limit bounds it all the same

    def at_stop() -> None:
        now = time.time()
        if watch.observed["at_cutoff"] is None:  # what the cutoff found, before the stop
            watch.cut(now)
            at_cutoff(now)
        if stop_unix >= start.outer_unix:
            print("[replay] outer limit reached: stopping the training process group", flush=True)

    # at the cutoff no grace is owed (the export reserve was it): SIGKILL, nothing to catch
    stopped = wait_until(proc, stop_unix, beat, before_stop=at_stop, grace_s=0)
    outer_hit = stopped and stop_unix >= start.outer_unix
    returncode = proc.wait()
    watch.ended(time.time())
    for progress, why in judge(watch.publish_dir, watch.observed).items():
        print(f"[replay] checkpoint-{progress}: late: {why}", flush=True)
    launched.relay_thread.join(timeout=10)
    launched.relay.close()
    ended_unix = time.time()
    hit, evidence = (None, None) if stopped else launched.confinement.verdict(returncode, launched.relay.tail)
    limits = launched.confinement.describe(hit, evidence)
    launched.confinement.close()
    attempts.current["limit_hit"] = hit  # the attempt's cause: a limit hit is the candidate's failure
    attempts.heartbeat(ended_unix)
    if hit:
        print(f"[replay] {failure_line(hit, limits)}", flush=True)
    overtime = watch.observed["at_cutoff"] is not None
    return Exit(returncode, outer_hit, ended_unix, limits, overtime, stopped)


def _fail(
    publish_dir: Path,
    workspace: Path,
    why: str,
    returncode: int,
    retained: list,
    limits: dict | None = None,
    cause: str = "candidate",
) -> ReplayError:
    """Write ``last-failure.json`` saying why (with the job's ``limits``, a hit named, and the
    attempt's ``cause``); the :class:`ReplayError` to raise."""
    atomic_write_json(
        publish_dir / "last-failure.json",
        {
            "error": why,
            "returncode": returncode,
            "time": utc_now(),
            "retained": retained,
            "limits": limits,
            "cause": cause,
        },
    )
    return ReplayError(f"{workspace}/train.py: {why}", cause)


RECIPE_REASONS = (StopReason.MAX_STEPS, StopReason.DEADLINE, StopReason.NAN_LOSS)  # what a recipe may say


def stop_reason(reported, ended: Exit) -> str:
    """Why training stopped, as the record says it: ``outer_limit`` when the driver stopped the
    process there (a cutoff at the outer limit), ``overtime`` when the driver saw it still
    running at the internal deadline + export reserve (and stopped it there), else the recipe's
    own reason when it is one a recipe gives (``max_steps``, ``deadline``, ``nan_loss``: the
    driver cannot tell these apart), else ``unknown``."""
    if ended.outer_hit:
        return StopReason.OUTER_LIMIT.value
    if ended.overtime:
        return StopReason.OVERTIME.value
    return reported if reported in RECIPE_REASONS else StopReason.UNKNOWN.value


def interpret_exit(spec: ReplaySpec, verified: Verified, launched: Launched, ended: Exit) -> Outcome:
    """Judge what the attempt left, reading candidate-written files only once they are known
    to be regular and small: the exit status, the frozen package, workspace and public split
    unchanged, at least one and at most ``keep`` checkpoints retained, each a regular tree
    matching its publication. Returns the outcome. Raises :class:`ReplayError` (after writing
    ``last-failure.json``) naming the first failure; the publications are kept."""
    workspace, publish_dir, state_dir = spec.workspace, spec.publish_dir, spec.state_dir
    returncode = ended.returncode
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
        raise _fail(publish_dir, workspace, why, returncode, [], ended.limits)
    result = TrainResult.read(state_dir / "train_result.json")
    ledger = published_entries(publish_dir)  # a pending one was cut short: it vouches for nothing
    retained = published(publish_dir)
    failure = killed = None
    if ended.stopped:
        pass  # stopped by the driver at the cutoff: judged by its stop_reason, not as a failure
    elif ended.limits.get("hit"):
        failure = failure_line(ended.limits["hit"], ended.limits)
    elif returncode != 0:
        failure = result.error or f"train.py exited with status {returncode} (see the log above)"
        killed = None if result.error else signal_cause(returncode)  # a kill from outside the recipe
        failure = f"{failure}: {killed[1]}" if killed else failure
    killed_failure = failure if killed else None
    changed = first_difference(launched.frozen_before, spec.frozen.files())
    if changed is not None:
        failure = f"the frozen package changed during the replay: {changed[0]}: {changed[1]}"
    elif sha256_tree(workspace) != verified.workspace_info["workspace_sha256"]:  # read-only in the sandbox
        failure = f"the workspace {workspace} changed during the replay"
    else:
        try:
            verify_assets(spec.manifest, spec.fixed_start, split="public", fixed_start_too=False)
        except InputError as exc:
            failure = f"the public split changed during the replay: {exc}"
    if failure is None and not retained:
        failure = "no checkpoint was published"
    for p in retained if failure is None else []:
        if special := special_entries(publish_dir / f"checkpoint-{p}"):
            failure = f"checkpoint-{p}/{special[0]}: not a regular file (symlinks, FIFOs and devices are refused)"
            break
    if failure is None and len(retained) > spec.keep:
        failure = f"retention broken: {len(retained)} checkpoints retained (keep {spec.keep})"
    hashes = {p: sha256_tree(publish_dir / f"checkpoint-{p}") for p in retained}
    ledger_sha = {e["progress"]: e.get("sha256") for e in ledger}
    moved = [p for p in retained if ledger_sha.get(p) != hashes[p]]
    if failure is None and moved and moved[0] not in ledger_sha:
        failure = f"checkpoint-{moved[0]}: no publication in {publish_dir}/publications.jsonl vouches for it"
    elif failure is None and moved:  # a resume must not adopt a checkpoint changed on disk
        failure = (
            f"checkpoint-{moved[0]} differs from its publication in "
            f"{publish_dir}/publications.jsonl (changed after publication); "
            f"start a fresh formal replay: rm -r {publish_dir} {state_dir}"
        )
    if failure is not None:
        cause = "platform" if failure == killed_failure else "candidate"  # a later check's failure is the recipe's
        raise _fail(publish_dir, workspace, failure, returncode, retained, ended.limits, cause)
    return Outcome(result, stop_reason(result.stop_reason, ended), ledger, retained, hashes)


def _number(value) -> float | None:
    """A number the recipe reported, or None when it is not one (candidate code wrote it)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def observed_account(attempts: Attempts, retained: list[int]) -> dict:
    """The record's ``observed``: the driver's own account of the replay's timing
    (:mod:`.observe`), this attempt's clock, and over all attempts when each checkpoint was
    first seen and which retained ones are late (``{progress: why}``)."""
    entries = [e.get("observed") for e in attempts.entries]
    entries = [(n, e) for n, e in enumerate(entries, 1) if isinstance(e, dict)]
    first_seen, late = {}, {}
    for number, obs in entries:  # oldest first: an earlier attempt saw it first
        for progress, when in (obs.get("first_seen") or {}).items():
            if when is not None:
                first_seen.setdefault(str(progress), when)
        for progress, why in (obs.get("late") or {}).items():
            if int(progress) in retained:
                late.setdefault(str(progress), why if number == len(attempts.entries) else f"{why} (attempt {number})")
    now = attempts.current.get("observed") or {}
    ended, deadline = now.get("process_ended_unix"), now.get("deadline_unix")
    return {
        "by": "the replay driver, outside the sandbox (replaykit.harness.observe)",
        "deadline_unix": deadline,
        "cutoff_unix": now.get("cutoff_unix"),
        "look_s": now.get("look_s"),
        "process_started_unix": now.get("process_started_unix"),
        "process_ended_unix": ended,
        "ended_after_deadline_s": ended - deadline if ended is not None and deadline is not None else None,
        "running_at_cutoff": now.get("at_cutoff") is not None,
        "at_cutoff_unix": now.get("at_cutoff_unix"),
        "at_cutoff_s": now.get("at_cutoff_s"),
        "first_seen": dict(sorted(first_seen.items(), key=lambda kv: int(kv[0]))),
        "late": dict(sorted(late.items(), key=lambda kv: int(kv[0]))),
    }


def budget_use(budget, start: Start, wall_s: float, result: TrainResult, observed: dict) -> dict:
    """The record's ``utilisation`` (the driver's clock: wall time over all attempts, and the
    training process's end as the driver saw it against the internal deadline), the recipe's
    own account of its time (``reported_by_recipe``, from ``train_result.json``) and
    ``observed`` (:func:`observed_account`)."""
    started_unix, spent_s = start.started_unix, start.spent_s
    total_s = spent_s + wall_s
    process_end, process_start = observed["process_ended_unix"], observed["process_started_unix"]
    t0, t1 = _number(result.train_start_unix), _number(result.train_end_unix)
    setup_s = (t0 - started_unix) if t0 else None
    train_s = (t1 - t0) if t0 and t1 else None
    accounted = sum(x for x in (setup_s, train_s) if x is not None)
    return {
        "utilisation": {
            "wall_s_all_attempts": total_s,
            "budget_fraction": total_s / budget.outer_limit_s,
            "deadline_fraction": (spent_s + process_end - started_unix) / budget.internal_deadline_s,
            "process_s": process_end - process_start,
            "after_deadline_s": max(0.0, observed["ended_after_deadline_s"]),
        },
        "reported_by_recipe": {  # train_result.json: candidate code wrote it
            "stop_reason": result.stop_reason,
            "train_start_unix": t0,
            "train_end_unix": t1,
            "setup_s": setup_s,
            "train_s": train_s,
            "publish_s": _number(result.publish_s),
            "idle_s": max(0.0, wall_s - accounted),
        },
        "observed": observed,
    }


def write_record(
    spec: ReplaySpec, verified: Verified, start: Start, launched: Launched, ended: Exit, outcome: Outcome
) -> dict:
    """Write the replay record to ``spec.record_path`` (last: its presence means the replay
    succeeded) and say so on stdout. Its timing (``stop_reason``, ``utilisation``,
    ``observed``, ``checkpoints.<N>.late``) is the driver's own; the recipe's account is under
    ``reported_by_recipe``. Returns the record."""
    result, _, ledger, retained, hashes = outcome
    ws_info, started_unix, spent_s = verified.workspace_info, start.started_unix, start.spent_s
    wall_s = ended.ended_unix - started_unix
    total_s = spent_s + wall_s
    attempts, config = start.attempts, workflow_provenance()
    timing = budget_use(spec.budget, start, wall_s, result, observed_account(attempts, retained))
    late = timing["observed"]["late"]
    record = {
        "task": spec.task,
        "run": spec.run,
        "seed": spec.seed,
        "identity": start.identity,
        "resumed": start.resume,
        "started_at": start.started_at,
        "ended_at": utc_now(),
        "wall_s": wall_s,
        "attempts": attempts.previous + [attempts.current],
        "budget": spec.budget.as_dict(),
        **timing,  # utilisation, reported_by_recipe, observed
        "stop_reason": outcome.stop_reason,
        "steps": result.steps,
        # publications.jsonl (its times are the recipe's), with when the driver first saw each
        "publications": [
            {**e, "first_seen_unix": timing["observed"]["first_seen"].get(str(e["progress"]))} for e in ledger
        ],
        "publication_count": len(ledger),
        "retained": retained,
        "checkpoints": {
            str(p): {
                "path": str(spec.publish_dir / f"checkpoint-{p}"),
                "sha256": hashes[p],
                **({"late": late[str(p)]} if str(p) in late else {}),
            }
            for p in retained
        },
        "workspace_record": str(spec.workspace_record),
        "workspace_sha256": ws_info["workspace_sha256"],
        "patch": ws_info.get("patch"),
        "patch_sha256": ws_info["patch_sha256"],
        "exploration": exploration_of(ws_info.get("patch"), ws_info["patch_sha256"]),
        "asset_manifest": str(spec.manifest),
        "asset_manifest_sha256": verified.manifest_sha256,
        "profile": spec.profile,
        "overrides": spec.overrides,
        "threads": spec.threads,
        "project": git_commit(Path(__file__).resolve().parent),
        "isolation": spec.isolation.mode,
        "sandbox": {**spec.isolation.describe(), "limits": ended.limits},
        # which config files the workflow ran on (not a parameter of the replay rule) and tiny
        "tiny": config["tiny"],
        "config_files": config["config_files"],
        "command_line_config_keys": config["command_line_keys"],
        "advisories": [NO_ISOLATION_ADVISORY] * (spec.isolation.mode == "none") + [TINY_ADVISORY] * config["tiny"],
        "frozen_code_sha256": frozen_digest(launched.frozen_before),
        "libraries": library_versions(),
        "fingerprint": fingerprint(),
        "train_metrics": result.metrics,
        "train_history": result.history,
    }
    atomic_write_json(spec.record_path, record)
    done = (
        f"done: stop_reason={record['stop_reason']} steps={record['steps']} "
        f"retained={retained} wall={wall_s:.1f} s ({total_s:.1f} s over all attempts)"
        + (f" late={[int(p) for p in late]} (not eligible for the official result)" if late else "")
    )
    print(f"[replay] {done}", flush=True)
    terminal = terminal_from_env()  # the job's terminal: why training ended (a deadline, its end)
    if terminal is not None:
        terminal.write(f"[replay] {spec.task}/{spec.run}: {done}\n")
        terminal.flush()
    return record


def run_replay(spec: ReplaySpec) -> dict:
    """Run one formal replay (or resume the same one) and write its record.

    The budget spans attempts: a resumed replay gets what earlier attempts left of the
    internal deadline and of the outer limit. ``train.py`` runs inside ``spec.isolation``
    (:func:`replaykit.isolation.plan`): it sees its workspace, the fixed start (unless it is
    raw data whose complement is the test set), the public split and the Python environment
    read-only, and can write only ``publish_dir`` and ``state_dir``. The frozen code is hashed
    before and after training: a change is a :class:`ReplayError`.

    Steps: :func:`verify_inputs`, :func:`decide_start`, :func:`launch`, :func:`supervise`,
    :func:`interpret_exit`, :func:`write_record`.

    Returns the record. Raises :class:`InputError` for bad assets, workspace or overrides
    (before anything is removed), and :class:`ReplayError` when the recipe fails; publications
    made before a failure are kept (they live outside Snakemake's declared outputs) and
    ``last-failure.json`` says why.
    """
    started_unix, started_at = time.time(), utc_now()
    verified = verify_inputs(spec)
    start = decide_start(spec, verified, started_unix, started_at)
    attempts = start.attempts
    if spec.slot is not None:  # the attempt's GPU slot: which device, when, how long it waited
        attempts.current["gpu_slot"] = spec.slot.record()
    tee_attempt_log(attempts.current["log"], os.environ.get("REPLAYKIT_LOG"))
    try:
        launched = launch(spec, start)
    except SandboxUnavailable as exc:
        attempts.end(time.time(), None, "platform", f"the sandbox did not start: {exc}")
        raise
    ended = supervise(launched, start)
    if spec.slot is not None:  # training has ended: the device is let go before the record is judged
        attempts.current["gpu_slot"] = spec.slot.release()
        attempts.heartbeat(ended.ended_unix)
    hit = ended.limits.get("hit")
    try:
        outcome = interpret_exit(spec, verified, launched, ended)
    except ReplayError as exc:
        attempts.end(ended.ended_unix, ended.returncode, exc.cause, str(exc), limit_hit=hit)
        raise
    stopped = outcome.stop_reason in (StopReason.DEADLINE, StopReason.OUTER_LIMIT)
    # overtime: the recipe ran past its export reserve and was killed there: its own failure
    # (the record is written all the same, and the job succeeds: a rerun would do the same)
    overtime = outcome.stop_reason == StopReason.OVERTIME
    attempts.end(
        ended.ended_unix,
        ended.returncode,
        "candidate" if overtime else "deadline" if stopped else "completed",
        f"stop_reason {outcome.stop_reason}",
        limit_hit=hit,
    )
    return write_record(spec, verified, start, launched, ended, outcome)


def replay_job(spec: ReplaySpec) -> dict:
    """The workflow's replay step: ask for SIGTERM when the job's owner dies (training stops
    too), take a GPU slot (:mod:`.slots`: waiting for a free device does not count against the
    budget; the sandbox sees that device alone), then :func:`run_replay`."""
    set_parent_death_signal(signal.SIGTERM)  # the job's owner died -> stop training too
    with take_slot({"task": spec.task, "run": spec.run, "rule": "replay"}) as slot:
        isolation = replace(spec.isolation, devices=slot.device_files())
        return run_replay(replace(spec, slot=slot, isolation=isolation))
