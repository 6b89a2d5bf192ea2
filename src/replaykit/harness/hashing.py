"""SHA-256 of files and directory trees: the lineage's fingerprints."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from .fileio import tree_paths

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


def tree_files(
    root: str | Path, hash_file: Callable[[Path], str] = sha256_file, follow_links: bool = False
) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every regular file under ``root`` (sorted).

    Skipped: temporary entries (names starting with ``.tmp``), ``__pycache__``, and the
    ``.snakemake_timestamp`` file Snakemake adds to ``directory()`` outputs. ``hash_file``
    computes one file's hex SHA-256 (e.g. :meth:`HashCache.file`). ``follow_links``: descend
    into symbolic links to folders too (each real folder once: a link loop ends there).
    """
    root = Path(root)
    out: dict[str, str] = {}
    for path in sorted(_walk(root) if follow_links else tree_paths(root)):
        rel = path.relative_to(root)
        if any(part.startswith(".tmp") or part in _SKIP for part in rel.parts):
            continue
        if path.is_file():
            out[rel.as_posix()] = hash_file(path)
    return out


def _walk(root: Path):
    """Every path under ``root``, through symbolic links to folders, each real folder once."""
    seen = set()
    for folder, dirs, names in os.walk(root, followlinks=True):
        if os.path.realpath(folder) in seen:
            dirs[:] = []
            continue
        seen.add(os.path.realpath(folder))
        yield from (Path(folder) / n for n in (*dirs, *names))


def listing_sha256(files: dict[str, str]) -> str:
    """The tree hash of a ``{relative path: sha256}`` listing in :func:`tree_files`' order."""
    listing = "".join(f"{name}\0{digest}\n" for name, digest in files.items())
    return sha256_bytes(listing.encode())


def sha256_tree(root: str | Path, hash_file: Callable[[Path], str] = sha256_file) -> str:
    """One SHA-256 for a directory: the hash of its sorted ``path\\0sha256\\n`` lines.

    A single file is hashed as a one-entry tree named by its file name.
    """
    root = Path(root)
    files = {root.name: hash_file(root)} if root.is_file() else tree_files(root, hash_file)
    return listing_sha256(files)


class HashCache:
    """``(size, mtime_ns, ctime_ns, inode) -> sha256`` per file, kept in a JSON file, so that
    re-verifying large unchanged checkpoints does not re-read them.

    Any write to a file changes its ``ctime``, which no user call can set back, so a file
    changed in place (even with its size and ``mtime`` restored) is hashed again; a file
    replaced by another gets a new inode. The cache is a speed-up only: a missing or
    unreadable cache file means every file is hashed. ``save()`` writes it atomically and
    only when it changed.
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path is not None else None
        self.entries: dict[str, list] = {}
        self.changed = False
        self.hashed_bytes = 0  # bytes actually read (the cost of this verification)
        if self.path is not None and self.path.is_file():
            try:
                self.entries = json.loads(self.path.read_text())
            except ValueError:
                self.entries = {}

    def file(self, path: str | Path) -> str:
        """Hex SHA-256 of ``path``, read from the cache when its stat key is unchanged."""
        st = os.stat(path)
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        name = os.path.abspath(path)
        hit = self.entries.get(name)
        if hit is not None and hit[:4] == key:
            return hit[4]
        digest = sha256_file(path)
        self.hashed_bytes += st.st_size
        self.entries[name] = key + [digest]
        self.changed = True
        return digest

    def tree(self, root: str | Path) -> str:
        """:func:`sha256_tree` of ``root`` through the cache."""
        return sha256_tree(root, self.file)

    def save(self) -> None:
        if self.path is None or not self.changed or not self.path.parent.is_dir():
            return
        from .fileio import atomic_write_text

        live = {k: v for k, v in self.entries.items() if os.path.exists(k)}
        atomic_write_text(self.path, json.dumps(live, sort_keys=True))
        self.changed = False
