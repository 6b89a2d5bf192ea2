"""ddpo's diagnostic figure for the HTML report (see :mod:`replaykit.report`)."""

from __future__ import annotations


def plot_diagnostics(fig, summary: dict, docs: list[dict], fixed_start: dict | None) -> str:
    """Diversity against reward: each valid checkpoint of every run (x: mean pairwise image
    distance, 1 - cosine of image embeddings; y: mean reward ± 1.96 SE), the fixed start, and
    the diversity-advisory line 0.02 below the fixed start's pairwise distance. Points moving
    up and left trade diversity for reward."""
    ax = fig.add_subplot()
    for doc in docs:
        valid = [c for c in doc["checkpoints"] if c["valid"]]
        xs = [c["diagnostics"]["mean_pairwise_image_distance"] for c in valid]
        ax.errorbar(
            xs,
            [c["value"] for c in valid],
            yerr=[1.96 * (c["se"] or 0.0) for c in valid],
            fmt="o-",
            capsize=3,
            label=doc["run"],
        )
        for x, c in zip(xs, valid):
            ax.annotate(f"{c['progress']}", (x, c["value"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if fixed_start:
        d = fixed_start["diagnostics"]
        ax.errorbar(
            [d["mean_pairwise_image_distance"]],
            [fixed_start["value"]],
            yerr=[1.96 * fixed_start["uncertainty"]["value"]],
            fmt="s",
            color="tab:grey",
            capsize=3,
            label="fixed start",
        )
        ax.axvline(
            d["mean_pairwise_image_distance"] - 0.02,
            color="tab:red",
            linestyle=":",
            label="diversity advisory threshold (−0.02)",
        )
    ax.set_xlabel("mean pairwise image distance (1 − cos)")
    ax.set_ylabel(summary["metric"])
    ax.legend(fontsize=7)
    return "DDPO: reward against sample diversity per checkpoint (labels: epoch)"
