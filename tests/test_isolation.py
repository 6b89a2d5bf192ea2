"""The isolation plan has one owner (replaykit.isolation.plan): the replay rule's plan (built by
the CLI from the rule's arguments) and the exploration probe's plan (built by the exploration
package) agree on everything that is not the run's own paths, for every task and a task
registered from outside the package; neither shows a final-split path; and a real process in
a plan reads nothing the plan does not name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import replaykit.tasks as tasks
from conftest import ROOT, rediscover
from replaykit import cli
from replaykit.exploration import Exploration, probe_plan
from replaykit.exploration.proxy import proxy_plan
from replaykit.harness.sandbox import inside
from replaykit.isolation import final_paths

TOY = ROOT / "tests" / "toy_task"
TASKS = ("ddpo", "digress", "dpo", "rm", "soup", "toy")


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working directory with a task's assets, a fixed start outside it, and a shared dataset
    folder holding a final-split source beside a training file; the toy plug-in registered."""
    rediscover(monkeypatch, TOY)
    work = tmp_path / "work"
    for task in TASKS:
        for split in ("public", "hidden"):
            (work / "results" / task / "assets" / split).mkdir(parents=True)
    (tmp_path / "fixed").mkdir()
    shared = tmp_path / "datasets"
    (shared / "final").mkdir(parents=True)
    (shared / "final" / "items.jsonl").write_text("{}\n")
    (shared / "train.jsonl").write_text("{}\n")
    monkeypatch.chdir(work)
    yield tmp_path
    tasks.get_task.cache_clear()


def data_of(task: str, root: Path) -> dict:
    """A data block naming the task's final-split source (when it has one) and a training file."""
    final = {"dpo": "ifeval_prompts", "rm": "rewardbench", "soup": "imagenetv2_dir"}
    data = {"source": "local", "train_prefs": str(root / "datasets" / "train.jsonl")}
    if task in final:
        data[final[task]] = str(root / "datasets" / "final")
    return data


SETTINGS = {"isolation": "bwrap", "sandbox_show": [], "sandbox_hide": []}


def replay_plan(task: str, root: Path, settings: dict = SETTINGS):
    run = f"results/{task}/shipped-seed42"
    argv = ["replay", "--task", task, "--run", "shipped-seed42", "--workspace", f"{run}/workspace"]
    argv += ["--workspace-record", f"{run}/workspace.json", "--manifest", f"results/{task}/assets/manifest.json"]
    argv += ["--fixed-start", str(root / "fixed"), "--public", f"results/{task}/assets/public"]
    argv += ["--publish-dir", f"{run}/replay", "--state-dir", f"{run}/replay-state", "--record", f"{run}/r.json"]
    argv += ["--budget", json.dumps({"outer_limit_s": 60, "internal_deadline_s": 50, "export_reserve_s": 5})]
    argv += ["--profile", "embedded", "--seed", "42", "--data", json.dumps(data_of(task, root))]
    argv += ["--sandbox", json.dumps(settings)]
    return cli.replay_spec(cli.parser().parse_args(argv)).isolation


def exploration(task: str, root: Path, settings: dict = SETTINGS) -> Exploration:
    folder = Path("explore") / task / "x"
    (folder / "runs" / "probe-1").mkdir(parents=True)
    (folder / "workspace").mkdir()
    info = {"task": task, "started_unix": 0, "budget_s": 1, "fixed_start": str(root / "fixed")}
    info.update(public_dir=f"results/{task}/assets/public", manifest=f"results/{task}/assets/manifest.json")
    info.update(data=data_of(task, root), sandbox=settings, isolation=settings["isolation"])
    (folder / "exploration.json").write_text(json.dumps(info))
    return Exploration(folder)


@pytest.mark.parametrize("task", TASKS)
def test_the_replay_and_the_probe_see_the_same_but_their_own_paths(work, task):
    replay = replay_plan(task, work)
    ex = exploration(task, work)
    probe = probe_plan(ex, ex.dir / "runs" / "probe-1")
    run = Path(f"results/{task}/shipped-seed42").resolve()
    replay_own = {run / "workspace"}
    probe_own = {ex.dir.resolve() / "runs"}
    assert replay.mode == probe.mode == "bwrap"
    assert set(replay.read_only) - replay_own == set(probe.read_only) - probe_own
    assert set(replay.writable) == {run / "replay", run / "replay-state"}
    assert set(probe.writable) == {ex.workspace.resolve(), (ex.dir / "runs" / "probe-1").resolve()}
    assert replay.masked == probe.masked
    fixed_shown = (work / "fixed").resolve() in replay.read_only
    assert fixed_shown == (not tasks.get_task(task).FIXED_START_IS_DATA)  # digress: raw data, never shown
    assert (work / "datasets" / "train.jsonl").resolve() in replay.read_only  # the task's other local data
    final = final_paths(task, data_of(task, work), cli_settings())
    for plan in (replay, probe):
        shown = [*plan.read_only, *plan.writable]
        assert not any(inside(p, f) for p in shown for f in final), "a final-split path is shown"
        assert all(f in plan.masked for f in final if any(inside(f, p) for p in shown))
    if task == "soup":  # the drift the exploration once had: scikit-learn's digits, the final split's source
        digits = next(f for f in final if f.name == "digits.csv.gz")
        assert digits in replay.masked and digits in probe.masked
    if task == "toy":  # a plug-in registered from outside the package: its code is shown to both
        assert (TOY / "replaykit_toy").resolve() in replay.read_only


