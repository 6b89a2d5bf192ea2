"""rm's diagnostic figure for the HTML report (see :mod:`replaykit.report`)."""

from __future__ import annotations

SECTIONS = ("Chat", "Chat Hard", "Reasoning", "Safety")  # leaderboard order (rewardbench.SUBSET_MAPPING's keys)


def plot_diagnostics(fig, summary: dict, docs: list[dict], fixed_start: dict | None) -> str:
    """RewardBench section scores (percent, ± 1.96 SE) of every valid checkpoint of the first
    run, grouped by section."""
    ax = fig.add_subplot()
    valid = [c for c in docs[0]["checkpoints"] if c["valid"]]
    width = 0.8 / max(len(valid), 1)
    for i, c in enumerate(valid):
        sections = c["diagnostics"]["sections"]
        xs = [s + (i - (len(valid) - 1) / 2) * width for s in range(len(SECTIONS))]
        ax.bar(
            xs,
            [sections[name]["score"] for name in SECTIONS],
            width=width,
            yerr=[1.96 * sections[name]["se"] for name in SECTIONS],
            capsize=3,
            label=f"checkpoint-{c['progress']}",
        )
    ax.set_xticks(range(len(SECTIONS)), SECTIONS)
    ax.set_ylim(0, 105)
    ax.set_ylabel("section score (%)")
    ax.legend(fontsize=7)
    return f"RewardBench v1 section scores per checkpoint ({docs[0]['run']}); final score = their mean"
