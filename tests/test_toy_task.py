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
from conftest import ROOT, rediscover, snakemake, write_config
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
    rediscover(monkeypatch, TOY)
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
    assert lines[0] == "('ddpo', 'digress', 'rm', 'soup', 'toy')"  # refused names are no choice
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


def install(folder: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str] | None = None) -> Path:
    """An installed distribution ``dist`` in ``folder`` (to put on PYTHONPATH): its
    ``.dist-info`` registering ``entry_points`` (task name -> module) and ``modules``
    (module name -> source)."""
    info = folder / f"{dist}-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0\n")
    lines = "".join(f"{name} = {module}\n" for name, module in entry_points.items())
    (info / "entry_points.txt").write_text(f"[replaykit.tasks]\n{lines}")
    for module, source in (modules or {}).items():
        (folder / f"{module}.py").write_text(source)
    return folder


def test_the_frozen_code_record_covers_registered_plugins(registered, discover, tmp_path):
    """A registered plug-in's files are in the frozen-code record (``plugin:<task>/<path>``,
    hashed here with hashlib); a changed one-module plug-in fails :func:`verify`, naming its file."""
    import hashlib

    files = tasks.frozen_code().files()
    source = TOY / "replaykit_toy" / "__init__.py"
    assert files["plugin:toy/__init__.py"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert "harness/frozen.py" in files and tasks.frozen_code().record()["plugins"] == {
        "toy": [str(source.parent.resolve())]
    }

    discover(install(tmp_path / "site", "onefile", {"onefile": "rk_onefile"}, {"rk_onefile": "METRIC = {}\n"}))
    rec = tmp_path / "frozen-code.json"
    tasks.frozen_code().write_record(rec)
    assert "plugin:onefile/rk_onefile.py" in tasks.frozen_code().files()
    (tmp_path / "site" / "rk_onefile.py").write_text("METRIC = {'changed': 1}\n")
    with pytest.raises(InputError, match=r"rk_onefile\.py: sha256: frozen code differs .*\(changed \(sha256"):
        tasks.frozen_code().verify(rec)


def test_the_frozen_code_record_covers_every_layout_of_a_plugin(registered, discover, monkeypatch, tmp_path):
    """Each folder of a namespace package; a folder linked in by a symlink; the zip archive a
    plug-in is imported from. Left out: an entry module that does not exist, and a plug-in
    folder that holds the working directory (whose task the sandbox refuses)."""
    import hashlib
    import zipfile

    site = install(tmp_path / "site", "several", {"nstoy": "acme.rk_ns", "sl": "rk_sl", "ghost": "json.no_such"})
    (tmp_path / "ns1/acme").mkdir(parents=True)
    (tmp_path / "ns1/acme/other.py").write_text("X = 1\n")
    (site / "acme").mkdir()
    (site / "acme/rk_ns.py").write_text("METRIC = {}\n")
    (tmp_path / "shared/helpers").mkdir(parents=True)
    (tmp_path / "shared/helpers/__init__.py").write_text("H = 1\n")
    (site / "rk_sl").mkdir()
    (site / "rk_sl/__init__.py").write_text("")
    (site / "rk_sl/helpers").symlink_to(tmp_path / "shared/helpers")
    archive = tmp_path / "plug.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("rk_zip/__init__.py", "METRIC = {}\n")
        zf.writestr("zipped-0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 0\n")
        zf.writestr("zipped-0.dist-info/entry_points.txt", "[replaykit.tasks]\nzp = rk_zip\n")
    monkeypatch.syspath_prepend(str(tmp_path / "ns1"))
    discover(archive)
    discover(site)
    files = tasks.frozen_code().files()
    plugin = {k: v for k, v in files.items() if k.startswith("plugin:") and not k.startswith("plugin:toy/")}
    assert set(plugin) == {
        "plugin:nstoy/0/rk_ns.py",  # site comes first on sys.path
        "plugin:nstoy/1/other.py",
        "plugin:sl/__init__.py",
        "plugin:sl/helpers/__init__.py",
        "plugin:zp/plug.zip",
    }
    assert plugin["plugin:zp/plug.zip"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert plugin["plugin:sl/helpers/__init__.py"] == hashlib.sha256(b"H = 1\n").hexdigest()
    monkeypatch.chdir(TOY / "replaykit_toy")  # a working directory inside a plug-in's folder
    assert "toy" not in tasks.frozen_code().plugin_roots()
    with pytest.raises(InputError, match="replaykit_toy holds the working directory"):
        tasks.code_roots("toy")


# Plug-ins that do not load, each for its own reason: module name -> (source, what the line says).
BROKEN = {
    "rk_raises": ("raise RuntimeError('boom\\nin two lines')\n", "RuntimeError: boom in two lines"),
    "rk_syntax": ("METRIC = {\n", "SyntaxError: "),
    "rk_imports": ("import rk_no_such_module  # noqa\n", "ModuleNotFoundError: No module named 'rk_no_such_module'"),
    "rk_incomplete": ("METRIC = {}\n", "missing required members"),
}


def test_a_broken_plugin_not_configured_leaves_the_builtin_builders_alone(tmp_path):
    """Each broken plug-in is skipped with one warning line naming its distribution and
    module; the built-in builders are all there, and a fixed start is built."""
    install(tmp_path, "broken", {m.removeprefix("rk_"): m for m in BROKEN}, {m: src for m, (src, _) in BROKEN.items()})
    env = dict(os.environ, PYTHONPATH=python_path(tmp_path))
    code = "import replaykit.tasks as t; print(sorted(t.builders()), t.KNOWN)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "['ddpo-digits', 'qm9pack', 'soup-digits', 'tiny-llama'] "
        "('ddpo', 'digress', 'dpo', 'imports', 'incomplete', 'raises', 'rm', 'soup', 'syntax')"
    ]
    warnings = out.stderr.splitlines()
    assert len(warnings) == len(BROKEN), out.stderr
    for line, (module, (_, what)) in zip(warnings, sorted(BROKEN.items())):
        assert line.startswith(f"warning: task plug-in {module.removeprefix('rk_')!r} skipped: ")
        assert f"{module}.py" in line and what in line
    assert all("of distribution broken" in line for line in warnings if "missing required" not in line)
    # the command of the report: a built-in builder's fixed start
    cmd = [sys.executable, "-m", "replaykit", "fixed-start", "--spec", '{"builder":"tiny-llama","seed":0}']
    cmd += ["--out", str(tmp_path / "x" / "tl"), "--manifest", str(tmp_path / "x" / "tl.json")]
    (tmp_path / "x").mkdir()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x" / "tl" / "config.json").is_file() and "Traceback" not in done.stderr


@pytest.fixture
def discover(monkeypatch):
    """``discover(folder)``: the registry as a process with ``folder`` on its path finds it."""

    yield lambda folder: rediscover(monkeypatch, folder)
    tasks.get_task.cache_clear()


@pytest.mark.parametrize("module", sorted(BROKEN))
def test_a_broken_plugin_configured_is_one_line_naming_its_file(discover, tmp_path, module):
    source, what = BROKEN[module]
    discover(install(tmp_path, "broken", {"broken": module}, {module: source}))
    with pytest.raises(InputError) as err:
        config_schema(SCHEMA, {"tasks": {"broken": {}}})
    assert err.value.path == str(tmp_path / f"{module}.py")
    assert what in err.value.message and "\n" not in str(err.value)
    if module != "rk_incomplete":  # the contract's own message names the members instead
        assert err.value.field == "import" and "entry point broken = " + module in err.value.message


def test_a_broken_plugin_configured_stops_the_workflow_in_one_line(tmp_path):
    from conftest import copy_workflow

    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    install(tmp_path / "plugins", "broken", {"broken": "rk_raises"}, {"rk_raises": BROKEN["rk_raises"][0]})
    write_config(work, {"models": {}, "tasks": {"broken": toy_block(TOY / "fixed-start")}})
    out = snakemake(work, "-n", env={"PYTHONPATH": python_path(tmp_path / "plugins")})
    assert out.returncode != 0 and "Traceback" not in out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "rk_raises.py: import: plug-in rk_raises" in lines[0]
    assert "RuntimeError: boom in two lines" in lines[0]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda s: s["data"]["properties"]["slope"].update(type="numbr"),
            "not a valid JSON schema (draft 2020-12) at data.properties.slope.type: 'numbr' is not valid",
        ),
        (
            lambda s: s["data"]["properties"]["slope"].update({"$ref": "#/$defs/nosuchdef"}),
            "$ref '#/$defs/nosuchdef' at data.properties.slope does not resolve",
        ),
        (lambda s: s["evaluation"].pop("default"), "evaluation needs a default"),
        (lambda s: s["evaluation"]["properties"]["runtime"].pop("default"), "evaluation needs a default"),
        (lambda s: s.update(validation={"type": "object", "default": {}}), "validation needs a default"),
    ],
)
def test_a_bad_config_schema_is_one_line_naming_it(registered, monkeypatch, change, message):
    import copy

    import replaykit_toy

    schema = copy.deepcopy(replaykit_toy.CONFIG_SCHEMA)
    change(schema)
    monkeypatch.setattr(replaykit_toy, "CONFIG_SCHEMA", schema)
    tasks.get_task.cache_clear()
    with pytest.raises(InputError) as err:
        config_schema(SCHEMA, {"tasks": {"toy": toy_block(TOY / "fixed-start")}})
    assert (err.value.path, err.value.field) == (replaykit_toy.__file__, "CONFIG_SCHEMA")
    assert message in err.value.message and len(str(err.value)) < 500


