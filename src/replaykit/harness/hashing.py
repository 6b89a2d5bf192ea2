"""SHA-256 of files and directory trees: the lineage's fingerprints."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20  # bytes read at a time
_SKIP = {"__pycache__", ".snakemake_timestamp"}


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_files(root: str | Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every regular file under ``root`` (sorted).

    Skipped: temporary entries (names starting with ``.tmp``), ``__pycache__``, and the
    ``.snakemake_timestamp`` file Snakemake adds to ``directory()`` outputs.
    """
    root = Path(root)
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".tmp") or part in _SKIP for part in rel.parts):
            continue
        if path.is_file():
            out[rel.as_posix()] = sha256_file(path)
    return out


def sha256_tree(root: str | Path) -> str:
    """One SHA-256 for a directory: the hash of its sorted ``path\\0sha256\\n`` lines.

    A single file is hashed as a one-entry tree named by its file name.
    """
    root = Path(root)
    files = {root.name: sha256_file(root)} if root.is_file() else tree_files(root)
    listing = "".join(f"{name}\0{digest}\n" for name, digest in files.items())
    return sha256_bytes(listing.encode())
