"""Task plug-ins: each subpackage ``replaykit.tasks.<name>`` (but ``common``, the helpers
tasks share) is the plug-in of task ``<name>``; the members it defines, their meaning and the
defaults of the optional ones are declared in :mod:`.contract` (:class:`.contract.TaskPlugin`).

A plug-in may also live outside this package: an installed distribution registers it with an
entry point in group :data:`ENTRY_POINT_GROUP` (``replaykit.tasks``), named after the task,
whose value is the plug-in's module (``toy = replaykit_toy`` in ``entry_points.txt``). Such a
plug-in brings its config block's schema (``CONFIG_SCHEMA``, see :mod:`.contract`).

The registry is found, not kept: :data:`KNOWN` lists the subpackages and the entry points
(without importing either; not the names refused, :data:`REFUSED`) and :func:`get_task`
loads one and checks it against the contract.
A plug-in never imports another plug-in; what two tasks share lives in :mod:`.common`.

Adding a task means adding such a plug-in (a subpackage here, or an entry point), its recipe
under ``recipes/<task>/`` and its config block; the harness and the rules stay as they are.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import pkgutil
import re
import sys
from pathlib import Path

from ..harness.errors import InputError
from ..harness.sandbox import holds_working_directory
from .contract import TaskPlugin, load

SHARED = ("common",)  # subpackages that hold shared helpers, not a task
ENTRY_POINT_GROUP = "replaykit.tasks"  # entry points of plug-ins installed from elsewhere
# A task name is a config key, a path part (results/<task>/, recipes/<task>/) and an
# alternative of the rules' `task` wildcard: lower-case letters, digits and `_`.
NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
# Names a registered plug-in may not take: fixed path parts of the workflow beside results/<task>/
# and logs/<task>/ (rules/assets.smk: results/models/<model>, logs/models/<model>.log), and the
# `explore start` subcommand beside `explore <task>` (cli.py).
RESERVED = {
    "models": "results/models/ and logs/models/ hold the fixed starts (rules/assets.smk)",
    "start": "`replaykit explore start <task>` is a subcommand beside `explore <task>`",
}


def _builtin() -> tuple[str, ...]:
    """Names of the plug-in subpackages, sorted; none is imported."""
    return tuple(
        sorted(
            m.name
            for m in pkgutil.iter_modules(__path__)
            if m.ispkg and m.name not in SHARED and not m.name.startswith("_")
        )
    )


def _origin(ep) -> str:
    """``entry point <name> = <value> of distribution <dist>``, for error messages."""
    dist = getattr(ep, "dist", None)
    return f"entry point {ep.name} = {ep.value} of distribution {dist.name if dist else '?'}"


def _registered(builtin: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """The plug-ins registered by entry points of group :data:`ENTRY_POINT_GROUP`, read from
    the installed distributions' metadata (no plug-in is imported; about 10 ms).

    Returns ``(registered, refused)``: task name -> plug-in module, and task name -> why it
    cannot be loaded. Refused: a name that is not a task name (:data:`NAME_RE`), a name of
    :data:`RESERVED` (a fixed path part of the workflow), a name that a built-in plug-in has
    (no silent precedence: the built-in task is refused too, until that distribution is
    uninstalled or its entry point renamed), a name that two distributions register, or a
    value that is not a module name (``module:attribute``).
    """
    found: dict[str, list] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, []).append(ep)
    registered, refused = {}, {}
    for name, eps in sorted(found.items()):
        if not NAME_RE.fullmatch(name):
            refused[name] = f"{_origin(eps[0])}: not a task name ({NAME_RE.pattern})"
        elif name in RESERVED:
            refused[name] = f"{_origin(eps[0])}: {name!r} is reserved ({RESERVED[name]}); rename the entry point"
        elif name in builtin:
            refused[name] = (
                f"{_origin(eps[0])} registers a task of the same name as replaykit.tasks.{name}; "
                "uninstall that distribution or rename its entry point"
            )
        elif len(eps) > 1:
            refused[name] = f"registered twice: {_origin(eps[0])} and {_origin(eps[1])}; uninstall one"
        elif eps[0].attr or not all(part.isidentifier() for part in eps[0].module.split(".")):
            refused[name] = f"{_origin(eps[0])}: the value must be a module name (no ':attribute')"
        else:
            registered[name] = eps[0].module
    return registered, refused


def _discover() -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
    """``(known, registered, refused)``: the task names that may be configured, sorted
    (built-in and registered ones, none refused); the registered plug-ins' modules; why each
    refused name cannot load (a built-in task whose name an entry point also registers is
    refused, so it is not in ``known`` either)."""
    builtin = _builtin()
    registered, refused = _registered(builtin)
    return tuple(sorted(n for n in {*builtin, *registered} if n not in refused)), registered, refused


BUILTIN = _builtin()
KNOWN, REGISTERED, REFUSED = _discover()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def deferred(package: str, module: str, name: str):
    """The plug-in member ``name`` of ``module`` (relative to ``package``), imported at its
    first call, not when the workflow is parsed (every job re-parses it; the soup, digress
    and ddpo loaders and evaluators import torch, open_clip, diffusers or RDKit)."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module, package), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{module}.{name}`` of ``{package}``, imported when first called."
    return call


