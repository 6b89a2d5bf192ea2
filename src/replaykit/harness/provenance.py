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
