"""The isolation plan has one owner (replaykit.isolation.plan): the replay rule's plan (built by
the CLI from the rule's arguments) and the exploration probe's plan (built by the exploration
package) agree on everything that is not the run's own paths, for every task and a task
registered from outside the package; neither shows a final-split path; and a real process in
a plan reads nothing the plan does not name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import replaykit.tasks as tasks
from conftest import ROOT, rediscover
from replaykit import cli
from replaykit.exploration import Exploration, probe_plan
from replaykit.exploration.proxy import proxy_plan
from replaykit.harness.errors import InputError
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


def replay_plan(task: str, root: Path, settings: dict = SETTINGS, fixed_start: Path | None = None):
    run = f"results/{task}/shipped-seed42"
    argv = ["replay", "--task", task, "--run", "shipped-seed42", "--workspace", f"{run}/workspace"]
    argv += ["--workspace-record", f"{run}/workspace.json", "--manifest", f"results/{task}/assets/manifest.json"]
    argv += ["--fixed-start", str(fixed_start or root / "fixed"), "--public", f"results/{task}/assets/public"]
    argv += ["--publish-dir", f"{run}/replay", "--state-dir", f"{run}/replay-state", "--record", f"{run}/r.json"]
    argv += ["--budget", json.dumps({"outer_limit_s": 60, "internal_deadline_s": 50, "export_reserve_s": 5})]
    argv += ["--profile", "embedded", "--seed", "42", "--data", json.dumps(data_of(task, root))]
    argv += ["--sandbox", json.dumps(settings)]
    return cli.replay_spec(cli.parser().parse_args(argv)).isolation


def exploration(
    task: str,
    root: Path,
    settings: dict = SETTINGS,
    config_files: tuple[Path, ...] = (),
    fixed_start: Path | None = None,
) -> Exploration:
    """An exploration's record as ``explore start`` writes it (``config_files``: the config files
    it read, recorded as ``{"path", "sha256"}``; ``fixed_start``: default ``<root>/fixed``)."""
    folder = Path("explore") / task / "x"
    (folder / "runs" / "probe-1").mkdir(parents=True)
    (folder / "workspace").mkdir()
    info = {"task": task, "started_unix": 0, "budget_s": 1, "fixed_start": str(fixed_start or root / "fixed")}
    info.update(workdir=str(Path.cwd()), config_files=[{"path": str(f), "sha256": ""} for f in config_files])
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


@pytest.mark.parametrize("task", TASKS)
def test_a_shown_folder_in_the_workflows_own_folders_is_refused_by_both_plans(work, task, monkeypatch):
    """The workflow's ``results/``, ``logs/`` and ``.snakemake/`` are never shown, whatever a
    ``sandbox_show`` entry spells: with ``sandbox_show: [tiny/results]`` a hostile run of
    2026-12-02 read other runs' ``rows.jsonl`` (every final item's id and label), the asset
    manifest naming every hidden file, other tasks' hidden splits and qm9pack's raw CSVs, which
    no mask covered. With ``workdir: tiny`` an exploration command plans from where snakemake
    starts (its results: ``tiny/results``); a job plans from ``tiny/`` (``results``). Both
    refuse the folder, a folder inside it, and a symbolic link to it. What the model builders
    know of final splits (``models/*.private.json`` holding something) stays a final-split
    path, masked where a plan shows its folder."""
    from replaykit.isolation import Settings

    results = work / "work" / "tiny" / "results"
    for split in ("public", "hidden"):
        (results / task / "assets" / split).mkdir(parents=True)
    (results / "models").mkdir()
    (results / "models" / "digits.private.json").write_text('{"heldout_indices": [1, 2]}\n')
    (results / "models" / "llama.private.json").write_text("{}")  # knows nothing of a final split
    (work / "work" / "tiny" / "logs").mkdir()
    (work / "work" / "tiny" / ".snakemake" / "metadata").mkdir(parents=True)  # a plan shows only what exists
    (work / "work" / "results-link").symlink_to(results)
    spellings = ["tiny/results", "./tiny/results/", str(results), "tiny/results/models", "tiny/logs", "results-link"]
    for shown in spellings + ["tiny/.snakemake/metadata"]:
        config = {**SETTINGS, "sandbox_show": [shown], "workdir": "tiny"}  # as the exploration reads it
        ex = exploration(task, work, Settings.from_config(config).as_dict())
        with pytest.raises(InputError, match="is inside the workflow's own"):
            probe_plan(ex, ex.dir / "runs" / "probe-1")
        shutil.rmtree("explore")  # the next spelling's exploration
    private = final_paths(task, {}, Settings.from_config({**SETTINGS, "workdir": "tiny"}))
    assert (results / "models" / "digits.private.json").resolve() in private
    assert (results / "models" / "llama.private.json").resolve() not in private
    monkeypatch.chdir(results.parent)  # the job: in the workdir, sandbox_show rebased, no workdir key
    for shown in ("results", "results/models", "logs", "../results-link"):
        with pytest.raises(InputError, match="is inside the workflow's own"):
            replay_plan(task, work, {**SETTINGS, "sandbox_show": [shown]})
    # a folder beside the workflow's own is shown as named
    (results.parent / "extra").mkdir()
    assert (results.parent / "extra").resolve() in replay_plan(
        task, work, {**SETTINGS, "sandbox_show": ["extra"]}
    ).read_only


@pytest.mark.parametrize("task", TASKS)
def test_a_shown_config_file_system_folder_or_exploration_is_refused_by_both_plans(work, task, monkeypatch):
    """The hostile run of 2026-12-02 (second): ``sandbox_show`` naming the private config file
    itself (``salt.yaml``: ``final_salt``) let a candidate rebuild the hidden split; a link made
    after the config was read, to the folder holding it, passed the load-time check; the host's
    ``/proc`` showed every process's command line and ``/run`` its sockets; the launch folder's
    ``explore/`` showed other explorations' logs. The replay's plan refuses each (the config
    files from ``REPLAYKIT_WORKFLOW``, as rules/common.smk passes them) and the probe's plan too
    (the config files from the exploration's record, with no such variable)."""
    private = work / "private"
    private.mkdir()
    salt = private / "salt.yaml"
    salt.write_text("final_salt: s3cret\n")
    (work / "later").symlink_to(private)  # a link made after the config was read
    Path("explore").mkdir()
    cases = {
        str(salt): f"{salt} is the config file {salt}",
        str(work / "later"): f"{private} holds the config file {salt}",
        "/proc": "/proc is the host's /proc",
        "/run": "/run is the host's /run",
        "/dev/shm": "/dev/shm is the host's /dev",
        "/sys/fs": "/sys/fs is the host's /sys",
        "explore": f"{work / 'work' / 'explore'} is inside the workflow's own {work / 'work' / 'explore'}",
    }
    for shown, message in cases.items():
        settings = {**SETTINGS, "sandbox_show": [shown]}
        monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": [str(salt)]}))
        with pytest.raises(InputError) as exc:
            replay_plan(task, work, settings)
        assert exc.value.field == "sandbox_show" and exc.value.message.startswith(message), exc.value.message
        monkeypatch.delenv("REPLAYKIT_WORKFLOW")
        ex = exploration(task, work, settings, config_files=(salt,))
        with pytest.raises(InputError) as exc:
            probe_plan(ex, ex.dir / "runs" / "probe-1")
        assert exc.value.message.startswith(message), exc.value.message
        shutil.rmtree(ex.dir)
    # the same private folder, its config file not in use: shown as named
    monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": []}))
    assert private in replay_plan(task, work, {**SETTINGS, "sandbox_show": [str(work / "later")]}).read_only


@pytest.mark.parametrize("task", TASKS)
def test_a_hard_link_to_a_secret_in_a_shown_folder_is_refused_by_both_plans(work, task, monkeypatch):
    """A hard link is the same file under another name, so comparing paths let it through
    (hostile, 2026-12-02, left open until 2026-12-05): a shown folder holding a hard link to
    the private config file (``final_salt``) or to a task's hidden split file. Both plans
    refuse it, found by inode; a copy of the bytes is another file (an operator's act no path
    or inode rule can see). A folder with an ordinary file of the same name still passes."""
    private = work / "private"
    private.mkdir()
    salt = private / "salt.yaml"
    salt.write_text("final_salt: s3cret\n")
    hidden = Path(f"results/{task}/assets/hidden/items.jsonl").resolve()
    hidden.write_text('{"id": "final-1"}\n')
    shown = work / "opt"
    (shown / "deep").mkdir(parents=True)
    settings = {**SETTINGS, "sandbox_show": [str(shown)]}
    monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": [str(salt)]}))
    (shown / "deep" / "salt.yaml").write_text("final_salt: other\n")  # same name, another file
    assert shown in replay_plan(task, work, settings).read_only
    (shown / "deep" / "salt.yaml").unlink()
    for secret in (salt, hidden):
        link = shown / "deep" / f"copy-of-{secret.name}"
        os.link(secret, link)
        message = f"{link} is a hard link to {secret}, which the sandbox never shows"
        with pytest.raises(InputError) as exc:
            replay_plan(task, work, settings)
        assert exc.value.field == "sandbox_show" and exc.value.message.startswith(message), exc.value.message
        ex = exploration(task, work, settings, config_files=(salt,))
        with pytest.raises(InputError) as exc:
            probe_plan(ex, ex.dir / "runs" / "probe-1")
        assert exc.value.message.startswith(message), exc.value.message
        shutil.rmtree(ex.dir)
        link.unlink()
    # second hostile pass: the task's own final source (a local file of the data block) and a
    # sandbox_hide folder's file, linked into the shown folder
    final = work / "datasets" / "final" / "items.jsonl"
    hide = work / "hidden-by-operator"
    hide.mkdir()
    (hide / "answers.txt").write_text("42\n")
    settings = {**settings, "sandbox_hide": [str(hide)]}
    secrets = [hide / "answers.txt"] + ([final] if task in ("dpo", "rm", "soup") else [])
    for secret in secrets:
        link = shown / "deep" / f"copy-of-{secret.name}"
        os.link(secret, link)
        with pytest.raises(InputError) as exc:
            replay_plan(task, work, settings)
        assert exc.value.message.startswith(f"{link} is a hard link to {secret.resolve()}"), exc.value.message
        link.unlink()
    assert shown in replay_plan(task, work, settings).read_only


def cli_settings():
    from replaykit.isolation import Settings

    return Settings.from_config(SETTINGS)


@pytest.mark.parametrize("task", TASKS)
def test_a_pythonpath_folder_is_shown_by_neither_plan(work, task, monkeypatch):
    """Whoever starts a run or an exploration command sets PYTHONPATH (hostile, 2026-12-02: a
    probe started with ``PYTHONPATH=<the private config's folder>`` printed ``final_salt``; a
    replay with PYTHONPATH on a copy of the hidden split printed it, and the audit passed):
    neither plan shows its folders, and a process in the replay's plan reads nothing there."""
    outside = work / "operator"
    outside.mkdir()
    (outside / "private.yaml").write_text('final_salt: "S3CRET"\n')
    monkeypatch.setenv("PYTHONPATH", f"{outside}{os.pathsep}{work / 'datasets' / 'final'}")
    monkeypatch.syspath_prepend(str(work / "datasets" / "final"))
    monkeypatch.syspath_prepend(str(outside))
    ex = exploration(task, work)
    for plan in (replay_plan(task, work), probe_plan(ex, ex.dir / "runs" / "probe-1")):
        shown = [*plan.read_only, *plan.writable]
        assert not any(inside(outside.resolve(), p) or inside(p, outside.resolve()) for p in shown), plan.read_only
        assert (work / "datasets" / "final").resolve() not in shown
    if task == "toy":  # a registered plug-in's code is still shown, by name
        assert (TOY / "replaykit_toy").resolve() in replay_plan(task, work).read_only
    if task == "soup":
        plan = replay_plan(task, work)
        run = Path("results/soup/shipped-seed42/workspace")
        run.mkdir(parents=True)
        result = subprocess.run(
            plan.argv(
                [sys.executable, "-c", f"print(open({str(outside / 'private.yaml')!r}).read())"], chdir=run.resolve()
            ),
            cwd=run,
            env=plan.environment({"PATH": "/usr/bin:/bin", "HOME": str(work / "home"), "PYTHONPATH": str(outside)}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode != 0 and "S3CRET" not in result.stdout, result.stdout


@pytest.mark.parametrize("task", TASKS)
def test_search_paths_in_the_sandbox_name_only_what_the_plan_shows(work, task):
    """Both plans' environments (the caller's before it: the operator's, or an exploring
    agent's): ``PYTHONPATH``, ``LD_LIBRARY_PATH`` and ``PATH`` keep the entries in the plan's
    software (the Python environment, the system's folders, what ``sandbox_show`` names, the
    folders on the way to them) and drop the others -- the name of an operator's folder, a copy
    of a hidden split (the names were seen in the sandbox; hostile, 2026-12-02), a relative
    entry, a masked split, and a shown data folder: the public split, or the probe's own
    run folder, from which the frozen proxy scorer would load an agent's ``sitecustomize.py``
    (hostile, 2026-12-05: it rebuilt digress's test split there) or ``libgomp.so.1``. Any other
    allowed variable naming a path (``CUDA_INJECTION64_PATH``, a kernel cache) passes only
    when the path is in the software or a folder the run writes. Checked in the replay's plan
    by a real process for soup."""
    operator, cuda = work / "operator", work / "cuda"
    (cuda / "lib").mkdir(parents=True)
    operator.mkdir()
    hidden = Path(f"results/{task}/assets/hidden").resolve()
    public = Path(f"results/{task}/assets/public").resolve()
    settings = {**SETTINGS, "sandbox_show": [str(cuda)]}
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:/usr/bin:{operator}:.:bin:/bin",
        "PYTHONPATH": f"{operator}:{work / 'datasets' / 'final'}:{hidden}:{cuda}:{public}",
        "LD_LIBRARY_PATH": f"{cuda / 'lib'}:{operator}:{public}",
        "HOME": str(work / "home"),
    }
    ex = exploration(task, work, settings)
    probe = ex.dir.resolve() / "runs" / "probe-1"
    for plan in (replay_plan(task, work, settings), probe_plan(ex, ex.dir / "runs" / "probe-1")):
        assert public in plan.read_only
        inner = plan.environment({**env, "LD_LIBRARY_PATH": f"{env['LD_LIBRARY_PATH']}:{probe}"})
        assert inner["PATH"] == f"{venv_bin}:/usr/bin:/bin"
        assert inner["PYTHONPATH"] == str(cuda)
        assert inner["LD_LIBRARY_PATH"] == str(cuda / "lib")
        assert "LD_LIBRARY_PATH" not in plan.environment({**env, "LD_LIBRARY_PATH": str(operator)})
        # any other variable naming a path: only in the software or a folder the run writes
        cache = plan.writable[0] / "compile-cache"
        paths = {"CUDA_INJECTION64_PATH": f"{public}/inject.so", "TRITON_CACHE_DIR": f"{public}/cache"}
        paths.update(TORCHINDUCTOR_CACHE_DIR=str(cache), CUDA_HOME=str(cuda), CUDA_MODULE_LOADING="LAZY")
        inner = plan.environment({**env, **paths})
        assert "CUDA_INJECTION64_PATH" not in inner and "TRITON_CACHE_DIR" not in inner
        assert (inner["TORCHINDUCTOR_CACHE_DIR"], inner["CUDA_HOME"], inner["CUDA_MODULE_LOADING"]) == (
            str(cache),
            str(cuda),
            "LAZY",
        )
        # second hostile pass (2026-12-05): a folder holding software (`/`, the checkout's
        # parent) made every shown folder importable as a namespace package; relative values
        # resolve in the folder the step runs in; HOME on a shown folder gives user site-packages;
        # a warnings category `module.Class` is imported at start-up
        sneaky = {"PYTHONPATH": f"/:{work}:{cuda}", "CUDA_INJECTION64_PATH": "./inject.so"}
        sneaky.update(
            TRITON_CACHE_DIR="rel/dir", HOME=str(public), PYTHONWARNINGS="ignore::evil.W,ignore::DeprecationWarning"
        )
        inner = plan.environment({**env, **sneaky})
        assert inner["PYTHONPATH"] == str(cuda) and inner["HOME"] == "/tmp"
        assert "CUDA_INJECTION64_PATH" not in inner and "TRITON_CACHE_DIR" not in inner
        assert inner["PYTHONWARNINGS"] == "ignore::DeprecationWarning"
    if task == "soup":
        plan = replay_plan(task, work, settings)
        run = Path("results/soup/shipped-seed42/workspace")
        run.mkdir(parents=True)
        show = "import os; print(os.environ['PYTHONPATH'], os.environ['PATH'], os.environ['LD_LIBRARY_PATH'])"
        result = subprocess.run(
            plan.argv([sys.executable, "-c", show], chdir=run.resolve()),
            cwd=run,
            env=plan.environment(env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0 and str(operator) not in result.stdout, result.stdout + result.stderr
        assert result.stdout.split() == [str(cuda), f"{venv_bin}:/usr/bin:/bin", str(cuda / "lib")]


@pytest.mark.parametrize("task", TASKS)
def test_the_proxy_scorers_environment_is_the_frozen_allow_list(work, task):
    """Third hostile pass (2026-12-05): the proxy scorer is frozen code that the exploring agent
    starts with its own environment, in a folder (``proxy/<k>``) the agent can write too. A
    path into that folder survived as a "writable" place (``CUDA_INJECTION64_PATH``, which
    CUDA loads at start-up; kernel caches), and torch, CUDA and NCCL switches passed. Its
    environment is now the frozen allow-list only, no variable names a folder it writes, and
    a relative path-like value is dropped."""
    ex = exploration(task, work)
    checkpoint = (ex.dir / "runs/probe-1/publish/checkpoint-3").resolve()
    checkpoint.mkdir(parents=True)
    out = (ex.dir / "proxy/1").resolve()
    out.mkdir(parents=True)
    plan = proxy_plan(ex, checkpoint, out)
    assert plan.frozen_only and out in plan.writable
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "2",
        "CUDA_VISIBLE_DEVICES": "0",
        "CUDA_INJECTION64_PATH": f"{out}/inject.so",
        "CUDA_CACHE_PATH": f"{out}/cc",
        "TORCHINDUCTOR_CACHE_DIR": f"{out}/ind",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "NCCL_NET_PLUGIN": "./net.so",
        "LC_ALL": f"{out}/locale",
        "LC_MESSAGES": "x/locale",
        "TZ": f"{checkpoint}/tzfile",
    }
    assert plan.environment(env) == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "2",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    # the probe's plan (candidate code anyway) keeps a cache in a folder it writes
    probe = probe_plan(ex, ex.dir / "runs" / "probe-1")
    cache = f"{probe.writable[-1]}/cache"
    assert probe.environment({**env, "TORCHINDUCTOR_CACHE_DIR": cache})["TORCHINDUCTOR_CACHE_DIR"] == cache


def test_a_data_folder_swapped_for_a_link_after_the_plan_is_refused_when_bwrap_starts(tmp_path):
    """Third hostile pass: bwrap follows a bound source that is a symbolic link when it starts,
    so a checkpoint folder replaced by a link to a hidden split after the plan was made would
    be shown in its place. The mounts refuse it; the software's own links are left alone."""
    from replaykit.harness.sandbox import IsolationPlan

    checkpoint, hidden = tmp_path / "checkpoint-5", tmp_path / "hidden"
    checkpoint.mkdir()
    hidden.mkdir()
    plan = IsolationPlan("bwrap", read_only=(checkpoint.resolve(),), writable=((tmp_path / "out").resolve(),))
    assert "--ro-bind" in plan.mounts()
    checkpoint.rmdir()
    checkpoint.symlink_to(hidden)
    with pytest.raises(InputError) as exc:
        plan.mounts()
    swapped = checkpoint.resolve().parent / "checkpoint-5"
    assert str(exc.value) == f"{swapped}: became a symbolic link after the sandbox's plan was made: not shown"


@pytest.mark.parametrize("task", TASKS)
def test_a_sys_path_folder_holding_a_config_file_is_refused_by_both_plans(work, task, monkeypatch):
    """The same kind without PYTHONPATH: a folder put on sys.path by the environment (a ``.pth``
    file written into site-packages) that holds a config file in use is refused by both plans,
    with the line a shown path gets."""
    from replaykit.harness.errors import InputError

    outside = work / "operator"
    outside.mkdir()
    config = outside / "private.yaml"
    config.write_text('final_salt: "S3CRET"\n')
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.syspath_prepend(str(outside))
    ex = exploration(task, work, config_files=(config,))
    settings = {**SETTINGS, "config_files_in_use": [str(config)]}
    for make in (lambda: replay_plan(task, work, settings), lambda: probe_plan(ex, ex.dir / "runs" / "probe-1")):
        with pytest.raises(InputError) as raised:
            make()
        assert str(raised.value) == (
            f"the Python environment: sys.path: {outside.resolve()} holds the config file {config.resolve()}, "
            "which can hold final_salt; keep config files out of shown paths"
        )


def read_in_sandbox(plan, paths: list[Path], masked: list[Path]) -> str:
    """What ``cat`` prints of ``paths`` in a real process under ``plan``; each of ``masked``
    cannot be opened there (a masked file is bwrap's bind of ``/dev/null``, no device)."""
    argv = plan.argv(["cat", *map(str, paths)], chdir="/")
    out = subprocess.run(argv, env=plan.environment({"PATH": "/usr/bin:/bin"}), capture_output=True, timeout=60)
    errors = out.stderr.decode(errors="replace")
    assert all(f"{m}: Permission denied" in errors for m in masked), errors
    return out.stdout.decode(errors="replace")


@pytest.mark.parametrize("task", TASKS)
def test_a_config_file_inside_the_python_environment_is_masked_by_both_plans(work, task, monkeypatch):
    """Hostile, 2026-12-05: a private config file (``final_salt``) kept in the venv's own folder
    (``sys.prefix``) was shown to candidate code by both plans, which checked config files only
    against ``sandbox_show``, data paths and ``sys.path`` folders outside the prefix. Both plans
    now show the prefix with the config file in use masked; a real process in each reads the
    environment's file beside it and cannot open the config file."""
    prefix = work / "venv"
    prefix.mkdir()
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    config = prefix / "private.yaml"
    config.write_text('final_salt: "S3CRET-in-the-prefix"\n')
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": [str(config)]}))
    replay = replay_plan(task, work)
    monkeypatch.delenv("REPLAYKIT_WORKFLOW")
    ex = exploration(task, work, config_files=(config,))
    probe = probe_plan(ex, ex.dir / "runs" / "probe-1")
    for plan in (replay, probe):
        assert prefix.resolve() in plan.read_only and config.resolve() in plan.masked, plan.masked
    if task == "soup":
        for plan in (replay, probe):
            assert read_in_sandbox(plan, [prefix / "pyvenv.cfg", config], [config]) == "home = /usr/bin\n"


def test_a_secret_in_the_systems_folders_is_masked_where_the_sandbox_shows_it(work, monkeypatch):
    """The system's part of the sandbox (``/usr``, the ``/etc`` entries) is shown whatever the
    plan says, and no secret lying there was masked: a config file in use under ``/etc`` (here
    ``/etc/hosts`` stands for one) or a ``sandbox_hide`` file under ``/usr`` (an operator's copy of
    a final split under ``/usr/share``). Both plans mask each where it appears inside; a real
    process reads ``/etc/nsswitch.conf`` beside them and cannot open either."""
    etc, beside = Path("/etc/hosts"), Path("/etc/nsswitch.conf")
    usr = next(Path(d) / f for d, _, files in os.walk("/usr/share") for f in sorted(files) if _readable(Path(d) / f))
    if not (_readable(etc) and _readable(beside)):
        pytest.skip("no /etc/hosts or /etc/nsswitch.conf here")
    settings = {**SETTINGS, "sandbox_hide": [str(usr)]}
    monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": [str(etc)]}))
    replay = replay_plan("soup", work, settings)
    monkeypatch.delenv("REPLAYKIT_WORKFLOW")
    ex = exploration("soup", work, settings, config_files=(etc,))
    probe = probe_plan(ex, ex.dir / "runs" / "probe-1")
    for plan in (replay, probe):
        assert {etc, usr} <= set(plan.masked), plan.masked
        assert read_in_sandbox(plan, [etc, usr, beside], [etc, usr]) == beside.read_text()


def _readable(path: Path) -> bool:
    """A regular file, not a link, with something in it that this process can read."""
    try:
        return path.is_file() and not path.is_symlink() and path.stat().st_size > 0 and bool(path.read_bytes())
    except OSError:
        return False


def test_a_config_file_that_is_one_of_the_runs_paths_is_refused(work):
    """A mask would hide the path itself: a config file in use that is one of the run's own paths
    (a read-only path here) is refused in one line naming it."""
    from replaykit.isolation import RunPaths, Settings, plan

    salt = work / "salt.yaml"
    salt.write_text("final_salt: s3cret\n")
    settings = Settings("bwrap", config_files=(str(salt),))
    with pytest.raises(InputError) as exc:
        plan("soup", {}, settings, RunPaths(work / "fixed", work / "public", read_only=(salt,)))
    assert str(exc.value) == (
        f"{salt}: is a config file in use, which can hold final_salt, and a path the sandbox would "
        "show (the run's own paths); keep config files out of them"
    )


@pytest.mark.parametrize("task", TASKS)
def test_a_local_fixed_start_is_checked_as_a_data_path_by_both_plans(work, task, monkeypatch):
    """A hostile tester's suspicion (2026-12-05), found true: a local fixed start (a folder the
    config names, not a name in ``models``) was shown with none of the checks a data path gets.
    Both plans (and, for digress, whose raw-data fixed start only frozen code sees, the proxy
    scoring's) refuse one that holds a config file in use, holds the working directory or lies
    in the workflow's own folders, naming ``tasks.<task>.fixed_start``; a built model
    (``results/models/<name>``) is shown."""
    private = work / "private-model"
    private.mkdir()
    salt = private / "salt.yaml"
    salt.write_text("final_salt: s3cret\n")
    cwd = Path.cwd().resolve()
    cases = {
        private: f"{private} holds the config file {salt}",
        work: f"{work} holds the working directory {cwd}",
        cwd / "results" / task: f"{cwd / 'results' / task} is inside the workflow's own {cwd / 'results'}",
    }
    data = tasks.get_task(task).FIXED_START_IS_DATA

    def plans(fixed: Path):
        ex = exploration(task, work, config_files=(salt,), fixed_start=fixed)
        try:
            if data:  # shown to the proxy scoring only
                (ex.dir / "proxy").mkdir()
                yield lambda: proxy_plan(ex, ex.dir / "runs" / "probe-1", ex.dir / "proxy")
            else:
                yield lambda: replay_plan(task, work, fixed_start=fixed)
                yield lambda: probe_plan(ex, ex.dir / "runs" / "probe-1")
        finally:
            shutil.rmtree(ex.dir)

    monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": [str(salt)]}))
    for fixed, message in cases.items():
        for make in plans(fixed):
            with pytest.raises(InputError) as exc:
                make()
            assert exc.value.field == f"tasks.{task}.fixed_start", str(exc.value)
            assert exc.value.message.startswith(message), exc.value.message
    built = Path("results/models/built")
    built.mkdir(parents=True)
    for make in plans(built):
        assert built.resolve() in make().read_only


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


def self_test(tmp_path: Path, work: Path, plan=None) -> dict:
    """The soup task's self-test (:func:`replaykit.harness.selftest.run_self_test`) with a final
    file in the working directory's hidden split; ``plan``: the run's plan (default: the one
    ``python -m replaykit self-test`` computes, :func:`replaykit.isolation.plan`)."""
    from replaykit.harness.selftest import run_self_test
    from replaykit.isolation import RunPaths, Settings, self_test_targets
    from replaykit.isolation import plan as isolation_plan

    Path("results/soup/assets/hidden/final.jsonl").write_text('{"id": 0, "label": 7}\n')
    for split in ("public", "hidden"):  # a file both splits hold (rm's overlap.json): no secret
        Path(f"results/soup/assets/{split}/overlap.json").write_text("{}\n")
    settings, run = Settings("bwrap"), tmp_path / "self-test-run"
    paths = RunPaths(work / "fixed", Path("results/soup/assets/public"), (run / "workspace",), (run / "state",))
    plan = plan or isolation_plan("soup", {}, settings, paths)
    targets = self_test_targets("soup", {}, settings, work / "fixed", Path("results/soup/assets/public"))
    return run_self_test(plan, targets, run, "soup")


def test_the_self_test_tries_every_escape_kind_and_the_sandbox_blocks_each(work, tmp_path):
    """The canary in soup's plan: every escape kind is tried (with real targets: copies of the
    final file planted under /var/tmp, Unix and TCP listeners on the host) and none reaches
    anything; the listeners, counting on the host, saw no connection; nothing planted is left.
    A file the public split holds too is neither planted nor an escape where the canary finds it
    (the working directory's parent is searched: the public split lies below it)."""
    from replaykit.harness.canary import ESCAPES

    verdict = self_test(tmp_path, work)
    assert verdict["passed"] is True and verdict["escaped"] == []
    assert {a["escape"] for a in verdict["attempts"]} == set(ESCAPES)
    assert all(a["blocked"] for a in verdict["attempts"])
    planted = [Path(p) for p in verdict["planted"]]
    assert len(planted) == 2 and all(p.is_relative_to("/var/tmp") and not p.exists() for p in planted)
    assert {p.name for p in planted} == {"final.jsonl"}
    assert any(a["target"] == str(planted[0]) for a in verdict["attempts"])  # read by its path, refused
    assert verdict["sandbox"]["limits"]["hit"] is None and verdict["fingerprint"]["bwrap"].startswith("bubblewrap")


def test_the_canary_without_a_sandbox_reaches_every_kind_and_the_line_names_the_first(work, tmp_path):
    """The control: the same canary with no sandbox (``isolation: none``'s plan) reaches the final
    split by path, through /proc, as a copy outside the working directory, the package data,
    the frozen code, the host's TCP and Unix listeners; the failure line names the first escape."""
    from replaykit.harness.sandbox import IsolationPlan
    from replaykit.harness.selftest import failure_line

    verdict = self_test(tmp_path, work, plan=IsolationPlan("none"))
    kinds = {"final_by_path", "final_through_proc", "copy_outside", "final_package_data", "write_outside"}
    kinds |= {"network", "host_unix_socket", "host_listener"}
    assert verdict["passed"] is False and kinds <= set(verdict["escaped"])
    assert failure_line(verdict).startswith("sandbox self-test: escape final_by_path: ")
    assert not list(Path.cwd().rglob(".canary-was-here"))  # the canary removes what it created


def test_a_connection_the_listener_closes_before_the_message_is_still_an_escape(tmp_path, monkeypatch):
    """CI saw the unsandboxed canary's Unix-socket attempt recorded as blocked: the host listener
    accepts and closes at once, and a Unix socket refuses a send to a closed peer
    (BrokenPipeError). Here the listener has closed before the canary sends, every time."""
    import socket
    import threading

    from replaykit.harness.canary import Canary

    path = str(tmp_path / "l.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    closed = threading.Event()

    def accept_and_close():
        conn, _ = server.accept()
        conn.close()
        closed.set()

    threading.Thread(target=accept_and_close, daemon=True).start()
    real_sendall = socket.socket.sendall

    def sendall_after_close(self, data, *args):
        closed.wait(5)
        return real_sendall(self, data, *args)

    canary = Canary({"final_prints": []})
    monkeypatch.setattr(socket.socket, "sendall", sendall_after_close)
    with server:
        canary.connect("host_unix_socket", (socket.AF_UNIX, socket.SOCK_STREAM), path, path)
        canary.connect("host_unix_socket", (socket.AF_UNIX, socket.SOCK_STREAM), str(tmp_path / "none.sock"), "none")
    reached, refused = canary.attempts
    assert not reached["blocked"] and "listener closed before the message (BrokenPipeError)" in reached["detail"]
    assert refused["blocked"] and "FileNotFoundError" in refused["detail"]


def test_the_fingerprint_names_this_machine(work):
    """Each field against an independent source: ``hostname``, ``nproc``, ``bwrap --version``,
    the imported torch, the interpreter."""
    import hashlib
    import platform

    import torch

    from replaykit.harness.provenance import fingerprint

    def out(*argv):  # nproc honours OMP_NUM_THREADS, which the test workers set to 1
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
        return subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout.strip()

    f = fingerprint()
    assert f["hostname_sha256"] == hashlib.sha256(out("hostname").encode()).hexdigest()
    assert f["cpu_count"] == int(out("nproc")) and f["bwrap"] == out("bwrap", "--version")
    assert f["torch"] == torch.__version__.split("+")[0] or f["torch"] == torch.__version__
    assert f["cuda"] == torch.version.cuda and f["python"] == platform.python_version()
    has_smi = subprocess.run(["which", "nvidia-smi"], capture_output=True).returncode == 0
    assert (f["gpu"] == [] and f["driver"] is None) or has_smi
    assert set(f) >= {"gpu", "driver", "cuda", "torch", "transformers", "trl", "diffusers", "peft", "python"}


EXPLORATION_PROBE = r"""
import json, os, socket, sys
from importlib.util import find_spec
from pathlib import Path

t, found = json.loads(sys.argv[1]), {}

def attempt(name, action):
    try:
        found[name] = str(action())[:200]
    except Exception as exc:
        pass

def unix():
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(t["socket"])
        s.sendall(b"probe")

hidden = Path(t["work"]) / "results" / "soup" / "assets" / "hidden"
attempt("hidden", lambda: os.listdir(hidden) or 1 / 0)
attempt("copy_under_var_tmp", lambda: Path(t["copy"]).read_bytes())
attempt("hf_home_outside_home", lambda: os.listdir(t["hf_home"]))
attempt("hf_home_by_its_variable", lambda: os.listdir(os.environ["HF_HOME"]))
attempt("host_unix_socket", unix)
attempt("host_tcp", lambda: socket.create_connection(("127.0.0.1", t["port"]), timeout=3))
digits = Path(find_spec("sklearn").origin).parent / "datasets" / "data" / "digits.csv.gz"
attempt("sklearn_digits", lambda: digits.read_bytes()[:4])
attempt("proc_1_root", lambda: os.listdir(f"/proc/1/root{hidden}"))
(Path(os.environ["REPLAYKIT_RUN_DIR"]) / "found.json").write_text(json.dumps(found))
print("probe done", len(found))
"""


@pytest.mark.slow
def test_an_exploration_probe_reaches_nothing_outside_and_still_finishes(soup_run, tmp_path, outside_targets):
    """``explore run -- python probe.py`` in the tiny soup run (a copy): the probe reads nothing of
    the hidden split, the copy under /var/tmp, a dataset cache set as HF_HOME outside $HOME, the
    final package data (scikit-learn's digits), and reaches neither host listener; the probe
    still exits 0 and its receipt states the sandbox's limits and the machine's fingerprint."""
    from conftest import copy_run

    work = copy_run(soup_run, tmp_path / "w")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HF_HOME=outside_targets["hf_home"], HOME=str(tmp_path))

    def rk(*args):
        result = subprocess.run([sys.executable, "-m", "replaykit", *args], cwd=work, env=env, capture_output=True)
        assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
        return result

    rk("explore", "soup", "--name", "escape", "--budget-s", "600")
    targets = {k: outside_targets[k] for k in ("copy", "hf_home", "socket", "port")}
    ex = work / "explore" / "soup" / "escape"
    probe = [sys.executable, "-c", EXPLORATION_PROBE, json.dumps({**targets, "work": str(work)})]
    rk("explore", "run", "-e", str(ex), "--", *probe)
    receipt = json.loads((ex / "receipts.jsonl").read_text().splitlines()[-1])
    found = json.loads((ex / "runs" / "probe-1" / "found.json").read_text())
    assert found == {} and outside_targets["tcp"].accepted == 0 and outside_targets["unix"].accepted == 0
    assert receipt["returncode"] == 0 and receipt["stop"] == "exit" and receipt["limit_hit"] is None
    assert receipt["sandbox"]["limits"]["memory_bytes"] > 0 and receipt["fingerprint"]["python"]


def assert_self_test_and_fingerprint_travel(work: Path, task: str) -> None:
    """``final/summary.json`` of ``task`` carries the self-test's verdicts (the same file's
    SHA-256), its bubblewrap version and the paths shown; the replay record, each score summary
    and the final summary carry one machine's fingerprint."""
    from replaykit.harness.hashing import sha256_file

    summary = json.loads((work / f"results/{task}/final/summary.json").read_text())
    section, test_file = summary["sandbox_self_test"], work / f"results/sandbox-self-test/{task}.json"
    assert section["passed"] is True and section["sha256"] == sha256_file(test_file)
    assert section["escapes"] and all(e["blocked"] for e in section["escapes"])
    assert section["bwrap"] == json.loads(test_file.read_text())["fingerprint"]["bwrap"]
    assert section["shown"]["read_only"] and section["replays_elsewhere"] == []
    record = json.loads((work / f"results/{task}/shipped-seed42/replay/record.json").read_text())
    assert record["fingerprint"] == summary["fingerprint"]  # one machine built both
    scores = sorted((work / f"results/{task}/shipped-seed42/final-scores").glob("checkpoint-*/summary.json"))
    assert scores and all(json.loads(p.read_text())["fingerprint"] == record["fingerprint"] for p in scores)


@pytest.mark.slow
def test_the_self_test_and_the_fingerprint_travel_with_the_soup_result(soup_run):
    """The tiny soup result: as :func:`assert_self_test_and_fingerprint_travel`, and report.md's
    section says the self-test passed."""
    assert_self_test_and_fingerprint_travel(soup_run, "soup")
    assert "## Sandbox self-test\n\nPassed: " in (soup_run / "results/soup/final/report.md").read_text()


@pytest.mark.slow
def test_the_self_test_and_the_fingerprint_travel_with_the_rm_report(rm_run):
    """The tiny rm result (a Trainer task): as :func:`assert_self_test_and_fingerprint_travel`,
    and report.html's paragraph says the self-test passed."""
    assert_self_test_and_fingerprint_travel(rm_run, "rm")
    html = (rm_run / "results/rm/report.html").read_text()
    assert 'id="sandbox-self-test">Sandbox self-test: <strong>passed</strong>' in html


@pytest.mark.parametrize("task", ["soup", "dpo"])
def test_a_hard_link_to_a_secret_under_a_path_no_config_key_names_is_refused(work, task, monkeypatch):
    """Hostile (2026-12-05, third pass): a config file hard-linked into the Python
    environment's site-packages was shown to a probe: the inode check looked only under the
    paths the config names (``sandbox_show``, data), and the masks go by path. Every shown or
    writable path is now walked when a secret has another link; here the link lies in the
    run's workspace (and the exploration's), which no config key names."""
    private = work / "private"
    private.mkdir()
    salt = private / "salt.yaml"
    salt.write_text("final_salt: s3cret\n")
    monkeypatch.setenv("REPLAYKIT_WORKFLOW", json.dumps({"config_paths": [str(salt)]}))
    workspace = Path(f"results/{task}/shipped-seed42/workspace")
    workspace.mkdir(parents=True)
    assert replay_plan(task, work).read_only  # one link: nothing walked, the plan is made
    os.link(salt, workspace / "notes.yaml")
    with pytest.raises(InputError) as exc:
        replay_plan(task, work)
    assert (exc.value.path, exc.value.field) == ("the sandbox's plan", "shown paths")
    assert exc.value.message.startswith(
        f"{(workspace / 'notes.yaml').resolve()} is a hard link to {salt}, which the sandbox never shows"
    ), exc.value.message
    (workspace / "notes.yaml").unlink()
    ex = exploration(task, work, config_files=(salt,))
    os.link(salt, ex.dir / "workspace" / "notes.yaml")
    with pytest.raises(InputError) as exc:
        probe_plan(ex, ex.dir / "runs" / "probe-1")
    assert exc.value.message.startswith(f"{(ex.dir / 'workspace' / 'notes.yaml').resolve()} is a hard link to {salt}")
