"""README, CI and environment files agree with each other, and the documented forms work."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, snakemake, tiny_config, write_config

README = (ROOT / "README.md").read_text()


def block(name: str) -> str:
    m = re.search(rf"<!-- {name} -->\n```bash\n(.+?)\n```\n<!-- /{name} -->", README, re.S)
    assert m, f"README.md: {name} block missing"
    return m.group(1).strip()


def test_readme_has_exactly_two_setup_commands():
    main, tests = block("main-command"), block("test-command")
    assert "\n" not in main and "\n" not in tests
    assert main.endswith(".venv/bin/snakemake results/dpo/final --cores 1 --resources gpu=1")
    assert "pip install -r requirements.txt" in main and "pip install -r requirements.txt" in tests


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    awk = re.search(r"cmd=\$\(awk '(.+?)' README.md\)", script).group(1)
    out = subprocess.run(["awk", awk, "README.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == block("test-command")


def _pins(lines):
    return sorted(l.strip().lstrip("- ").strip() for l in lines if "==" in l and not l.lstrip().startswith("#"))


def test_conda_env_pins_equal_requirements():
    reqs = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env = _pins((ROOT / "envs" / "replaykit.yaml").read_text().splitlines())
    assert env == reqs
    assert any(p.startswith("torch==") for p in reqs) and any(p.startswith("trl==") for p in reqs)


@pytest.mark.slow
def test_documented_command_forms(workdir, tiny_llama):
    write_config(workdir, tiny_config(tiny_llama))
    ok = snakemake(workdir, "results/dpo/final", "--cores", "1", "--resources", "gpu=1", "-n")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    dashes = snakemake(workdir, "--cores", "1", "--resources", "gpu=1", "-n", "--", "results/dpo/final")
    assert dashes.returncode == 0, dashes.stdout + dashes.stderr
    reordered = snakemake(workdir, "--resources", "gpu=1", "--cores", "1", "results/dpo/final", "-n")
    assert reordered.returncode == 0, reordered.stdout + reordered.stderr
    swallowed = snakemake(workdir, "--cores", "1", "--resources", "gpu=1", "results/dpo/final", "-n")
    assert swallowed.returncode != 0  # --resources takes the target as a resource: see README
    local = subprocess.run(
        [
            str(Path(os.sys.executable).parent / "snakemake"),
            "results/dpo/final",
            "--profile",
            str(ROOT / "profiles/local"),
            "-n",
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    assert local.returncode == 0, local.stdout + local.stderr


@pytest.mark.main_job
def test_readme_main_command_as_written(main_job_install_signal):
    """The README's first command, verbatim, in the project directory (about 10 minutes).
    Its pip reinstalls this venv's replaykit: on pytest-xdist the other worker waits for that
    (conftest's ``main_job_install_signal``)."""
    # 502 s alone, 1,383 s beside the other worker's SLURM and campaign builds (2026-12-02): the
    # timeout catches a hang, not a busy machine
    result = subprocess.run(
        ["bash", "-c", block("main-command")], cwd=ROOT, capture_output=True, text=True, timeout=2700
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    final = ROOT / "results" / "dpo" / "final"
    assert (final / ".complete").exists()
    summary = json.loads((final / "summary.json").read_text())
    assert 0.0 <= summary["value"] <= 1.0 and summary["n"] == 64
    report = (final / "report.md").read_text()
    assert report.count("| checkpoint-") == 3


def test_default_workflow_profile_gives_one_core_and_one_gpu_slot():
    """profiles/default/ is what Snakemake 9.27 reads by itself (cli.py: `profiles/default`
    next to the working directory or the Snakefile)."""
    import yaml

    profile = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())
    assert profile == {"cores": 1, "resources": ["gpu=1"]}


@pytest.mark.slow
def test_bare_target_uses_the_default_profile(workdir, tiny_llama):
    import shutil

    write_config(workdir, tiny_config(tiny_llama))
    shutil.copytree(ROOT / "profiles", workdir / "profiles")
    env = dict(os.environ, PATH=f"{Path(os.sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    bare = subprocess.run(
        [str(Path(os.sys.executable).parent / "snakemake"), "results/dpo/final", "-n"],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
    )
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert "Using workflow specific profile profiles/default" in bare.stdout + bare.stderr