def check_data_keys(
    data: dict,
    *,
    embedded: tuple[str, ...],
    local: tuple[str, ...],
    counts: tuple[str, ...] = (),
    files: tuple[str, ...] = (),
) -> None:
    """The common part of a plug-in's ``check_data``: the keys its source needs
    (``source: local`` or embedded), positive integer ``counts``, and local ``files`` that
    exist. Raises ``KeyError(key)`` or ``ValueError("key: message")``."""
    from pathlib import Path

    is_local = data.get("source") == "local"
    for key in local if is_local else embedded:
        if key not in data:
            raise KeyError(key)
    for key in counts:
        if key in data and not (isinstance(data[key], int) and data[key] >= 1):
            raise ValueError(f"{key}: must be an integer >= 1, got {data[key]!r}")
    if is_local:
        for key in files:
            if not Path(data[key]).is_file():
                raise ValueError(f"{key}: file {data[key]!r} not found")


def write_splits(public_dir, hidden_dir, public: dict[str, list[dict]], hidden: dict[str, list[dict]]) -> None:
    """Replace ``public_dir`` and ``hidden_dir`` with fresh folders holding the given JSON-lines
    files (name -> rows), each written atomically."""
    import shutil
    from pathlib import Path

    from ..harness.fileio import atomic_write_jsonl

    for folder, files in ((Path(public_dir), public), (Path(hidden_dir), hidden)):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for name, rows in files.items():
            atomic_write_jsonl(folder / name, rows)


@functools.cache
def get_task(name: str) -> TaskPlugin:
    """The plug-in of task ``name`` (the subpackage ``replaykit.tasks.<name>``, or the module
    of the entry point ``<name>``), checked against the contract.

    Raises:
        InputError: for an unknown task, a refused one (:data:`REFUSED`: why, naming the
            distribution) and a registered plug-in that raises anything on import (naming
            its module file and the exception, in one line);
            :class:`.contract.ContractError` (an InputError) naming every missing or malformed
            member of an incomplete plug-in.
    """
    if name in REFUSED:
        raise InputError("config", f"tasks.{name}", REFUSED[name])
    if name not in KNOWN:
        raise InputError("config", f"tasks.{name}", f"unknown task (known: {', '.join(KNOWN)})")
    if name not in REGISTERED:
        return load(name, importlib.import_module(f"{__name__}.{name}"))
    module = REGISTERED[name]
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # a plug-in from elsewhere: SyntaxError, RuntimeError, ImportError, ...
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise InputError(
            _module_file(module),
            "import",
            f"plug-in {module} of task {name!r} ({_origin_of(name)}) does not import: {what}",
        ) from None
    return load(name, imported)


def _origin_of(name: str) -> str:
    """:func:`_origin` of the registered entry point ``name``."""
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    return _origin(next(iter(eps))) if eps else f"entry point {name} of group {ENTRY_POINT_GROUP}"


def _module_file(module: str) -> str:
    """The file of ``module`` (found, not imported, where its parent packages import), else
    its name."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except Exception:  # a parent package that does not import
        return module
    return spec.origin if spec is not None and spec.origin else module


def code_roots(name: str) -> list[Path]:
    """What a sandboxed replay of task ``name`` must see of its plug-in's code besides the
    frozen package (a recipe may import its plug-in's helpers, as soup's does): nothing for a
    built-in plug-in; for a registered one, the folder of its top-level package (or its
    module file), read from the imported plug-in.

    Raises:
        InputError: as :func:`get_task`; a plug-in folder that holds the working directory
            (it would show the hidden paths to the sandbox).
    """
    if name not in REGISTERED:
        return []
    top = sys.modules[get_task(name).module.__name__.split(".")[0]]
    paths = getattr(top, "__path__", None)
    roots = [Path(p) for p in paths] if paths else [Path(top.__file__)]
    for root in roots:
        if holds_working_directory(root):
            raise InputError(
                _origin_of(name),
                "package",
                f"its folder {root} holds the working directory {Path.cwd()}: showing it to the sandbox "
                "would show the hidden split too; install the plug-in outside the working directory",
            )
    return roots


def frozen_code():
    """The frozen code of this installation (:class:`replaykit.harness.frozen.FrozenCode`): the
    package and the plug-ins registered by entry points (:data:`REGISTERED`)."""
    from ..harness.frozen import FrozenCode

    return FrozenCode(REGISTERED)


def builders() -> dict[str, str]:
    """Every fixed-start builder: builder name -> module (absolute). The built-in plug-ins'
    come first (also one whose task name a distribution clashes with: its code is still the
    package's); a registered plug-in is read only after them, and one that is refused, does
    not load or declares a builder already found is skipped with one warning line on stderr,
    so a broken plug-in from elsewhere, configured or not, never takes the built-in builders
    down (the workflow refuses a configured one when it parses the config).

    Raises:
        InputError: when two built-in plug-ins declare the same builder name.
    """
    found: dict[str, str] = {}
    for name in BUILTIN:
        plugin = load(name, importlib.import_module(f"{__name__}.{name}"))
        for builder in plugin.FIXED_START_BUILDERS:
            if builder in found:
                raise InputError(
                    plugin.module.__file__,
                    "FIXED_START_BUILDERS",
                    f"builder {builder!r} is also declared by {found[builder]}",
                )
            found[builder] = plugin.builder_module(builder)
    for name, why in REFUSED.items():
        _warn(f"task plug-in {name!r} skipped: {why}")
    for name in REGISTERED:
        try:
            plugin = get_task(name)
        except InputError as exc:
            _warn(f"task plug-in {name!r} skipped: {exc}")
            continue
        for builder in plugin.FIXED_START_BUILDERS:
            if builder in found:
                _warn(
                    f"{plugin.module.__file__}: FIXED_START_BUILDERS: builder {builder!r} of task "
                    f"{name!r} skipped: also declared by {found[builder]}"
                )
            else:
                found[builder] = plugin.builder_module(builder)
    return found
