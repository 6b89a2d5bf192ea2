"""Submit an exploration: the workspace's difference from the shipped recipe as a candidate
patch, checked like every candidate patch, with its sidecar (the link the replay records)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..harness.errors import InputError
from ..harness.fileio import atomic_write_json, tree_paths
from ..harness.hashing import sha256_file, sha256_tree, tree_files
from ..harness.lock import FileLock
from ..harness.provenance import utc_now
from ..harness.submission import sidecar
from ..harness.workspace import build_workspace, special_entries
from .processes import alive_processes, record_refusal, refusals
from .record import Exploration, configfile_option

CODE_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".txt", ".md", ".rst", ".sh"})
MAX_CODE_BYTES = 256 * 1024  # a larger "code or config" file is data
CACHE_DIRS = frozenset(
    {"__pycache__", ".cache", ".ipynb_checkpoints", ".pytest_cache", ".git", "wandb", "runs", "outputs"}
)


def not_code(root: Path, after_unix: float | None = None) -> list[str]:
    """Workspace entries (relative paths, sorted) a candidate patch may not carry: special
    files, cache directories, checkpoint directories, files whose suffix is not code or
    config (:data:`CODE_SUFFIXES`) or larger than :data:`MAX_CODE_BYTES`, and files changed
    after ``after_unix`` (the budget's end)."""
    bad = [f"{rel} (not a regular file)" for rel in special_entries(root)]
    for path in sorted(tree_paths(root)):
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
        raise InputError(workspace, None, f"git diff failed: {result.stderr.strip()}")
    return result.stdout


def formal_replay_command(doc: dict) -> str:
    """The command that replays a submission (``submit``'s record) formally: its task's
    ``final/`` with the patch as the candidate, on the config files the exploration used."""
    files = configfile_option(doc.get("config_files") or [])
    tasks = json.dumps({doc["task"]: {"candidate": doc["name"], "candidates": {doc["name"]: doc["patch"]}}})
    return f"snakemake results/{doc['task']}/final --cores 1 --resources gpu=1{files} --config 'tasks={tasks}'"


def submit(exploration: Exploration, patches_dir: str | Path = "patches") -> dict:
    """Write ``<patches_dir>/<task>-<name>.diff`` and its sidecar ``.exploration.json``.

    The patch is the workspace against the shipped recipe; it is checked like every candidate
    patch (:func:`replaykit.harness.workspace.build_workspace` on a fresh copy) and the copy it
    produces must equal the workspace. Works after the budget has ended (files changed after
    the end are refused). Returns the submission record (patch path and SHA-256, budget used
    in s, the receipts).

    Raises:
        InputError: already submitted; a probe or proxy scoring of this exploration still runs
            (it holds the GPU lock; the submission holds it too, so none starts meanwhile); the
            shipped recipe changed since the start; files that are not code or config (named);
            no change to submit; the patch file exists.
    """
    info, ex = exploration.info, exploration
    if (ex.dir / "submission.json").exists():
        raise InputError(ex.dir / "submission.json", None, "already submitted")
    lock = FileLock(info["lock"], {"exploration": str(ex.dir), "id": "submit"})
    if lock.try_acquire():
        with lock:  # no probe or proxy scoring of this exploration starts while it is submitted
            return _submit(ex, patches_dir)
    holder = lock.waited_for or {}
    if holder.get("exploration") == str(ex.dir):  # its own probe or scoring runs now
        raise InputError(
            info["lock"],
            "lock",
            f"{holder.get('id', 'a probe')} of this exploration still runs (it holds the GPU lock): "
            "wait for it to end, then submit",
        )
    return _submit(ex, patches_dir)  # another exploration's run holds it: none of this one runs


def _submit(ex: Exploration, patches_dir: str | Path) -> dict:
    info = ex.info
    recipe = Path(info["recipe"])
    if sha256_tree(recipe) != info["recipe_sha256"]:
        raise InputError(recipe, "recipe_sha256", "the shipped recipe changed since the exploration started")
    ended = info["ends_unix"] if ex.left_s() <= 0 else None
    if bad := not_code(ex.workspace, after_unix=ended):
        record_refusal(ex.dir, bad)  # the audit lists refused attempts (docs/audit.md)
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise InputError(
            ex.workspace, "files", f"not code or config (checkpoints, caches and data are refused): {shown}"
        )
    diff = make_diff(recipe, ex.workspace)
    if not diff:
        raise InputError(ex.workspace, None, "no change against the shipped recipe: nothing to submit")
    patches_dir = Path(patches_dir)
    patch = patches_dir / f"{info['task']}-{info['name']}.diff"
    if patch.exists():
        raise InputError(
            patch,
            "--patches",
            f"a patch of this name exists already; submit to another folder (--patches DIR, e.g. "
            f"--patches {os.path.relpath(ex.dir / 'patches')}) or move it away",
        )
    with tempfile.TemporaryDirectory(prefix="replaykit-submit-") as tmp:
        staged = Path(tmp) / patch.name
        staged.write_text(diff)
        check = build_workspace(recipe, Path(tmp) / "ws", Path(tmp) / "ws.json", staged)
        if tree_files(Path(tmp) / "ws") != tree_files(ex.workspace):
            raise InputError(patch, None, "the patch does not reproduce the workspace")
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
        "submitted_unix": now,  # the budget's clock stops here (status)
        "probes": sum(r["kind"] == "probe" for r in receipts),
        # receipts whose lock was held by another (waited_s is 0.0 when it was taken at once)
        "probe_waits": sum(r["kind"] == "probe" and r.get("waited_s", 0) > 0 for r in receipts),
        "proxy_waits": sum(r["kind"] == "proxy" and r.get("waited_s", 0) > 0 for r in receipts),
        "lock_replaced": [r["id"] for r in receipts if r.get("lock_replaced")],
        # for the audit's agent behaviour (docs/audit.md): processes left running, refused files
        "alive_at_submit": alive_processes(ex.dir),
        "refusals": refusals(ex.dir),
        "tiny": bool(info.get("tiny", False)),
        "config_files": info.get("config_files"),
        "receipts": receipts,
    }
    atomic_write_json(ex.dir / "submission.json", doc)
    atomic_write_json(sidecar(patch), doc)
    return doc
