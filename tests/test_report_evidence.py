"""Issue 30's fields in the final reports, on hand-written summaries: the proxy-selected
result with its oracle gap, the decision rule's hash and whether it was fixed before the
first replay, and the normalisation left undefined (``final/report.md`` and ``report.html``),
each shown exactly as the summary holds it; and ``final_summary`` carrying them over from the
runs' ``official.json``."""

import copy
import json

from markupsafe import escape
from test_report_markdown import DOC, SUMMARY

from replaykit.harness.results import final_summary
from replaykit.report import templates
from replaykit.report.final import render_report
from replaykit.report.html import fmt

SHA_THEN, SHA_NOW = "a" * 64, "b" * 64
RULE = {
    "path": "results/dpo/decision-rules/beta02.json",
    "sha256": SHA_NOW,
    "fixed_in_advance": False,
    "in_force_sha256": SHA_THEN,
    "note": f"the rule changed after the candidate's first replay started: {SHA_THEN[:12]} was in force then, "
    f"{SHA_NOW[:12]} is judged now",
}
# official = checkpoint-5 (0.8125), the proxy ranks checkpoint-4 best: gap 0.8125 - 0.796875
PROXY = {"run": "beta02-seed42", "progress": 4, "proxy_value": 0.75, "final_value": 0.796875, "oracle_gap": 0.015625}


def evidence_summary() -> dict:
    summary = copy.deepcopy(SUMMARY)
    summary["proxy_selected"] = PROXY
    summary["decision_rule"] = RULE
    summary["seeds"]["per_seed"] = [
        {"seed": 42, "run": "beta02-seed42", "value": 0.8125, "progress": 5, "proxy_selected": PROXY}
    ]
    return summary


def render_html(summary: dict) -> str:
    return (
        templates(trim=False)
        .get_template("report.html.j2")
        .render(
            task="dpo", summary=summary, references=[], table="", figures=[], fmt=fmt, final_file="f", final_href="f"
        )
    )


def test_markdown_shows_proxy_selected_and_the_changed_rule():
    lines = render_report("dpo", evidence_summary(), [DOC], ()).splitlines()
    assert (
        "**Proxy-selected result**: checkpoint-4, the retained checkpoint the proxy ranks best (proxy 0.7500): "
        "accuracy = 0.7969; oracle gap (official − proxy-selected, in the metric's direction) 0.0156." in lines
    )
    assert (
        f"**Decision rule**: `results/dpo/decision-rules/beta02.json` (sha256 `{SHA_NOW}`), fixed before the "
        f"candidate's first replay: **no** ({RULE['note']})." in lines
    )
    assert "| 42 | `beta02-seed42` | 0.8125 (5) | 0.7969 (4) | 0.0156 |" in lines
    # the run's table marks both choices and gives each checkpoint's proxy value
    doc = copy.deepcopy(DOC)
    doc["checkpoints"][0].update(proxy_value=0.75, proxy_se=0.0625)
    doc["checkpoints"][1].update(valid=True, value=0.8125, se=0.05)
    doc.update(official={"progress": 5}, proxy_selected={"progress": 4})
    table = render_report("dpo", evidence_summary(), [doc], ()).splitlines()
    assert (
        "| checkpoint-4 (proxy-selected) | valid | 0.7969 ± 0.0500 | 0.7500 ± 0.0625 | `m4` | `s4/summary.json` |"
        in table
    )
    assert "| checkpoint-5 (official) | valid | 0.8125 ± 0.0500 | - | `m5` | `s5/summary.json` |" in table
    # the shipped run (no rule): no line; a rule fixed in advance: "yes"
    shipped = {**evidence_summary(), "decision_rule": None}
    assert not any(line.startswith("**Decision rule**") for line in render_report("dpo", shipped, [], ()).splitlines())
    fixed = {**evidence_summary(), "decision_rule": {**RULE, "fixed_in_advance": True}}
    assert "first replay: **yes** (" in render_report("dpo", fixed, [], ())


def test_markdown_normalisation_undefined_gives_no_number():
    summary = {**evidence_summary(), "normalised_score": None}
    summary["normalised_undefined"] = (
        "normalised score undefined: the shipped reference (0.4000) is below the fixed start (0.4500)"
    )
    lines = render_report("dpo", summary, [], ()).splitlines()
    assert f"Normalised score: none ({summary['normalised_undefined']})" in lines
    assert not any(line.startswith("Normalised score (fixed start = 0") for line in lines)


