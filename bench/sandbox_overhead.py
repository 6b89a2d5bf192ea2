"""Per-job overhead of the replay sandbox (issues 14, 27): ``python -c pass`` started directly,
the same command in the replay's allow-list sandbox (bubblewrap), and ``bwrap --version``
alone, N launches each, interleaved in one run so that load from other users of the machine
falls on all three alike.

The sandboxed launch uses the layout of a real replay: a fake working directory (with
``results/``, ``logs/``, a config) as the working directory; the soup task's isolation plan
(:func:`replaykit.isolation.plan`: the system, the Python environment, the frozen package, the
workspace and the public split read-only, the publish and state directories writable,
scikit-learn's digits masked); chdir into the workspace. Its time includes computing the plan
and its argv (which runs bubblewrap's start-up probe, ``check_available``, each call, as
``run_replay`` does), and is also given without that (the prebuilt argv only). The case
``plan+limits+bwrap`` adds what a job pays for its resource limits (issue 27): the job's
``Confinement`` made (a ``pids`` cgroup where one can be made), its ``preexec`` (setrlimit, join
the cgroup) in the child, its verdict read and the cgroup removed, as the replay driver does.

Usage: PYTHONPATH=src python bench/sandbox_overhead.py [--n 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replaykit.harness.launch import start_group
from replaykit.isolation import RunPaths, Settings, plan


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q * 100) - 1] if len(xs) > 1 else xs[0]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="sandbox-overhead-"))
    try:
        workdir = root / "workdir"  # stands in for the Snakemake working directory
        for sub in (
            "results/t/assets/public",
            "results/t/assets/hidden",
            "results/t/run/workspace",
            "results/t/run/replay",
            "results/t/run/state",
            "logs",
            ".snakemake",
        ):
            (workdir / sub).mkdir(parents=True)
        (workdir / "config.yaml").write_text("isolation: bwrap\n")
        (workdir / "results/t/assets/hidden/final.jsonl").write_text("{}\n")
        (workdir / "results/t/assets/public/train.jsonl").write_text("{}\n")
        workspace = workdir / "results/t/run/workspace"
        public = workdir / "results/t/assets/public"
        publish, state = workdir / "results/t/run/replay", workdir / "results/t/run/state"

        command = [sys.executable, "-c", "pass"]
        os.chdir(workdir)
        fixed = root / "fixed-start"  # a model folder's size: the file-size limit is derived from it
        fixed.mkdir()
        (fixed / "config.json").write_text("{}\n")
        (fixed / "model.safetensors").write_bytes(b"\0" * 1024**2)
        run = RunPaths(fixed, public, read_only=(workspace,), writable=(publish, state))

        def wrap(command):  # what the replay CLI and driver compute per job
            return plan("soup", {}, Settings("bwrap"), run).argv(command, chdir=workspace)

        bwrap = shutil.which("bwrap")
        prebuilt = wrap(command)

        def direct():
            subprocess.run(command, check=True, cwd=workspace)

        def sandboxed():  # what a replay pays: the plan, its argv (with the probe) + the sandboxed launch
            subprocess.run(wrap(command), check=True, cwd=workspace)

        def sandboxed_limits():  # + the job's limits, started as launch.start_group starts a replay
            sandbox = plan("soup", {}, Settings("bwrap"), run)
            with sandbox.confine() as confinement:
                proc = start_group(
                    sandbox.argv(command, chdir=workspace),
                    cwd=workspace,
                    env=dict(os.environ),
                    preexec=confinement.preexec,
                )
                proc.communicate()
                assert proc.returncode == 0 and confinement.verdict(0, []) == (None, None)

        def sandboxed_prebuilt():
            subprocess.run(prebuilt, check=True, cwd=workspace)

        def version():
            subprocess.run([bwrap, "--version"], check=True, capture_output=True)

        # the sandbox must really hide the working directory: the hidden file is not there
        probe = wrap(
            [
                sys.executable,
                "-c",
                f"import os; print(os.path.exists({str(workdir / 'results/t/assets/hidden/final.jsonl')!r}), "
                f"os.path.exists({str(public / 'train.jsonl')!r}))",
            ]
        )
        seen = subprocess.run(probe, check=True, capture_output=True, text=True, cwd=workspace).stdout.split()
        assert seen == ["False", "True"], f"sandbox view unexpected: hidden visible / public visible = {seen}"

        cases = {
            "direct": direct,
            "plan+bwrap": sandboxed,
            "plan+limits+bwrap": sandboxed_limits,
            "bwrap (prebuilt argv)": sandboxed_prebuilt,
            "bwrap --version": version,
        }
        for fn in cases.values():  # warm the page cache once
            fn()
        times = {name: [] for name in cases}
        for _ in range(a.n):
            for name, fn in cases.items():
                times[name].append(timed(fn))
    finally:
        os.chdir(Path(__file__).resolve().parents[1])
        shutil.rmtree(root, ignore_errors=True)

    with plan("soup", {}, Settings("bwrap"), run).confine() as confinement:
        limits = confinement.describe()
    version_line = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    stats = {
        name: {
            "median_s": statistics.median(xs),
            "p90_s": quantile(xs, 0.90),
            "min_s": min(xs),
            "max_s": max(xs),
            "n": len(xs),
        }
        for name, xs in times.items()
    }
    overhead = {
        "plan+bwrap - direct": {k: stats["plan+bwrap"][k] - stats["direct"][k] for k in ("median_s", "p90_s")},
        "plan+limits+bwrap - direct": {
            k: stats["plan+limits+bwrap"][k] - stats["direct"][k] for k in ("median_s", "p90_s")
        },
        "prebuilt - direct": {k: stats["bwrap (prebuilt argv)"][k] - stats["direct"][k] for k in ("median_s", "p90_s")},
    }
    doc = {
        "n": a.n,
        "bwrap": version_line,
        "bwrap_path": bwrap,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "machine": platform.machine(),
        "kernel": platform.release(),
        "argv_example": prebuilt,
        "limits": limits,
        "stats": stats,
        "overhead": overhead,
    }
    print(f"{version_line}; Python {platform.python_version()}; N={a.n} each, interleaved")
    print(f"{'case':24s} {'median s':>9s} {'p90 s':>9s} {'min s':>9s} {'max s':>9s}")
    for name, s in stats.items():
        print(f"{name:24s} {s['median_s']:9.4f} {s['p90_s']:9.4f} {s['min_s']:9.4f} {s['max_s']:9.4f}")
    for name, o in overhead.items():
        print(f"overhead {name:24s} median {o['median_s']:.4f} s, p90 {o['p90_s']:.4f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
