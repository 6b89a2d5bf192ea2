"""The frozen code (harness, loaders, evaluators: the ``replaykit`` package) verified by hash.

``results/frozen-code.json`` (rule ``frozen_code``) records the SHA-256 of every file of the
package when the workflow runs; the replay driver checks the package before and after the
candidate's training (a change is a :class:`FrozenCodeChanged` error, not an advisory), and
validation and scoring refuse to run when the package differs from the record.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json
from .hashing import sha256_bytes, tree_files


class FrozenCodeChanged(RuntimeError):
    """A file of the frozen package differs from its record (message names the file)."""


def package_dir() -> Path:
    import replaykit

    return Path(replaykit.__file__).resolve().parent


def frozen_files() -> dict[str, str]:
    """``{path relative to the package: sha256}`` of every file of ``replaykit`` (no caches)."""
    return tree_files(package_dir())


def digest(files: dict[str, str]) -> str:
    """One SHA-256 over the sorted ``path\\0sha256`` lines (as :func:`sha256_tree`)."""
    return sha256_bytes("".join(f"{k}\0{v}\n" for k, v in sorted(files.items())).encode())


def record() -> dict:
    files = frozen_files()
    return {"package": str(package_dir()), "sha256": digest(files), "files": files}


def write_record(out: str | Path) -> dict:
    """Write the frozen package's :func:`record` (its files' SHA-256) to ``out``; return it."""
    doc = record()
    atomic_write_json(out, doc)
    return doc


def first_difference(expected: dict[str, str], actual: dict[str, str]) -> str | None:
    """A one-line description of the first file that was changed, added or removed."""
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            return f"{rel}: removed"
        if rel not in expected:
            return f"{rel}: added"
        if expected[rel] != actual[rel]:
            return f"{rel}: changed (sha256 {actual[rel][:12]}, recorded {expected[rel][:12]})"
    return None


def verify(record_path: str | Path) -> str:
    """Check the package against ``record_path``; return its digest.

    Raises:
        InputError: naming the record and the first differing package file.
    """
    expected = read_json(record_path, required=("files",))["files"]
    diff = first_difference(expected, frozen_files())
    if diff is not None:
        raise InputError(
            package_dir() / diff.split(":")[0],
            "sha256",
            f"frozen code differs from {record_path} ({diff.split(': ', 1)[1]}); "
            "restore it, or rebuild the record with --forcerun frozen_code",
        )
    return digest(expected)
