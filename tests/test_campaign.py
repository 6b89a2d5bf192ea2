"""A campaign (issue 32): two tasks (soup, rm), two candidates each, two seeds, built by one
``snakemake results/campaign``, with at most one replay at a time (``campaign.max_replays``).

Kept cheap: soup publishes one checkpoint per run and rm's tiny recipe is cut to 2 steps with
one checkpoint, on conftest's shared fixed starts. The checks are computed independently of the
campaign's code: which replays ran, from Snakemake's own job list; each candidate's mean
difference and normalised score, from the runs' ``official.json`` and the fixed-start
reference's summary; replays one at a time, from the GPU-slot intervals of their records.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path

import pytest

from conftest import copy_workflow, rm_config, snakemake, soup_task, write_config
from replaykit.config import check_campaign
from replaykit.harness.errors import InputError
from replaykit.harness.stats import ZERO_WIDTH

SEEDS = [42, 43]


def knob_patch(work: Path, task: str, name: str, key: str, value) -> str:
    """A candidate patch setting ``key: value`` in the task's embedded recipe profile."""
    path = work / f"recipes/{task}/configs/embedded.yaml"
    old = path.read_text().splitlines(keepends=True)
    new = [f"{key}: {value}\n" if line.startswith(f"{key}:") else line for line in old]
    assert new != old, (task, key)
    patch = work / f"{task}-{name}.diff"
    patch.write_text("".join(difflib.unified_diff(old, new, "a/configs/embedded.yaml", "b/configs/embedded.yaml")))
    return str(patch)


@pytest.fixture(scope="module")
def campaign(soup_start, tiny_llama, tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("campaign"))
    soup = soup_task(
        soup_start,
        seeds=SEEDS,
        candidates={
            "greedy": knob_patch(work, "soup", "greedy", "method", "greedy"),
            "single": knob_patch(work, "soup", "single", "method", "best_single"),
        },
    )
    rm = rm_config(tiny_llama)["tasks"]["rm"]
    rm["recipe"]["overrides"].update(max_steps=2, save_steps=2)  # one checkpoint per run
    rm.update(
        seeds=SEEDS,
        candidates={
            "lr1": knob_patch(work, "rm", "lr1", "learning_rate", 1.0e-4),
            "lr4": knob_patch(work, "rm", "lr4", "learning_rate", 4.0e-4),
        },
    )
    config = {"models": {}, "tasks": {"soup": soup, "rm": rm}, "campaign": {"tasks": ["soup", "rm"], "max_replays": 1}}
    write_config(work, config)
    # 12 replays and their scoring: about 7 minutes of CPU; the timeout leaves room for a loaded machine
    out = snakemake(work, "results/campaign", "--cores", "2", "--resources", "gpu=2", timeout=2700, check=True)
    return work, out.stdout + out.stderr


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
        for t, cs in (("soup", ("greedy", "single")), ("rm", ("lr1", "lr4")))
        for c in (*cs, "shipped")
        for s in SEEDS
    )
    assert ran == expected  # 12 replays: 2 tasks x (2 candidates + shipped) x 2 seeds, shipped once
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
