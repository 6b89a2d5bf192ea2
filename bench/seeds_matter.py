"""Does a task's replay seed change its final scores? The tiny config (config/test.yaml) with
two seeds per task, in a copy of the workflow; prints each run's official value and every
retained checkpoint's final value, and whether the two seeds differ.

    .venv/bin/python bench/seeds_matter.py [WORKDIR] [TASK ...]

WORKDIR (default: a new temporary folder) receives the copy and its results/; TASK defaults to
all five. Used for docs/operations.md ("Which tasks' seeds matter").
"""

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("dpo", "rm", "soup", "digress", "ddpo")
SEEDS = (42, 43)


def main(argv: list[str]) -> None:
    work = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="seeds-matter-"))
    tasks = argv[1:] or list(TASKS)
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "Snakefile").exists():
        for name in ("Snakefile", "rules", "config", "recipes", "envs", "report"):
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    for task in tasks:
        config["tasks"][task]["seeds"] = list(SEEDS)
    (work / "config/config.yaml").write_text(yaml.safe_dump(config))
    snakemake = ROOT / ".venv/bin/snakemake"
    for task in tasks:
        targets = [f"results/{task}/shipped-seed{s}/official.json" for s in SEEDS]
        start = time.monotonic()
        cmd = [str(snakemake), *targets, "--workflow-profile", "none", "--cores", "2", "--resources", "gpu=1"]
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if done.returncode:
            print(f"{task}: snakemake failed ({done.returncode}); see {work}/logs/{task}/", flush=True)
            continue
        runs = {s: json.loads((work / targets[i]).read_text()) for i, s in enumerate(SEEDS)}
        values = {s: [(c["progress"], c["value"]) for c in runs[s]["checkpoints"]] for s in SEEDS}
        official = {s: runs[s]["official"]["value"] for s in SEEDS}
        differ = values[SEEDS[0]] != values[SEEDS[1]]
        print(
            f"{task}: official {official}; checkpoints {values}; "
            f"seeds {'change' if differ else 'do NOT change'} the final scores "
            f"({time.monotonic() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
