"""digress's diagnostic figure for the HTML report (see :mod:`replaykit.report`)."""

from __future__ import annotations

MOLECULE_METRICS = ("validity", "uniqueness", "novelty", "vun")


def plot_diagnostics(fig, summary: dict, docs: list[dict], fixed_start: dict | None) -> str:
    """Left: validity, uniqueness, novelty and their product (V×U×N) of the molecules sampled
    from every valid checkpoint of the first run. Right: the mean NLL terms of the
    variational bound (``mean_<term>`` diagnostics, nats per graph) per checkpoint."""
    left, right = fig.subplots(1, 2)
    valid = [c for c in docs[0]["checkpoints"] if c["valid"]]
    width = 0.8 / max(len(valid), 1)
    for i, c in enumerate(valid):
        d = c["diagnostics"]
        xs = [k + (i - (len(valid) - 1) / 2) * width for k in range(len(MOLECULE_METRICS))]
        left.bar(xs, [d.get(k, 0.0) for k in MOLECULE_METRICS], width=width, label=f"checkpoint-{c['progress']}")
    left.set_xticks(range(len(MOLECULE_METRICS)), ["validity", "uniqueness", "novelty", "V×U×N"], fontsize=8)
    left.set_ylim(0, 1.05)
    left.set_ylabel("fraction of sampled molecules")
    left.legend(fontsize=7)
    terms = sorted({k for c in valid for k in c["diagnostics"] if k.startswith("mean_")})
    for term in terms:
        right.plot(
            [c["progress"] for c in valid],
            [c["diagnostics"][term] for c in valid],
            marker="o",
            label=term.removeprefix("mean_"),
        )
    right.set_xlabel("checkpoint progress (epoch)")
    right.set_ylabel("mean NLL term (nats per graph)")
    right.legend(fontsize=7)
    return (
        f"sampled molecules and NLL terms per checkpoint ({docs[0]['run']}); final metric = test NLL (lower is better)"
    )
