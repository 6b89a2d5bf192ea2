"""dpo's diagnostic figure for the HTML report (see :mod:`replaykit.report`)."""

from __future__ import annotations


def plot_diagnostics(fig, summary: dict, docs: list[dict], fixed_start: dict | None) -> str:
    """IFEval strict accuracy per instruction type (``per_instruction_strict_acc`` of the
    final summaries): the official checkpoint against the fixed-start reference."""
    ax = fig.add_subplot()
    official = summary["diagnostics"].get("per_instruction_strict_acc", {})
    base = (fixed_start or {}).get("diagnostics", {}).get("per_instruction_strict_acc", {})
    names = sorted(set(official) | set(base))
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [official.get(n, 0.0) for n in names], height=0.4, label="official checkpoint")
    if base:
        ax.barh(
            [y - 0.2 for y in ys], [base.get(n, 0.0) for n in names], height=0.4, color="tab:grey", label="fixed start"
        )
    ax.set_yticks(list(ys), names, fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("strict accuracy (fraction of instructions of the type followed)")
    ax.legend(fontsize=7, loc="lower right")
    return "IFEval strict accuracy per instruction type: official checkpoint vs fixed start"
