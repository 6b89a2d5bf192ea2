"""``python -m replaykit audit``: the audit of a task's formal runs (:mod:`replaykit.harness.audit`)
with the task's plug-in and config resolved here (the harness knows no task)."""

from __future__ import annotations

from pathlib import Path

from .harness.audit import AuditInputs, audit_run, first_lines
from .harness.audit.checks import SECTIONS, read_json_or_none
from .harness.audit.items import ItemFields
from .isolation import Settings, final_paths


def inputs(
    task: str,
    run: str,
    *,
    results: str | Path = "results",
    data: dict | None = None,
    sandbox: dict | None = None,
    shipped_official: str | Path | None = None,
    fixed_start_scores: str | Path | None = None,
) -> AuditInputs:
    """The audit's inputs for ``results/<task>/<run>``: the plug-in's final and proxy split files
    and item fields, the final-split paths of the isolation plan (:func:`final_paths`), the
    shipped run of the same seed and the fixed-start reference (defaults: where the workflow
    writes them; ``data``: the config's data block, default the one the asset manifest records)."""
    from .tasks import get_task

    plugin, results = get_task(task), Path(results)
    assets = results / task / "assets"
    if data is None:  # the data block the assets were built from (the manifest records it)
        data = (read_json_or_none(assets / "manifest.json") or {}).get("config") or {}
    seed = run.rsplit("-seed", 1)[-1]
    fixed = results / task / "reference" / "fixed-start" / "final-scores"
    return AuditInputs(
        task=task,
        run=run,
        results=results,
        final_split=assets / plugin.split_file("final"),
        proxy_split=assets / plugin.split_file("proxy"),
        shipped_official=Path(shipped_official or results / task / f"shipped-seed{seed}" / "official.json"),
        fixed_start_scores=Path(fixed_start_scores) if fixed_start_scores else (fixed if fixed.is_dir() else None),
        has_fixed_reference=plugin.FIXED_START_REFERENCE,
        final_paths=tuple(
            final_paths(task, data or {}, Settings.from_config({**(sandbox or {}), "results_dir": results}))
        ),
        item_fields=ItemFields.of(plugin.FINAL_ITEM_FIELDS),
        data=data or {},
        workdir=results.parent,  # where the record's log paths and Snakemake's records are from
    )


def runs_to_show(task: str, run: str | None, results: str | Path = "results") -> list[str]:
    """The runs ``audit <task>`` prints: the one named, else the official run of
    ``final/summary.json`` first, then every other run with an ``official.json`` (none before
    any run has finished)."""
    if run:
        return [run]
    task_dir = Path(results) / task
    summary = read_json_or_none(task_dir / "final" / "summary.json") or {}
    first = (summary.get("official") or {}).get("run")
    runs = sorted(p.parent.name for p in task_dir.glob("*/official.json"))
    return [r for r in [first] if r in runs] + [r for r in runs if r != first]


def _recorded_sha256(task_dir: Path, run: str) -> str | None:
    """The SHA-256 ``final/summary.json`` recorded for ``run``'s ``audit.json`` (None when
    ``final/`` names no audit of that run)."""
    audit = (read_json_or_none(task_dir / "final" / "summary.json") or {}).get("audit") or {}
    for entry in [audit, *(audit.get("others") or [])]:
        if isinstance(entry, dict) and entry.get("run") == run and isinstance(entry.get("sha256"), str):
            return entry["sha256"]
    return None


def show(task: str, run: str | None, results: str | Path = "results") -> tuple[list[str], bool]:
    """Each run's four verdicts with their first evidence line (from its ``audit.json``, else
    computed now from the receipts with the default inputs) and whether any is confirmed, or
    an ``audit.json`` differs from the hash ``final/summary.json`` recorded of it (edited
    after ``final/`` was made: its verdicts are not shown as the audit's)."""
    from .harness.hashing import sha256_file

    lines, confirmed = [], False
    names = runs_to_show(task, run, results)
    if not names:  # as ``status``: not an error, and nothing confirmed
        return [f"{Path(results) / task}: nothing has run yet (no official.json): nothing to audit"], False
    for name in names:
        path = Path(results) / task / name / "audit.json"
        doc = read_json_or_none(path)
        source = str(path)
        recorded = _recorded_sha256(Path(results) / task, name)
        if doc is not None and recorded is not None and sha256_file(path) != recorded:
            lines.append(f"{task}/{name} ({path}):")
            lines.append(
                f"  {path}: edited since final/ was made (SHA-256 {sha256_file(path)[:12]}, "
                f"final/summary.json recorded {recorded[:12]}): its verdicts are not the audit's; "
                "rebuild it with snakemake (`--forcerun audit`)"
            )
            confirmed = True
            continue
        if doc is None:
            if run is None and not (Path(results) / task / name / "replay" / "record.json").is_file():
                continue
            doc = audit_run(inputs(task, name, results=results))
            source = f"{path} not written yet: computed now from the receipts"
        lines.append(f"{task}/{name} ({source}):")
        lines += [f"  {line}" for line in first_lines(doc)]
        confirmed |= any(doc[s]["verdict"] == "confirmed" for s in SECTIONS)
    return lines, confirmed
