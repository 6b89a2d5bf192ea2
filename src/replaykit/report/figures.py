"""Report figures (matplotlib, Agg backend, PNG written atomically).

Per run: :func:`training_curve`, :func:`checkpoint_scores`, :func:`budget_use`.
Per task: :func:`seed_spread`, :func:`diagnostics`. Each takes the documents the workflow
wrote (an ``official.json``, a ``replay/record.json``, ``final/summary.json``) and a PNG
path, and draws what they hold; none recomputes a score. Error bars are ±1.96 SE (a normal
95 % interval of the reported SE).
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from ..tasks.contract import TaskPlugin

Z95 = 1.96
COLOURS = {"fixed_start": "tab:grey", "shipped": "tab:orange", "run": "tab:blue", "invalid": "tab:red"}


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (PNG, 110 dpi) through a temporary name, then close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a report is read by others
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path


def _message(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def curve_key(history: list[dict], preferred: str | None = None) -> str | None:
    """The ``history`` key to plot: ``preferred`` (the plug-in's ``TRAINING_CURVE``) when
    present, else ``loss``, else the first numeric key other than ``progress``."""
    keys = [k for h in history for k in h if k != "progress" and isinstance(h[k], (int, float))]
    for key in (preferred, "loss"):
        if key and key in keys:
            return key
    return keys[0] if keys else None


def training_curve(record: dict, path: str | Path, preferred: str | None = None) -> Path:
    """The replay's training curve (``record["train_history"]``) against progress, with every
    publication marked: solid green for a retained checkpoint, dashed grey for one removed
    by retention."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    history = record.get("train_history") or []
    key = curve_key(history, preferred)
    title = f"{record['task']} / {record['run']}: training curve (stopped: {record.get('stop_reason')})"
    if key is None:
        _message(
            ax,
            "no per-step training log in the replay record\n(the recipe logs no training curve, "
            "e.g. a soup is an average, not a training run)",
        )
    else:
        points = [(h["progress"], h[key]) for h in history if key in h]
        ax.plot([p for p, _ in points], [v for _, v in points], marker=".", color=COLOURS["run"], label=key)
        ax.set_xlabel("progress")
        ax.set_ylabel(key)
    retained = set(record.get("retained") or [])
    for i, pub in enumerate(record.get("publications") or []):
        kept = pub["progress"] in retained
        ax.axvline(
            pub["progress"],
            color="tab:green" if kept else "tab:grey",
            linestyle="-" if kept else "--",
            alpha=0.7,
            label=("retained checkpoint" if kept else "removed by retention")
            if i == 0 or kept != (record["publications"][i - 1]["progress"] in retained)
            else None,
        )
    if key is not None or record.get("publications"):
        ax.legend(fontsize=8, loc="best")
    ax.set_title(title, fontsize=9)
    return save(fig, path)


def _reference_lines(ax, references: dict) -> None:
    for name, label in (("fixed_start", "fixed-start reference"), ("shipped", "shipped reference")):
        ref = references.get(name)
        if not ref or ref.get("value") is None:
            continue
        ax.axhline(ref["value"], color=COLOURS[name], linestyle="--", label=f"{label} {ref['value']:.4g}")
        if ref.get("se"):
            ax.axhspan(ref["value"] - Z95 * ref["se"], ref["value"] + Z95 * ref["se"], color=COLOURS[name], alpha=0.12)


def checkpoint_scores(doc: dict, summary: dict, path: str | Path) -> Path:
    """Each retained checkpoint's final score ± 1.96 SE (``doc``: a run's ``official.json``)
    against the fixed-start and shipped references of ``summary`` (dashed lines, 95 % bands);
    the official checkpoint is starred, invalid ones are marked on the axis."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    valid = [c for c in doc["checkpoints"] if c["valid"] and c.get("value") is not None]
    ax.errorbar(
        [c["progress"] for c in valid],
        [c["value"] for c in valid],
        yerr=[Z95 * (c["se"] or 0.0) for c in valid],
        fmt="o",
        capsize=4,
        color=COLOURS["run"],
        label="checkpoint final score ± 1.96 SE",
    )
    best = doc.get("official")
    if best:
        ax.plot(
            [best["progress"]],
            [best["value"]],
            marker="*",
            markersize=16,
            color="gold",
            markeredgecolor="black",
            linestyle="none",
            label=f"official (checkpoint-{best['progress']})",
        )
    _reference_lines(ax, summary["references"])
    for c in doc["checkpoints"]:
        if not c["valid"]:
            ax.axvline(c["progress"], color=COLOURS["invalid"], linestyle=":", label=f"invalid: {c['reason']}"[:60])
    ax.set_xticks([c["progress"] for c in doc["checkpoints"]])
    ax.set_xlabel("checkpoint progress")
    ax.set_ylabel(summary["metric"])
    ax.set_title(f"{doc['task']} / {doc['run']}: final score per checkpoint ({summary['direction']})", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    return save(fig, path)


def _benchmark_seconds(folder: Path, prefix: str) -> float:
    """Sum of the ``s`` column of Snakemake benchmark files ``<folder>/<prefix>-*.tsv``."""
    total = 0.0
    for tsv in sorted(folder.glob(f"{prefix}-*.tsv")):
        with tsv.open() as f:
            for row in csv.DictReader(f, delimiter="\t"):
                total += float(row["s"])
    return total


def budget_use(doc: dict, record: dict, path: str | Path, benchmarks: str | Path | None = None) -> Path:
    """Where the replay's time went, per phase, against the budget: earlier attempts (the
    record's ``utilisation``, the driver's clock), then setup, training, publishing, idle as the
    recipe reports them (``reported_by_recipe``; older records: ``utilisation``), then
    validation and final scoring of the retained checkpoints (Snakemake benchmark files, when
    present), with the internal deadline and the outer limit marked; the title says why
    training stopped (the driver's ``stop_reason``)."""
    util, budget = record.get("utilisation") or {}, record.get("budget") or {}
    reported = record.get("reported_by_recipe") or util
    earlier = (util.get("wall_s_all_attempts") or 0.0) - (record.get("wall_s") or 0.0)
    publish = reported.get("publish_s") or 0.0
    phases = [
        ("earlier attempts", max(earlier, 0.0)),
        ("setup (recipe's account)", reported.get("setup_s") or 0.0),
        ("training (recipe's account)", max((reported.get("train_s") or 0.0) - publish, 0.0)),
        ("publishing (recipe's account)", publish),
        ("idle", reported.get("idle_s") or 0.0),
    ]
    after = []
    if benchmarks is not None and Path(benchmarks).is_dir():
        after = [
            ("validation", _benchmark_seconds(Path(benchmarks), "validate")),
            ("final scoring", _benchmark_seconds(Path(benchmarks), "score-final")),
        ]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    left = 0.0
    palette = plt.get_cmap("tab10")
    for i, (name, seconds) in enumerate(phases + after):
        y = 1 if i < len(phases) else 0
        if i == len(phases):
            left = 0.0
        ax.barh(y, seconds, left=left, color=palette(i), label=f"{name} {seconds:.0f} s")
        left += seconds
    for name, key, style in (("internal deadline", "internal_deadline_s", "--"), ("outer limit", "outer_limit_s", "-")):
        if budget.get(key):
            ax.axvline(budget[key], color="black", linestyle=style, label=f"{name} {budget[key]:.0f} s")
    ax.set_yticks([0, 1] if after else [1], ["after replay", "replay"] if after else ["replay"])
    ax.set_xlabel("seconds")
    fraction = util.get("budget_fraction")
    ax.set_title(
        f"{doc['task']} / {doc['run']}: budget use — stopped: {record.get('stop_reason')}"
        + (f", {fraction:.1%} of the outer limit" if fraction is not None else ""),
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, path)


def seed_spread(summary: dict, docs: list[dict], path: str | Path) -> Path:
    """Each seed's official score ± 1.96 SE, their mean (solid) and ± 1 SD across seeds
    (band; undefined with one seed), and the references."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    by_run = {d["run"]: d for d in docs}
    per_seed = summary["seeds"]["per_seed"]
    xs = list(range(len(per_seed)))
    for x, s in zip(xs, per_seed):
        best = by_run.get(s["run"], {}).get("official")
        if s["value"] is None or best is None:
            ax.plot([x], [0], marker="x", color=COLOURS["invalid"], linestyle="none")
            continue
        ax.errorbar([x], [s["value"]], yerr=[Z95 * (best["se"] or 0.0)], fmt="o", capsize=4, color=COLOURS["run"])
    seeds = summary["seeds"]
    if seeds.get("mean") is not None:
        ax.axhline(seeds["mean"], color=COLOURS["run"], label=f"mean over {seeds['n']} seed(s) {seeds['mean']:.4g}")
        if seeds.get("sd"):
            ax.axhspan(
                seeds["mean"] - seeds["sd"],
                seeds["mean"] + seeds["sd"],
                color=COLOURS["run"],
                alpha=0.12,
                label=f"± 1 SD {seeds['sd']:.3g}",
            )
    _reference_lines(ax, summary["references"])
    ax.set_xticks(xs, [f"seed {s['seed']}\ncheckpoint-{s['progress']}" for s in per_seed], fontsize=8)
    ax.set_xlim(-0.7, len(per_seed) - 0.3)
    ax.set_ylabel(summary["metric"])
    ax.set_title(
        f"official score per seed ({summary['direction']}); SD across seeds: "
        + ("-" if seeds.get("sd") is None else f"{seeds['sd']:.4g}"),
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="best")
    return save(fig, path)


def diagnostics(
    plugin: TaskPlugin, summary: dict, docs: list[dict], fixed_start: dict | None, path: str | Path
) -> Path:
    """The task's own diagnostic figure, drawn by the plug-in's ``plot_diagnostics(fig,
    summary, docs, fixed_start)`` (``fixed_start``: the fixed-start reference's summary or
    None), which returns the title; a note when the plug-in has none."""
    fig = plt.figure(figsize=(7.5, 4))
    draw = plugin.plot_diagnostics
    if draw is None:
        _message(fig.add_subplot(), "this task defines no diagnostic figure")
        title = "diagnostics"
    else:
        title = draw(fig, summary, docs, fixed_start)
        fig.tight_layout()
    fig.suptitle(title, fontsize=9, y=1.02)
    return save(fig, path)
