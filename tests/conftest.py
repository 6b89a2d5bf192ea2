"""Shared fixtures: a tiny random Llama with a locally trained tokenizer, a copy of the
workflow to run Snakemake in (so tests never touch the repository's results/), and tiny runs
built once per test session.

How a test gets a built tiny run (docs/testing.md, "Tiny runs built once"):

* **It only reads the run** (files, receipts, a dry run, ``--summary``, ``--report`` to a path
  outside the run): take the shared tree, e.g. the ``dpo_run`` fixture, and change nothing in
  it. Every test of the session, on every pytest-xdist worker, sees the same folder; a test
  that changes it is reported when the session ends (``shared_runs_unchanged``).
* **It changes or breaks a run** (deletes a receipt, flips a byte, runs more jobs there):
  ``copy_run(dpo_run, tmp_path / "w")`` and work in the copy. The copy keeps every file's
  mtime but not ``.snakemake/`` (whose records hold the original folder's path in the replay
  rule's sandbox parameters), so Snakemake finds the copy up to date, from file times.
* **Its meaning is running the DAG itself** (kill -9, SIGTERM, a fault injected into a rule, a
  config whose assets differ): its own ``workdir`` and ``write_config``, as before.

A new kind of shared run is a session fixture that calls ``build_once`` (see ``dpo_run``):
the first worker that asks builds it under a file lock, the others wait for it and reuse it.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from replaykit.tiny_model import CHAT_TEMPLATE  # noqa: F401  (tests import it from here)

# One thread per pytest-xdist worker, for in-process torch and every process a test starts
# (a rule that wants more sets OMP_NUM_THREADS itself): two workers of two OpenMP threads each on
# two cores spin at each other's barriers (bench/results-2026-12-01-omp-threads.md: a small training
# loop run twice at once took 10x the wall time and 4.5x the CPU time with 2 threads each than with 1).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TEST_CONFIG = ROOT / "config" / "test.yaml"  # the tiny settings users run too (README)


def make_tiny_model(out: Path, model_type: str = "llama") -> Path:
    """The ``tiny-llama`` builder's model (:mod:`replaykit.tiny_model`): 2 layers of the given
    architecture (``llama``: SmolLM2's; ``mistral``: Zephyr's and Mistral-7B's), hidden size
    32, random weights (seed 0), a BPE tokenizer trained on the instruction texts, ChatML."""
    from replaykit.tiny_model import make_tiny_model as make

    return make(out, model_type)


def rediscover(monkeypatch, folder: Path) -> None:
    """The task registry (``replaykit.tasks``) as a process with ``folder`` on its path finds it
    (undone with ``monkeypatch``; ``get_task``'s cache cleared)."""
    import replaykit.tasks as tasks

    monkeypatch.syspath_prepend(str(folder))
    known, found, refused = tasks._discover()
    monkeypatch.setattr(tasks, "KNOWN", known)
    monkeypatch.setattr(tasks, "REGISTERED", found)
    monkeypatch.setattr(tasks, "REFUSED", refused)
    tasks.get_task.cache_clear()


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
    """``<state>/request.json`` as the replay driver writes it for a recipe's ``train.py``
    (:class:`~replaykit.harness.protocol.ReplayRequest`: seed 42, deadline in 10 minutes, 3
    checkpoints kept, one thread; ``<state>/state`` and ``<state>/publish`` for its state and
    publications); returns its path."""
    import time

    from replaykit.harness.protocol import ReplayRequest

    state = Path(state)
    (state / "state").mkdir(parents=True, exist_ok=True)
    request = ReplayRequest(
        fixed_start=Path(fixed_start),
        public_dir=Path(public_dir),
        publish_dir=state / "publish",
        state_dir=state / "state",
        seed=42,
        deadline_unix=time.time() + 600,
        export_reserve_s=60,
        profile=profile,
        overrides=overrides,
        threads=1,
        keep=3,
        resume=resume,
    )
    return request.write(state / "request.json")


def tiny_task(task: str) -> dict:
    """A deep copy of ``tasks.<task>`` of ``config/test.yaml``."""
    return copy.deepcopy(yaml.safe_load(TEST_CONFIG.read_text())["tasks"][task])


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """The tiny Llama of ``make_tiny_model``, one for the whole session (read only)."""
    return build_once(tmp_path_factory, "tiny-llama", lambda out: make_tiny_model(out, "llama"))


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
    workdir: Path,
    *args: str,
    timeout: float = 1200,
    check: bool = False,
    env: dict | None = None,
    program: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the venv's snakemake in ``workdir`` (no default profile) and capture its output;
    ``env`` adds or replaces environment variables; ``program`` replaces the ``snakemake``
    command (tests/slurm_snakemake.py). ``timeout`` catches a hang: two-seed DAGs took 500–665 s
    beside the other worker in the fresh-clone run of 2026-12-02, so the default is twice the
    600 s that left them 10 % of margin."""
    cmd = [*(program or [str(VENV_BIN / "snakemake")]), "--workflow-profile", "none", *args]
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def jobs_run(out: subprocess.CompletedProcess) -> dict[str, int]:
    """Snakemake's job stats table: rule -> count (empty when nothing was done)."""
    text = out.stdout + out.stderr
    if "Job stats:" not in text:
        return {}
    table = text.split("Job stats:")[1].split("total")[0]
    return {
        line.split()[0]: int(line.split()[1])
        for line in table.splitlines()
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }


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
    """Replay drivers and training processes whose full command line contains ``marker`` or,
    when ``marker`` is a folder, whose working directory lies in it (a driver started with
    relative paths names no folder of its own; another worker's run never matches)."""
    # -ww: full command lines (ps cuts them to the terminal width, COLUMNS, otherwise)
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    folder = Path(marker) if os.path.isabs(marker) else None

    def inside(pid: str) -> bool:
        try:
            return folder is not None and Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder)
        except OSError:  # gone meanwhile, or not ours to read
            return False

    return [
        l
        for l in out.splitlines()
        if ("train.py" in l or "replaykit replay" in l) and (marker in l or inside(l.split()[0]))
    ]


def orphans_after(marker: str, grace_s: float) -> list[str]:
    """``orphan_processes(marker)`` once none are left or ``grace_s`` seconds have passed (the
    driver's SIGTERM grace after its owner was killed): the processes still running then. A
    fixed sleep of the grace cost each kill test its whole length; they are usually gone at once."""
    deadline = time.time() + grace_s
    while (left := orphan_processes(marker)) and time.time() < deadline:
        time.sleep(0.5)
    return left


# ---------------------------------------------------------------- tiny runs built once per session


def shared_dir(tmp_path_factory) -> Path:
    """The session's folder for what is built once: the same for every pytest-xdist worker and
    their controller (a worker's own base folder, ``popen-gw<N>``, is a child of the session's;
    the recipe of pytest-xdist's docs for session fixtures shared by workers)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    return root


def _snapshot(tree: Path) -> dict[str, list[int]]:
    """``relpath -> [size, mtime_ns]`` of every file of ``tree``, but for what reading a run
    writes: ``.snakemake/`` (a dry run's log) and each run's receipt hash cache, which the
    receipts check refreshes (atomically) even in a dry run."""
    from replaykit.harness.verify import CACHE

    return {
        str(p.relative_to(tree)): [p.lstat().st_size, p.lstat().st_mtime_ns]
        for p in sorted(tree.rglob("*"))
        if ".snakemake" not in p.relative_to(tree).parts and p.name != CACHE and not p.is_dir()
    }


_BUILT: list[tuple[Path, Path]] = []  # (tree, its snapshot file) this worker handed out


def build_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """``<shared_dir>/<name>``, written by ``build(path)`` once per test session.

    The first worker to ask builds it, holding ``<name>.lock`` (``filelock``); the others
    wait on the lock and then reuse it. A build that raised is not tried again: later askers
    fail at once with its traceback (``<name>.failed``). ``<name>.done`` holds the build's
    wall time (seconds) and a snapshot of its files, which ``shared_runs_unchanged`` compares
    when the session ends. The tree is built where it stays (never moved): Snakemake's records
    and the replay's sandbox parameters hold its absolute path.
    """
    from filelock import FileLock

    root = shared_dir(tmp_path_factory)
    dest, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    asked = time.time()
    with FileLock(root / f"{name}.lock"):
        if failed.exists():
            raise RuntimeError(f"{name}: its build failed in another test (once per session):\n{failed.read_text()}")
        role = "reused"
        if not done.exists():
            role = "built"
            if dest.exists():
                shutil.rmtree(dest)
            started = time.time()
            try:
                build(dest)
            except BaseException:
                failed.write_text(traceback.format_exc())
                raise
            done.write_text(json.dumps({"seconds": time.time() - started, "files": _snapshot(dest)}))
    _log_build(root, name, role, asked)
    _BUILT.append((dest, done))
    return dest


BUILDS_LOG = "builds.jsonl"


def _log_build(root: Path, name: str, role: str, asked: float) -> None:
    """One line of ``<shared_dir>/builds.jsonl`` per worker's first ask of a shared tree: who
    built it, and how long a worker that reused it waited for the lock (a worker that waits
    runs nothing: ``pytest_terminal_summary`` lists those waits)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = {"name": name, "worker": worker, "role": role, "seconds": round(time.time() - asked, 1), "asked": asked}
    with (root / BUILDS_LOG).open("a") as out:
        out.write(json.dumps(line) + "\n")


def build_seconds(tree: Path) -> float:
    """How long the build of a ``build_once`` tree took (in whichever worker built it)."""
    return json.loads(tree.with_name(f"{tree.name}.done").read_text())["seconds"]


@pytest.fixture(scope="session", autouse=True)
def shared_runs_unchanged():
    """When the session ends: every shared tree this worker handed out still has the files,
    sizes and mtimes it had when it was built (a test that changed one must use ``copy_run``)."""
    yield
    changed = []
    for tree, done in dict(_BUILT).items():
        before, after = json.loads(done.read_text())["files"], _snapshot(tree)
        diff = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if diff:
            changed.append(f"{tree.name}: {', '.join(diff[:5])}{' ...' if len(diff) > 5 else ''}")
    assert not changed, f"shared runs changed by a test (use copy_run): {'; '.join(changed)}"


class Listener:
    """A listening socket on the host (a Unix socket file or TCP on 127.0.0.1) that counts the
    connections it accepted, on a thread of its own."""

    def __init__(self, family: int, address):
        import socket
        import threading

        self.sock = socket.socket(family)
        self.sock.bind(address)
        self.sock.listen()
        self.address, self.accepted = self.sock.getsockname(), 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def outside_targets():
    """What candidate code must not reach, placed outside the working directory as an
    operator's machine holds it (issue 27): under ``/var/tmp`` (kept across reboots, not the
    sandbox's scratch ``/tmp``) a copy of a hidden split as another checkout's
    ``results/<task>/assets/hidden/final.jsonl``, a dataset cache meant as ``HF_HOME`` (outside
    ``$HOME``), and a Unix socket listener; and a TCP listener on the host's loopback. Yields a
    dict: ``copy``, ``hf_home``, ``socket``, ``port`` (for the probe) and the two listeners."""
    import socket
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="replaykit-test-outside-", dir="/var/tmp"))
    copy = folder / "other-checkout" / "results" / "soup" / "assets" / "hidden" / "final.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_text('{"id": 0, "label": 7}\n')
    hf_home = folder / "hf-home"
    (hf_home / "datasets").mkdir(parents=True)
    (hf_home / "datasets" / "final.arrow").write_bytes(b"ARROW1")
    unix, tcp = Listener(socket.AF_UNIX, str(folder / "host.sock")), Listener(socket.AF_INET, ("127.0.0.1", 0))
    targets = {"copy": str(copy), "hf_home": str(hf_home), "socket": unix.address, "port": tcp.address[1]}
    yield {**targets, "unix": unix, "tcp": tcp}
    unix.close()
    tcp.close()
    shutil.rmtree(folder, ignore_errors=True)


