"""The configs of ``bench/full_dag.py`` (each task's full-scale DAG on random weights, issue 17).

A device run is worth what its config is: the full-scale config of the task, changed only
where ``DEVICE_CHANGES`` says (and in the paths, threads and budget). Checked here: each
config passes the workflow's schema on the toy-size stand-ins, its recipe overrides name knobs
of the profile with values of the right kind, every key ``DEVICE_CHANGES`` sets already exists
(in the full-scale block or the profile), and the full-size config differs from
``config/full-scale/<task>.yaml`` in no other key.
"""

from __future__ import annotations

import copy
import sys

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import full_dag  # noqa: E402


def paths(task: str) -> dict:
    """Stand-in paths of ``task`` (nothing on disk)."""
    data = {
        "dpo": ["train_prefs", "ifeval_prompts"],
        "rm": ["train_prefs", "rewardbench"],
        "ddpo": ["prompts_file", "clip_dir", "aesthetic_mlp"],
        "soup": ["imagenetv2_dir"],
        "digress": [],
    }[task]
    return {"fixed_start": f"/stand-ins/{task}/model", "data": {k: f"/stand-ins/{task}/{k}" for k in data}}


@pytest.fixture(scope="module")
def toy_stand_ins(tmp_path_factory):
    """The toy-size stand-ins of every task (the schema check reads the files it names)."""
    root = tmp_path_factory.mktemp("stand-ins")
    qm9 = root / "qm9"
    qm9.mkdir()
    (qm9 / "config.json").write_text('{"kind": "qm9pack", "files": []}')
    return {task: full_dag.stand_ins(task, "tiny", root / task, qm9, shared=root) for task in full_dag.TASKS}


def merged(base: dict, update: dict) -> dict:
    """Snakemake's ``--configfile`` merge: mappings recursively, other values replaced."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("size", ["full", "tiny"])
@pytest.mark.parametrize("task", full_dag.TASKS)
def test_config_passes_the_schema_and_the_recipe_contract(task, size, toy_stand_ins):
    """At both sizes, on the toy stand-ins (the full-size config's knobs on toy files)."""
    from replaykit.config import check_config
    from replaykit.harness.profile import check_overrides

    block = full_dag.task_block(task, size, toy_stand_ins[task])
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    check_config(merged(base, {"tasks": {task: block}}), ROOT / "config/schema.yaml", f"{task}.yaml")
    check_overrides(ROOT / "recipes" / task, block["recipe"]["profile"], block["recipe"]["overrides"])


@pytest.mark.parametrize("task", full_dag.TASKS)
def test_full_size_is_the_full_scale_config_but_for_the_listed_changes(task):
    full = yaml.safe_load((ROOT / f"config/full-scale/{task}.yaml").read_text())["tasks"][task]
    block = full_dag.task_block(task, "full", paths(task))
    changed = {k for k in set(flat(full)) | set(flat(block)) if flat(full).get(k) != flat(block).get(k)}
    listed = {"fixed_start", "threads"} | {f"budget.{k}" for k in full_dag.BUDGET}
    listed |= {f"data.{k}" for k in paths(task)["data"]}
    for dotted, value in full_dag.DEVICE_CHANGES[task].items():
        listed |= {f"{dotted}.{k}" for k in value} if isinstance(value, dict) else {dotted}
    assert changed <= listed, sorted(changed - listed)
    assert block["recipe"]["profile"] == full["recipe"]["profile"]
    # and each change replaces a key that exists: a misspelt one would add a key instead
    profile = yaml.safe_load((ROOT / f"recipes/{task}/configs/{full['recipe']['profile']}.yaml").read_text())
    for dotted, value in full_dag.DEVICE_CHANGES[task].items():
        if dotted == "recipe.overrides":
            assert set(value) <= set(profile), sorted(set(value) - set(profile))
        else:
            assert dotted in flat(full), dotted


def test_set_changes_the_block_last_with_yaml_values():
    """``--set`` (``bench/device_full_dag.sh``'s SET): the values are YAML, keys nest, and the
    change lands over ``DEVICE_CHANGES``."""
    block = full_dag.task_block("rm", "full", paths("rm"))
    assert block["recipe"]["overrides"]["max_steps"] == 2
    out = full_dag.apply_settings(
        block, ["recipe.overrides.max_steps=16", "recipe.overrides.micro_batch_tokens=null", "recipe.profile=full-nogc"]
    )
    assert out["recipe"]["overrides"]["max_steps"] == 16
    overrides = out["recipe"]["overrides"]
    assert "micro_batch_tokens" in overrides and overrides["micro_batch_tokens"] is None
    assert out["recipe"]["profile"] == "full-nogc"
    for bad in ("recipe.profile", "=3"):
        with pytest.raises(SystemExit, match="DOTTED.KEY=YAML_VALUE"):
            full_dag.apply_settings(block, [bad])
    for bad, parent in (("recipe.override.max_steps=3", "recipe.override"), ("recipe.profile.x=1", "recipe.profile")):
        with pytest.raises(SystemExit, match=f"{parent} is not a mapping of the task block"):
            full_dag.apply_settings(block, [bad])
    assert "override" not in block["recipe"]


def test_replay_steps_reads_step_times_and_tokens(tmp_path):
    """``bench/replay_steps.py``: the mean step over steps 2..M from the progress lines' stamps,
    and the real tokens of those steps from the running ``num_tokens`` (step 1's excluded)."""
    import json

    import replay_steps

    folder = tmp_path / "rm-full"
    folder.mkdir()
    history = [
        {"loss": 1.0, "num_tokens": 100.0},
        {"loss": 0.9, "num_tokens": 250.0},
        {"loss": 0.8, "num_tokens": 450.0},
    ]
    (folder / "rm-shipped-seed42-record.json").write_text(
        json.dumps({"profile": "full", "overrides": {}, "train_history": history})
    )
    (folder / "rm-shipped-seed42-replay.log").write_text(
        "[data] 3 pairs\n"
        + "".join(
            f"[train] step {n}/3 loss 1.0 accuracy 0.5 margin 0.1 elapsed {s} s\n"
            for n, s in [(1, 10), (2, 20), (3, 35)]
        )
    )
    v = replay_steps.variant(folder)
    # steps 2 and 3: (35 - 10) s / 2 steps; (450 - 100) tokens over those 25 s
    assert (v["steps"], v["step_s"], v["tokens_a_step"], v["tokens_per_s"]) == (3, 12.5, 175.0, 14.0)
