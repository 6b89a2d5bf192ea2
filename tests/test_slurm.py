"""The tiny dpo DAG submitted through profiles/slurm to a real (one-node) SLURM cluster.

Needs the cluster of ``scripts/slurm-test-cluster.sh start`` (``.ci/run`` starts it); skipped
when no SLURM controller answers. Every job passes through ``sbatch``; the tests read the
cluster's job-completion log (its job history) to check that each of them ran there, that GPU
rules asked for the stand-in GPU, and that a replay killed by SLURM at its wall time (TIMEOUT)
was retried with more time and resumed. One DAG run serves all three tests.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, copy_workflow, orphan_processes, snakemake, tiny_config, write_config

JOBCOMP = Path("/var/lib/replaykit-slurm/jobcomp.log")


def _cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mixed", "allocated"))


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _cluster_up(), reason="no SLURM cluster (bash scripts/slurm-test-cluster.sh start)"),
]

# what a small node can give; the profile's defaults are for a GPU cluster's nodes
TEST_RESOURCES = [
    "--default-resources",
    "mem_mb=1500",
    "runtime=attempt*30",
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--seconds-between-status-checks",
    "1",
    "--set-resources",
    "replay:mem_mb=3000",
]
# The replay's first attempt gets 1 minute of wall time, shorter than its budget: SLURM kills it
# (TIMEOUT) while it trains; the retry (attempt 2) gets 7 minutes and resumes. This override
# replaces the rule's own runtime (attempt x the budget's 7 minutes), which a dry run shows.
TIMEOUT_RUNTIME = "replay:runtime=6*attempt-5"


def jobs_in(workdir: Path, since: float) -> list[dict]:
    """Job-completion records of jobs whose working directory is ``workdir`` that started at
    ``since`` (Unix time) or later: the history outlives pytest's numbered folders, and an earlier
    session's run in a folder of the same name (``/tmp/pytest-of-root`` removed in between) is
    not this one's."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))  # slurmctld's local time, as it logs
    records = []
    for line in JOBCOMP.read_text().splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("WorkDir") == str(workdir) and fields.get("StartTime", "") >= start:
            records.append(fields)
    return records


GPU_RULES = {"replay", "validate", "score", "reference_fixed_start"}
# the plug-in with its status back-off capped at 3 s (the module says why)
SLURM_SNAKEMAKE = [sys.executable, str(Path(__file__).with_name("slurm_snakemake.py"))]


@pytest.fixture(scope="module")
def cluster_run(tiny_llama, tmp_path_factory):
    """The tiny dpo DAG through sbatch, training until its internal deadline (120 s of budget)
    so that the replay's 1-minute first attempt times out mid-training."""
    work = copy_workflow(tmp_path_factory.mktemp("slurm"))
    shutil.copytree(ROOT / "profiles", work / "profiles")
    cfg = tiny_config(tiny_llama)
    # the timed-out attempt spends 60-100 s of this internal deadline; the retry trains the rest
    # (20-60 s; 180 s until 2026-12-02 made the retry train 80-120 s, a minute of the suite's
    # longest unit for nothing the tests read)
    cfg["tasks"]["dpo"]["budget"] = {"outer_limit_s": 300, "internal_deadline_s": 120, "export_reserve_s": 60}
    cfg["tasks"]["dpo"]["recipe"]["overrides"].update(max_steps=100000, save_steps=10)
    write_config(work, cfg)
    dry = snakemake(work, "results/dpo/final", "--profile", "profiles/slurm", *TEST_RESOURCES, "-n", check=True)
    started = time.time()
    out = snakemake(
        work,
        "results/dpo/final",
        "--profile",
        "profiles/slurm",
        *TEST_RESOURCES,
        TIMEOUT_RUNTIME,
        timeout=1500,
        check=True,
        program=SLURM_SNAKEMAKE,
    )
    print(f"SLURM DAG with one TIMEOUT: {time.time() - started:.0f} s")
    jobs = jobs_in(work, started)
    for job in jobs:  # what SLURM was asked for (scontrol keeps finished jobs for MinJobAge = 1 h)
        shown = dict(
            re.findall(
                r"(\w+)=(\S*)",
                subprocess.run(
                    ["scontrol", "show", "job", job["JobId"]], capture_output=True, text=True, check=True
                ).stdout,
            )
        )
        job["rule"] = re.match(r"rule_(.+?)(?:_wildcards_|$)", shown["Comment"]).group(1)
        job["TresPerJob"] = shown.get("TresPerJob")
        job["TimeLimitShown"] = shown["TimeLimit"]
    work.joinpath("dry-run.txt").write_text(dry.stdout + dry.stderr)
    return work, out.stdout + out.stderr, sorted(jobs, key=lambda j: int(j["JobId"]))


