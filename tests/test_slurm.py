"""The tiny dpo DAG submitted through profiles/slurm to a real (one-node) SLURM cluster.

Needs the cluster of ``scripts/slurm-test-cluster.sh start`` (``.ci/run`` starts it); skipped
when no SLURM controller answers. Every job passes through ``sbatch``; the test reads the
cluster's job-completion log (its job history) to check that each of them ran there and that
GPU rules asked for the stand-in GPU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, copy_workflow, snakemake, tiny_config, write_config

JOBCOMP = Path("/var/lib/replaykit-slurm/jobcomp.log")


def _cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mixed", "allocated"))


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not _cluster_up(), reason="no SLURM cluster (bash scripts/slurm-test-cluster.sh start)")]

# what a small node can give; the profile's defaults are for a GPU cluster's nodes
TEST_RESOURCES = ["--default-resources", "mem_mb=1500", "runtime=attempt*30",
                  "--set-resources", "replay:mem_mb=3000", "--slurm-status-command", "squeue",
                  "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1"]


def jobs_in(workdir: Path) -> list[dict]:
    """Job-completion records of jobs whose working directory is ``workdir``."""
    records = []
    for line in JOBCOMP.read_text().splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("WorkDir") == str(workdir):
            records.append(fields)
    return records


def test_tiny_dpo_dag_through_sbatch(tiny_llama, tmp_path):
    work = copy_workflow(tmp_path)
    shutil.copytree(ROOT / "profiles", work / "profiles")
    write_config(work, tiny_config(tiny_llama))
    started = time.time()
    out = snakemake(work, "results/dpo/final", "--profile", "profiles/slurm", *TEST_RESOURCES, timeout=1200,
                    check=True)
    log = out.stdout + out.stderr
    assert (work / "results/dpo/final/.complete").exists()
    summary = json.loads((work / "results/dpo/final/summary.json").read_text())
    record = json.loads((work / "results/dpo/shipped-seed42/replay/record.json").read_text())
    assert summary["official"]["progress"] in record["retained"] and len(record["retained"]) <= 3
    n_jobs = int(re.search(r"(\d+) of \1 steps \(100%\) done", log).group(1))
    # every job went through sbatch and finished in SLURM's job history
    jobs = jobs_in(work)
    assert len(jobs) == n_jobs, (len(jobs), n_jobs)
    assert {j["JobState"] for j in jobs} == {"COMPLETED"}
    assert all(j["ExitCode"] == "0:0" for j in jobs)
    # per job, what SLURM was asked for (scontrol keeps finished jobs for MinJobAge = 1 h)
    asked = {}
    for j in jobs:
        shown = dict(re.findall(r"(\w+)=(\S*)", subprocess.run(["scontrol", "show", "job", j["JobId"]],
                                                               capture_output=True, text=True, check=True).stdout))
        rule = re.match(r"rule_(.+?)(?:_wildcards_|$)", shown["Comment"]).group(1)
        asked.setdefault(rule, []).append(shown)
    gpu_rules = {"replay", "validate", "score_final", "reference_fixed_start"}
    for rule, shown in asked.items():
        for s in shown:
            assert (s.get("TresPerJob") == "gres:gpu:1") == (rule in gpu_rules), (rule, s.get("TresPerJob"))
    # wall time from the budget, in minutes: ceil((300 s outer limit + 120 s setup) / 60) = 7
    assert [s["TimeLimit"] for s in asked["replay"]] == ["00:07:00"]
    assert {s["TimeLimit"] for s in asked["validate"]} == {"00:05:00"}  # validation.runtime
    assert {s["TimeLimit"] for s in asked["assets"]} == {"00:30:00"}  # the profile's default, attempt 1
    assert time.time() - started < 1200
