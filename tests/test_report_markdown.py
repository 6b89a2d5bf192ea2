"""``final/report.md`` from its template (report/templates/final.md.j2), on a hand-written
summary: every number is the summary's, formatted as stated (4 decimals, ± SE, signed
differences), and each optional section appears exactly when its data does."""

import copy

import pytest

from replaykit.report.final import render_report
from replaykit.report.formats import fmt_number, fmt_percent, fmt_seconds, fmt_signed

SUMMARY = {
    "metric": "accuracy",
    "value": 0.8125,  # 52 / 64
    "uncertainty": {"value": 0.048796, "kind": "binomial_se"},  # sqrt(0.8125 * 0.1875 / 64)
    "n": 64,
    "direction": "maximize",
    "official": {
        "run": "beta02-seed42",
        "progress": 5,
        "official": "results/dpo/beta02-seed42/official.json",
        "scores": "results/dpo/beta02-seed42/final-scores/checkpoint-5",
    },
    "isolation": "bubblewrap",
    "final_split": {"note": "final split drawn with the public salt"},
    "advisories": [],
    "references": {
        "fixed_start": {"value": 0.5, "se": 0.0625, "scores": "results/dpo/fixed-start/scores"},
        "shipped": {"value": 0.75, "se": 0.054127, "official": "results/dpo/shipped-seed42/official.json"},
        "published": {"zephyr": 0.9},
    },
    "comparisons": {
        "vs_shipped": {"difference": 0.0625, "ci_low": -0.015625, "ci_high": 0.140625, "mcnemar": {"p_value": 0.21875}},
    },
    "normalised_score": 1.25,  # (0.8125 - 0.5) / (0.75 - 0.5)
    "seeds": {"n": 1, "mean": 0.8125, "sd": None},
    "lineage": {
        "asset_manifest": "results/dpo/assets/manifest.json",
        "asset_manifest_sha256": "aa",
        "workspace_record": "results/dpo/beta02-seed42/workspace.json",
        "patch_sha256": "bb",
        "record": "results/dpo/beta02-seed42/replay/record.json",
        "record_sha256": "cc",
    },
}
DOC = {
    "run": "beta02-seed42",
    "seed": 42,
    "stop_reason": "max_steps",
    "publication_count": 5,
    "utilisation": {"budget_fraction": 0.25},  # the replay driver's clock
    "reported_by_recipe": {"setup_s": 12.4, "train_s": 90.6, "publish_s": 2.0, "idle_s": 0.0},
    "budget": {"outer_limit_s": 420},
    "checkpoints": [
        {"progress": 4, "valid": True, "value": 0.796875, "se": 0.05, "marker": "m4", "scores": "s4"},
        {
            "progress": 5,
            "valid": False,
            "reason": "loss is nan",
            "value": None,
            "se": None,
            "marker": "m5",
            "scores": "s5",
        },
    ],
}


def test_formatting_helpers():
    assert fmt_number(0.8125, 0.048796) == "0.8125 ± 0.0488"
    assert fmt_number(None) == "-" and fmt_percent(0.25) == "25.0%" and fmt_seconds(419.6) == "420 s"
    # a value that rounds to zero has no sign: -0.0 (a minimised metric's gap of -1 * 0.0) and
    # float noise below the 4th decimal (new user, 2026-12-05: "oracle gap ... -0.0000")
    assert fmt_number(-0.0) == "0.0000" and fmt_number(-3e-17, -0.0) == "0.0000 ± 0.0000"
    assert fmt_signed(-0.0) == "+0.0000" and fmt_signed(-2e-9) == "+0.0000" and fmt_signed(-0.00051) == "-0.0005"