def test_every_job_went_through_sbatch(cluster_run):
    work, log, jobs = cluster_run
    assert (work / "results/dpo/final/.complete").exists()
    summary = json.loads((work / "results/dpo/final/summary.json").read_text())
    record = json.loads((work / "results/dpo/shipped-seed42/replay/record.json").read_text())
    assert summary["official"]["progress"] in record["retained"] and len(record["retained"]) <= 3
    # every step Snakemake counted is a job in SLURM's history, plus the timed-out attempt
    n_steps = int(re.search(r"(\d+) of \1 steps \(100%\) done", log).group(1))
    assert len(jobs) == n_steps + 1, (len(jobs), n_steps)
    assert [j["JobState"] for j in jobs].count("COMPLETED") == n_steps
    assert all(j["ExitCode"] == "0:0" for j in jobs if j["JobState"] == "COMPLETED")


def test_gpu_rules_ask_for_the_gpu_and_runtime_follows_the_rules(cluster_run):
    _, _, jobs = cluster_run
    for j in jobs:
        assert (j["TresPerJob"] == "gres:gpu:1") == (j["rule"] in GPU_RULES), (j["rule"], j["TresPerJob"])
    limits = {}
    for j in jobs:
        limits.setdefault(j["rule"], set()).add(j["TimeLimitShown"])
    assert limits["validate"] == {"00:05:00"}  # validation.runtime
    assert limits["assets"] == {"00:30:00"}  # the profile's default, attempt 1
    # without the override, the replay's is the budget's: ceil((300 s outer limit + 120 s setup) / 60)
    work = cluster_run[0]
    dry = work.joinpath("dry-run.txt").read_text()
    replay = re.search(r"checkpoint replay:.*?resources: ([^\n]*)", dry, re.S).group(1)
    assert "runtime=7," in replay and "gpu=1" in replay


def test_timeout_is_retried_with_more_time_and_resumes(cluster_run):
    work, _, jobs = cluster_run
    replays = [j for j in jobs if j["rule"] == "replay"]
    assert [(j["JobState"], j["TimeLimitShown"]) for j in replays] == [
        ("TIMEOUT", "00:01:00"),
        ("COMPLETED", "00:07:00"),
    ]
    run = work / "results/dpo/shipped-seed42"
    record = json.loads((run / "replay/record.json").read_text())
    assert record["resumed"] is True and len(record["attempts"]) == 2
    # each attempt's GPU slot states what SLURM assigned to that job (its id, its GPUs)
    for attempt, job in zip(record["attempts"], replays):
        slot = attempt["gpu_slot"]
        assert slot["source"] == "slurm" and slot["slurm"]["SLURM_JOB_ID"] == job["JobId"]
        visible = slot["slurm"]["CUDA_VISIBLE_DEVICES"]
        assert slot["devices"] == [d for d in (visible or "").split(",") if d]
    markers = sorted((run / "validation").glob("checkpoint-*.json"))
    validate_ids = {j["JobId"] for j in jobs if j["rule"] == "validate"}
    assert markers and all(
        json.loads(m.read_text())["gpu_slot"]["slurm"]["SLURM_JOB_ID"] in validate_ids for m in markers
    )
    assert record["stop_reason"] == "deadline"  # the internal deadline, one budget over both attempts
    assert record["utilisation"]["wall_s_all_attempts"] <= record["budget"]["outer_limit_s"]
    # the retry continued from a saved trainer state, not from step 0
    resumed_at = re.search(
        r"\[train\] resuming from \S*checkpoint-(\d+)", (work / "logs/dpo/shipped-seed42/replay.log").read_text()
    )
    assert resumed_at and int(resumed_at.group(1)) > 0
    steps = [h["progress"] for h in record["train_history"]]
    assert steps[0] <= 10 and steps == sorted(set(steps))  # one curve across both attempts
    # receipts agree: at most 3 retained, each on disk with the recorded hash, ledger in order
    from replaykit.harness.hashing import sha256_tree
    from replaykit.harness.publish import published, read_ledger

    assert published(run / "replay") == record["retained"] and len(record["retained"]) <= 3
    for progress in record["retained"]:
        assert sha256_tree(run / f"replay/checkpoint-{progress}") == record["checkpoints"][str(progress)]["sha256"]
        assert json.loads((run / f"validation/checkpoint-{progress}.json").read_text())["valid"] is True
    assert [e["count"] for e in read_ledger(run / "replay")] == list(range(1, record["publication_count"] + 1))
    assert not (run / "replay/last-failure.json").exists()
    assert orphan_processes(str(work)) == []
