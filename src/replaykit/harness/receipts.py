"""Final summaries and completion receipts; status is derived from them, never stored.

A result directory is *complete* when ``summary.json`` parses and the empty ``.complete``
receipt, written after it, exists. No record carries a ``status: running`` field.
"""

from __future__ import annotations

import math
from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json

SUMMARY = "summary.json"
RECEIPT = ".complete"
SUMMARY_FIELDS = ("metric", "direction", "value", "uncertainty", "n", "diagnostics", "advisories")


def check_summary(summary: dict, where: str | Path = "summary") -> None:
    """Raise :class:`InputError` unless ``summary`` has the final-summary fields of SPEC."""
    for key in SUMMARY_FIELDS:
        if key not in summary:
            raise InputError(where, key, "required field missing")
    if summary["direction"] not in ("maximize", "minimize"):
        raise InputError(where, "direction", "must be 'maximize' or 'minimize'")
    value = summary["value"]
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
        raise InputError(where, "value", f"must be a finite number or null, got {value!r}")
    unc = summary["uncertainty"]
    if not isinstance(unc, dict) or "value" not in unc or "kind" not in unc:
        raise InputError(where, "uncertainty", "must be {value, kind}")


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    """Write ``summary.json`` atomically, then the empty ``.complete`` receipt (last)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    receipt = out_dir / RECEIPT
    if receipt.exists():
        receipt.unlink()
    check_summary(summary, out_dir / SUMMARY)
    atomic_write_json(out_dir / SUMMARY, summary)
    receipt.touch()
    return out_dir / SUMMARY


def status(out_dir: str | Path) -> str:
    """``complete`` (receipt present and summary whole) or ``incomplete``."""
    out_dir = Path(out_dir)
    if not (out_dir / RECEIPT).exists():
        return "incomplete"
    try:
        check_summary(read_json(out_dir / SUMMARY), out_dir / SUMMARY)
    except InputError:
        return "incomplete"
    return "complete"


def read_complete_summary(out_dir: str | Path) -> dict:
    """Read a summary whose receipt exists; raise :class:`InputError` otherwise."""
    out_dir = Path(out_dir)
    if status(out_dir) != "complete":
        raise InputError(out_dir / RECEIPT, None, "no completion receipt (summary missing or incomplete)")
    return read_json(out_dir / SUMMARY)
