"""The task's final result on disk: ``final/report.md`` and, last, ``summary.json`` with its
``.complete`` receipt (the numbers: :func:`replaykit.harness.results.final_summary`)."""

from __future__ import annotations

from pathlib import Path

from ..harness.audit import audit_summary
from ..harness.fileio import atomic_write_text, recording_reads
from ..harness.hashing import sha256_file
from ..harness.receipts import write_summary
from ..harness.results import final_summary
from . import templates


def render_report(task: str, summary: dict, docs: list[dict], diagnostics: tuple[str, ...] = ()) -> str:
    """A Markdown run report (template ``report/templates/final.md.j2``): official result,
    references, paired comparisons, seeds, each run's checkpoints (with the task's
    ``diagnostics`` as columns) and budget use, lineage, the exploration and advisories."""
    text = (
        templates().get_template("final.md.j2").render(task=task, summary=summary, docs=docs, diagnostics=diagnostics)
    )
    return text.rstrip("\n") + "\n"  # each section ends with a blank line; the file with one newline


def final_result(
    *, task: str, out_dir: str | Path, report_diagnostics: tuple[str, ...] = (), audits: list = (), **kwargs
) -> dict:
    """Write ``report.md``, ``summary.json`` and (last) ``.complete`` of the task's final result
    into ``out_dir``; ``kwargs`` are :func:`replaykit.harness.results.final_summary`'s (the
    report's checkpoint columns: ``report_diagnostics``; ``audits``: the official run's
    ``audit.json`` first, then the other runs', :func:`~replaykit.harness.audit.audit_summary`).
    Returns the summary; raises what :func:`~replaykit.harness.results.final_summary` raises
    (nothing is written then). ``summary.json`` records every file read to make it, with its
    SHA-256 (``inputs_sha256``), and ``.complete`` seals both files of the folder."""
    with recording_reads() as reads:
        summary, docs = final_summary(**kwargs)
        summary["audit"] = audit_summary(list(audits))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "report.md", render_report(task, summary, docs, report_diagnostics))
    summary["report_sha256"] = sha256_file(out_dir / "report.md")  # checked by status and the workflow
    write_summary(out_dir, summary, inputs=reads)
    return summary
