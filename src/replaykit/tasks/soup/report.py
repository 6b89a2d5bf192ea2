"""soup's diagnostic figure for the HTML report (see :mod:`replaykit.report`)."""

from __future__ import annotations

import json
from pathlib import Path


def plot_diagnostics(fig, summary: dict, docs: list[dict], fixed_start: dict | None) -> str:
    """Left: each ingredient's coefficient in every retained checkpoint of the first run
    (``coefficients.json`` of the published checkpoint). Right: top-1 accuracy per class of
    the official checkpoint against the fixed-start reference (the best single ingredient)."""
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    record = json.loads(Path(docs[0]["record"]).read_text())
    retained = sorted(record["checkpoints"], key=int)
    width = 0.8 / max(len(retained), 1)
    for i, progress in enumerate(retained):
        coefficients = json.loads((Path(record["checkpoints"][progress]["path"]) / "coefficients.json").read_text())[
            "coefficients"
        ]
        xs = [k + (i - (len(retained) - 1) / 2) * width for k in range(len(coefficients))]
        left.bar(xs, coefficients, width=width, label=f"checkpoint-{progress}")
    left.set_xlabel("ingredient")
    left.set_ylabel("coefficient (sum 1)")
    left.legend(fontsize=7)
    official = summary["diagnostics"].get("per_class_accuracy", {})
    base = (fixed_start or {}).get("diagnostics", {}).get("per_class_accuracy", {})
    classes = sorted(official, key=lambda c: (len(c), c))
    right.plot(classes, [official[c] for c in classes], marker="o", label="official")
    if base:
        right.plot(classes, [base.get(c) for c in classes], marker="x", color="tab:grey", label="fixed start")
    right.set_xlabel("class")
    right.set_ylabel("top-1 accuracy")
    right.legend(fontsize=7)
    return f"soup coefficients per checkpoint ({docs[0]['run']}) and per-class accuracy"
