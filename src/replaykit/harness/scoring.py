"""The frozen side of a run: validate a published checkpoint and score it on a split.

Both steps run the frozen package only: scoring keeps the run's workspace off ``sys.path``
(:func:`assert_workspace_free`), and both verify the frozen-code record first when given one.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, atomic_write_jsonl, read_json
from .hashing import listing_sha256, sha256_file, sha256_tree, tree_files
from .provenance import TINY_ADVISORY, fingerprint, utc_now, workflow_provenance


def assert_workspace_free(workspace: str | Path | None) -> None:
    """Isolation rule: scoring has the workspace off ``sys.path`` and imports nothing from it.

    Raises RuntimeError naming the offending path or module.
    """
    if not workspace:
        return
    root = Path(workspace).resolve()

    def inside(path: str) -> bool:
        resolved = Path(path or ".").resolve()
        return resolved == root or root in resolved.parents

    bad = [p for p in sys.path if inside(p)]
    loaded = [m for m, mod in list(sys.modules.items()) if getattr(mod, "__file__", None) and inside(mod.__file__)]
    if bad or loaded:
        raise RuntimeError(f"scoring must not see the workspace {root}: sys.path={bad} modules={loaded}")


def verify_frozen(code, frozen_record: str | Path | None) -> str | None:
    """The frozen code's SHA-256 after checking ``code`` (a :class:`.frozen.FrozenCode`) against
    ``frozen_record`` (None without one). Raises :class:`InputError` naming the first file
    that differs."""
    return code.verify(frozen_record) if frozen_record else None


def validate_checkpoint(
    *,
    plugin,
    checkpoint: str | Path,
    fixed_start: str | Path,
    cfg: dict,
    record: str | Path | None,
    frozen_record: str | Path | None,
    frozen,
    out: str | Path,
    slot=None,
) -> dict:
    """The frozen loader's verdict on one checkpoint, written to ``out`` (a validation marker);
    ``plugin`` is the task's plug-in (:class:`replaykit.tasks.contract.TaskPlugin`: ``validate``);
    ``frozen`` the installation's frozen code (:class:`.frozen.FrozenCode`), checked against
    ``frozen_record`` first.

    With the replay ``record``, the checkpoint must be the one the replay published: a tree
    hash that differs from the recorded one makes it invalid without loading it, and so does
    the record's ``late`` (the replay driver saw it published or changed after the internal
    deadline + export reserve: not eligible for the official result). ``slot``: the
    job's :class:`~.slots.GpuSlot`, let go before the marker is written and recorded in it as
    ``gpu_slot``. Returns the marker. Raises :class:`InputError` when the record does not list the checkpoint, and what
    :func:`verify_frozen` raises.
    """
    started = time.time()
    frozen_sha = verify_frozen(frozen, frozen_record)
    checkpoint = Path(checkpoint)
    progress = int(checkpoint.name.split("-")[-1])
    files = tree_files(checkpoint) if checkpoint.is_dir() else {}
    actual = listing_sha256(files)
    record_doc = read_json(record, required=("checkpoints",)) if record else {}
    recorded = late = None
    if record:  # the receipt: the checkpoint must be the one the replay published
        entry = record_doc["checkpoints"].get(str(progress))
        if not isinstance(entry, dict) or "sha256" not in entry:
            raise InputError(record, f"checkpoints.{progress}.sha256", "not in the replay record")
        recorded, late = entry["sha256"], entry.get("late")
    if recorded is not None and actual != recorded:
        verdict = {
            "valid": False,
            "reason": f"checkpoint changed after publication: tree sha256 {actual} "
            f"differs from {recorded} in its replay record {record}",
        }
    elif late:
        verdict = {"valid": False, "reason": f"late: {late} (the replay driver's observation, {record})"}
    else:
        verdict = plugin.validate(checkpoint, fixed_start, cfg)
    verdict["isolation"] = record_doc.get("isolation", "unknown")
    verdict["tiny"] = bool(record_doc.get("tiny", False)) or workflow_provenance()["tiny"]
    verdict["frozen_code_sha256"] = frozen_sha
    verdict.update(
        {
            "checkpoint": str(checkpoint),
            "progress": progress,
            "seconds": time.time() - started,
            "validated_at": utc_now(),
            "files": files,
            "checkpoint_sha256": actual,
            "record": record or None,
            "recorded_sha256": recorded,
        }
    )
    if slot is not None:
        verdict["gpu_slot"] = slot.release()
    atomic_write_json(out, verdict)
    return verdict


def read_marker(marker: str | Path | None) -> dict:
    """The validation marker at ``marker``; without one, the fixed start's (valid).

    Raises :class:`InputError` when it lacks ``valid``/``reason`` or ``valid`` is not a bool.
    """
    doc = read_json(marker, required=("valid", "reason")) if marker else {"valid": True, "reason": "fixed start"}
    if not isinstance(doc["valid"], bool):
        raise InputError(marker, "valid", f"must be true or false, got {doc['valid']!r}")
    return doc


def unscored_summary(plugin, metric: str, reason: str) -> dict:
    """The summary of a checkpoint that is not scored because its marker says it is invalid.

    ``metric`` is the task's metric name template; fields other than ``n`` that the evaluator
    would fill (soup's ``{dataset}``) read ``unscored``.
    """
    # names may hold other fields the evaluator fills (soup's {dataset}): keep those as they are
    name = metric.format_map(collections.defaultdict(lambda: "unscored", n=0))
    return {
        "metric": name,
        "direction": plugin.METRIC["direction"],
        "value": None,
        "uncertainty": {"value": None, "kind": plugin.METRIC["uncertainty"]},
        "n": 0,
        "diagnostics": {},
        "advisories": [f"not scored: checkpoint invalid ({reason})"],
    }


def score(
    *,
    plugin,
    split: str,
    manifest: str | Path,
    fixed_start: str | Path,
    items: str | Path,
    out_dir: str | Path,
    cfg: dict,
    checkpoint: str | Path | None = None,
    marker: str | Path | None = None,
    workspace: str | Path | None = None,
    public: str | Path | None = None,
    frozen_record: str | Path | None = None,
    frozen=None,
    slot=None,
) -> dict:
    """Score ``checkpoint`` (None: the fixed start) on the ``proxy`` or ``final`` split with
    the task's plug-in (:class:`replaykit.tasks.contract.TaskPlugin`: ``evaluate``, ``METRIC``);
    ``frozen`` (:class:`.frozen.FrozenCode`) is checked against ``frozen_record`` when given.

    Checks that the workspace is off ``sys.path`` (before and after evaluating), verifies the
    frozen package and the split's assets (and the public split too when ``public`` is given:
    a reference that selects on it), then writes ``rows.jsonl`` and ``summary.json`` with its
    receipts to ``out_dir``, ``.complete`` last. A checkpoint whose marker is invalid is not
    evaluated: its summary says why. ``slot``: the job's :class:`~.slots.GpuSlot`, let go once
    the evaluator is done and recorded as ``gpu_slot``. Returns the summary. Raises :class:`InputError` for bad
    assets or marker, RuntimeError when the workspace is visible, and what
    :func:`verify_frozen` raises.
    """
    from .assets import verify_assets
    from .receipts import write_summary

    assert_workspace_free(workspace)
    frozen_sha = verify_frozen(frozen, frozen_record)
    verify_assets(manifest, fixed_start, split={"final": "hidden", "proxy": "public"}[split])
    cfg = dict(cfg)
    if public:  # a fixed-start reference that picks among the fixed assets on the public split (soup)
        verify_assets(manifest, fixed_start, split="public")
        cfg["public_dir"] = public
    metric = plugin.METRIC[split]
    out_dir = Path(out_dir)
    marker_doc = read_marker(marker)
    if not marker_doc["valid"]:
        summary, rows = unscored_summary(plugin, metric, marker_doc["reason"]), []
    else:
        summary, rows = plugin.evaluate(checkpoint or None, fixed_start, items, metric, cfg)
        assert_workspace_free(workspace)
    if marker_doc.get("isolation") == "none":
        from .sandbox import NO_ISOLATION_ADVISORY

        summary["advisories"] = [NO_ISOLATION_ADVISORY, *summary.get("advisories", [])]
    summary["tiny"] = bool(marker_doc.get("tiny", False)) or workflow_provenance()["tiny"]
    if summary["tiny"]:  # after the isolation's advisory
        summary.setdefault("advisories", []).insert(int(marker_doc.get("isolation") == "none"), TINY_ADVISORY)
    summary["split"] = split
    summary["checkpoint"] = checkpoint or None
    # receipts: what this score was made from (checked again before an official uses it)
    summary["checkpoint_sha256"] = sha256_tree(checkpoint) if checkpoint else None
    summary["marker_sha256"] = sha256_file(marker) if marker else None
    summary["frozen_code_sha256"] = frozen_sha
    summary["items_sha256"] = sha256_file(items)
    summary["scored_at"] = utc_now()
    if slot is not None:
        summary["gpu_slot"] = slot.release()
    summary["fingerprint"] = fingerprint()  # the machine and software that scored it
    (out_dir / ".complete").unlink(missing_ok=True)  # receipts come last: none while rewriting
    atomic_write_jsonl(out_dir / "rows.jsonl", rows)
    write_summary(out_dir, summary)
    return summary
