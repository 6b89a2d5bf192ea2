"""Task plug-ins: each subpackage ``replaykit.tasks.<name>`` (but ``common``, the helpers
tasks share) is the plug-in of task ``<name>``; the members it defines, their meaning and the
defaults of the optional ones are declared in :mod:`.contract` (:class:`.contract.TaskPlugin`).

The registry is found, not kept: :data:`KNOWN` lists the subpackages (without importing
them) and :func:`get_task` loads one and checks it against the contract. A plug-in never
imports another plug-in; what two tasks share lives in :mod:`.common`.

Adding a task means adding such a subpackage, its recipe under ``recipes/<task>/`` and its
config block; the harness and the rules stay as they are.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from ..harness.errors import InputError
from .contract import TaskPlugin, load

SHARED = ("common",)  # subpackages that hold shared helpers, not a task


def _discover() -> tuple[str, ...]:
    """Names of the plug-in subpackages, sorted; none is imported."""
    return tuple(
        sorted(
            m.name
            for m in pkgutil.iter_modules(__path__)
            if m.ispkg and m.name not in SHARED and not m.name.startswith("_")
        )
    )


KNOWN = _discover()


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
    """The plug-in of task ``name``, checked against the contract.

    Raises:
        InputError: for an unknown task; :class:`.contract.ContractError` (an InputError)
            naming every missing or malformed member of an incomplete plug-in.
    """
    if name not in KNOWN:
        raise InputError("config", f"tasks.{name}", f"unknown task (known: {', '.join(KNOWN)})")
    return load(name, importlib.import_module(f"{__name__}.{name}"))


def builders() -> dict[str, str]:
    """Every fixed-start builder of every plug-in: builder name -> module (absolute).

    Raises:
        InputError: when two plug-ins declare the same builder name.
    """
    found: dict[str, str] = {}
    for name in KNOWN:
        plugin = get_task(name)
        for builder in plugin.FIXED_START_BUILDERS:
            if builder in found:
                raise InputError(
                    plugin.module.__file__,
                    "FIXED_START_BUILDERS",
                    f"builder {builder!r} is also declared by {found[builder]}",
                )
            found[builder] = plugin.builder_module(builder)
    return found
