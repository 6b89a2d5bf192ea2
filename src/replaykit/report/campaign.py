"""A campaign's one summary page: ``results/campaign/`` (``summary.json``, ``report.md``,
``report.html``, then ``.complete``), read off the matched ablations the campaign built.

A campaign (config ``campaign``; docs/operations.md, "Campaigns") ablates every candidate of
each listed task against the shipped recipe over the task's seeds. Everything here is read from
each ablation's ``summary.json`` (:func:`replaykit.harness.ablation.ablation_summary`): per task
each candidate's verdict against shipped (the two-stage bootstrap CI over seeds and rows), and
across tasks the normalised scores (fixed start = 0, the same seed's shipped run = 1; none for a
task without a fixed-start reference). The page also shows the shipped runs each task's
candidates were compared with, and refuses ablations of one task that name different shipped
runs for a seed: the campaign shares them, so every candidate meets the same shipped replay.
"""

from __future__ import annotations

from pathlib import Path

from ..harness.errors import InputError
from ..harness.fileio import atomic_write_json, atomic_write_text, recording_reads
from ..harness.receipts import INPUTS, RECEIPT, read_complete_summary, seal
from . import templates
from .formats import fmt_plain, fmt_signed


def _candidate(ablation: Path, s: dict) -> dict:
    main = s["comparisons"]["official"]
    norm = main.get("normalised") or {}
    return {
        "candidate": s["candidate"],
        "ablation": str(ablation),
        "verdict": s["verdict"],
        "difference": s["value"],
        "se": s["uncertainty"]["value"],
        "ci_low": main["hierarchical"]["ci_low"],
        "ci_high": main["hierarchical"]["ci_high"],
        "normalised_mean": norm.get("mean"),
        "normalised_per_seed": norm.get("per_seed", []),
        "per_seed": [
            {"seed": p["seed"], "value": p["candidate"]["value"], "official": p["candidate"]["official"]}
            for p in main["per_seed"]
        ],
    }


def _shipped(per_seed: list[dict]) -> list[dict]:
    return [
        {
            "seed": p["seed"],
            "run": p["shipped"]["run"],
            "official": p["shipped"]["official"],
            "value": p["shipped"]["value"],
        }
        for p in per_seed
    ]


def campaign_summary(ablations: list[str | Path]) -> dict:
    """The campaign's summary from its matched-ablation folders (each with ``.complete``).

    Returns ``{"tasks": {task: {"metric", "direction", "seeds", "n", "fixed_start",
    "shipped": [{"seed", "run", "official", "value"}], "candidates": [{"candidate",
    "ablation", "verdict", "difference", "se", "ci_low", "ci_high", "normalised_mean",
    "normalised_per_seed", "per_seed"}]}}, "normalised": [{"task", "candidate", "mean",
    "per_seed"}], "ablations": [...]}``; differences in the task's metric units (candidate -
    shipped), normalised scores unitless.

    Raises:
        InputError: an ablation without its completion receipt, or two ablations of one task
            whose shipped runs differ (seeds or files).
    """
    tasks: dict[str, dict] = {}
    for folder in map(Path, ablations):
        s = read_complete_summary(folder)
        main = s["comparisons"]["official"]
        entry = tasks.setdefault(
            s["task"],
            {
                "metric": s["metric"],
                "direction": s["direction"],
                "seeds": s["seeds"],
                "n": s["n"],
                "fixed_start": (s.get("fixed_start") or {}).get("value"),
                "shipped": _shipped(main["per_seed"]),
                "candidates": [],
            },
        )
        if _shipped(main["per_seed"]) != entry["shipped"]:
            raise InputError(
                folder / "summary.json",
                "comparisons.official.per_seed",
                "other shipped runs than the task's first ablation",
            )
        entry["candidates"].append(_candidate(folder, s))
    normalised = [
        {"task": t, "candidate": c["candidate"], "mean": c["normalised_mean"], "per_seed": c["normalised_per_seed"]}
        for t, entry in tasks.items()
        for c in entry["candidates"]
    ]
    return {"tasks": tasks, "normalised": normalised, "ablations": [str(a) for a in ablations]}


def campaign_result(ablations: list[str | Path], out_dir: str | Path) -> dict:
    """Write ``report.md``, ``report.html`` and, last, ``summary.json`` with ``.complete`` of
    :func:`campaign_summary` into ``out_dir``; return the summary. ``summary.json`` records
    the ablation summaries it was read from (``inputs_sha256``); ``.complete`` seals the folder."""
    with recording_reads() as reads:
        summary = campaign_summary(ablations)
    summary[INPUTS] = dict(sorted(reads.items()))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / RECEIPT).unlink(missing_ok=True)
    env = templates(trim=False)
    for name in ("report.md", "report.html"):
        page = env.get_template(f"campaign.{name.split('.')[1]}.j2").render(s=summary, f=fmt_plain, sf=fmt_signed)
        atomic_write_text(out / name, page)
    atomic_write_json(out / "summary.json", summary)
    seal(out)
    return summary
