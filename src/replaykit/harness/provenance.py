"""Who made a file: project commit, library versions, machine (:func:`fingerprint`)."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

LIBRARIES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "safetensors",
    "datasets",
    "snakemake",
    "lm_eval",
    "numpy",
    "gguf",
    "replaykit",
)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_commit(where: str | Path = ".") -> dict:
    """``{commit, dirty}`` of the project checkout (``commit: None`` outside a git work tree)."""

    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = run("rev-parse", "HEAD")
        dirty = bool(run("status", "--porcelain", "--untracked-files=no"))
    except (subprocess.CalledProcessError, FileNotFoundError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def library_versions(names=LIBRARIES) -> dict:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in names:
        try:
            out[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


FINGERPRINT_LIBRARIES = ("torch", "transformers", "trl", "diffusers", "peft")


@functools.cache
def fingerprint() -> dict:
    """The hardware and software a job ran on, so that a result from another machine is
    recognisably so: ``gpu`` (model names, ``nvidia-smi`` where it is installed, else ``[]``),
    ``driver`` (NVIDIA driver version or None), ``cuda`` (the CUDA version torch was built with,
    ``torch.version.cuda``, read without importing torch; None for a CPU build), the versions of
    ``torch``, ``transformers``, ``trl``, ``diffusers``, ``peft`` (None where not installed) and
    ``python``, ``cpu_count`` (CPUs this process may run on), ``bwrap`` (``bwrap --version``, None
    without it), ``kernel`` and ``hostname_sha256`` (SHA-256 of the host name: the same host is
    recognisable, its name is not written)."""
    gpu, driver = _nvidia()
    out = {"gpu": gpu, "driver": driver, "cuda": _torch_cuda()}
    for name in FINGERPRINT_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    out["cpu_count"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out["bwrap"] = _command_output(["bwrap", "--version"])
    out["kernel"] = platform.release()
    out["hostname_sha256"] = hashlib.sha256(socket.gethostname().encode()).hexdigest()
    return out


def _command_output(argv: list[str]) -> str | None:
    """What ``argv`` prints, stripped, or None when it is not installed, fails or prints nothing."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _nvidia() -> tuple[list[str], str | None]:
    """GPU model names and the driver version from ``nvidia-smi`` (``[]``, None without it)."""
    out = _command_output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]) or ""
    rows = [[c.strip() for c in r.split(",")] for r in out.splitlines() if "," in r]
    return [r[0] for r in rows], (rows[0][1] if rows else None)


def _torch_cuda() -> str | None:
    """``torch.version.cuda``: from the imported module, else read from ``torch/version.py``
    (importing torch takes seconds)."""
    if "torch" in sys.modules:
        return sys.modules["torch"].version.cuda
    try:
        files = metadata.files("torch") or []
    except metadata.PackageNotFoundError:
        return None
    version = next((f for f in files if str(f) == "torch/version.py"), None)
    if version is None:
        return None
    found = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", version.read_text(), re.M)
    return found.group(1) if found else None


WORKFLOW_ENV = "REPLAYKIT_WORKFLOW"  # set by rules/common.smk for every job (not a rule parameter)
TINY_ADVISORY = (
    "tiny run: the config sets `tiny: true` (config/test.yaml): the models are tiny or random and "
    "trained for a few steps, so these scores mean nothing"
)


def workflow_provenance() -> dict:
    """The invocation's config as rules/common.smk passes it to every job in
    ``REPLAYKIT_WORKFLOW``: ``config_files`` (path as given, SHA-256 of each, lowest priority
    first), ``command_line_keys`` (top-level keys given with ``--config``; values are not
    recorded: they may hold ``final_salt``) and ``tiny`` (bool). Outside a workflow job
    (``config_files: None``) nothing is known but ``tiny: False``."""
    import json
    import os

    try:
        doc = json.loads(os.environ.get(WORKFLOW_ENV) or "null")
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return {"config_files": None, "command_line_keys": None, "tiny": False}
    return {
        "config_files": doc.get("config_files"),
        "command_line_keys": doc.get("command_line_keys"),
        "tiny": bool(doc.get("tiny")),
    }


def workflow_config_paths() -> list[Path]:
    """The absolute paths of the config files of the invocation that started this job
    (``REPLAYKIT_WORKFLOW``'s ``config_paths``: the sandbox never shows them, as they may hold
    ``final_salt``); ``[]`` outside a workflow job."""
    import json

    try:
        doc = json.loads(os.environ.get(WORKFLOW_ENV) or "null")
    except ValueError:
        return []
    paths = doc.get("config_paths") if isinstance(doc, dict) else None
    return [Path(p) for p in paths if isinstance(p, str)] if isinstance(paths, list) else []