def copy_run(tree: Path, dest: Path, without: tuple[str, ...] = ()) -> Path:
    """A copy of a built workflow folder to change or break: every file with its mtime
    (``shutil.copy2``), symlinks as links, ``.snakemake/`` left out (its records name the
    original folder), so Snakemake sees the copy as up to date from file times alone.
    ``without``: paths (relative, glob patterns) left out too, e.g. one run's folders, so that
    Snakemake builds them again in the copy."""
    shutil.copytree(tree, dest, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    for pattern in without:
        for path in dest.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return dest


def _tiny_dag(work: Path, config: dict, *targets: str, cores: int = 2) -> None:
    work.mkdir()
    copy_workflow(work)
    write_config(work, config)
    for target in targets:
        snakemake(work, target, "--cores", str(cores), "--resources", "gpu=1", check=True)


@pytest.fixture(scope="session")
def dpo_run(tiny_llama, tmp_path_factory) -> Path:
    """The tiny dpo DAG of ``tiny_config(tiny_llama)`` built: ``results/dpo/final`` (one seed,
    5 steps, checkpoints 3-5 retained), then ``results/dpo/shipped-seed42/proxy.json``, each by
    ``snakemake --cores 2 --resources gpu=1`` (two CPU jobs at a time, GPU jobs one at a
    time). Shared and read only: change a ``copy_run`` of it."""
    return build_once(
        tmp_path_factory,
        "dpo-run",
        lambda work: _tiny_dag(
            work, tiny_config(tiny_llama), "results/dpo/final", "results/dpo/shipped-seed42/proxy.json"
        ),
    )


@pytest.fixture(scope="session")
def rm_run(tiny_llama, tmp_path_factory) -> Path:
    """The tiny rm DAG of ``rm_config(tiny_llama)`` built: ``results/rm/report.html`` (one seed,
    4 steps, checkpoints 2-4 retained), then ``results/rm/shipped-seed42/proxy.json``, as
    ``dpo_run``. Shared and read only: change a ``copy_run`` of it."""
    return build_once(
        tmp_path_factory,
        "rm-run",
        lambda work: _tiny_dag(
            work, rm_config(tiny_llama), "results/rm/report.html", "results/rm/shipped-seed42/proxy.json"
        ),
    )


def soup_task(fixed_start: Path, **extra) -> dict:
    """A tiny soup block on ``fixed_start`` (``soup_start``): one seed, 3 greedy rounds."""
    return {
        "fixed_start": str(fixed_start),
        "data": {"source": "embedded", "public_seed": 1, "proxy_per_class": 2},
        "recipe": {"profile": "embedded", "overrides": {}},
        "seeds": [42],
        "threads": 1,
        "budget": {"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
        "validation": {"runtime": 5},
        "evaluation": {"batch_size": 64, "runtime": 5},
        "final": {"n_boot": 200},
        **extra,
    }


@pytest.fixture(scope="session")
def soup_start(tmp_path_factory) -> Path:
    """The soup-digits builder's fixed start (3 ingredients, 1 epoch, 4 held-out digits per
    class), written as the fixed_start_model rule writes it (with its private file and
    manifest beside it: ``soup-start/ingredients``). Shared and read only."""
    from replaykit.models import build_from_builder

    spec = {"builder": "soup-digits", "seed": 0, "n_ingredients": 3, "pretrain_epochs": 1, "heldout_per_class": 4}

    def build(out: Path) -> None:
        out.mkdir()
        build_from_builder(spec, out / "ingredients", out / "ingredients.manifest.json")

    return build_once(tmp_path_factory, "soup-start", build) / "ingredients"


@pytest.fixture(scope="session")
def soup_run(soup_start, tmp_path_factory) -> Path:
    """The tiny soup DAG of ``soup_task(soup_start)`` built: ``results/soup/final`` by
    ``snakemake --cores 1 --resources gpu=1``. Shared and read only: change a ``copy_run``."""
    config = {"models": {}, "tasks": {"soup": soup_task(soup_start)}}
    return build_once(tmp_path_factory, "soup-run", lambda work: _tiny_dag(work, config, "results/soup/final", cores=1))


def knob_patch(work: Path, task: str, name: str, key: str, value) -> str:
    """A candidate patch (``<work>/<task>-<name>.diff``) setting ``key: value`` in the task's
    embedded recipe profile; returns its path."""
    import difflib

    path = work / f"recipes/{task}/configs/embedded.yaml"
    old = path.read_text().splitlines(keepends=True)
    new = [f"{key}: {value}\n" if line.startswith(f"{key}:") else line for line in old]
    assert new != old, (task, key)
    patch = work / f"{task}-{name}.diff"
    patch.write_text("".join(difflib.unified_diff(old, new, "a/configs/embedded.yaml", "b/configs/embedded.yaml")))
    return str(patch)


CAMPAIGN_SEEDS = [42, 43]


def campaign_config(work: Path, soup_start: Path, tiny_llama: Path) -> dict:
    """The campaign of ``campaign_run`` (issue 32): soup with two candidates (``greedy``,
    ``single``: the shipped runs shared between them) and rm with one (learning rate ``lr4``),
    seeds 42 and 43, at most one replay at a time. Kept cheap: soup publishes one checkpoint per
    run, rm's tiny recipe is cut to 2 steps with one checkpoint, and rm's second candidate (16 of
    the campaign's jobs, about 80 s of the suite) is left out: soup's two show the sharing.
    soup's official candidate is ``greedy``, so its final and its report (read by
    tests/test_report.py) hold a candidate patch over two seeds and the shipped reference, and
    the report shows the ``greedy`` ablation. Patches are written into ``work``."""
    soup = soup_task(
        soup_start,
        candidate="greedy",
        seeds=CAMPAIGN_SEEDS,
        candidates={
            "greedy": knob_patch(work, "soup", "greedy", "method", "greedy"),
            "single": knob_patch(work, "soup", "single", "method", "best_single"),
        },
        ablation={"report": ["greedy"]},
    )
    rm = rm_config(tiny_llama)["tasks"]["rm"]
    rm["recipe"]["overrides"].update(max_steps=2, save_steps=2)  # one checkpoint per run
    rm.update(
        seeds=CAMPAIGN_SEEDS,
        candidates={"lr4": knob_patch(work, "rm", "lr4", "learning_rate", 4.0e-4)},
    )
    return {"models": {}, "tasks": {"soup": soup, "rm": rm}, "campaign": {"tasks": ["soup", "rm"], "max_replays": 1}}


@pytest.fixture(scope="session")
def campaign_run(soup_start, tiny_llama, tmp_path_factory) -> Path:
    """The campaign of ``campaign_config`` built by one ``snakemake results/campaign
    results/soup/report.html --cores 2 --resources gpu=2`` (10 replays: each task's candidates
    and its shipped recipe, shared, over 2 seeds; every candidate's ablation; soup's report);
    Snakemake's output in ``campaign.log`` beside the tree. Read by the campaign's, the rm
    ablation's, the soup ablation's and the HTML report's tests. Shared and read only: change a
    ``copy_run``."""

    def build(work: Path) -> None:
        work.mkdir()
        copy_workflow(work)
        write_config(work, campaign_config(work, soup_start, tiny_llama))
        # about 10 minutes of CPU beside another worker; the timeout leaves room for a loaded machine
        out = snakemake(
            work, "results/campaign", "results/soup/report.html", "--cores", "2", "--resources", "gpu=2", timeout=2700
        )
        work.with_name("campaign.log").write_text(out.stdout + out.stderr)
        if out.returncode != 0:
            raise AssertionError(f"snakemake failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")

    return build_once(tmp_path_factory, "campaign", build)


# ---------------------------------------------------------------- the main job's install, with other workers


def _main_job_installed(tmp_path_factory) -> Path:
    return shared_dir(tmp_path_factory) / "main-job-installed"


@pytest.fixture
def main_job_install_signal(tmp_path_factory):
    """For the main-job test: README's main command reinstalls this venv's editable
    ``replaykit`` (pip removes its ``.pth`` file, then writes it again), and a Python process
    that starts in between cannot import replaykit. The other pytest-xdist worker waits for
    this signal (``pytest_runtest_setup``): ``main-job-installed``, written once pip has
    written the new ``replaykit-*.dist-info/RECORD`` (its last file) or when the test ends."""
    import threading

    signal = _main_job_installed(tmp_path_factory)
    started, stop = time.time(), threading.Event()
    records = "lib/python*/site-packages/replaykit-*.dist-info/RECORD"

    def watch() -> None:
        while not stop.wait(0.5):
            try:
                if any(r.stat().st_mtime > started for r in (ROOT / ".venv").glob(records)):
                    signal.touch()
                    return
            except OSError:  # a file of the old install, removed between glob and stat
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield
    stop.set()
    watcher.join()
    signal.touch()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a pytest-xdist worker, when the session holds the main job (ordered first, so the
    other worker starts it at once): no other test sets up (its fixtures may start Python
    processes) before the main command's pip has reinstalled replaykit
    (``main_job_install_signal``); waited for once per worker, at most 10 minutes."""
    session = item.session
    if (
        os.environ.get("PYTEST_XDIST_WORKER")
        and not item.get_closest_marker("main_job")
        and not getattr(session, "main_job_installed", False)
        and any(other.get_closest_marker("main_job") for other in session.items)
    ):
        signal, deadline = _main_job_installed(item.config._tmp_path_factory), time.time() + 600
        while not signal.exists() and time.time() < deadline:
            time.sleep(1)
    session.main_job_installed = True


# ---------------------------------------------------------------- scheduling on pytest-xdist workers


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return bool(info) and any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


# Started first, after the main job: the longest unit (docs/testing.md: the SLURM DAG's set-up
# alone took 363 s of the serial suite). Only an ordering hint: a stale entry costs time, not results.
LONG_POLES = ("test_slurm.py::",)
SHARED_RUNS = ("dpo_run", "rm_run", "soup_run", "campaign_run")  # the build_once runs that several modules read


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group and order the tests for pytest-xdist's workers (README's test command runs
    ``pytest -n 2``; pyproject.toml adds ``--dist loadgroup --no-loadscope-reorder``, so a
    worker takes the next unit in this order whenever it runs short of work).

    * Grouped: the tests of a module that use a module-scoped fixture run on one worker, in
      file order (``xdist_group`` ``<module>``), so that the fixture is built once. A test
      that marks its own ``xdist_group`` (an exclusive resource) keeps it. Tiny runs read by
      several modules are session fixtures (``build_once``), built once across workers.
    * Ordered, longest first, so that the long ones overlap and short ones fill the end: the
      main job, ``LONG_POLES``, the first slow reader of each of ``SHARED_RUNS`` (it builds the
      run, on the worker that does not hold the main job, while the main job runs), groups
      holding slow tests, the other slow tests, the rest. Those other slow readers of a shared
      run take turns by run (dpo, rm, soup, campaign, other, dpo, ...). On 2026-12-04 the first
      readers came after the groups, and a worker waited 60 s for the other's ``dpo_run``.
      File order otherwise, except that units 3 and 4 are two quick tests (see below).
    """
    group_of: dict[pytest.Item, str] = {}
    for item in items:
        marks = [m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")]
        if not marks and _uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
            marks = [item.module.__name__]
        if marks:
            group_of[item] = "_".join(sorted(map(str, marks)))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # for the controller's GroupScheduling
        groups = _groups_file(config)
        partial = groups.with_name(f"{groups.name}.{os.environ['PYTEST_XDIST_WORKER']}")
        partial.write_text(json.dumps({item.nodeid: group for item, group in group_of.items()}))
        os.replace(partial, groups)
    slow_groups = {g for item, g in group_of.items() if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("main_job"):
            return 0
        if any(pole in item.nodeid for pole in LONG_POLES):
            return 1
        if item in group_of:
            return 2 if group_of[item] in slow_groups else 4
        return 3 if item.get_closest_marker("slow") else 4

    turn: dict[pytest.Item, int] = {}
    seen: dict[str, int] = {}
    builders: set[pytest.Item] = set()
    for item in items:
        if rank(item) == 3:
            run = next((name for name in SHARED_RUNS if name in item.fixturenames), "")
            turn[item] = seen.get(run, 0)
            seen[run] = turn[item] + 1
            if run and turn[item] == 0:
                builders.add(item)

    def key(item: pytest.Item) -> tuple[int, int, int]:
        if item in builders:  # right after the long poles, so each run exists before its other readers
            return (1, 1, 0)
        return (rank(item), 0, turn.get(item, 0))

    items.sort(key=key)  # stable: file order otherwise
    # pytest-xdist hands each worker two units at the start (a worker runs a test only once it
    # holds the next one), so the second unit a worker gets waits behind its long first one:
    # units 3 and 4 are two quick tests of the fast tier, which then wait for nothing much.
    units = list(dict.fromkeys(group_of.get(item, item.nodeid) for item in items))
    quick = [item for item in items if item not in group_of and rank(item) == 4][:2]
    if len(units) > 4 and len(quick) == 2:
        first_two = set(units[:2])
        cut = max(i for i, item in enumerate(items) if group_of.get(item, item.nodeid) in first_two) + 1
        rest = [item for item in items[cut:] if item not in quick]
        items[:] = items[:cut] + quick + rest


def _groups_file(config: pytest.Config) -> Path:
    return shared_dir(config._tmp_path_factory) / "xdist-groups.json"


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` with the groups of ``pytest_collection_modifyitems``.

    pytest-xdist 3.8's own loadgroup renames a grouped test's node id (``item._nodeid``),
    which pytest 9.2 no longer reads: its groups never reach the controller. Here the workers
    write ``nodeid -> group`` to ``xdist-groups.json`` in the session's shared folder, and the
    controller's scheduler (pytest-xdist's ``LoadScopeScheduling``: one unit per group, or per
    test outside a group, handed out in collection order) reads it when it starts scheduling,
    after every worker has collected."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                path = _groups_file(self.config)
                self.groups = json.loads(path.read_text()) if path.exists() else {}
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Each shared tree's build and every wait for one (``build_once``'s ``builds.jsonl``):
    seconds in which a worker held the lock's queue instead of running tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    log = shared_dir(config._tmp_path_factory) / BUILDS_LOG
    if not log.exists():
        return
    lines = []
    for text in log.read_text().splitlines():  # a line cut short (a worker killed mid-append) is left out
        try:
            lines.append(json.loads(text))
        except ValueError:
            continue
    keys = {"name", "worker", "role", "seconds", "asked"}
    lines = [line for line in lines if isinstance(line, dict) and keys <= line.keys()]
    if not lines:
        return
    start = min(line["asked"] for line in lines)
    terminalreporter.section("shared runs (build_once)")
    for line in lines:
        what = "built in" if line["role"] == "built" else "waited"
        at = f"{line['asked'] - start:.0f} s after the first ask"
        terminalreporter.write_line(f"{line['name']}: {line['worker']} {what} {line['seconds']:.1f} s ({at})")
    waited = sum(line["seconds"] for line in lines if line["role"] == "reused")
    terminalreporter.write_line(f"waits for another worker's build: {waited:.0f} s in all")


def bare_replay_spec(
    tmp_path: Path,
    workspace: Path,
    budget: dict,
    *,
    settings: dict | None = None,
    frozen=None,
    record: str = "record.json",
    make_inputs: bool = True,
):
    """The :class:`~replaykit.harness.protocol.ReplaySpec` of a soup replay of ``workspace`` on an
    empty fixed start and no assets (made first unless ``make_inputs`` is false: an earlier
    replay's), publishing to ``pub/`` with its state in ``state/``, under the isolation plan the
    replay rule's gets (``settings``: the config's isolation keys, default bwrap)."""
    from replaykit.harness.budget import Budget
    from replaykit.harness.hashing import tree_files
    from replaykit.harness.protocol import ReplaySpec
    from replaykit.isolation import RunPaths, Settings, plan
    from replaykit.tasks import frozen_code

    fixed, manifest = tmp_path / "fixed", tmp_path / "assets" / "manifest.json"
    if make_inputs:
        fixed.mkdir()
        (fixed / "config.json").write_text("{}")
        manifest.parent.mkdir()
        manifest.write_text(json.dumps({"fixed_start": {"files": tree_files(fixed)}, "files": {}}))
    run = RunPaths(fixed, tmp_path / "assets", read_only=(workspace,), writable=(tmp_path / "pub", tmp_path / "state"))
    return ReplaySpec(
        task="soup",
        run="x-seed1",
        workspace=Path(workspace),
        workspace_record=tmp_path / "ws.json",
        manifest=manifest,
        fixed_start=fixed,
        public_dir=tmp_path / "assets",
        publish_dir=tmp_path / "pub",
        state_dir=tmp_path / "state",
        record_path=tmp_path / record,
        budget=Budget.from_config(budget),
        seed=1,
        profile="embedded",
        overrides={},
        threads=1,
        isolation=plan("soup", {}, Settings.from_config(settings or {"isolation": "bwrap"}), run),
        frozen=frozen or frozen_code(),
    )