def cli_settings():
    from replaykit.isolation import Settings

    return Settings.from_config(SETTINGS)


def test_the_proxy_scoring_sees_the_fixed_start_and_writes_only_its_folder(work):
    """The exploration's proxy scoring runs frozen code only: it sees the fixed start even where
    candidate code may not (digress), the checkpoint read-only, and writes its own folder."""
    ex = exploration("digress", work)
    checkpoint = ex.dir / "runs" / "probe-1" / "publish" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    out = ex.dir / "proxy" / "1"
    out.mkdir(parents=True)
    plan = proxy_plan(ex, checkpoint, out)
    assert (work / "fixed").resolve() in plan.read_only and checkpoint.resolve() in plan.read_only
    assert set(plan.writable) == {out.resolve()}
    assert (work / "fixed").resolve() not in probe_plan(ex, ex.dir / "runs" / "probe-1").read_only


def test_a_config_file_list_is_no_input_of_the_plan(work):
    """The plan reads the config's isolation keys only: what config files were given cannot
    change it (so adding one never re-runs a replay), and sandbox_show / sandbox_hide do."""
    base = replay_plan("soup", work)
    assert replay_plan("soup", work) == base
    extra = {**SETTINGS, "sandbox_show": [str(work / "datasets")], "sandbox_hide": [str(work / "datasets" / "x")]}
    (work / "datasets" / "x").mkdir()
    shown = replay_plan("soup", work, extra)
    assert (work / "datasets").resolve() in shown.read_only
    assert {(work / "datasets" / "x").resolve(), (work / "datasets" / "final").resolve()} <= set(shown.masked)


def test_a_process_in_a_plan_reads_nothing_it_does_not_name(work, tmp_path):
    """A real process in the replay's plan: the workspace and the public split are there; a copy
    of the hidden split outside the working directory, the working directory's hidden split, a
    library cache outside $HOME, the shared dataset's final folder and scikit-learn's digits are
    not."""
    run = Path("results/soup/shipped-seed42")
    for sub in ("workspace", "replay", "replay-state"):
        (run / sub).mkdir(parents=True)
    (run / "workspace" / "train.py").write_text("print('ok')\n")
    Path("results/soup/assets/public/proxy.jsonl").write_text("{}\n")
    Path("results/soup/assets/hidden/final.jsonl").write_text("FINAL\n")
    copy = tmp_path / "other-checkout" / "results" / "soup" / "assets" / "hidden"
    copy.mkdir(parents=True)
    (copy / "final.jsonl").write_text("FINAL\n")
    cache = tmp_path / "hf-home"
    cache.mkdir()
    (cache / "token").write_text("secret\n")
    plan = replay_plan("soup", work)
    probe = (
        "import os, sys\nfrom importlib.util import find_spec\nfrom pathlib import Path\n"
        "digits = Path(find_spec('sklearn').origin).parent / 'datasets' / 'data' / 'digits.csv.gz'\n"
        "for p in sys.argv[1:] + [str(digits)]:\n"
        "    try:\n        Path(p).read_bytes(); print('READ', p)\n"
        "    except OSError:\n        print('none', p)\n"
    )
    paths = [
        str((run / "workspace" / "train.py").resolve()),
        str(Path("results/soup/assets/public/proxy.jsonl").resolve()),
        str(Path("results/soup/assets/hidden/final.jsonl").resolve()),
        str(copy / "final.jsonl"),
        str(cache / "token"),
        str(work / "datasets" / "final" / "items.jsonl"),
    ]
    workspace = (run / "workspace").resolve()
    result = subprocess.run(
        plan.argv([sys.executable, "-c", probe, *paths], chdir=workspace),
        cwd=workspace,
        env=plan.environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "HF_HOME": str(cache)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    read = [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("READ")]
    assert read == paths[:2], result.stdout


def test_a_path_spelled_through_a_symbolic_link_resolves_inside(work, tmp_path):
    """A run path reached through a symbolic link (a prefix under a linked folder, as a venv or
    a conda environment often is): the real folder is bound and the link recreated, so the
    spelled path works inside; the link's own folder shows nothing else."""
    from replaykit.isolation import RunPaths, Settings, plan

    real = tmp_path / "real" / "workspace"
    real.mkdir(parents=True)
    (real / "data.txt").write_text("ok\n")
    (tmp_path / "real" / "other.txt").write_text("not shown\n")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    spelled = tmp_path / "linked" / "workspace"
    shown = plan("soup", {}, Settings("bwrap"), RunPaths(work / "fixed", work / "public", read_only=(spelled,)))
    assert real.resolve() in shown.read_only and (str(tmp_path / "real"), tmp_path / "linked") in shown.links
    data, folder = str(spelled / "data.txt"), str(tmp_path / "real")
    script = f"import os; print(open({data!r}).read().strip(), os.listdir({folder!r}))"
    argv = shown.argv([sys.executable, "-c", script], chdir=real)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=shown.environment({"PATH": "/usr/bin"}))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "['workspace']"]