def test_html_shows_the_same_numbers():
    page = render_html(evidence_summary())
    assert '<span class="proxy-selected-final" data-value="0.796875">0.7969</span>' in page
    assert '<span class="oracle-gap" data-value="0.015625">0.0156</span>' in page
    assert f'<p id="decision-rule" data-sha256="{SHA_NOW}" data-fixed-in-advance="false">' in page
    assert "first replay:\n<strong>no</strong>" in page and str(escape(RULE["note"])) in page
    assert 'id="decision-rule"' not in render_html({**evidence_summary(), "decision_rule": None})
    unknown = render_html({**evidence_summary(), "decision_rule": {**RULE, "fixed_in_advance": None}})
    assert 'data-fixed-in-advance="null"' in unknown and "<strong>unknown</strong>" in unknown
    undefined = {
        **evidence_summary(),
        "normalised_score": None,
        "normalised_undefined": "normalised score undefined: x",
    }
    assert (
        '<span class="advisory" id="normalised-undefined">No normalised score: normalised score undefined: x.</span>'
        in (render_html(undefined))
    )


def test_final_summary_carries_the_rule_receipt_and_warns(tmp_path):
    """``final_summary`` copies the official run's rule receipt (short) and proxy-selected
    result from its ``official.json``, and advises when the rule was not fixed in advance."""
    from replaykit.harness.receipts import write_receipt, write_summary

    scores = tmp_path / "scores"
    scores.mkdir()
    (scores / "rows.jsonl").write_text("".join(json.dumps({"id": str(i), "score": i % 2}) + "\n" for i in range(4)))
    write_summary(  # last, as the score step writes them: .complete seals both files
        scores,
        {
            "metric": "acc",
            "direction": "maximize",
            "value": 0.5,
            "uncertainty": {"value": 0.1, "kind": "se"},
            "n": 4,
            "diagnostics": {},
            "advisories": [],
        },
    )
    checkpoint = {
        "progress": 2,
        "valid": True,
        "value": 0.5,
        "se": 0.1,
        "n": 4,
        "metric": "acc",
        "scores": str(scores),
        "uncertainty_kind": "se",
        "checkpoint_sha256": None,
    }
    receipt = {
        "path": RULE["path"],
        "sha256": SHA_NOW,
        "fixed_in_advance": False,
        "note": RULE["note"],
        "in_force_at_first_attempt": {"sha256": SHA_THEN, "written_unix": 1.0, "rule": {}},
        "versions": [],
    }
    lineage = {
        k: None
        for k in (
            "asset_manifest",
            "asset_manifest_sha256",
            "workspace_record",
            "patch_sha256",
            "record",
            "record_sha256",
        )
    }
    doc = {
        "run": "cand-seed42",
        "seed": 42,
        "direction": "maximize",
        "checkpoints": [checkpoint],
        "official": checkpoint,
        "decision_rule": receipt,
        **lineage,
        "proxy_selected": {
            **{k: PROXY[k] for k in ("progress", "proxy_value", "final_value")},
            "oracle_gap": 0.0,
            "rule": "r",
            "official_progress": 2,
        },
    }
    official = tmp_path / "official.json"
    official.write_text(json.dumps(doc))
    write_receipt(official)
    summary, _ = final_summary(
        officials=[official], fixed_start_scores=None, shipped_official=official, published={}, n_boot=50
    )
    assert summary["decision_rule"] == RULE
    assert summary["proxy_selected"]["progress"] == 4 and summary["proxy_selected"]["oracle_gap"] == 0.0
    assert f"decision rule {SHA_NOW[:12]} not shown to be fixed in advance: {RULE['note']}" in summary["advisories"]
    doc["decision_rule"] = None
    official.write_text(json.dumps(doc))
    write_receipt(official)
    summary, _ = final_summary(
        officials=[official], fixed_start_scores=None, shipped_official=official, published={}, n_boot=50
    )
    assert summary["decision_rule"] is None and not any("decision rule" in a for a in summary["advisories"])