def test_every_number_of_the_summary_is_in_the_report():
    text = render_report("dpo", SUMMARY, [DOC], ("nll",))
    lines = text.splitlines()
    assert lines[0] == "# dpo: final result" and text.endswith(
        "s5/summary.json` |\n\n## Lineage\n\n" + lines[-1] + "\n"
    )
    assert (
        "**Official result**: accuracy = 0.8125 ± 0.0488 (n = 64, maximize), run `beta02-seed42`, checkpoint-5."
        in lines
    )
    assert "| fixed start | 0.5000 ± 0.0625 | `results/dpo/fixed-start/scores` |" in lines
    assert "| shipped recipe | 0.7500 ± 0.0541 | `results/dpo/shipped-seed42/official.json` |" in lines
    assert "| published zephyr (full scale) | 0.9000 | SPEC |" in lines
    assert "Normalised score (fixed start = 0, shipped = 1): 1.2500" in lines
    assert "| shipped | +0.0625 | [-0.0156, +0.1406] | 0.2188 |" in lines
    assert "n = 1, mean = 0.8125, SD = -" in lines
    assert (
        "Stopped: max_steps; publications: 5; budget used: 25.0% of the outer limit (420 s) over all attempts "
        "(this attempt as the recipe reports it: setup 12 s, training 91 s of which publishing 2 s, idle 0 s)." in lines
    )
    assert "| checkpoint | valid | final score ± SE | proxy ± SE | nll | marker | summary |" in lines
    assert "|---|---|---|---|---|---|---|" in lines
    assert "| checkpoint-4 | valid | 0.7969 ± 0.0500 | - | - | `m4` | `s4/summary.json` |" in lines
    assert "| checkpoint-5 | invalid: loss is nan | - | - | - | `m5` | `s5/summary.json` |" in lines
    assert "(patch `bb`)" in lines[-1] and "## Exploration" not in text and "## Advisories" not in text
    assert "\n\n\n" not in text  # no doubled blank lines where a block tag stood


@pytest.mark.parametrize("same", [False, True])
def test_optional_sections(same):
    summary = copy.deepcopy(SUMMARY)
    summary["references"]["fixed_start"] = None
    summary["advisories"] = ["isolation: none (bubblewrap missing)", "one more"]
    summary["comparisons"]["vs_shipped"].pop("mcnemar")
    if same:
        summary["official"]["official"] = summary["references"]["shipped"]["official"]
    summary["exploration"] = {
        "linked": True,
        "patch_sha256": "bb",
        "exploration": "explore/dpo/a",
        "budget_used_s": 600.4,
        "budget_s": 14400,
        "probes": 3,
        "sidecar": "patches/dpo-a.json",
        "proxy_receipts": [{"id": 1, "checkpoint": "runs/1/checkpoint-2", "value": 0.5, "se": 0.1}],
        "formal": [{"checkpoint": "checkpoint-5", "proxy": None, "proxy_se": None, "final": 0.8125, "final_se": 0.05}],
    }
    text = render_report("dpo", summary, [], ())
    lines = text.splitlines()
    assert lines[2] == "> **Warning**: isolation: none (bubblewrap missing)"
    assert "| fixed start | - | none: the fixed start cannot be scored by itself |" in lines
    assert "| shipped | +0.0625 | [-0.0156, +0.1406] | - |" in lines
    normalised = "Normalised score: none (no fixed-start reference to anchor it)"
    if same:
        normalised += "; this run is the shipped recipe, so its comparison with the shipped reference is 0"
    assert normalised in lines
    assert "after 600 of 14400 s and 3 probes (`patches/dpo-a.json`)." in text
    assert "| exploration receipt 1 | `runs/1/checkpoint-2` | 0.5000 ± 0.1000 | - |" in lines
    assert "| formal replay | checkpoint-5 | - | 0.8125 ± 0.0500 |" in lines
    assert text.endswith("## Advisories\n\n- isolation: none (bubblewrap missing)\n- one more\n")


def test_free_text_stays_inside_its_table_cell():
    """A reason or advisory with ``|`` or a newline (e.g. a traceback line) cannot break the
    checkpoint table or start a heading."""
    doc = copy.deepcopy(DOC)
    doc["checkpoints"][1]["reason"] = "shape | mismatch\n# not a heading"
    summary = copy.deepcopy(SUMMARY)
    summary["advisories"] = ["two\nlines | here"]
    lines = render_report("dpo", summary, [doc], ()).splitlines()
    assert "| checkpoint-5 | invalid: shape \\| mismatch # not a heading | - | - | `m5` | `s5/summary.json` |" in lines
    assert "- two lines \\| here" in lines and "# not a heading" not in lines
