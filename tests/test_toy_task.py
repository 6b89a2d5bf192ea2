"""A task added without editing the package: the plug-in in tests/toy_task/ is registered by an
entry point (a folder on PYTHONPATH with the module and its ``.dist-info``), brings its config
block's schema (CONFIG_SCHEMA) and its recipe (copied to ``recipes/toy/``), and its whole DAG
runs in the bubblewrap sandbox to ``results/toy/final``, with the official value computed here
by the closed form of gradient descent on a line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import replaykit.tasks as tasks
from conftest import ROOT, snakemake, write_config
from replaykit.config import check_config, config_schema, fill_defaults
from replaykit.harness.errors import InputError

TOY = ROOT / "tests" / "toy_task"
SCHEMA = ROOT / "config" / "schema.yaml"
DATA = {"slope": 3.0, "n_train": 2, "n_proxy": 2, "n_final": 3}


def toy_block(fixed_start: Path, **overrides) -> dict:
    """One config block for ``toy``: a 5-step replay of the shipped recipe, seed 42."""
    block = {
        "fixed_start": str(fixed_start),
        "data": dict(DATA),
        "seeds": [42],
        "budget": {"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 10},
        "final": {"n_boot": 200},
    }
    block.update(overrides)
    return block


def expected_value(w0: float, slope: float, lr: float, steps: int, train_x, final_x) -> float:
    """The final split's mean squared error after ``steps`` of full-batch gradient descent
    from ``w0``: ``w_k - a = (w0 - a)(1 - 2η·mean(x²))^k`` on points of ``y = a·x``, and a
    row's error is ``(w - a)²·x²``."""
    m_train = sum(x * x for x in train_x) / len(train_x)
    w = slope + (w0 - slope) * (1 - 2 * lr * m_train) ** steps
    return (w - slope) ** 2 * sum(x * x for x in final_x) / len(final_x)


def python_path(*folders) -> str:
    """``folders`` before the PYTHONPATH entries already set (this checkout's src/, say)."""
    return os.pathsep.join([*map(str, folders), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


@pytest.fixture
def registered(monkeypatch):
    """The registry as a process with tests/toy_task/ on its path finds it."""
    monkeypatch.syspath_prepend(str(TOY))
    known, found, refused = tasks._discover()
    monkeypatch.setattr(tasks, "KNOWN", known)
    monkeypatch.setattr(tasks, "REGISTERED", found)
    monkeypatch.setattr(tasks, "REFUSED", refused)
    tasks.get_task.cache_clear()
    yield
    tasks.get_task.cache_clear()


def test_the_entry_point_is_found_without_importing_the_plugin():
    code = (
        "import sys, replaykit.tasks as t; "
        "print(t.KNOWN, t.REGISTERED, t.REFUSED, 'replaykit_toy' in sys.modules); "
        "p = t.get_task('toy'); print(p.METRIC['direction'], [r.name for r in t.code_roots('toy')])"
    )
    env = dict(os.environ, PYTHONPATH=python_path(TOY))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "('ddpo', 'digress', 'dpo', 'rm', 'soup', 'toy') {'toy': 'replaykit_toy'} {} False",
        "minimize ['replaykit_toy']",
    ]


def test_a_name_clash_with_a_builtin_task_is_refused_by_name(tmp_path):
    dist = tmp_path / "clash-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: clash\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[replaykit.tasks]\ndpo = replaykit_toy\nBad-Name = replaykit_toy\n")
    code = (
        "import replaykit.tasks as t; print(t.KNOWN); t.get_task('rm')\n"
        "for name in ('dpo', 'Bad-Name'):\n"
        "    try: t.get_task(name)\n"
        "    except Exception as exc: print(type(exc).__name__, exc)\n"
    )
    env = dict(os.environ, PYTHONPATH=python_path(tmp_path, TOY))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "('Bad-Name', 'ddpo', 'digress', 'dpo', 'rm', 'soup', 'toy')"
    assert lines[1] == (
        "InputError config: tasks.dpo: entry point dpo = replaykit_toy of distribution clash registers a task "
        "of the same name as replaykit.tasks.dpo; uninstall that distribution or rename its entry point"
    )
    assert lines[2].startswith("InputError config: tasks.Bad-Name: entry point Bad-Name = replaykit_toy")
    assert "not a task name" in lines[2]


