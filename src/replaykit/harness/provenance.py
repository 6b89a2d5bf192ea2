"""Who made a file: project commit, library versions, machine."""

from __future__ import annotations

import platform
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
