"""The frozen code (harness, loaders, evaluators: the ``replaykit`` package and the task
plug-ins registered by entry points) verified by hash.

``results/frozen-code.json`` (rule ``frozen_code``) records the SHA-256 of every file of the
package, and of every file of each registered plug-in's top-level package under the key
``plugin:<task>/<path>``, when the workflow runs (:class:`FrozenCode`; the caller names the
registered plug-ins: :func:`replaykit.tasks.frozen_code`); the replay driver checks them before and
after the candidate's training (a change is a :class:`FrozenCodeChanged` error, not an
advisory), and validation and scoring refuse to run when they differ from the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json
from .hashing import sha256_bytes, sha256_file, tree_files
from .sandbox import holds_working_directory

PLUGIN = "plugin:"  # record keys of a registered plug-in's files: plugin:<task>/<path>


class FrozenCodeChanged(RuntimeError):
    """A file of the frozen package differs from its record (message names the file)."""


def package_dir() -> Path:
    import replaykit

    return Path(replaykit.__file__).resolve().parent


def _on_disk(path: Path) -> Path | None:
    """``path``, or the archive holding it (a plug-in imported from a zip file), or None."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.resolve() if candidate == path or candidate.is_file() else None
    return None


class FrozenCode:
    """The frozen code of one installation: the ``replaykit`` package and the plug-ins
    registered by entry points (``registered``: task -> module, as
    :data:`replaykit.tasks.REGISTERED`)."""

    def __init__(self, registered: Mapping[str, str]):
        self.registered = dict(registered)

    def plugin_roots(self) -> dict[str, list[Path]]:
        """``{task: [folder or file, ...]}``: the top-level package of each registered plug-in --
        its folder (every folder of a namespace package), its module file, or the zip archive
        it is imported from -- found without importing it. Left out: a plug-in whose entry
        module is not there (configuring its task fails, naming it:
        :func:`replaykit.tasks.get_task`) and one whose folder holds the working directory (its
        task is refused: :func:`replaykit.tasks.code_roots`)."""
        roots = {}
        for name, module in sorted(self.registered.items()):
            found = [p for p in dict.fromkeys(_module_roots(module)) if p is not None]
            if found and not any(holds_working_directory(p) for p in found):
                roots[name] = found
        return roots

    def _plugin_files(self, hash_file=sha256_file) -> dict[str, tuple[Path, str]]:
        """``{record key: (file, hash_file(file))}`` of every registered plug-in (see
        :meth:`files`): a folder's files through symbolic links too; a module or an archive by
        itself."""
        out = {}
        for name, roots in self.plugin_roots().items():
            for i, root in enumerate(roots):
                prefix = f"{PLUGIN}{name}/" + (f"{i}/" if len(roots) > 1 else "")
                found = (
                    tree_files(root, hash_file, follow_links=True) if root.is_dir() else {root.name: hash_file(root)}
                )
                for rel, sha in found.items():
                    out[prefix + rel] = (root / rel if root.is_dir() else root, sha)
        return out

    def files(self) -> dict[str, str]:
        """``{key: sha256}`` of every file of ``replaykit`` (key: its path relative to the
        package) and of each registered plug-in (key: ``plugin:<task>/<path relative to its
        folder>``, or ``plugin:<task>/<file name>`` for a module or an archive; with ``<i>/``
        after the task for the i-th folder of a namespace package); no caches."""
        files = tree_files(package_dir())
        files.update({key: sha for key, (_, sha) in self._plugin_files().items()})
        return files

    def paths(self) -> list[Path]:
        """Every file :meth:`files` hashes, listed without reading them (rule ``frozen_code``'s
        input)."""
        unread = lambda path: ""  # noqa: E731
        package = [package_dir() / rel for rel in tree_files(package_dir(), unread)]
        return package + [path for path, _ in self._plugin_files(unread).values()]

    def locate(self, key: str) -> Path:
        """The file behind a record key of :meth:`files` (for messages)."""
        if key.startswith(PLUGIN):
            found = self._plugin_files().get(key)
            return found[0] if found else Path(key)
        return package_dir() / key

    def record(self) -> dict:
        files = self.files()
        plugins = {name: [str(root) for root in roots] for name, roots in self.plugin_roots().items()}
        return {"package": str(package_dir()), "plugins": plugins, "sha256": digest(files), "files": files}

    def write_record(self, out: str | Path) -> dict:
        """Write :meth:`record` (every file's SHA-256) to ``out``; return it."""
        doc = self.record()
        atomic_write_json(out, doc)
        return doc

    def verify(self, record_path: str | Path) -> str:
        """Check the code against ``record_path``; return its digest.

        Raises:
            InputError: naming the record and the first differing file, or the plug-in that is
                no longer registered.
        """
        recorded = read_json(record_path, required=("files",))
        expected = recorded["files"]
        diff = first_difference(expected, self.files())
        if diff is None:
            return digest(expected)
        key, what = diff
        name = key[len(PLUGIN) :].split("/")[0] if key.startswith(PLUGIN) else None
        if name is not None and name not in self.plugin_roots():
            raise InputError(
                record_path,
                f"plugins.{name}",
                f"the plug-in of task {name} ({(recorded.get('plugins') or {}).get(name, '?')}) is no longer "
                "registered or found; reinstall it, or rebuild the record with --forcerun frozen_code",
            )
        raise InputError(
            self.locate(key),
            "sha256",
            f"frozen code differs from {record_path} ({what}); "
            "restore it, or rebuild the record with --forcerun frozen_code",
        )


def _module_roots(module: str) -> list[Path | None]:
    """Where the top-level package of ``module`` is on disk (found, not imported): its folders,
    its file or the archive holding it; ``[]`` when it or its entry module is missing."""
    import importlib.util

    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if not spec.submodule_search_locations:
        return [_on_disk(Path(spec.origin))] if spec.origin else []
    folders = [Path(p) for p in spec.submodule_search_locations]
    dirs = [f for f in folders if f.is_dir()]  # (none: the package is in an archive)
    entry = Path(*rest) if rest else None
    if entry and dirs and not any((f / entry).is_dir() or (f / f"{entry}.py").is_file() for f in dirs):
        return []  # no such entry module
    return [_on_disk(f) for f in folders]


def digest(files: dict[str, str]) -> str:
    """One SHA-256 over the sorted ``path\\0sha256`` lines (as :func:`sha256_tree`)."""
    return sha256_bytes("".join(f"{k}\0{v}\n" for k, v in sorted(files.items())).encode())


def first_difference(expected: dict[str, str], actual: dict[str, str]) -> tuple[str, str] | None:
    """``(key, what)`` of the first file that was changed, added or removed, or None."""
    for key in sorted(set(expected) | set(actual)):
        if key not in actual:
            return key, "removed"
        if key not in expected:
            return key, "added"
        if expected[key] != actual[key]:
            return key, f"changed (sha256 {actual[key][:12]}, recorded {expected[key][:12]})"
    return None
