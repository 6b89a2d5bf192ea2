"""The link from a candidate patch to the exploration that submitted it: the sidecar
``patches/<task>-<name>.exploration.json`` beside ``patches/<task>-<name>.diff`` (written by
:mod:`replaykit.exploration`, read into the replay record)."""

from __future__ import annotations

import math
from pathlib import Path

from .errors import InputError
from .fileio import read_json
from .hashing import sha256_file

PROXY_RECEIPT_KEYS = (
    "id",
    "checkpoint",
    "checkpoint_sha256",
    "metric",
    "value",
    "se",
    "n",
    "valid",
    "waited_s",
    "budget_used_s",
)


def sidecar(patch: str | Path) -> Path:
    """``patches/<task>-<name>.exploration.json`` beside ``patches/<task>-<name>.diff``."""
    return Path(patch).with_suffix(".exploration.json")


def read_sidecar(path: str | Path, patch_sha256: str | None) -> dict:
    """The sidecar at ``path``, checked: a JSON object whose ``patch_sha256`` is a string; when
    it names ``patch_sha256`` (the patch it sits beside), also the fields the replay record and
    the audit read: ``budget_s`` and ``budget_used_s`` (finite seconds, at least 0), ``probes``
    (a count) and ``receipts`` (a list of objects, each with a string ``kind``). Raises
    :class:`InputError` naming the sidecar and the field (before any training starts: the
    replay checks it with its other inputs)."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise InputError(path, None, f"not a JSON object but {type(doc).__name__}")
    if not isinstance(doc.get("patch_sha256"), str):
        raise InputError(path, "patch_sha256", "missing or not a string (the SHA-256 of the patch beside it)")
    if doc["patch_sha256"] != patch_sha256:
        return doc  # names another patch: recorded as not linked (the audit says inconclusive)
    for key in ("budget_s", "budget_used_s"):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise InputError(path, key, f"{value!r} is not a number of seconds (finite, at least 0)")
    if isinstance(doc.get("probes"), bool) or not isinstance(doc.get("probes"), int) or doc["probes"] < 0:
        raise InputError(path, "probes", f"{doc.get('probes')!r} is not a count of probes")
    if not isinstance(doc.get("receipts"), list):
        raise InputError(path, "receipts", f"{doc.get('receipts')!r} is not a list of receipts")
    for i, receipt in enumerate(doc["receipts"]):
        if not isinstance(receipt, dict) or not isinstance(receipt.get("kind"), str):
            raise InputError(path, f"receipts[{i}]", "not a receipt (an object with a string kind)")
    return doc


def exploration_of(patch: str | Path | None, patch_sha256: str | None) -> dict | None:
    """The exploration a candidate patch came from, for the replay record: its submission's
    name, directory, budget (s) and proxy receipts, when the sidecar names this patch's
    SHA-256; None for the shipped recipe or a hand-made patch; a mismatch is recorded. Raises
    :class:`InputError` for a malformed sidecar (:func:`read_sidecar`)."""
    if not patch or not sidecar(patch).is_file():
        return None
    doc = read_sidecar(sidecar(patch), patch_sha256)
    link = {
        "sidecar": str(sidecar(patch)),
        "sidecar_sha256": sha256_file(sidecar(patch)),
        "name": doc.get("name"),
        "exploration": doc.get("exploration"),
        "patch_sha256": doc.get("patch_sha256"),
        "linked": doc.get("patch_sha256") == patch_sha256,
    }
    if link["linked"]:
        link.update(
            budget_s=doc["budget_s"],
            budget_used_s=doc["budget_used_s"],
            probes=doc["probes"],
            proxy_receipts=[{k: r.get(k) for k in PROXY_RECEIPT_KEYS} for r in doc["receipts"] if r["kind"] == "proxy"],
        )
    return link
