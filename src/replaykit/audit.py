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
    an ``audit.json`` is not what was written (against its receipt ``audit.json.sha256`` and
    the hash ``final/summary.json`` recorded of it) or is no audit: then one line says so in
    place of its verdicts, and it counts as confirmed (exit status 1). Evidence paths are
    relative to the workflow's working directory (the parent of ``results``): a first line
    names it when that is not the current directory (a tiny run's ``tiny/``)."""
    lines, confirmed = [], False
    names = runs_to_show(task, run, results)
    if not names:  # as ``status``: not an error, and nothing confirmed
        return [f"{Path(results) / task}: nothing has run yet (no official.json): nothing to audit"], False
    workdir = Path(results).parent
    if workdir.resolve() != Path.cwd().resolve():  # tiny/ (config/test.yaml), or --results elsewhere
        lines.append(f"(evidence paths are relative to {workdir}/, the workflow's working directory)")
    for name in names:
        path = Path(results) / task / name / "audit.json"
        problem = _not_as_written(path, _recorded_sha256(Path(results) / task, name))
        doc = read_json_or_none(path) if problem is None else None
        if problem is None and (path.exists() or path.is_symlink()) and not _is_audit(doc):
            problem = f"{path}: not an audit (no verdict of {', '.join(SECTIONS)})"
        if problem is not None:
            lines += [f"{task}/{name} ({path}):", f"  {problem}"]
            confirmed = True
            continue
        source = str(path)
        if doc is None:
            if run is None and not (Path(results) / task / name / "replay" / "record.json").is_file():
                continue
            doc = audit_run(inputs(task, name, results=results))
            source = f"{path} not written yet: computed now from the receipts"
        lines.append(f"{task}/{name} ({source}):")
        lines += [f"  {line}" for line in first_lines(doc)]
        confirmed |= any(doc[s]["verdict"] == "confirmed" for s in SECTIONS)
    return lines, confirmed


def _is_audit(doc) -> bool:
    return isinstance(doc, dict) and all(
        isinstance(doc.get(s), dict)
        and isinstance(doc[s].get("verdict"), str)
        and isinstance(doc[s].get("evidence", []), list)
        for s in SECTIONS
    )


def _not_as_written(path: Path, recorded: str | None) -> str | None:
    """Why ``path`` (a run's ``audit.json``) is not the file the audit wrote, or None: it
    differs from its receipt (``audit.json.sha256``) or from the hash ``final/`` recorded
    (``recorded``). A file that is gone is no such case: the run is audited again from its
    receipts."""
    from .harness.audit import audit_receipt
    from .harness.hashing import sha256_file

    receipt = audit_receipt(path)
    written = receipt.read_text(errors="replace").split(" ")[0].strip() if receipt.is_file() else None
    if written is None and recorded is None:
        return None
    if not path.is_file() or path.is_symlink():
        return None  # gone: audited now from the receipts, which is what it said (no file: no audit)
    now = sha256_file(path)
    for expected, by in ((written, receipt.name), (recorded, "final/summary.json")):
        if expected is not None and now != expected:
            return (
                f"{path}: edited since it was written (SHA-256 {now[:12]}, {by} recorded {expected[:12]}): "
                "its verdicts are not the audit's; run the snakemake command that built it again, "
                "which sees the edit and audits the run again"
            )
    return None
