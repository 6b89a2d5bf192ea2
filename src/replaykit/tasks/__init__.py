"""Task plug-ins. Each task is a subpackage ``replaykit.tasks.<name>`` exposing:

* ``METRIC``: ``{"final": name, "proxy": name, "direction": "maximize"|"minimize"}``
  (names may contain ``{n}``, filled with the number of scored rows), optionally ``scale``
  (metric units per unit of a row's ``score``, e.g. 100 for percent) and ``uncertainty``
  (the kind of SE);
* ``check_data(data)`` - config check of ``tasks.<task>.data`` (``KeyError``/``ValueError``);
* ``build_assets(cfg, fixed_start, public_dir, hidden_dir) -> dict`` - writes the task's
  data (public: training + proxy; hidden: the final split) and returns extra manifest fields;
* ``validate(checkpoint, fixed_start, cfg) -> dict`` - the frozen loader's verdict
  ``{valid, reason, checks}``; never raises for a bad checkpoint;
* ``evaluate(checkpoint, fixed_start, items_file, metric, cfg) -> (summary, rows)`` - the
  frozen evaluator (``metric``: the name pattern from ``METRIC``); ``rows`` carry a unique
  ``id`` and a numeric ``score`` for paired statistics, optionally a ``weight`` (share of
  the metric) and a ``stratum`` (resampled within);
* ``split_file(split) -> str`` - where the proxy / final items lie under the assets folder;
* ``REPORT_DIAGNOSTICS`` - diagnostics shown as report columns;
* ``FINAL_SOURCES`` - keys of ``data`` whose local paths hold final-split items: the replay
  sandbox hides them (other existing paths in ``data`` are shown read-only);
* ``FINAL_PACKAGE_DATA`` - ``(package, path inside it)`` of installed data files that hold
  final-split items (soup: scikit-learn's digits): the replay sandbox hides them;
* ``FIXED_START_IS_DATA`` - True when the fixed start is raw data whose complement is the
  test split (digress's QM9): the replay sandbox does not show it;
* ``check_fixed_start(path)`` (optional) - workflow-start check of a local fixed start
  (soup: aligned ingredient heads; ddpo: the scheduler config), :class:`InputError`;
* ``FIXED_START_REFERENCE`` (optional, default True) - False when the fixed start cannot be
  scored by itself (``rm``: no reward head), so the final result has no fixed-start reference;
* ``ROW_CLUSTER`` (optional) - the row field naming a row's cluster when the task's uncertainty
  is clustered (``soup``: ``label``); the matched ablation's bootstrap draws whole clusters.

Adding a task means adding such a subpackage, its recipe under ``recipes/<task>/`` and its
config block; the harness and the rules stay as they are.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..harness.errors import InputError

KNOWN = ("dpo", "rm", "soup", "digress", "ddpo")


def check_data_keys(data: dict, *, embedded: tuple[str, ...], local: tuple[str, ...],
                    counts: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> None:
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


def get_task(name: str) -> ModuleType:
    """Import the plug-in of task ``name``; :class:`InputError` for an unknown task."""
    if name not in KNOWN:
        raise InputError("config", f"tasks.{name}", f"unknown task (known: {', '.join(KNOWN)})")
    return importlib.import_module(f"{__name__}.{name}")
