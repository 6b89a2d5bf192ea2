"""Same seed, same bytes (issue 28): a replay's published checkpoints are byte-identical between
two runs of one config. PEFT writes ``adapter_config.json``'s ``target_modules`` as
``list(set)``, whose order follows Python's string hashing; the launch fixes ``PYTHONHASHSEED``
for every training process (replay and exploration probe: ``harness.launch.training_env``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import copy_workflow, snakemake
from replaykit.harness.hashing import tree_files
from replaykit.harness.launch import training_env

MODULES = "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj to_q to_k to_v to_out.0"
SET_ORDER = f"import json; print(json.dumps(list(set({MODULES.split()!r}))))"


def set_order(env: dict) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SET_ORDER], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_set_iterates_alike_in_every_training_process():
    """Two training processes whose callers set different hash seeds list a set alike; the same
    code under those two seeds without the launch's environment does not (so the check can
    fail)."""
    import os

    seeds = ("1", "2")
    bare = [set_order(dict(os.environ, PYTHONHASHSEED=seed)) for seed in seeds]
    assert bare[0] != bare[1] and sorted(bare[0]) == sorted(bare[1])
    launched = []
    for seed in seeds:
        os.environ["PYTHONHASHSEED"] = seed
        try:
            launched.append(set_order(training_env(1)))
        finally:
            del os.environ["PYTHONHASHSEED"]
    assert launched[0] == launched[1]


@pytest.mark.slow
@pytest.mark.parametrize("fixture, task", [("rm_run", "rm"), ("dpo_run", "dpo"), ("soup_run", "soup")])
def test_a_second_replay_publishes_the_same_bytes(fixture, task, request, tmp_path):
    """The shipped recipe's replay built again from the shared run's config, in another folder
    (another process, another hash seed of the caller): every retained checkpoint, file by
    file, has the shared run's bytes (the record's tree hashes and each file's SHA-256)."""
    first = request.getfixturevalue(fixture)
    work = tmp_path / "again"
    work.mkdir()
    copy_workflow(work)
    shutil.copyfile(first / "config/config.yaml", work / "config/config.yaml")
    record = f"results/{task}/shipped-seed42/replay/record.json"
    env = {"PYTHONHASHSEED": "12345"}  # the operator's seed differs from the shared run's
    snakemake(work, record, "--cores", "1", "--resources", "gpu=1", check=True, env=env, timeout=900)
    docs = [json.loads((root / record).read_text()) for root in (first, work)]
    assert docs[0]["checkpoints"].keys() == docs[1]["checkpoints"].keys()
    for progress, entry in docs[0]["checkpoints"].items():
        again = docs[1]["checkpoints"][progress]
        files = [tree_files(root / doc["checkpoints"][progress]["path"]) for root, doc in zip((first, work), docs)]
        differ = sorted(name for name in files[0].keys() | files[1].keys() if files[0].get(name) != files[1].get(name))
        assert not differ, f"checkpoint-{progress}: not reproducible: {differ}"
        assert entry["sha256"] == again["sha256"]
