"""``snakemake`` for tests/test_slurm.py, with the SLURM plug-in's status back-off capped.

snakemake-executor-plugin-slurm 2.8.0 waits 10 s longer before each status check in which no job
finished (``check_active_jobs``: ``next_seconds_between_status_checks + 10``, up to 180 s,
hard-coded). On the one-node test cluster that made Snakemake see the replay's TIMEOUT 33 s and
its retry's end 58 s after SLURM recorded them (2026-12-04, the job history beside the run's
``.snakemake/log/``): about a minute and a half of the test's seven in which nothing ran. Here
the interval is capped at ``CAP_S``; every other part of the plug-in (sbatch, squeue, retries,
time limits) is the installed one. Usage: ``python tests/slurm_snakemake.py <snakemake args>``.
"""

from __future__ import annotations

import sys

import snakemake_executor_plugin_slurm as plugin
from snakemake.cli import main

CAP_S = 3  # squeue every 3 s at most on a node that runs one job at a time


def _capped(prop: property) -> property:
    return property(prop.fget, lambda self, value: prop.fset(self, min(value, CAP_S)))


plugin.Executor.next_seconds_between_status_checks = _capped(plugin.Executor.next_seconds_between_status_checks)

if __name__ == "__main__":
    sys.argv[0] = "snakemake"
    sys.exit(main())
