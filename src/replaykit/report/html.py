"""The task's HTML report: ``results/<task>/report.html`` (self-contained: figures are embedded
as PNG data URIs; links to the workflow's files are relative to the report) and the
checkpoint table alone (for ``snakemake --report``).

Every number shown is read from the workflow's files; each value cell also carries the
exact number in a ``data-value`` attribute, so a test (or a reader's script) can compare the
page with the summaries. The paired difference of each checkpoint against the shipped
reference is :func:`replaykit.harness.results.paired_comparison` over the same rows, with the
bootstrap seed the final summary uses (0), so the official checkpoint's entry equals
``comparisons.vs_shipped`` of ``final/summary.json``.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from markupsafe import Markup

from ..harness.ablation import holm_verdicts
from ..harness.fileio import atomic_write_text, read_json
from ..harness.receipts import read_complete_summary, read_verified_json
from ..harness.results import paired_comparison
from ..harness.stats import decimal
from . import templates

FIGURE_CAPTIONS = {
    "training": "Training curve from the replay record's per-step (or per-epoch) log; vertical lines mark "
    "each publication (solid: retained checkpoint, dashed: removed by retention).",
    "checkpoints": "Final score of each retained checkpoint ± 1.96 SE, against the fixed-start and shipped "
    "references (dashed, with 95 % bands); the star is the official result.",
    "budget": "Wall-clock time per phase (replay record and Snakemake benchmarks) against the internal "
    "deadline and the outer limit; the title says why training stopped.",
    "seeds": "Official score of each seed ± 1.96 SE, the mean across seeds and ± 1 SD.",
    "diagnostics": "The task's diagnostic (see the figure title).",
    "differences": "Matched ablation: per-seed paired differences candidate − shipped (official "
    "result filled circles, proxy-selected checkpoint triangles, last retained checkpoint hollow squares), "
    "their mean with the two-stage bootstrap CI over seeds and rows at the decision rule's level (bar) "
    "and the t-interval over seeds (thin bar); 0 dashed.",
}


def fmt(value) -> str:
    return "-" if value is None or value == "" else decimal(value)


def _href(target: str | Path, base: Path) -> str:
    return Path(os.path.relpath(Path(target).resolve(), base.resolve())).as_posix()


def checkpoint_rows(docs: list[dict], summary: dict, shipped: dict, n_boot: int, scale: float) -> list[dict]:
    """One row per retained checkpoint of every run (``docs``: the runs' ``official.json``),
    with the paired difference against the shipped reference's official checkpoint
    (``shipped``: its ``official.json``) for each valid one."""
    shipped_best = shipped.get("official")
    rows = []
    for doc in docs:
        best = doc.get("official") or {}
        for c in doc["checkpoints"]:
            diff = None
            if c["valid"] and shipped_best:
                diff = paired_comparison(c["scores"], shipped_best["scores"], n_boot, seed=0, scale=scale)
            rows.append(
                {
                    "run": doc["run"],
                    "seed": doc["seed"],
                    "progress": c["progress"],
                    "valid": c["valid"],
                    "reason": c["reason"],
                    "value": c.get("value"),
                    "se": c.get("se"),
                    "n": c.get("n"),
                    "official": c["progress"] == best.get("progress") and doc["run"] == summary["official"]["run"],
                    "proxy_selected": c["progress"] == (doc.get("proxy_selected") or {}).get("progress"),
                    "proxy_value": c.get("proxy_value"),
                    "proxy_se": c.get("proxy_se"),
                    "diff": diff,
                    "advisories": c.get("advisories") or [],
                    "manifest_sha": doc.get("asset_manifest_sha256") or "",
                    "patch_sha": doc.get("patch_sha256"),
                    "files": {
                        "marker": c["marker"],
                        "manifest": doc["asset_manifest"],
                        "workspace": doc["workspace_record"],
                        "record": doc["record"],
                        "summary": str(Path(c["scores"]) / "summary.json"),
                    },
                }
            )
    return rows


def render_table(rows: list[dict], base: Path) -> str:
    for r in rows:
        r["links"] = {k: _href(v, base) for k, v in r["files"].items()}
    return templates(trim=False).get_template("checkpoints.html.j2").render(rows=rows, fmt=fmt)


def _references(refs: dict, base: Path) -> list[dict]:
    """The reference rows of the report: the fixed start (or why there is none), the shipped
    recipe and the published full-scale values, each with its source and link."""
    if refs["fixed_start"]:
        scores = Path(refs["fixed_start"]["scores"]) / "summary.json"
        fixed = {
            "value": refs["fixed_start"]["value"],
            "se": refs["fixed_start"]["se"],
            "source": f"{refs['fixed_start']['scores']}/summary.json",
            "href": _href(scores, base),
        }
    else:
        fixed = {"value": None, "se": None, "href": None, "source": "none: the fixed start cannot be scored by itself"}
    shipped = refs["shipped"]
    rows = [
        {"name": "fixed start", **fixed},
        {
            "name": "shipped recipe",
            "value": shipped["value"],
            "se": shipped["se"],
            "source": shipped["official"],
            "href": _href(shipped["official"], base),
        },
    ]
    for name, value in sorted(refs["published"].items()):
        rows.append(
            {"name": f"published {name} (full scale)", "value": value, "se": None, "source": "SPEC", "href": None}
        )
    return rows


def _figures(figures: dict[str, str | Path], base: Path) -> list[dict]:
    """Each figure as the template shows it: id, title, caption, link and the PNG's bytes."""
    out = []
    for fig_id, png in figures.items():
        kind = fig_id.rsplit("/", 1)[-1]
        run = fig_id.rsplit("/", 1)[0] if "/" in fig_id else None
        out.append(
            {
                "id": fig_id.replace("/", "-"),
                "title": (f"{run}: " if run else "") + kind.replace("_", " "),
                "caption": FIGURE_CAPTIONS.get(kind, ""),
                "file": str(png),
                "href": _href(png, base),
                "data": base64.b64encode(Path(png).read_bytes()).decode("ascii"),
            }
        )
    return out


def _ablation_section(ablations: list[str | Path], base: Path) -> str:
    """The matched ablations' section (empty without one): each with its verdict adjusted for
    the number of ablations shown, which share the shipped runs (Holm;
    :func:`~replaykit.harness.ablation.holm_verdicts`)."""
    abl = [
        {
            **read_complete_summary(folder),
            "file": str(Path(folder) / "summary.json"),
            "href": _href(Path(folder) / "summary.json", base),
        }
        for folder in ablations
    ]
    for a, adjusted in zip(abl, holm_verdicts(abl)):
        a["holm"] = adjusted
    return Markup(templates(trim=False).get_template("ablation.html.j2").render(ablations=abl)) if abl else ""


def _attempts(docs: list[dict]) -> list[dict]:
    """Each run's replay attempts, oldest first (the record's ``attempts``; ``wall_s`` up to
    its end, or to when it was last seen alive when no end was recorded)."""
    rows = []
    for doc in docs:
        if not Path(doc["record"]).is_file():  # the record is named relative to the workflow's folder
            continue
        for a in read_json(doc["record"]).get("attempts") or []:
            end = a.get("ended_unix") or a.get("last_seen_unix") or a["started_unix"]
            rows.append({"run": doc["run"], "wall_s": end - a["started_unix"], **a})
    return rows


def write_report(
    *,
    task: str,
    final_dir: str | Path,
    officials: list[str | Path],
    figures: dict[str, str | Path],
    n_boot: int,
    scale: float,
    out_html: str | Path,
    out_table: str | Path,
    ablations: list[str | Path] = (),
) -> dict:
    """Write the HTML report and the checkpoint table (each atomically).

    Args:
        officials: every run's ``official.json`` (the task's runs and the shipped reference's).
        figures: ``id -> PNG`` (ids ``<run>/training``, ``<run>/checkpoints``, ``<run>/budget``,
            ``seeds``, ``diagnostics``), embedded in that order.
        ablations: matched-ablation folders (``summary.json`` with its receipt), each shown with
            its verdict and per-seed differences.
    Returns the rows of the table. Raises :class:`~replaykit.harness.errors.InputError` for a
    summary without its completion receipt.
    """
    out_html, out_table = Path(out_html), Path(out_table)
    base = out_html.parent
    summary = read_complete_summary(final_dir)
    docs = [
        read_verified_json(p, required=("run", "seed", "checkpoints", "asset_manifest", "workspace_record", "record"))
        for p in dict.fromkeys(map(str, officials))
    ]
    shipped = read_verified_json(summary["references"]["shipped"]["official"], required=("official",))
    rows = checkpoint_rows(docs, summary, shipped, n_boot, scale)
    ablation_section = _ablation_section(ablations, base)
    atomic_write_text(out_table, render_table([dict(r) for r in rows], out_table.parent))
    final_file = str(Path(final_dir) / "summary.json")
    html = (
        templates(trim=False)
        .get_template("report.html.j2")
        .render(
            task=task,
            summary=summary,
            references=_references(summary["references"], base),
            table=Markup(render_table(rows, base)),
            figures=_figures(figures, base),
            fmt=fmt,
            final_file=final_file,
            ablation_section=ablation_section,
            final_href=_href(final_file, base),
            attempts=_attempts(docs),
        )
    )
    atomic_write_text(out_html, html)
    return {"rows": rows, "summary": summary}
