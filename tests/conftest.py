"""Shared fixtures: a tiny random Llama with a locally trained tokenizer, and a copy of the
workflow to run Snakemake in (so tests never touch the repository's results/)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replaykit.tiny_model import CHAT_TEMPLATE  # noqa: F401  (tests import it from here)

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TEST_CONFIG = ROOT / "config" / "test.yaml"  # the tiny settings users run too (README)


def make_tiny_model(out: Path, model_type: str = "llama") -> Path:
    """The ``tiny-llama`` builder's model (:mod:`replaykit.tiny_model`): 2 layers of the given
    architecture (``llama``: SmolLM2's; ``mistral``: Zephyr's and Mistral-7B's), hidden size
    32, random weights (seed 0), a BPE tokenizer trained on the instruction texts, ChatML."""
    from replaykit.tiny_model import make_tiny_model as make

    return make(out, model_type)


def recipe_train(task: str):
    """``recipes/<task>/train.py`` as module ``<task>_recipe_train`` (each task's under its own
    name: several recipes are called ``train``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{task}_recipe_train", ROOT / "recipes" / task / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def write_request(
    state: Path, fixed_start, public_dir, overrides: dict, profile: str = "embedded", resume: bool = False
) -> Path:
    """``<state>/request.json`` as the replay driver writes it for a recipe's ``train.py`` (seed 42,
    deadline in 10 minutes, 3 checkpoints kept, one thread; ``<state>/state`` and
    ``<state>/publish`` for its state and publications); returns its path."""
    import json
    import time

    state = Path(state)
    (state / "state").mkdir(parents=True, exist_ok=True)
    request = {
        "fixed_start": str(fixed_start),
        "public_dir": str(public_dir),
        "publish_dir": str(state / "publish"),
        "state_dir": str(state / "state"),
        "seed": 42,
        "deadline_unix": time.time() + 600,
        "export_reserve_s": 60,
        "profile": profile,
        "overrides": overrides,
        "threads": 1,
        "keep": 3,
        "resume": resume,
    }
    (state / "request.json").write_text(json.dumps(request))
    return state / "request.json"


def tiny_task(task: str) -> dict:
    """A deep copy of ``tasks.<task>`` of ``config/test.yaml``."""
    return copy.deepcopy(yaml.safe_load(TEST_CONFIG.read_text())["tasks"][task])


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama", "llama")


def tiny_config(fixed_start: Path, **task_overrides) -> dict:
    """The dpo block of ``config/test.yaml`` on ``fixed_start`` (the whole DAG in about a minute)."""
    task = tiny_task("dpo")
    task["fixed_start"] = str(fixed_start)
    task.update(task_overrides)
    return {"models": {}, "tasks": {"dpo": task}}


def rm_config(fixed_start: Path, **overrides) -> dict:
    """The rm block of ``config/test.yaml`` on ``fixed_start`` (the whole DAG in about a minute)."""
    task = tiny_task("rm")
    task["fixed_start"] = str(fixed_start)
    task.update(overrides)
    return {"models": {}, "tasks": {"rm": task}}


def ultrafeedback_rows(n: int) -> list[dict]:
    """UltraFeedback-binarized-format rows: whole conversations in ``chosen``/``rejected``."""
    rows = []
    for i in range(n):
        question = f"Name a colour, please ({i})."
        rows.append(
            {
                "prompt": question,
                "prompt_id": str(i),
                "chosen": [{"role": "user", "content": question}, {"role": "assistant", "content": "Blue."}],
                "rejected": [{"role": "user", "content": question}, {"role": "assistant", "content": f"No ({i})."}],
                "score_chosen": 8.0,
                "score_rejected": 2.0,
            }
        )
    return rows


def copy_workflow(dest: Path) -> Path:
    """Copy the workflow (Snakefile, rules, config, recipes, envs, report captions) to run Snakemake in."""
    for name in ("Snakefile", "rules", "config", "recipes", "envs", "report"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


@pytest.fixture
def workdir(tmp_path) -> Path:
    return copy_workflow(tmp_path)


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "config" / "config.yaml"  # replaces the default: --configfile would merge into it
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(
    workdir: Path, *args: str, timeout: float = 600, check: bool = False, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the venv's snakemake in ``workdir`` (no default profile) and capture its output;
    ``env`` adds or replaces environment variables."""
    cmd = [str(VENV_BIN / "snakemake"), "--workflow-profile", "none", *args]
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def config_patch(workdir, name, key, value):
    """A candidate patch that sets ``key: value`` in the recipe's embedded profile."""
    import difflib

    original = (workdir / "recipes/dpo/configs/embedded.yaml").read_text().splitlines(keepends=True)
    changed = [f"{key}: {value}\n" if line.startswith(f"{key}:") else line for line in original]
    patch = workdir / f"{name}.diff"
    patch.write_text(
        "".join(difflib.unified_diff(original, changed, "a/configs/embedded.yaml", "b/configs/embedded.yaml"))
    )
    return patch


def orphan_processes(marker: str) -> list[str]:
    """Replay drivers and training processes whose full command line contains ``marker``."""
    # -ww: full command lines (ps cuts them to the terminal width, COLUMNS, otherwise)
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if marker in l and ("train.py" in l or "replaykit replay" in l)]
