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

import jinja2
from markupsafe import Markup

from ..harness.fileio import atomic_write_text, read_json
from ..harness.receipts import read_complete_summary
from ..harness.results import paired_comparison

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
    "result filled, last retained checkpoint hollow), their mean with the 95 % "
    "two-stage bootstrap CI over seeds and rows (bar) and the t-interval over seeds "
    "(thin bar); 0 dashed.",
}

TEMPLATE = jinja2.Template(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ task }}: replay report</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.official { background: #fff7d6; }
tr.invalid { color: #a00; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; }
code { font-size: 0.85em; }
.advisory { color: #8a5a00; }
</style></head>
<body>
<h1>{{ task }}: replay report</h1>
{% if summary.advisories and summary.advisories[0].startswith("isolation") %}
<p class="advisory" id="isolation-warning"><strong>Warning: {{ summary.advisories[0] }}</strong></p>{% endif %}
<p><strong>Official result</strong>: {{ summary.metric }} =
<span class="value" data-value="{{ summary.value }}">{{ fmt(summary.value) }}</span> ±
<span data-value="{{ summary.uncertainty.value }}">{{ fmt(summary.uncertainty.value) }}</span>
({{ summary.uncertainty.kind }}, n = {{ summary.n }}, {{ summary.direction }}),
run <code>{{ summary.official.run }}</code>, checkpoint-{{ summary.official.progress }}.
{% if summary.normalised_score is not none %}Normalised score (fixed start = 0, shipped = 1):
<span data-value="{{ summary.normalised_score }}">{{ fmt(summary.normalised_score) }}</span>.{% endif %}</p>

<p id="isolation">Isolation of the replays: {{ summary.isolation }};
{{ summary.final_split.note if summary.final_split else "final split: not recorded" }}.</p>

<h2>References</h2>
<table id="references"><tr><th>reference</th><th>value ± SE</th><th>source</th></tr>
{% for ref in references %}<tr><td>{{ ref.name }}</td>
<td class="num" data-value="{{ ref.value }}">{{ fmt(ref.value) }}{% if ref.se is not none %} ± {{ fmt(ref.se) }}{% endif %}</td>
<td>{% if ref.href %}<a href="{{ ref.href }}">{{ ref.source }}</a>{% else %}{{ ref.source }}{% endif %}</td></tr>
{% endfor %}</table>

<h2>Checkpoints</h2>
{{ table }}

<h2>Seeds</h2>
<p>n = {{ summary.seeds.n }}, mean = {{ fmt(summary.seeds.mean) }}, SD across seeds = {{ fmt(summary.seeds.sd) }}.</p>

{% if ablation_section %}<h2>Matched ablations</h2>
{{ ablation_section }}{% endif %}

{% if summary.advisories %}<h2>Advisories</h2><ul>
{% for a in summary.advisories %}<li class="advisory">{{ a }}</li>{% endfor %}</ul>{% endif %}

<h2>Figures</h2>
{% for f in figures %}<figure id="{{ f.id }}"><figcaption><strong>{{ f.title }}</strong></figcaption>
<img src="data:image/png;base64,{{ f.data }}" alt="{{ f.title }}">
<figcaption>{{ f.caption }} (<a href="{{ f.href }}">{{ f.file }}</a>)</figcaption></figure>
{% endfor %}
<p>Final summary: <a href="{{ final_href }}">{{ final_file }}</a>.</p>
<script>
// After loading, record how many figures failed to decode (a headless browser's DOM dump shows it).
window.addEventListener("load", () => {
  const broken = [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length;
  document.body.dataset.images = document.images.length;
  document.body.dataset.brokenImages = broken;
});
</script>
</body></html>
""",
    autoescape=True,
)

TABLE = jinja2.Template(
    """<table id="checkpoints">
<tr><th>run</th><th>seed</th><th>checkpoint</th><th>validity</th><th>final score ± SE</th><th>n</th>
<th>paired difference vs shipped [95 % CI]</th><th>advisories</th><th>lineage</th></tr>
{% for r in rows %}<tr class="{{ 'official' if r.official else '' }} {{ '' if r.valid else 'invalid' }}" data-run="{{ r.run }}" data-progress="{{ r.progress }}">
<td><code>{{ r.run }}</code></td><td class="num">{{ r.seed }}</td><td>checkpoint-{{ r.progress }}{% if r.official %} (official){% endif %}</td>
<td><a href="{{ r.links.marker }}">{{ 'valid' if r.valid else 'invalid: ' ~ r.reason }}</a></td>
<td class="num score" data-value="{{ r.value }}" data-se="{{ r.se }}">{{ fmt(r.value) }}{% if r.se is not none %} ± {{ fmt(r.se) }}{% endif %}</td>
<td class="num">{{ r.n if r.n is not none else '-' }}</td>
<td class="num diff" data-value="{{ r.diff.difference if r.diff else '' }}" data-ci-low="{{ r.diff.ci_low if r.diff else '' }}" data-ci-high="{{ r.diff.ci_high if r.diff else '' }}">{% if r.diff %}{{ '%+.4f' % r.diff.difference }} [{{ '%+.4f' % r.diff.ci_low }}, {{ '%+.4f' % r.diff.ci_high }}]{% else %}-{% endif %}</td>
<td>{% for a in r.advisories %}<div class="advisory">{{ a }}</div>{% endfor %}</td>
<td><a href="{{ r.links.manifest }}">asset manifest</a> <code>{{ r.manifest_sha[:12] }}</code> →
<a href="{{ r.links.workspace }}">workspace</a> (patch <code>{{ (r.patch_sha or 'none')[:12] }}</code>) →
<a href="{{ r.links.record }}">replay record</a> →
<a href="{{ r.links.summary }}">summary</a></td></tr>
{% endfor %}</table>""",
    autoescape=True,
)


def fmt(value) -> str:
    return "-" if value is None or value == "" else f"{value:.4f}"


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
    return TABLE.render(rows=rows, fmt=fmt)


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
    summary = read_complete_summary(final_dir)
    docs = [
        read_json(p, required=("run", "seed", "checkpoints", "asset_manifest", "workspace_record", "record"))
        for p in dict.fromkeys(map(str, officials))
    ]
    shipped = read_json(summary["references"]["shipped"]["official"], required=("official",))
    rows = checkpoint_rows(docs, summary, shipped, n_boot, scale)
    refs = summary["references"]
    references = []
    if refs["fixed_start"]:
        references.append(
            {
                "name": "fixed start",
                "value": refs["fixed_start"]["value"],
                "se": refs["fixed_start"]["se"],
                "source": f"{refs['fixed_start']['scores']}/summary.json",
                "href": _href(Path(refs["fixed_start"]["scores"]) / "summary.json", out_html.parent),
            }
        )
    else:
        references.append(
            {
                "name": "fixed start",
                "value": None,
                "se": None,
                "href": None,
                "source": "none: the fixed start cannot be scored by itself",
            }
        )
    references.append(
        {
            "name": "shipped recipe",
            "value": refs["shipped"]["value"],
            "se": refs["shipped"]["se"],
            "source": refs["shipped"]["official"],
            "href": _href(refs["shipped"]["official"], out_html.parent),
        }
    )
    for name, value in sorted(refs["published"].items()):
        references.append(
            {"name": f"published {name} (full scale)", "value": value, "se": None, "source": "SPEC", "href": None}
        )
    figs = []
    for fig_id, png in figures.items():
        kind = fig_id.rsplit("/", 1)[-1]
        run = fig_id.rsplit("/", 1)[0] if "/" in fig_id else None
        figs.append(
            {
                "id": fig_id.replace("/", "-"),
                "title": (f"{run}: " if run else "") + kind.replace("_", " "),
                "caption": FIGURE_CAPTIONS.get(kind, ""),
                "file": str(png),
                "href": _href(png, out_html.parent),
                "data": base64.b64encode(Path(png).read_bytes()).decode("ascii"),
            }
        )
    from .ablation import SECTION

    abl = [
        {
            **read_complete_summary(folder),
            "file": str(Path(folder) / "summary.json"),
            "href": _href(Path(folder) / "summary.json", out_html.parent),
        }
        for folder in ablations
    ]
    ablation_section = Markup(SECTION.render(ablations=abl)) if abl else ""
    atomic_write_text(out_table, render_table([dict(r) for r in rows], out_table.parent))
    table = Markup(render_table(rows, out_html.parent))
    final_file = str(Path(final_dir) / "summary.json")
    atomic_write_text(
        out_html,
        TEMPLATE.render(
            task=task,
            summary=summary,
            references=references,
            table=table,
            figures=figs,
            fmt=fmt,
            final_file=final_file,
            ablation_section=ablation_section,
            final_href=_href(final_file, out_html.parent),
        ),
    )
    return {"rows": rows, "summary": summary}
