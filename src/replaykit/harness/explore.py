"""The exploration phase: a budgeted, sandboxed workspace where a candidate is developed
against the proxy and submitted as a candidate patch (SPEC, vocabulary: exploration, proxy).

Layout of one exploration, ``explore/<task>/<name>/``::

    exploration.json   paths, budget (s), start time (unix s), isolation, lock, recipe hash
    frozen-code.json   SHA-256 of the frozen package at the start (scoring verifies it)
    workspace/         fresh copy of recipes/<task>/: the editable workspace
    runs/probe-<k>/    one probe: request.json, log.txt, publish/, state/ (writable in it)
    proxy/<k>/         one proxy score: marker.json, summary.json, rows.jsonl, .complete
    receipts.jsonl     one JSON line per probe and per proxy score (appended, never rewritten)
    submission.json    written by submit (then also patches/<task>-<name>.exploration.json)

Rules:

* The budget is wall-clock seconds from the start (full scale 14,400 s; default a third of
  the task's outer limit, the full-scale ratio 14,400 / 43,200). A probe or proxy score is
  refused once it has ended and killed when it ends; submit always works.
* Probes run in the replay's sandbox (:func:`replaykit.harness.sandbox.wrap`): the
  workspace and the probe's run directory writable, earlier runs, the fixed start (unless it
  is raw data) and the public split read-only; the working directory (``results/``, the
  config, the final split), the exploration's own records and the lock file hidden; no
  network.
* Probes and proxy scores hold one GPU lock (``fcntl.flock`` on a file outside the sandbox's
  view): a second one waits for it (or, with ``wait=False``, is refused); its receipt says
  how long it waited and for whom.
* Submit writes the workspace's difference from the shipped recipe as a patch, checked like
  every candidate patch (applied to a fresh copy, the result must equal the workspace), and
  refuses files that are not code or config (checkpoints, caches, data), naming them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json
from .hashing import sha256_file, sha256_tree, tree_files
from .provenance import utc_now
from .publish import KEEP
from .workspace import build_workspace, special_entries

BUDGET_FRACTION = 14_400 / 43_200  # SPEC: exploration budget / formal replay outer limit
DEFAULT_LOCK = Path("explore/.gpu.lock")
NAME_RE = re.compile(r"[A-Za-z0-9_.]+")  # the formal run is <candidate>-seed<seed>
CODE_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".txt", ".md", ".rst", ".sh"})
MAX_CODE_BYTES = 256 * 1024  # a larger "code or config" file is data
CACHE_DIRS = frozenset(
    {"__pycache__", ".cache", ".ipynb_checkpoints", ".pytest_cache", ".git", "wandb", "runs", "outputs"}
)
POLL_S = 0.2


def config_paths(config: dict, task: str) -> dict:
    """Where the workflow keeps a task's fixed start, public split, manifest and recipe
    (relative to the working directory, as ``rules/common.smk`` names them)."""
    from ..tasks import get_task

    cfg = config["tasks"][task]
    fs = cfg["fixed_start"]
    plugin = get_task(task)
    hide = [*config.get("sandbox_hide", []), f"results/{task}/assets/hidden"]
    show = []
    for key, value in cfg["data"].items():
        if isinstance(value, str) and value and Path(value).exists():
            (hide if key in plugin.FINAL_SOURCES else show).append(value)
    return {
        "fixed_start": f"results/models/{fs}" if fs in config.get("models", {}) else fs,
        "public_dir": f"results/{task}/assets/public",
        "manifest": f"results/{task}/assets/manifest.json",
        "recipe": f"recipes/{task}",
        "hide": hide,
        "show": show,
        "show_fixed_start": not plugin.FIXED_START_IS_DATA,
    }


def load_config(configfile: str | Path, task: str) -> dict:
    """The workflow config (checked against ``config/schema.yaml`` beside it, defaults filled).

    Raises:
        InputError: a missing file, a config the schema refuses, or an unknown task.
    """
    import yaml

    from ..config import check_config, config_schema, fill_defaults

    configfile = Path(configfile)
    if not configfile.is_file():
        raise InputError(configfile, "-", "config file not found")
    config = yaml.safe_load(configfile.read_text()) or {}
    schema = configfile.parent / "schema.yaml"
    check_config(config, schema, str(configfile))
    fill_defaults(config, config_schema(schema, config))
    if task not in config["tasks"]:
        raise InputError(configfile, "tasks", f"no task named {task!r}")
    return config


def start(
    task: str,
    name: str,
    *,
    config: dict | None = None,
    configfile: str | Path,
    root: str | Path = "explore",
    lock: str | Path = DEFAULT_LOCK,
    budget_s: float | None = None,
) -> dict:
    """Create ``<root>/<task>/<name>/``: a fresh workspace, the budget's clock started.

    Args:
        config: the workflow config (default: :func:`load_config` of ``configfile``).
        budget_s: wall-clock budget in seconds; default the task's outer limit × 1/3.

    Returns the exploration record (``exploration.json``).

    Raises:
        InputError: a config :func:`load_config` refuses, a bad name, an existing exploration,
            a non-positive budget, or assets
            that are missing or differ from their manifest (build them first with
            ``snakemake results/<task>/assets/manifest.json``).
    """
    from . import frozen
    from .replay import verify_assets

    if config is None:
        config = load_config(configfile, task)
    if not NAME_RE.fullmatch(name):
        raise InputError("--name", "name", f"{name!r}: use letters, digits, '_' and '.' only")
    cfg = config["tasks"][task]
    if budget_s is None:
        budget_s = float(cfg["budget"]["outer_limit_s"]) * BUDGET_FRACTION
    if not budget_s > 0:
        raise InputError("--budget-s", "budget_s", f"must be > 0 seconds, got {budget_s!r}")
    paths = config_paths(config, task)
    manifest = Path(paths["manifest"])
    if not manifest.is_file():
        raise InputError(manifest, "-", f"assets not built: run `snakemake {manifest} --cores 1` first")
    verify_assets(manifest, paths["fixed_start"], split="public")
    out = Path(root) / task / name
    if out.exists():
        raise InputError(out, "-", "exploration already exists (choose another --name)")
    out.mkdir(parents=True)
    atomic_write_json(out / "frozen-code.json", frozen.record())
    build_workspace(paths["recipe"], out / "workspace", out / "workspace.json")
    (out / "runs").mkdir()
    (out / "proxy").mkdir()
    (out / "receipts.jsonl").touch()
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    budget = cfg["budget"]
    info = {
        "task": task,
        "name": name,
        "directory": str(out),
        "workdir": str(Path.cwd().resolve()),
        "started_at": utc_now(),
        "started_unix": time.time(),
        "budget_s": float(budget_s),
        "ends_unix": None,
        "configfile": str(configfile),
        "lock": str(lock.resolve()),
        "isolation": config["isolation"],
        "seed": int(cfg["seeds"][0]),
        "threads": int(cfg["threads"]),
        "profile": cfg["recipe"]["profile"],
        "overrides": cfg["recipe"]["overrides"],
        "replay_budget": budget,
        "evaluation": cfg["evaluation"],
        "validation": cfg["validation"],
        "recipe_sha256": sha256_tree(paths["recipe"]),
        **paths,
    }
    info["ends_unix"] = info["started_unix"] + info["budget_s"]
    atomic_write_json(out / "exploration.json", info)
    return info


class Exploration:
    """One exploration directory: its record, clock and receipts."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.record_path = self.dir / "exploration.json"
        if not self.record_path.is_file():
            raise InputError(self.record_path, "-", "not an exploration (run `explore` first)")
        self.info = read_json(self.record_path, required=("task", "started_unix", "budget_s"))
        self.workspace = self.dir / "workspace"

    def used_s(self, now: float | None = None) -> float:
        """Wall-clock seconds since the start, capped at the budget."""
        return min(self.info["budget_s"], (now or time.time()) - self.info["started_unix"])

    def left_s(self, now: float | None = None) -> float:
        """Seconds of budget left (0 once it has ended)."""
        return max(0.0, self.info["ends_unix"] - (now or time.time()))

    def require_budget(self, what: str) -> None:
        """Raises InputError when the budget has ended (only submit works then)."""
        if self.left_s() <= 0:
            raise InputError(
                self.record_path,
                "budget_s",
                f"the exploration budget ({self.info['budget_s']:.0f} s) has ended: no more {what}; only submit works",
            )

    def receipts(self) -> list[dict]:
        path = self.dir / "receipts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def add_receipt(self, receipt: dict) -> dict:
        line = (json.dumps(receipt, sort_keys=True) + "\n").encode()
        fd = os.open(self.dir / "receipts.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)  # one write of an O_APPEND file: lines never interleave
        finally:
            os.close(fd)
        return receipt

    def new_dir(self, parent: str, prefix: str) -> Path:
        """``<parent>/<prefix><k>`` with the next free k (safe under concurrent callers)."""
        k = 1
        while True:
            path = self.dir / parent / f"{prefix}{k}"
            try:
                path.mkdir()
                return path
            except FileExistsError:
                k += 1

    def status(self) -> dict:
        receipts = self.receipts()
        return {
            "exploration": str(self.dir),
            "budget_s": self.info["budget_s"],
            "used_s": self.used_s(),
            "left_s": self.left_s(),
            "probes": sum(r["kind"] == "probe" for r in receipts),
            "proxy_scores": [
                {k: r.get(k) for k in ("id", "checkpoint", "value", "se", "waited_s")}
                for r in receipts
                if r["kind"] == "proxy"
            ],
            "submitted": (self.dir / "submission.json").is_file(),
        }


def find_exploration(directory: str | Path | None = None) -> Exploration:
    """The exploration at ``directory``, else the one the working directory is inside; then
    work from the workflow directory it was started in (its paths are relative to it).

    Raises:
        InputError: no ``directory`` and the working directory is in no exploration, or
            ``directory`` is not an exploration.
    """
    if directory:
        found = Path(directory)
    else:
        here = Path.cwd().resolve()
        found = next((d for d in (here, *here.parents) if (d / "exploration.json").is_file()), None)
        if found is None:
            raise InputError(
                "-e", "exploration", "not inside an exploration directory: name one with -e explore/<task>/<name>"
            )
    ex = Exploration(found.resolve())
    os.chdir(ex.info["workdir"])
    return ex


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

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except ProcessLookupError:
        pass


def _run_until(command: list[str], *, cwd: Path, env: dict, log: Path, ends_unix: float, echo: bool) -> tuple[int, str]:
    """Run ``command`` in its own process group (dies with this process), its output to
    ``log`` (and stdout when ``echo``); kill it at ``ends_unix``. Returns (exit status, stop)."""
    from .progress import escape_controls
    from .replay import set_parent_death_signal

    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: set_parent_death_signal(signal.SIGKILL),
        )

        def pump():
            for line in iter(proc.stdout.readline, b""):
                sink.write(line)
                sink.flush()
                if echo:  # the candidate's bytes reach the operator's terminal: controls shown, not run
                    print(escape_controls(line.decode("utf-8", errors="replace").rstrip("\r\n")), flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stop = "exit"
        while proc.poll() is None:
            if time.time() >= ends_unix:
                stop = "budget"
                _kill_group(proc)
                break
            time.sleep(POLL_S)
        code = proc.wait()
        reader.join(timeout=5)
    return code, stop


def run_probe(
    exploration: Exploration, command: list[str] | None = None, *, wait: bool = True, echo: bool = True
) -> dict:
    """Run ``command`` (default: the recipe, ``python train.py --request <request.json>``) in
    the sandbox under the GPU lock, killed when the budget ends; append and return its receipt.

    The default run's request is a replay's (see :mod:`replaykit.harness.replay`), with
    ``publish_dir``/``state_dir`` in ``runs/probe-<k>/`` and a deadline that leaves the
    replay's export reserve before the budget's end. Inside, ``REPLAYKIT_RUN_DIR`` names the
    probe's run directory and ``REPLAYKIT_REQUEST`` its request. Receipt: id, command,
    waited_s, waited_for, lock_acquired_unix, released_unix, seconds, returncode, stop
    (``exit`` or ``budget``), the checkpoints it left (path, SHA-256), budget used and left (s).

    Raises:
        InputError: the budget has ended, or the lock is refused (``wait=False``).
    """
    from .sandbox import process_env, python_roots, wrap

    info, ex = exploration.info, exploration
    ex.require_budget("probes")
    run_dir = ex.new_dir("runs", "probe-").resolve()
    probe_id = run_dir.name
    lock = GpuLock(info["lock"], {"exploration": str(ex.dir), "id": probe_id, "pid": os.getpid()})
    try:
        lock.acquire(wait, info["ends_unix"])
    except InputError:
        run_dir.rmdir()  # a refused probe leaves nothing
        raise
    try:
        ex.require_budget("probes")
        publish, state = run_dir / "publish", run_dir / "state"
        publish.mkdir()
        state.mkdir()
        reserve = float(info["replay_budget"]["export_reserve_s"])
        now = time.time()
        deadline = min(
            now + float(info["replay_budget"]["internal_deadline_s"]),
            info["ends_unix"] - min(reserve, ex.left_s(now) / 4),
        )
        request = {
            "fixed_start": str(Path(info["fixed_start"]).resolve()),
            "public_dir": str(Path(info["public_dir"]).resolve()),
            "publish_dir": str(publish),
            "state_dir": str(state),
            "seed": info["seed"],
            "deadline_unix": deadline,
            "export_reserve_s": reserve,
            "profile": info["profile"],
            "overrides": info["overrides"],
            "threads": info["threads"],
            "keep": KEEP,
            "resume": False,
        }
        request_path = atomic_write_json(run_dir / "request.json", request)
        command = list(command or [sys.executable, "train.py", "--request", str(request_path)])
        workspace = ex.workspace.resolve()
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PYTHONDONTWRITEBYTECODE="1",
            OMP_NUM_THREADS=str(info["threads"]),
            REPLAYKIT_RUN_DIR=str(run_dir),
            REPLAYKIT_REQUEST=str(request_path),
        )
        argv = wrap(
            command,
            info["isolation"],
            chdir=workspace,
            hide=[info["workdir"], ex.dir, info["lock"], info["lock"] + ".holder", *info["hide"]],
            read_only=[
                *python_roots(info["task"]),
                info["public_dir"],
                *info["show"],
                ex.dir / "runs",
                *([info["fixed_start"]] if info["show_fixed_start"] else []),
            ],
            writable=[workspace, run_dir],
        )
        code, stop = _run_until(
            argv,
            cwd=workspace,
            env=process_env(env, info["isolation"]),
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
    return ex.add_receipt(
        {
            "kind": "probe",
            "id": probe_id,
            "command": command,
            "isolation": info["isolation"],
            "waited_s": lock.waited_s,
            "waited_for": lock.waited_for,
            "lock_acquired_unix": lock.acquired_unix,
            "released_unix": released,
            "seconds": released - lock.acquired_unix,
            "returncode": code,
            "stop": stop,
            "log": str(run_dir.relative_to(ex.dir) / "log.txt"),
            "checkpoints": checkpoints,
            "budget_used_s": ex.used_s(released),
            "budget_left_s": ex.left_s(released),
        }
    )


def score_proxy(exploration: Exploration, checkpoint: str | Path, *, wait: bool = True) -> dict:
    """Score ``checkpoint`` (a directory inside the exploration) with the frozen loader and
    the frozen proxy evaluator (``python -m replaykit validate`` / ``score --split proxy``,
    the same calls as the workflow's ``score_proxy`` rule) under the GPU lock.

    Receipt: id, checkpoint, checkpoint_sha256, valid, reason, metric, value, se (the
    evaluator's uncertainty), n, summary path, waited_s, seconds, budget used and left (s).

    Raises:
        InputError: the budget has ended, the checkpoint is not a directory of this
            exploration, the lock is refused, or the evaluator failed (its last line).
    """
    from ..tasks import get_task

    info, ex = exploration.info, exploration
    ex.require_budget("proxy scores")
    checkpoint = Path(checkpoint)
    resolved = checkpoint.resolve()
    if not resolved.is_dir() or ex.dir.resolve() not in resolved.parents:
        raise InputError(checkpoint, "-", f"not a checkpoint directory inside {ex.dir}")
    digest = sha256_tree(resolved)
    out = ex.new_dir("proxy", "")
    lock = GpuLock(info["lock"], {"exploration": str(ex.dir), "id": f"proxy-{out.name}", "pid": os.getpid()})
    try:
        lock.acquire(wait, info["ends_unix"])
    except InputError:
        out.rmdir()
        raise
    try:
        ex.require_budget("proxy scores")
        py = [sys.executable, "-m", "replaykit"]
        frozen = str(ex.dir / "frozen-code.json")
        items = Path(info["public_dir"]).parent / get_task(info["task"]).split_file("proxy")
        steps = [
            [
                *py,
                "validate",
                "--task",
                info["task"],
                "--checkpoint",
                str(resolved),
                "--fixed-start",
                info["fixed_start"],
                "--cfg",
                json.dumps(info["validation"]),
                "--frozen",
                frozen,
                "--out",
                str(out / "marker.json"),
            ],
            [
                *py,
                "score",
                "--task",
                info["task"],
                "--split",
                "proxy",
                "--frozen",
                frozen,
                "--checkpoint",
                str(resolved),
                "--marker",
                str(out / "marker.json"),
                "--fixed-start",
                info["fixed_start"],
                "--manifest",
                info["manifest"],
                "--items",
                str(items),
                "--cfg",
                json.dumps(info["evaluation"]),
                "--workspace",
                str(ex.workspace),
                "--out-dir",
                str(out),
            ],
        ]
        env = dict(os.environ, OMP_NUM_THREADS=str(info["threads"]))
        for step in steps:
            code, stop = _run_until(
                step, cwd=Path.cwd(), env=env, log=out / "log.txt", ends_unix=info["ends_unix"], echo=False
            )
            if code != 0:
                last = (out / "log.txt").read_text().strip().splitlines() or [f"exit {code}"]
                why = "the budget ended during scoring" if stop == "budget" else last[-1]
                raise InputError(checkpoint, step[3], why)
    finally:
        released = time.time()
        lock.release()
    marker = read_json(out / "marker.json")
    summary = read_json(out / "summary.json")
    return ex.add_receipt(
        {
            "kind": "proxy",
            "id": out.name,
            "checkpoint": str(resolved.relative_to(ex.dir.resolve())),
            "checkpoint_sha256": digest,
            "valid": marker["valid"],
            "reason": marker["reason"],
            "metric": summary["metric"],
            "value": summary["value"],
            "se": summary["uncertainty"]["value"],
            "uncertainty_kind": summary["uncertainty"]["kind"],
            "n": summary["n"],
            "summary": str(out / "summary.json"),
            "waited_s": lock.waited_s,
            "waited_for": lock.waited_for,
            "lock_acquired_unix": lock.acquired_unix,
            "released_unix": released,
            "seconds": released - lock.acquired_unix,
            "budget_used_s": ex.used_s(released),
            "budget_left_s": ex.left_s(released),
        }
    )


def not_code(root: Path, after_unix: float | None = None) -> list[str]:
    """Workspace entries (relative paths, sorted) a candidate patch may not carry: special
    files, cache directories, checkpoint directories, files whose suffix is not code or
    config (:data:`CODE_SUFFIXES`) or larger than :data:`MAX_CODE_BYTES`, and files changed
    after ``after_unix`` (the budget's end)."""
    bad = [f"{rel} (not a regular file)" for rel in special_entries(root)]
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_symlink() or any(part in CACHE_DIRS for part in rel.parts[:-1]):
            continue
        if path.is_dir():
            if path.name in CACHE_DIRS or path.name.startswith("checkpoint-"):
                bad.append(f"{rel.as_posix()}/")
            continue
        if any(p in CACHE_DIRS or p.startswith("checkpoint-") for p in rel.parts[:-1]):
            continue
        if path.suffix.lower() not in CODE_SUFFIXES:
            bad.append(rel.as_posix())
        elif path.stat().st_size > MAX_CODE_BYTES:
            bad.append(f"{rel.as_posix()} ({path.stat().st_size} bytes)")
        elif after_unix is not None and path.stat().st_mtime > after_unix:
            bad.append(f"{rel.as_posix()} (changed after the budget ended)")
    return bad


def make_diff(recipe: Path, workspace: Path) -> str:
    """``git diff`` of ``workspace`` against ``recipe`` with ``a/``, ``b/`` paths (``-p1``)."""
    with tempfile.TemporaryDirectory(prefix="replaykit-diff-") as tmp:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(recipe, Path(tmp) / "a", ignore=ignore)
        shutil.copytree(workspace, Path(tmp) / "b", ignore=ignore)
        result = subprocess.run(
            ["git", "diff", "--no-index", "--no-prefix", "--no-color", "--no-renames", "--no-ext-diff", "a", "b"],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
    if result.returncode not in (0, 1):
        raise InputError(workspace, "-", f"git diff failed: {result.stderr.strip()}")
    return result.stdout


def submit(exploration: Exploration, patches_dir: str | Path = "patches") -> dict:
    """Write ``<patches_dir>/<task>-<name>.diff`` and its sidecar ``.exploration.json``.

    The patch is the workspace against the shipped recipe; it is checked like every candidate
    patch (:func:`replaykit.harness.workspace.build_workspace` on a fresh copy) and the copy it
    produces must equal the workspace. Works after the budget has ended (files changed after
    the end are refused). Returns the submission record (patch path and SHA-256, budget used
    in s, the receipts).

    Raises:
        InputError: already submitted; the shipped recipe changed since the start; files that
            are not code or config (named); no change to submit; the patch file exists.
    """
    info, ex = exploration.info, exploration
    if (ex.dir / "submission.json").exists():
        raise InputError(ex.dir / "submission.json", "-", "already submitted")
    recipe = Path(info["recipe"])
    if sha256_tree(recipe) != info["recipe_sha256"]:
        raise InputError(recipe, "recipe_sha256", "the shipped recipe changed since the exploration started")
    ended = info["ends_unix"] if ex.left_s() <= 0 else None
    if bad := not_code(ex.workspace, after_unix=ended):
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise InputError(
            ex.workspace, "files", f"not code or config (checkpoints, caches and data are refused): {shown}"
        )
    diff = make_diff(recipe, ex.workspace)
    if not diff:
        raise InputError(ex.workspace, "-", "no change against the shipped recipe: nothing to submit")
    patches_dir = Path(patches_dir)
    patch = patches_dir / f"{info['task']}-{info['name']}.diff"
    if patch.exists():
        raise InputError(patch, "-", "patch file already exists")
    with tempfile.TemporaryDirectory(prefix="replaykit-submit-") as tmp:
        staged = Path(tmp) / patch.name
        staged.write_text(diff)
        check = build_workspace(recipe, Path(tmp) / "ws", Path(tmp) / "ws.json", staged)
        if tree_files(Path(tmp) / "ws") != tree_files(ex.workspace):
            raise InputError(patch, "-", "the patch does not reproduce the workspace")
        patches_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(staged, patch)
    now = time.time()
    receipts = ex.receipts()
    doc = {
        "task": info["task"],
        "name": info["name"],
        "exploration": str(ex.dir),
        "exploration_record_sha256": sha256_file(ex.record_path),
        "patch": str(patch),
        "patch_sha256": sha256_file(patch),
        "patch_touches": check["patch_touches"],
        "workspace_sha256": check["workspace_sha256"],
        "recipe_sha256": info["recipe_sha256"],
        "submitted_at": utc_now(),
        "budget_s": info["budget_s"],
        "budget_used_s": ex.used_s(now),
        "probes": sum(r["kind"] == "probe" for r in receipts),
        "probe_waits": sum(r.get("waited_s", 0) > 0 for r in receipts),
        "receipts": receipts,
    }
    atomic_write_json(ex.dir / "submission.json", doc)
    atomic_write_json(sidecar(patch), doc)
    return doc


def sidecar(patch: str | Path) -> Path:
    """``patches/<task>-<name>.exploration.json`` beside ``patches/<task>-<name>.diff``."""
    return Path(patch).with_suffix(".exploration.json")


def exploration_of(patch: str | Path | None, patch_sha256: str | None) -> dict | None:
    """The exploration a candidate patch came from, for the replay record: its submission's
    name, directory, budget (s) and proxy receipts, when the sidecar names this patch's
    SHA-256; None for the shipped recipe or a hand-made patch; a mismatch is recorded."""
    if not patch or not sidecar(patch).is_file():
        return None
    doc = read_json(sidecar(patch))
    link = {
        "sidecar": str(sidecar(patch)),
        "sidecar_sha256": sha256_file(sidecar(patch)),
        "name": doc.get("name"),
        "exploration": doc.get("exploration"),
        "patch_sha256": doc.get("patch_sha256"),
        "linked": doc.get("patch_sha256") == patch_sha256,
    }
    if link["linked"]:
        link.update(
            budget_s=doc["budget_s"],
            budget_used_s=doc["budget_used_s"],
            probes=doc["probes"],
            proxy_receipts=[
                {
                    k: r.get(k)
                    for k in (
                        "id",
                        "checkpoint",
                        "checkpoint_sha256",
                        "metric",
                        "value",
                        "se",
                        "n",
                        "valid",
                        "waited_s",
                        "budget_used_s",
                    )
                }
                for r in doc["receipts"]
                if r["kind"] == "proxy"
            ],
        )
    return link