@pytest.mark.parametrize("name", sorted(tasks.RESERVED))
def test_a_reserved_name_is_refused_and_no_choice(discover, tmp_path, name):
    """``models`` would make results/models/<x> ambiguous between fixed_start_model and the
    task's rules; ``start`` is a subcommand of ``explore``."""
    discover(install(tmp_path, "clash", {name: "replaykit_toy"}))
    assert name not in tasks.KNOWN and "toy" not in tasks.KNOWN
    with pytest.raises(InputError) as err:
        config_schema(SCHEMA, {"tasks": {name: {}}})
    assert err.value.field == f"tasks.{name}" and f"{name!r} is reserved" in err.value.message
    assert "of distribution clash" in err.value.message
    from replaykit import cli

    explore = next(
        a for a in cli.parser()._subparsers._group_actions[0].choices["explore"]._actions if a.dest == "action"
    )
    assert name not in explore.choices or name == "start"
    start = next(a for a in explore.choices["start"]._actions if a.dest == "task")
    assert name not in start.choices


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
    recorded = json.loads((work / "results/frozen-code.json").read_text())
    assert recorded["plugins"] == {"toy": [str((plugins / "replaykit_toy").resolve())]}
    assert "plugin:toy/__init__.py" in recorded["files"]
    print(f"toy DAG: {seconds:.0f} s")
