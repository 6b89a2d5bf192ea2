"""Final summaries and completion receipts; status is derived from them, never stored.

A result directory is *complete* when ``summary.json`` parses and the ``.complete`` receipt,
written after it, exists. No record carries a ``status: running`` field.

The receipt seals the folder: ``.complete`` lists the SHA-256 of every file in it
(``summary.json``, a score's ``rows.jsonl``, ``report.md``, a figure), in ``sha256sum``'s
format (``sha256sum -c .complete`` in the folder checks it). A JSON product that lies alone
(``official.json``, ``proxy.json``, ``audit.json``, the sandbox self-test) has its receipt
beside it, ``<name>.sha256``, in the same format. A consumer reads such a file only once it
agrees with its receipt (:func:`verified`, :func:`read_verified_json`,
:func:`read_complete_summary`), so a number edited by hand is refused, never carried into what
is built from it; ``status`` and the workflow's re-verification check the same receipts
(:func:`receipt_problem`, :mod:`.verify`). The hashes are unkeyed: whoever rewrites a file and
its receipt is found only by the checks further down the chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, atomic_write_text, read_json
from .hashing import sha256_file

SUMMARY = "summary.json"
RECEIPT = ".complete"
SIDECAR = ".sha256"  # <file>.sha256: the receipt of a JSON product that lies alone
SUMMARY_FIELDS = ("metric", "direction", "value", "uncertainty", "n", "diagnostics", "advisories")
INPUTS = "inputs_sha256"  # a product's summary: every file it was made from -> its SHA-256


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


def sealed_files(folder: str | Path) -> list[str]:
    """The files a folder's ``.complete`` lists: the name of every regular file in ``folder``
    (sorted), leaving out names that start with a dot (the receipt itself, Snakemake's
    ``.snakemake_timestamp``, temporary files)."""
    folder = Path(folder)
    return sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith("."))


def seal(folder: str | Path) -> Path:
    """Write ``folder``'s ``.complete`` (last): the SHA-256 of each of its files
    (:func:`sealed_files`), one ``<sha256>  <name>`` line each."""
    folder = Path(folder)
    lines = "".join(f"{sha256_file(folder / name)}  {name}\n" for name in sealed_files(folder))
    return atomic_write_text(folder / RECEIPT, lines)


def write_summary(out_dir: str | Path, summary: dict, inputs: dict | None = None) -> Path:
    """Write ``summary.json`` atomically, then the ``.complete`` receipt (last) sealing every
    file of ``out_dir`` (:func:`seal`: write the folder's other files first). ``inputs``: the
    files the summary was made from (:func:`~.fileio.recording_reads`), recorded as
    ``inputs_sha256``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    receipt = out_dir / RECEIPT
    if receipt.exists():
        receipt.unlink()
    check_summary(summary, out_dir / SUMMARY)
    if inputs is not None:
        summary[INPUTS] = dict(sorted(inputs.items()))
    atomic_write_json(out_dir / SUMMARY, summary)
    seal(out_dir)
    return out_dir / SUMMARY


def sidecar(path: str | Path) -> Path:
    """The receipt of a JSON product that lies alone: ``<path>.sha256``."""
    return Path(f"{path}{SIDECAR}")


def write_receipt(path: str | Path) -> Path:
    """Write ``path``'s receipt :func:`sidecar` (``sha256sum``'s format) after ``path``."""
    return atomic_write_text(sidecar(path), f"{sha256_file(path)}  {Path(path).name}\n")


def recorded_hashes(receipt: str | Path) -> dict[str, str]:
    """``{name: sha256}`` of a receipt in ``sha256sum``'s format (``{}`` when unreadable)."""
    try:
        text = Path(receipt).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        if name:
            out[name.lstrip("*")] = digest.strip()
    return out


# JSON products that lie alone, each vouched for by <name>.sha256 beside it; every other file
# by its folder's .complete (a sidecar beside a score's rows is no receipt of them)
ALONE = ("official.json", "proxy.json", "audit.json")
SELF_TESTS = "sandbox-self-test"  # results/sandbox-self-test/<task>.json: alone too


def expected_receipt(path: str | Path) -> Path:
    """Where ``path``'s receipt is: its :func:`sidecar` for a product that lies alone
    (:data:`ALONE`, a sandbox self-test), else its folder's ``.complete``."""
    path = Path(path)
    return sidecar(path) if path.name in ALONE or path.parent.name == SELF_TESTS else path.parent / RECEIPT


def receipt_of(path: str | Path) -> Path | None:
    """``path``'s receipt (:func:`expected_receipt`) when there is one, else None."""
    receipt = expected_receipt(path)
    return receipt if receipt.is_file() else None


def receipt_problem(path: str | Path, hash_file: Callable[[Path], str] = sha256_file) -> tuple[str, str] | None:
    """Why ``path`` is not what its receipt (:func:`receipt_of`) says: ``("tampered", why)`` for
    a file whose SHA-256 differs from the recorded one, or a file of a sealed folder that its
    ``.complete`` does not list (added afterwards); ``("stale", why)`` without a receipt, or
    with one that does not name the file (written before receipts named their files, or cut
    short); ``("missing", why)`` for a file its receipt names that is gone. None when it agrees.
    ``hash_file``: the hash function (:meth:`~.hashing.HashCache.file` in the workflow)."""
    path = Path(path)
    receipt = receipt_of(path)
    if receipt is None:
        return "stale", f"no receipt ({expected_receipt(path)} is not there)"
    recorded = recorded_hashes(receipt).get(path.name)
    if not path.is_file() or path.is_symlink():
        if recorded is not None:
            return "missing", f"gone, but its receipt {receipt} names it"
        if path.exists() or path.is_symlink():
            return "stale", f"not a regular file, and {receipt} names none"
        return None  # neither there nor named: nothing to vouch for (a reader says "file not found")
    if recorded is None:
        if receipt.name == RECEIPT and any(recorded_hashes(receipt)):
            return "tampered", f"added after its folder was sealed: {receipt} does not list it"
        return "stale", f"its receipt {receipt} records no SHA-256 of it (written before receipts named their files)"
    actual = hash_file(path)
    if actual != recorded:
        return "tampered", f"edited since it was written (SHA-256 {actual[:12]}, {receipt} recorded {recorded[:12]})"
    return None


def folder_problem(folder: str | Path, hash_file: Callable[[Path], str] = sha256_file) -> tuple[str, str, str] | None:
    """``(file, state, why)`` of the first file of a sealed ``folder`` that disagrees with its
    ``.complete`` (:func:`receipt_problem`: each file it lists and each file in the folder), or
    None when all agree. A receipt that lists nothing (written before receipts listed files)
    is ``stale``."""
    folder = Path(folder)
    listed = recorded_hashes(folder / RECEIPT)
    if not listed:
        return str(folder / RECEIPT), "stale", "lists no file (written before receipts named their files)"
    for name in sorted(set(listed) | set(sealed_files(folder))):
        problem = receipt_problem(folder / name, hash_file)
        if problem:
            return (str(folder / name), *problem)
    return None


def verified(path: str | Path) -> Path:
    """``path``, once it agrees with its receipt (:func:`receipt_problem`). Raises
    :class:`InputError` naming the file and what differs (a consumer never builds on an edited
    file; a plain re-run of the workflow makes it again)."""
    problem = receipt_problem(path)
    if problem:
        raise InputError(
            path, None, f"{problem[0]}: {problem[1]}; not used: a plain re-run of the workflow makes it again"
        )
    return Path(path)


def read_verified_json(path: str | Path, required=()) -> dict:
    """:func:`~.fileio.read_json` of a file that agrees with its receipt (:func:`verified`)."""
    if not Path(path).exists():
        return read_json(path, required)  # "file not found", as before
    return read_json(verified(path), required)


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
    """Read a summary whose receipt exists and vouches for it; raise :class:`InputError` otherwise."""
    out_dir = Path(out_dir)
    if status(out_dir) != "complete":
        raise InputError(out_dir / RECEIPT, None, "no completion receipt (summary missing or incomplete)")
    return read_json(verified(out_dir / SUMMARY))
