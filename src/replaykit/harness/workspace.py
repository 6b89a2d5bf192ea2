"""The editable workspace of a formal replay: a fresh copy of the shipped recipe plus an
optional candidate patch (a unified diff, ``-p1`` paths as ``git diff`` writes them).

A patch is refused, before anything runs, when it is empty or malformed, names a path that
is absolute, contains ``..``, leaves the workspace, or is a symlink, or when it does not apply.
The text check is a first line of defence only: after ``git apply`` the applied tree itself
is judged with ``lstat`` (:func:`special_entries`), so a mode line spelled in any way git
accepts (``120000 ``, ``0120000``, an ``index`` line's mode) cannot leave a symlink, FIFO or
device file in the workspace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from .errors import InputError
from .fileio import aside_dir, atomic_write_json, tree_paths
from .hashing import sha256_file, sha256_tree

_PATH = r'("(?:[^"\\]|\\.)*"|\S+)'  # a path, or a git C-quoted one with spaces / escapes
_HEADER_RE = re.compile(rf"^(?:---|\+\+\+) {_PATH}")
_GIT_RE = re.compile(rf"^diff --git {_PATH} {_PATH}$")
_RENAME_RE = re.compile(r"^(?:rename|copy) (?:from|to) (.+)$")
# git parses a mode with strtoul(..., 8) and accepts trailing whitespace (apply.c, parse_mode_line)
_MODE_RE = re.compile(r"^(?:new file mode|new mode|old mode|deleted file mode|index \S+)\s+\+?([0-7]+)\s*$")
_S_IFMT, _S_IFLNK = 0o170000, 0o120000


def _clean(path: str, prefixed: bool = True) -> str:
    """Undo git's C-style quoting, then drop the ``a/`` / ``b/`` prefix of -p1 paths."""
    if len(path) > 1 and path.startswith('"') and path.endswith('"'):
        path = (
            path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode("utf-8")
        )
    return path[2:] if prefixed and path.startswith(("a/", "b/")) else path


def patch_paths(patch: str | Path) -> list[str]:
    """Workspace-relative paths a unified diff touches.

    Raises:
        InputError: the file is empty, has no diff headers, or names a path that is
            absolute, contains ``..``, or is a symlink (mode 120000).
    """
    patch = Path(patch)
    text = patch.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise InputError(patch, None, "candidate patch is empty")
    paths: list[tuple[int, str, str]] = []  # (line, raw, cleaned)
    for number, line in enumerate(text.splitlines(), start=1):
        if m := _GIT_RE.match(line):
            paths += [(number, m.group(1), _clean(m.group(1))), (number, m.group(2), _clean(m.group(2)))]
        elif line.startswith(("--- ", "+++ ")) and (m := _HEADER_RE.match(line)):
            paths.append((number, m.group(1), _clean(m.group(1))))
        elif m := _RENAME_RE.match(line):
            paths.append((number, m.group(1), _clean(m.group(1), prefixed=False)))
        elif (m := _MODE_RE.match(line)) and int(m.group(1), 8) & _S_IFMT == _S_IFLNK:
            raise InputError(patch, f"line {number}", "symlinks are not allowed in a candidate patch")
    if not paths:
        raise InputError(patch, None, "not a unified diff (no ---/+++ headers)")
    out = []
    for number, raw, rel in paths:
        if raw == "/dev/null":
            continue
        pure = PurePosixPath(rel)
        if pure.is_absolute() or raw.startswith("/"):
            raise InputError(patch, f"line {number}", f"absolute path {raw!r} is outside the workspace")
        if ".." in pure.parts or rel.startswith("~"):
            raise InputError(patch, f"line {number}", f"path {raw!r} leaves the workspace")
        if rel not in out:
            out.append(rel)
    return out


def special_entries(root: str | Path) -> list[str]:
    """Paths under ``root`` (relative, sorted) that are neither regular files nor directories,
    judged with ``lstat``: symlinks, FIFOs, sockets, character and block devices; and the
    folders that cannot be listed (no permission, a path over ``PATH_MAX``), which cannot be
    checked. Walked at any depth (:func:`.fileio.tree_paths`: a candidate's 1,100 nested
    folders in its replay state had raised RecursionError in the replay driver at every later
    attempt)."""
    import stat

    root = Path(root)
    unlistable: list[Path] = []
    out = []
    for path in tree_paths(root, unlistable=unlistable):
        try:
            mode = path.lstat().st_mode
        except OSError:  # gone meanwhile, or its path too long to name
            out.append(path)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            out.append(path)
    return sorted({p.relative_to(root).as_posix() for p in [*out, *unlistable]})


def _git_apply(workspace: Path, patch: Path, check: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(workspace.parent.resolve()))
    args = ["git", "apply", "-p1", "--whitespace=nowarn"] + (["--check"] if check else []) + [str(patch.resolve())]
    return subprocess.run(args, cwd=workspace, env=env, capture_output=True, text=True)


def build_workspace(recipe: str | Path, out: str | Path, record: str | Path, patch: str | Path | None = None) -> dict:
    """Copy ``recipe`` to ``out``, apply ``patch`` (if any), and write the workspace record.

    The copy is assembled under a temporary name next to ``out`` and renamed into place only
    when the patch applied, so a refused patch leaves nothing behind.

    Returns:
        The record: recipe tree SHA-256, patch path and SHA-256 (``None`` without a patch),
        files the patch touches, and the resulting workspace tree SHA-256.

    Raises:
        InputError: the recipe is missing, or the patch is refused (see :func:`patch_paths`)
            or does not apply (git's message is included).
    """
    recipe, out, record = Path(recipe), Path(out), Path(record)
    if not recipe.is_dir():
        raise InputError(recipe, None, "shipped recipe directory not found")
    touched: list[str] = []
    patch_sha = None
    if patch:
        patch = Path(patch)
        if not patch.is_file():
            raise InputError(patch, None, "candidate patch file not found")
        touched = patch_paths(patch)
        patch_sha = sha256_file(patch)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = aside_dir(out, "tmp")
    try:
        tmp = staging / "ws"
        if special := special_entries(recipe):
            raise InputError(
                recipe, special[0], "not a regular file in the shipped recipe (only regular files are allowed)"
            )
        shutil.copytree(recipe, tmp, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if patch:
            for rel in touched:  # a symlink inside the recipe could still point outside
                resolved = (tmp / rel).resolve()
                if tmp.resolve() not in resolved.parents and resolved != tmp.resolve():
                    raise InputError(patch, rel, "resolves outside the workspace")
            result = _git_apply(tmp, patch, check=True)
            if result.returncode != 0:
                first = (result.stderr.strip().splitlines() or ["does not apply"])[0]
                raise InputError(patch, None, f"does not apply to {recipe}: {first}")
            _git_apply(tmp, patch, check=False).check_returncode()
        if special := special_entries(tmp):
            what = "a symlink" if (tmp / special[0]).is_symlink() else "not a regular file"
            raise InputError(
                patch if patch else recipe,
                special[0],
                f"{what} in the applied workspace (only regular files are allowed)",
            )
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    info = {
        "recipe": str(recipe),
        "recipe_sha256": sha256_tree(recipe),
        "patch": str(patch) if patch else None,
        "patch_sha256": patch_sha,
        "patch_touches": touched,
        "workspace": str(out),
        "workspace_sha256": sha256_tree(out),
    }
    atomic_write_json(record, info)
    return info
