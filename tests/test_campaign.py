"""A campaign (issue 32): two tasks (soup with two candidates, rm with one), two seeds, built by one
``snakemake results/campaign``, with at most one replay at a time (``campaign.max_replays``).

Built once per session (conftest's ``campaign_run``: soup publishes one checkpoint per run and
rm's tiny recipe is cut to 2 steps with one checkpoint); the ablation tests read the same tree.
The checks are computed independently of the campaign's code: which replays ran, from
Snakemake's own job list; each candidate's mean difference and normalised score, from the
runs' ``official.json`` and the fixed-start reference's summary; replays one at a time, from the GPU-slot
intervals of their records.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from conftest import CAMPAIGN_SEEDS
from replaykit.config import check_campaign
from replaykit.harness.errors import InputError
from replaykit.harness.stats import ZERO_WIDTH

SEEDS = CAMPAIGN_SEEDS


@pytest.fixture
def campaign(campaign_run):
    """conftest's shared campaign tree and Snakemake's output of its build."""
    return campaign_run, campaign_run.with_name("campaign.log").read_text()


def official(work: Path, task: str, run: str) -> float:
    return json.loads((work / f"results/{task}/{run}/official.json").read_text())["official"]["value"]


@pytest.mark.slow
def test_the_campaign_replays_each_shipped_run_once(campaign):
    work, log = campaign
    jobs = [
        block
        for block in re.split(r"\n\[[^\]]+\]\n", log)
        if re.search(r"^(?:local)?(?:checkpoint|rule) replay:", block, re.M)
    ]
    ran = sorted(re.search(r"wildcards: task=(\w+), run=([\w.-]+)", block).groups() for block in jobs)
    expected = sorted(
        (t, f"{c}-seed{s}")
        for t, cs in (("soup", ("greedy", "single")), ("rm", ("lr4",)))
        for c in (*cs, "shipped")
        for s in SEEDS
    )
    assert ran == expected  # 10 replays: soup (2 candidates + shipped) and rm (1 + shipped) x 2 seeds, shipped once
    for task in ("soup", "rm"):
        for seed in SEEDS:
            record = json.loads((work / f"results/{task}/shipped-seed{seed}/replay/record.json").read_text())
            assert len(record["attempts"]) == 1
    # at most one replay at a time (campaign.max_replays: 1), from the records' slot intervals
    intervals = sorted(
        (a["gpu_slot"]["acquired_unix"], a["gpu_slot"]["released_unix"])
        for task, run in expected
        for a in json.loads((work / f"results/{task}/{run}/replay/record.json").read_text())["attempts"]
    )
    assert all(end <= nxt for (_, end), (nxt, _) in zip(intervals, intervals[1:])), intervals


@pytest.mark.slow
def test_the_summary_page_gives_each_candidates_verdict_and_normalised_score(campaign):
    work, _ = campaign
    out = work / "results/campaign"
    assert (out / ".complete").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["tasks"]) == ["rm", "soup"]  # summary.json's keys are sorted
    fixed = json.loads((work / "results/soup/reference/fixed-start/final-scores/summary.json").read_text())["value"]
    for task, t in summary["tasks"].items():
        assert [c["candidate"] for c in t["candidates"]] == sorted(c["candidate"] for c in t["candidates"])
        shipped = {s: official(work, task, f"shipped-seed{s}") for s in SEEDS}
        assert [(r["seed"], r["run"], r["value"]) for r in t["shipped"]] == [
            (s, f"shipped-seed{s}", shipped[s]) for s in SEEDS
        ]
        for c in t["candidates"]:
            values = {s: official(work, task, f"{c['candidate']}-seed{s}") for s in SEEDS}
            # the mean of per-seed differences; 1e-9: two float subtractions and a mean
            assert math.isclose(c["difference"], sum(values[s] - shipped[s] for s in SEEDS) / 2, abs_tol=1e-9)
            assert c["ci_low"] <= c["difference"] <= c["ci_high"]
            if c["ci_low"] == c["ci_high"]:  # the same difference at every seed: nothing to judge it against
                assert c["verdict"] == ZERO_WIDTH
            else:
                assert c["verdict"] in ("established gain", "established loss", "not established (CI spans 0)")
            if task == "rm":  # no fixed-start reference: no normalised score
                assert c["normalised_mean"] is None
            elif all(shipped[s] > fixed for s in SEEDS):  # soup is maximised: defined when shipped beats it
                norm = [(values[s] - fixed) / (shipped[s] - fixed) for s in SEEDS]
                assert math.isclose(c["normalised_mean"], sum(norm) / 2, rel_tol=1e-9)
            else:  # seen on the tiny soup: the shipped uniform soup (0.40) below its fixed start (0.45)
                assert c["normalised_mean"] is None
    page = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for task, t in summary["tasks"].items():
        for c in t["candidates"]:
            assert f"| `{c['candidate']}` |" in page and c["verdict"] in page
            assert f'data-task="{task}" data-candidate="{c["candidate"]}"' in html
    assert page.index("## soup") < page.index("## rm") < page.index("## Across tasks: normalised scores")


def test_a_campaign_task_that_is_not_configured_or_has_no_candidates_is_refused():
    tasks = {"soup": {"candidates": {}}, "rm": {"candidates": {"lr1": "rm-lr1.diff"}}}
    layers = [("config/config.yaml", {"tasks": tasks}), ("campaign.yaml", {"campaign": {"tasks": ["rm"]}})]

    def refused(listed):
        with pytest.raises(InputError) as err:
            check_campaign({"tasks": tasks, "campaign": {"tasks": listed}}, layers, "config")
        return str(err.value)

    check_campaign({"tasks": tasks, "campaign": {"tasks": ["rm"]}}, layers, "config")
    assert refused(["soup"]) == "campaign.yaml: campaign.tasks: 'soup' has no candidates (tasks.soup.candidates)"
    assert refused(["dpo"]) == "campaign.yaml: campaign.tasks: 'dpo' is not a configured task (tasks: rm, soup)"
    assert "listed twice" in refused(["rm", "rm"])
