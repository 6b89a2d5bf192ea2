"""The report steps of the workflow: a run's figures, and the task's HTML report with its
seed and diagnostic figures (what ``python -m replaykit figures`` and ``report`` run)."""

from __future__ import annotations

from pathlib import Path

from ..harness.fileio import read_json
from ..harness.receipts import read_complete_summary, read_verified_json


def run_figures(
    *, task: str, official: str | Path, record: str | Path, final_dir: str | Path, out_dir: str | Path, benchmarks=None
) -> dict:
    """Draw one run's ``training.png``, ``checkpoints.png`` and ``budget.png`` into ``out_dir``.

    ``benchmarks`` is the run's Snakemake benchmark folder (validation and scoring times).
    Returns the run's official document. Raises :class:`InputError` for a missing or
    incomplete input file.
    """
    from ..tasks import get_task
    from . import figures

    doc = read_verified_json(official, required=("run", "checkpoints"))
    record_doc = read_json(record, required=("task", "run"))
    summary = read_complete_summary(final_dir)
    out = Path(out_dir)
    figures.training_curve(record_doc, out / "training.png", get_task(task).TRAINING_CURVE)
    figures.checkpoint_scores(doc, summary, out / "checkpoints.png")
    figures.budget_use(doc, record_doc, out / "budget.png", benchmarks or None)
    return doc


def task_report(
    *,
    task: str,
    final_dir: str | Path,
    officials: list[str | Path],
    run_figures: list[str | Path],
    ablations: list[str | Path],
    n_boot: int,
    out_html: str | Path,
    out_table: str | Path,
    out_seeds: str | Path,
    out_diagnostics: str | Path,
) -> dict:
    """Draw the task's seed and diagnostic figures and write its HTML report and checkpoint
    table, showing each run's figures (``run_figures``, same order as ``officials``) and each
    matched ablation's. Returns what :func:`replaykit.report.html.write_report` returns plus
    ``figures``, the figures shown. Raises :class:`InputError` for a missing or incomplete
    input file.
    """
    from ..tasks import get_task
    from . import figures
    from .html import write_report

    plugin = get_task(task)
    summary = read_complete_summary(final_dir)
    docs = [read_verified_json(p, required=("run", "checkpoints")) for p in dict.fromkeys(officials)]
    fixed = summary["references"]["fixed_start"]
    figures.seed_spread(summary, docs, out_seeds)
    figures.diagnostics(
        plugin, summary, docs, read_complete_summary(fixed["scores"]) if fixed else None, out_diagnostics
    )
    pngs = {}
    for doc, folder in zip(docs, run_figures):
        for kind in ("training", "checkpoints", "budget"):
            pngs[f"{doc['run']}/{kind}"] = Path(folder) / f"{kind}.png"
    pngs.update(seeds=out_seeds, diagnostics=out_diagnostics)
    for folder in ablations:  # matched ablations (issue 16): their figure, after the task's
        pngs[f"ablation-{Path(folder).name}/differences"] = Path(folder) / "differences.png"
    result = write_report(
        task=task,
        final_dir=final_dir,
        officials=officials,
        figures=pngs,
        n_boot=n_boot,
        scale=float(plugin.METRIC["scale"]),
        out_html=out_html,
        out_table=out_table,
        ablations=ablations,
    )
    return {**result, "figures": pngs}
