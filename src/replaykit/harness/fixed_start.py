"""Where a fixed start's files live beside it, and the PyPI wheels fixed starts come from
(task-agnostic: :mod:`replaykit.models` builds fixed starts with them, plug-ins read them).

``results/models/<model>/`` is the fixed start; beside it ``<model>.manifest.json`` (its
source and every file's SHA-256) and ``<model>.private.json`` (what its builder knows of the
final split, kept out of the fixed start so that a replay never sees it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .errors import InputError
from .hashing import sha256_file


def fetch_wheel(name: str, version: str, sha256: str | None, dest: str | Path) -> Path:
    """``pip download --no-deps name==version`` into ``dest``; check its SHA-256 if pinned.

    Raises :class:`InputError` when pip fails or the hash differs from the pin.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(dest),
        f"{name}=={version}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise InputError(f"{name}=={version}", "wheel", f"pip download failed: {tail}")
    wheels = sorted(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        raise InputError(dest, "wheel", f"no wheel for {name}=={version} after pip download")
    wheel = wheels[0]
    digest = sha256_file(wheel)
    if sha256 and digest != sha256:
        raise InputError(wheel, "sha256", f"is {digest}, config pins {sha256}")
    return wheel


def private_path(fixed_start: str | Path) -> Path:
    """``<fixed start>.private.json``: what a builder knows of the final split (soup's held-out
    images), beside the fixed start and outside it, so a replay never sees it."""
    return Path(str(fixed_start).rstrip("/") + ".private.json")


def source_of(fixed_start: str | Path) -> dict | None:
    """The wheel provenance recorded next to a built fixed start (``<dir>.manifest.json``)."""
    path = Path(str(fixed_start).rstrip("/") + ".manifest.json")
    return json.loads(path.read_text())["source"] if path.exists() else None
