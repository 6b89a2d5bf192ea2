"""The frozen code (harness, loaders, evaluators: the ``replaykit`` package and the task
plug-ins registered by entry points) verified by hash.

``results/frozen-code.json`` (rule ``frozen_code``) records the SHA-256 of every file of the
package, and of every file of each registered plug-in's top-level package under the key
``plugin:<task>/<path>``, when the workflow runs; the replay driver checks them before and
after the candidate's training (a change is a :class:`FrozenCodeChanged` error, not an
advisory), and validation and scoring refuse to run when they differ from the record.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json
from .hashing import sha256_bytes, sha256_file, tree_files

PLUGIN = "plugin:"  # record keys of a registered plug-in's files: plugin:<task>/<path>


class FrozenCodeChanged(RuntimeError):
    """A file of the frozen package differs from its record (message names the file)."""


def package_dir() -> Path:
    import replaykit

    return Path(replaykit.__file__).resolve().parent


def plugin_roots() -> dict[str, Path]:
    """``{task: folder (or module file)}`` of the top-level package of each plug-in registered
    by an entry point (:data:`replaykit.tasks.REGISTERED`), found without importing it; a
    plug-in whose package cannot be found is left out (configuring its task fails anyway,
    naming it: :func:`replaykit.tasks.get_task`)."""
    import importlib.util

    from ..tasks import REGISTERED

    roots = {}
    for name, module in sorted(REGISTERED.items()):
        try:
            spec = importlib.util.find_spec(module.split(".")[0])
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            roots[name] = Path(next(iter(spec.submodule_search_locations))).resolve()
        elif spec is not None and spec.origin and Path(spec.origin).is_file():
            roots[name] = Path(spec.origin).resolve()
    return roots


def frozen_files() -> dict[str, str]:
    """``{key: sha256}`` of every file of ``replaykit`` (key: its path relative to the
    package) and of each registered plug-in (key: ``plugin:<task>/<path relative to its
    package folder>``, or ``plugin:<task>/<file name>`` for a one-module plug-in); no caches."""
    files = tree_files(package_dir())
    for name, root in plugin_roots().items():
        found = tree_files(root) if root.is_dir() else {root.name: sha256_file(root)}
        files.update({f"{PLUGIN}{name}/{rel}": sha for rel, sha in found.items()})
    return files


def locate(key: str) -> Path:
    """The file behind a record key of :func:`frozen_files` (for messages)."""
    if key.startswith(PLUGIN):
        name, _, rel = key[len(PLUGIN) :].partition("/")
        root = plugin_roots().get(name)
        if root is None:
            return Path(key)
        return root / rel if root.is_dir() else root
    return package_dir() / key


def digest(files: dict[str, str]) -> str:
    """One SHA-256 over the sorted ``path\\0sha256`` lines (as :func:`sha256_tree`)."""
    return sha256_bytes("".join(f"{k}\0{v}\n" for k, v in sorted(files.items())).encode())


def record() -> dict:
    files = frozen_files()
    plugins = {name: str(root) for name, root in plugin_roots().items()}
    return {"package": str(package_dir()), "plugins": plugins, "sha256": digest(files), "files": files}


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
        key, what = diff.split(": ", 1)  # a plug-in key holds ':' but never ': '
        raise InputError(
            locate(key),
            "sha256",
            f"frozen code differs from {record_path} ({what}); "
            "restore it, or rebuild the record with --forcerun frozen_code",
        )
    return digest(expected)
