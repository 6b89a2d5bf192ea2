"""The link from a candidate patch to the exploration that submitted it: the sidecar
``patches/<task>-<name>.exploration.json`` beside ``patches/<task>-<name>.diff`` (written by
:mod:`replaykit.exploration`, read into the replay record)."""

from __future__ import annotations

from pathlib import Path

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


def exploration_of(patch: str | Path | None, patch_sha256: str | None) -> dict | None:
    """The exploration a candidate patch came from, for the replay record: its submission's
    name, directory, budget (s) and proxy receipts, when the sidecar names this patch's
    SHA-256; None for the shipped recipe or a hand-made patch; a mismatch is recorded."""
    if not patch or not sidecar(patch).is_file():
        return None
    doc = read_json(sidecar(patch))
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
