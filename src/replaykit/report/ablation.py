"""The matched ablation's files: ``report.md``, ``differences.png`` and ``summary.json`` with its
receipt (the numbers: :mod:`replaykit.harness.ablation`), and its section of the HTML report."""

from __future__ import annotations

from pathlib import Path

from ..harness.ablation import ablation_summary
from ..harness.fileio import atomic_write_text, recording_reads
from ..harness.receipts import write_summary
from . import templates
from .figures import COLOURS, plt, save
from .formats import fmt_plain, fmt_signed

MARKERS = {
    "official": ("o", "official result"),
    "proxy_selected": ("^", "proxy-selected checkpoint"),
    "last": ("s", "last retained checkpoint"),
}


def differences(summary: dict, path: str | Path) -> Path:
    """Per-seed paired differences (candidate − shipped) of the ablation ``summary``, for the
    official result (filled circles), the proxy-selected checkpoint (triangles) and the last
    retained checkpoint (hollow squares), each selection's mean with its two-stage bootstrap CI
    at the decision rule's level (bar; the label gives that selection's verdict, the rule's
    comparison marked) and t-interval (thin bar, with its reading), and 0 (dashed)."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    comparisons = [c for c in summary["comparisons"].values() if c["available"]]
    for j, c in enumerate(comparisons):
        marker, label = MARKERS[c["selection"]]
        shift = 0.12 * (j - (len(comparisons) - 1) / 2)
        xs = [i + shift for i in range(len(c["per_seed"]))]
        colour = {"official": COLOURS["run"], "proxy_selected": "tab:green"}.get(c["selection"], COLOURS["shipped"])
        ruled = " (the rule's)" if c["selection"] == summary["decision"]["comparison"] else ""
        level = f"{100 * c['hierarchical']['confidence']:g} %"
        ax.plot(
            xs,
            [p["difference"] for p in c["per_seed"]],
            marker=marker,
            linestyle="none",
            color=colour,
            markerfacecolor="none" if c["selection"] == "last" else colour,
            label=f"{label}, per seed",
        )
        x_mean = len(c["per_seed"]) + shift
        h = c["hierarchical"]
        ax.errorbar(
            [x_mean],
            [c["mean_difference"]],
            yerr=[[c["mean_difference"] - h["ci_low"]], [h["ci_high"] - c["mean_difference"]]],
            fmt=marker,
            color=colour,
            capsize=5,
            linewidth=2,
            label=f"mean, {level} CI [{h['ci_low']:+.4g}, {h['ci_high']:+.4g}]: {c['verdict']}{ruled}",
        )
        if c["t_interval"]:
            t, reading = c["t_interval"], c["t_interval_reading"].split(";")[0].split(":")[0]
            ax.plot(
                [x_mean + 0.25] * 2,
                [t["ci_low"], t["ci_high"]],
                color=colour,
                linewidth=0.8,
                label=f"t-interval [{t['ci_low']:+.4g}, {t['ci_high']:+.4g}]: {reading}",
            )
    ax.axhline(0.0, color="grey", linestyle="--", linewidth=0.8)
    seeds = summary["seeds"]
    ax.set_xticks(list(range(len(seeds) + 1)), [f"seed {s}" for s in seeds] + ["mean"], fontsize=8)
    ax.set_ylabel(f"candidate − shipped\n({summary['direction']})", fontsize=8)
    ax.set_title(
        f"{summary['task']}: {summary['candidate']} vs shipped, {len(seeds)} seed(s), n = {summary['n']}",
        fontsize=9,
    )
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, path)


def ablation_result(*, out_dir: str | Path, figure=None, **kwargs) -> dict:
    """Write ``report.md``, ``differences.png`` (``figure(summary, path)``; None: no figure) and,
    last, ``summary.json`` with ``.complete`` of a matched ablation into ``out_dir``.
    ``kwargs`` are :func:`replaykit.harness.ablation.ablation_summary`'s; returns its summary
    and raises what it raises. ``summary.json`` records every file read to make it
    (``inputs_sha256``); ``.complete`` seals the folder's files."""
    with recording_reads() as reads:
        summary = ablation_summary(**kwargs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = templates().get_template("ablation.md.j2").render(s=summary, f=fmt_plain, sf=fmt_signed)
    atomic_write_text(out_dir / "report.md", text.rstrip("\n") + "\n")
    if figure is not None:
        figure(summary, out_dir / "differences.png")
    write_summary(out_dir, summary, inputs=reads)
    return summary