def test_the_plugin_brings_its_block_schema(registered, tmp_path):
    config = {"tasks": {"toy": toy_block(TOY / "fixed-start")}}
    schema = config_schema(SCHEMA, config)
    block = schema["properties"]["tasks"]["properties"]["toy"]
    assert block["properties"]["data"]["properties"]["source"] == {"$ref": "#/$defs/source", "default": "embedded"}
    assert block["properties"]["budget"] == {"$ref": "#/$defs/budget"}  # the shared keys
    check_config(config, SCHEMA, "toy.yaml")
    fill_defaults(config, schema)
    toy = config["tasks"]["toy"]
    assert toy["evaluation"] == {"runtime": 5} and toy["validation"] == {"dtype": "auto", "runtime": 10}
    assert (toy["candidate"], toy["threads"], toy["data"]["source"]) == ("shipped", 1, "embedded")
    # the built-in blocks are the ones of config/schema.yaml, untouched
    plain = config_schema(SCHEMA, {"tasks": {"dpo": {}}})
    assert "toy" not in plain["properties"]["tasks"]["properties"]
    assert schema["properties"]["tasks"]["properties"]["dpo"] == plain["properties"]["tasks"]["properties"]["dpo"]


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"data": {**DATA, "slop": 3}}, "tasks.toy.data.slop", "did you mean 'slope'?"),
        ({"data": {**DATA, "n_final": 0}}, "tasks.toy.data.n_final", "0 is less than the minimum of 1"),
        ({"budget": {"outer_limit_s": 1}}, "tasks.toy.budget", "'internal_deadline_s' is a required property"),
        ({"evaluation": {"runtime": 0}}, "tasks.toy.evaluation.runtime", "0 is less than the minimum of 1"),
    ],
)
def test_a_bad_toy_block_is_one_clear_line(registered, change, field, message):
    config = {"tasks": {"toy": toy_block(TOY / "fixed-start", **change)}}
    with pytest.raises(InputError) as err:
        check_config(config, SCHEMA, "toy.yaml")
    assert err.value.field == field and message in err.value.message


def test_a_registered_plugin_without_config_schema_is_refused(registered, monkeypatch):
    import replaykit_toy

    monkeypatch.delattr(replaykit_toy, "CONFIG_SCHEMA")
    tasks.get_task.cache_clear()
    with pytest.raises(InputError) as err:
        config_schema(SCHEMA, {"tasks": {"toy": {}}})
    assert err.value.field == "CONFIG_SCHEMA" and "must give its block's schema" in err.value.message


@pytest.mark.slow
def test_the_toy_dag_runs_end_to_end_in_the_sandbox(tmp_path):
    """Copy the project, add ``recipes/toy/`` and the plug-in (inside the working directory,
    which the sandbox hides: only the plug-in's package is shown again), write one config
    block, build ``results/toy/final``."""
    from conftest import copy_workflow

    work = copy_workflow(tmp_path)
    shutil.copytree(TOY / "recipe", work / "recipes" / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    plugins = work / "plugins"
    for name in ("replaykit_toy", "replaykit_toy-0.dist-info", "fixed-start"):
        shutil.copytree(TOY / name, plugins / name, ignore=shutil.ignore_patterns("__pycache__"))
    write_config(work, {"models": {}, "tasks": {"toy": toy_block(plugins / "fixed-start")}})
    started = time.time()
    env = {"PYTHONPATH": python_path(plugins)}
    snakemake(work, "results/toy/final", "--cores", "2", "--resources", "gpu=1", env=env, check=True)
    seconds = time.time() - started

    run = work / "results/toy/shipped-seed42"
    record = json.loads((run / "replay/record.json").read_text())
    assert record["isolation"] == "bwrap" and record["stop_reason"] == "max_steps"
    assert record["retained"] == [3, 4, 5] and record["publication_count"] == 5
    # the closed form: x = 1, 2 for training, 5, 6, 7 final; w0 = 1, slope 3, η = 0.1, 5 steps
    value = expected_value(1.0, 3.0, 0.1, 5, [1, 2], [5, 6, 7])
    assert value == pytest.approx(110 / 768, rel=1e-12)  # (w5 - 3)² = 4 / 2^10, mean x² = 110/3
    official = json.loads((run / "official.json").read_text())["official"]
    assert official["progress"] == 5 and official["value"] == pytest.approx(value, rel=1e-12)
    final = json.loads((work / "results/toy/final/summary.json").read_text())
    assert (work / "results/toy/final/.complete").exists()
    assert final["metric"] == "squared_error_final3" and final["direction"] == "minimize"
    assert final["value"] == pytest.approx(value, rel=1e-12) and final["isolation"] == "bwrap"
    assert final["references"]["fixed_start"]["value"] == pytest.approx(4 * 110 / 3, rel=1e-12)  # w = w0 = 1
    print(f"toy DAG: {seconds:.0f} s")
