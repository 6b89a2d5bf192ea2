"""Isolation of candidate code (issue 14): a hostile candidate patch probes the sandbox.

The probe is a candidate patch that adds ``probe.py`` to the workspace and calls it from
``train.py`` before training. It tries to list and read the hidden split, earlier results,
other runs' directories and the source tree; to open the frozen package and the fixed start
for writing (``r+``, without changing a byte, so the test is safe even without a sandbox);
to create a file in the working directory; to look through ``/proc/<pid>/root``; to see
host processes; and to connect to a TCP server the test runs on the host's loopback. It
writes what it managed to ``<state_dir>/probe.json``; the tests assert it managed none of
it under ``isolation: bwrap``, and that the same probe does manage (so it is a real probe)
under ``isolation: none``, where every output carries the advisory.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, bare_replay_spec, copy_workflow, jobs_run, snakemake, tiny_config, write_config
from conftest import soup_task as tiny_soup_task
from replaykit.harness import sandbox
from replaykit.harness.salt import ENV as SALT_ENV
from replaykit.harness.salt import fingerprint
from replaykit.harness.sandbox import IsolationPlan
from replaykit.tasks import frozen_code

pytestmark = pytest.mark.slow

PROBE = r'''
"""A hostile candidate's probe: try everything a replay must not do; record what worked."""
import json, os, socket
from pathlib import Path


def attempt(results, name, action):
    try:
        results[name] = {"managed": True, "detail": str(action())[:200]}
    except Exception as exc:  # every failure is the expected outcome
        results[name] = {"managed": False, "detail": f"{type(exc).__name__}: {exc}"[:200]}


def writable(path):
    with open(path, "r+b"):  # opens for writing, changes nothing
        return "opened for writing"


def unix_connect(path):
    # the connection is the escape: the host's listener accepts and closes at once, so a send
    # after it may meet a closed peer (BrokenPipeError) without making the connection any less made
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(path)
        try:
            s.sendall(b"probe")
        except (BrokenPipeError, ConnectionResetError) as exc:
            return f"connected; the listener closed before the message ({type(exc).__name__})"
    return "connected and sent"


def run(request, task, t):
    publish = Path(request.publish_dir)
    work = publish.parents[3]  # <work>/results/<task>/<run>/replay
    run_dir, results = publish.parent, {}
    hidden = work / "results" / task / "assets" / "hidden"
    attempt(results, "list_hidden", lambda: os.listdir(hidden))
    attempt(results, "read_hidden", lambda: [p.read_bytes()[:10] for p in hidden.rglob("*") if p.is_file()][0])
    manifest = work / "results" / task / "assets" / "manifest.json"
    attempt(results, "read_manifest_of_hidden", lambda: manifest.read_text())
    others = lambda: [p.name for p in (work / "results" / task).iterdir() if p.name not in ("assets", run_dir.name)]
    attempt(results, "other_runs", lambda: others() or 1 / 0)
    attempt(results, "earlier_results", lambda: (work / "results" / task / "final" / "summary.json").read_text())
    attempt(results, "logs", lambda: os.listdir(work / "logs"))
    attempt(results, "config", lambda: (work / "config" / "config.yaml").read_text())
    import replaykit
    package = Path(replaykit.__file__).parent
    attempt(results, "write_frozen_code", lambda: writable(package / "tasks" / task / "evaluator.py"))
    first_file = lambda: next(p for p in Path(request.fixed_start).rglob("*") if p.is_file())
    attempt(results, "write_fixed_start", lambda: writable(first_file()))
    attempt(results, "create_in_fixed_start", lambda: (Path(request.fixed_start) / "probe").write_text("x"))
    attempt(results, "write_workspace", lambda: writable(Path("train.py")))
    attempt(results, "create_in_work_dir", lambda: (work / "probe-escape").write_text("x"))
    attempt(results, "proc_parent_root", lambda: os.listdir(f"/proc/{os.getppid()}/root{hidden}"))
    attempt(results, "proc_1_root", lambda: os.listdir(f"/proc/1/root{hidden}"))
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    attempt(results, "see_host_processes", lambda: pids if len(pids) > 5 else 1 / 0)
    from importlib.util import find_spec
    digits = Path(find_spec("sklearn").origin).parent / "datasets" / "data" / "digits.csv.gz"
    attempt(results, "sklearn_digits", lambda: digits.read_bytes()[:4] if task == "soup" else 1 / 0)
    attempt(results, "home_secret", lambda: (Path.home() / "secret.txt").read_text())
    attempt(results, "network_interfaces", lambda: [n for _, n in socket.if_nameindex() if n != "lo"] or 1 / 0)
    attempt(results, "connect_host_loopback", lambda: socket.create_connection(("127.0.0.1", t["port"]), timeout=3))
    attempt(results, "connect_host_unix_socket", lambda: unix_connect(t["socket"]))
    attempt(results, "copy_under_var_tmp", lambda: Path(t["copy"]).read_bytes())
    attempt(results, "hf_home_outside_home", lambda: os.listdir(t["hf_home"]))
    attempt(results, "hf_home_by_its_variable", lambda: os.listdir(os.environ["HF_HOME"]))
    (Path(request.state_dir) / "probe.json").write_text(json.dumps(results, indent=1))
'''

ESCAPES = (
    "list_hidden",
    "read_hidden",
    "read_manifest_of_hidden",
    "other_runs",
    "earlier_results",
    "logs",
    "config",
    "write_frozen_code",
    "write_fixed_start",
    "create_in_fixed_start",
    "write_workspace",
    "create_in_work_dir",
    "proc_parent_root",
    "proc_1_root",
    "see_host_processes",
    "sklearn_digits",
    "home_secret",
    "network_interfaces",
    "connect_host_loopback",
    "connect_host_unix_socket",
    "copy_under_var_tmp",
    "hf_home_outside_home",
    "hf_home_by_its_variable",
)
# what the same probe manages without a sandbox (so each of these is a real probe)
ESCAPES_WITHOUT_SANDBOX = (
    "list_hidden",
    "read_hidden",
    "write_frozen_code",
    "connect_host_loopback",
    "create_in_work_dir",
    "connect_host_unix_socket",
    "copy_under_var_tmp",
    "hf_home_outside_home",
    "hf_home_by_its_variable",
    "sklearn_digits",
)


def bare_replay(tmp_path: Path, workspace: Path, isolation: str, frozen=None, limits: dict | None = None) -> dict:
    """``run_replay`` of ``workspace`` on an empty fixed start and no assets (60 s budget), with
    the isolation plan the replay rule's gets (``frozen``: the frozen code to hash; ``limits``:
    the config's ``sandbox_limits``)."""
    from replaykit.harness import replay

    budget = {"outer_limit_s": 60, "internal_deadline_s": 50, "export_reserve_s": 5}
    settings = {"isolation": isolation, "sandbox_limits": limits}
    return replay.run_replay(
        bare_replay_spec(tmp_path, workspace, budget, settings=settings, frozen=frozen, record="r.json")
    )


def one_file_workspace(tmp_path, train_py: str) -> Path:
    """A workspace built from a recipe of one ``train.py`` (``train_py``) and an embedded profile
    of ``max_steps: 1``."""
    from replaykit.harness.workspace import build_workspace

    recipe = tmp_path / "recipe"
    (recipe / "configs").mkdir(parents=True)
    (recipe / "configs" / "embedded.yaml").write_text("max_steps: 1\n")
    (recipe / "train.py").write_text(train_py)
    return build_workspace(recipe, tmp_path / "ws", tmp_path / "ws.json")["workspace"]


def make_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def probe_patch(dest: Path, task: str, targets: dict) -> Path:
    """A candidate patch for ``recipes/<task>``: add probe.py and call it first in train.py, with
    the outside targets (conftest's ``outside_targets``: ``copy``, ``hf_home``, ``socket``, ``port``)."""
    targets = {k: targets[k] for k in ("copy", "hf_home", "socket", "port")}
    train = (ROOT / "recipes" / task / "train.py").read_text()
    # the line where the recipe's session has read the driver's request
    anchor = next(l for l in train.splitlines(True) if "Session.start(" in l)
    patched = train.replace(
        anchor, anchor + f"    import probe\n    probe.run(session.request, {task!r}, {targets!r})\n"
    )
    diff = "".join(difflib.unified_diff(train.splitlines(True), patched.splitlines(True), "a/train.py", "b/train.py"))
    diff += "".join(difflib.unified_diff([], PROBE.splitlines(True), "/dev/null", "b/probe.py"))
    dest.write_text(diff)
    return dest


def soup_task(fixed_start: Path, patch: Path) -> dict:
    """conftest's tiny soup block with the probe as its candidate."""
    return tiny_soup_task(fixed_start, candidate="probe", candidates={"probe": str(patch)})


@pytest.fixture
def soup_start(soup_start, tmp_path):
    """A copy of conftest's shared soup start (with its private file and manifest): the probe
    without isolation writes into its fixed start."""
    import shutil

    shutil.copytree(soup_start.parent, tmp_path / "soup-start", symlinks=True)
    return tmp_path / "soup-start" / soup_start.name


def run_probe(work: Path, task: str, target: str, outside: dict) -> tuple[dict, dict]:
    """Build ``target`` with the probe as the candidate, the user's ``$HOME`` holding a secret and
    ``HF_HOME`` set to the outside dataset cache; the probe's findings and the replay record."""
    before = frozen_code().files()
    home = work.parent / "home"  # the user's HOME holds a secret the probe looks for
    home.mkdir()
    (home / "secret.txt").write_text("token")
    env = {"HOME": str(home), "HF_HOME": outside["hf_home"]}
    snakemake(work, target, "--cores", "2", "--resources", "gpu=1", check=True, env=env)
    assert frozen_code().files() == before, "the frozen package changed"
    probe = json.loads((work / f"results/{task}/probe-seed42/replay-state/probe.json").read_text())
    record = json.loads((work / f"results/{task}/probe-seed42/replay/record.json").read_text())
    return probe, record


def nothing_reached(outside: dict) -> bool:
    return outside["tcp"].accepted == 0 and outside["unix"].accepted == 0


def test_soup_probe_reaches_nothing_and_the_run_stays_valid(soup_start, tmp_path, outside_targets):
    work = copy_workflow(make_dir(tmp_path / "work"))
    (work / "results/soup/final").mkdir(parents=True)  # an earlier result the probe looks for
    (work / "results/soup/final/summary.json").write_text('{"value": 0.9}')
    (work / "results/soup/other-seed1").mkdir()
    write_config(
        work,
        {
            "models": {},
            "tasks": {"soup": soup_task(soup_start, probe_patch(tmp_path / "p.diff", "soup", outside_targets))},
        },
    )
    probe, record = run_probe(work, "soup", "results/soup/probe-seed42/official.json", outside_targets)
    managed = {k: v["detail"] for k, v in probe.items() if v["managed"]}
    assert set(probe) == set(ESCAPES) and managed == {}
    assert (
        nothing_reached(outside_targets)
        and not (work / "probe-escape").exists()
        and not (soup_start / "probe").exists()
    )
    assert record["isolation"] == "bwrap" and record["advisories"] == []
    official = json.loads((work / "results/soup/probe-seed42/official.json").read_text())
    assert official["official"] is not None and official["isolation"] == "bwrap"
    # the replay waited for the sandbox's self-test, which every escape kind failed to pass
    self_test = json.loads((work / "results/sandbox-self-test/soup.json").read_text())
    assert self_test["passed"] is True and self_test["escaped"] == []
    limits = record["sandbox"]["limits"]
    assert limits["hit"] is None and limits["memory_bytes"] > 0 and limits["file_bytes"] >= 1024**3
    assert (
        record["fingerprint"]["bwrap"]
        == subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    )


def test_soup_probe_without_isolation_reaches_everything_and_says_so(soup_start, tmp_path, outside_targets):
    work = copy_workflow(make_dir(tmp_path / "work"))
    write_config(
        work,
        {
            "isolation": "none",
            "models": {},
            "tasks": {"soup": soup_task(soup_start, probe_patch(tmp_path / "p.diff", "soup", outside_targets))},
        },
    )
    probe, record = run_probe(work, "soup", "results/soup/report.html", outside_targets)
    for escape in ESCAPES_WITHOUT_SANDBOX:
        assert probe[escape]["managed"], (escape, probe[escape])
    assert outside_targets["tcp"].accepted and outside_targets["unix"].accepted and record["isolation"] == "none"
    advisory = sandbox.NO_ISOLATION_ADVISORY
    final = json.loads((work / "results/soup/final/summary.json").read_text())
    assert final["advisories"][0] == advisory and final["isolation"] == "none"
    score = json.loads((work / "results/soup/probe-seed42/final-scores/checkpoint-3/summary.json").read_text())
    assert score["advisories"][0] == advisory
    report_md = (work / "results/soup/final/report.md").read_text().splitlines()
    assert advisory in report_md[2]
    html = (work / "results/soup/report.html").read_text()
    assert html.index(advisory) < html.index("Official result")


def test_dpo_probe_reaches_nothing(tiny_llama, tmp_path, outside_targets):
    work = copy_workflow(make_dir(tmp_path / "work"))
    config = tiny_config(tiny_llama)
    task = config["tasks"]["dpo"]
    task["candidate"], task["candidates"] = (
        "probe",
        {"probe": str(probe_patch(tmp_path / "p.diff", "dpo", outside_targets))},
    )
    # one step, one checkpoint: the probe runs before training; each more checkpoint is three
    # more Python starts (validation, proxy and final scoring) that the test does not read
    task["recipe"]["overrides"]["max_steps"] = 1
    write_config(work, config)
    probe, record = run_probe(work, "dpo", "results/dpo/probe-seed42/official.json", outside_targets)
    assert set(probe) == set(ESCAPES) and {k: v["detail"] for k, v in probe.items() if v["managed"]} == {}
    assert nothing_reached(outside_targets) and not (work / "probe-escape").exists()
    official = json.loads((work / "results/dpo/probe-seed42/official.json").read_text())
    assert official["official"] is not None and record["isolation"] == "bwrap"


def test_frozen_code_changed_during_the_replay_is_an_error(tmp_path):
    """Without the sandbox, a training process that edits the frozen package fails the replay."""
    from replaykit.harness import replay
    from replaykit.harness.hashing import tree_files

    package = tmp_path / "package"
    package.mkdir()
    (package / "evaluator.py").write_text("SCORE = 1\n")

    class Package:  # the frozen code the driver hashes before and after training
        def files(self):
            return tree_files(package)

    ws = one_file_workspace(tmp_path, f"open({str(package / 'evaluator.py')!r}, 'a').write('SCORE = 2\\n')\n")
    with pytest.raises(replay.ReplayError, match="frozen package changed during the replay: evaluator.py: changed"):
        bare_replay(tmp_path, ws, isolation="none", frozen=Package())
    assert "changed" in json.loads((tmp_path / "pub" / "last-failure.json").read_text())["error"]


def test_sandbox_shows_only_what_the_plan_names(tmp_path):
    """A plan on plain files: a folder not named holds only what is shown inside it, shown paths
    are readable, only writable ones written."""
    hidden, shown, out = tmp_path / "hidden", tmp_path / "hidden" / "public", tmp_path / "out"
    shown.mkdir(parents=True)
    out.mkdir()
    (hidden / "final.jsonl").write_text("secret")
    (shown / "proxy.jsonl").write_text("public")
    script = (
        "import os, pathlib\n"
        f"print(sorted(os.listdir({str(hidden)!r})))\n"
        f"print(pathlib.Path({str(shown / 'proxy.jsonl')!r}).read_text())\n"
        f"pathlib.Path({str(out / 'ok')!r}).write_text('1')\n"
        "try:\n"
        f"    pathlib.Path({str(shown / 'x')!r}).write_text('1'); print('wrote')\n"
        "except OSError as e:\n    print('read-only', e.errno)\n"
    )
    argv = IsolationPlan("bwrap", read_only=(shown,), writable=(out,)).argv(["python3", "-c", script], chdir=out)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['public']", "public", "read-only 30"]  # 30 = EROFS
    assert (out / "ok").read_text() == "1" and not (shown / "x").exists()


def test_only_allowed_environment_variables_reach_the_sandbox(tmp_path):
    """A token in the operator's environment is cleared, also from what bwrap's own reaper
    (pid 1 inside) shows in /proc/1/environ; thread counts, CUDA switches and the probe's
    REPLAYKIT_RUN_DIR pass with their values; a name like a key is cleared even under an
    allowed pattern (NVIDIA_API_KEY); PATH loses the folder the plan does not show."""
    env = {
        "PATH": "/opt/operator/bin:/usr/bin:/bin",
        "HF_TOKEN": "hf_secret",
        "AWS_SECRET_ACCESS_KEY": "k",
        "SLURM_JOB_ID": "7",
        "OMP_NUM_THREADS": "3",
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_API_KEY": "nv_secret",
        "REPLAYKIT_RUN_DIR": "/x",
        "LC_ALL": "C.UTF-8",
    }
    script = (
        "import json, os; print(json.dumps(dict(os.environ), sort_keys=True));"
        "print(json.dumps(sorted(open('/proc/1/environ').read().split(chr(0)))))"
    )
    plan = IsolationPlan("bwrap", writable=(tmp_path,))
    argv = plan.argv(["python3", "-c", script], chdir=tmp_path)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=plan.environment(env))
    assert result.returncode == 0, result.stderr
    inside, reaper = map(json.loads, result.stdout.splitlines())
    assert inside == {
        "PATH": "/usr/bin:/bin",  # a search path keeps the system's and the plan's software (none here)
        "OMP_NUM_THREADS": "3",
        "CUDA_VISIBLE_DEVICES": "0",
        "REPLAYKIT_RUN_DIR": "/x",
        "LC_ALL": "C.UTF-8",
        "PWD": str(tmp_path.absolute()),
    }  # set by bwrap --chdir
    assert not any("secret" in entry or entry.startswith(("HF_TOKEN", "AWS_", "SLURM_")) for entry in reaper)
    assert IsolationPlan("none").environment(env) == env  # isolation: none changes nothing


def test_torch_compile_caches_live_in_the_replay_state(tmp_path):
    """A replay's training process finds torch.compile's caches under
    ``<state_dir>/compile-cache`` (their default, ``/tmp``, is empty at each attempt in the
    sandbox): the installed torch's Inductor and Triton, asked inside the sandbox, name them;
    and the interpreter's ``Python.h``, which compiling needs, is shown."""
    from replaykit.harness import replay

    ws = one_file_workspace(
        tmp_path,
        "import json, sys\nfrom pathlib import Path\n"
        "from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir\n"
        "r = json.loads(Path(sys.argv[2]).read_text())\n"
        "import os, sysconfig\n"
        "header = os.path.join(sysconfig.get_paths()['include'], 'Python.h')\n"
        "dirs = {'inductor': cache_dir(), 'triton': triton_cache_dir(0), 'Python.h': os.path.isfile(header)}\n"
        "(Path(r['state_dir']) / 'caches.json').write_text(json.dumps(dirs))\n"
        "(Path(r['state_dir']) / 'train_result.json').write_text(json.dumps({'stop_reason': 'max_steps'}))\n",
    )
    with pytest.raises(replay.ReplayError):  # it publishes nothing: only the environment matters
        bare_replay(tmp_path, ws, isolation="bwrap")
    state = (tmp_path / "state").resolve()
    caches = json.loads((state / "caches.json").read_text())
    assert caches == {
        "inductor": str(state / "compile-cache/inductor"),
        "triton": str(state / "compile-cache/triton"),
        "Python.h": True,  # what the compiled kernels build against (a pyenv keeps it outside /usr)
    }
    assert (state / "compile-cache/inductor").is_dir()  # created by cache_dir(), inside the sandbox


def test_missing_bubblewrap_is_one_clear_line(tmp_path):
    work = copy_workflow(tmp_path)
    env_path = f"{tmp_path / 'nobin'}"
    (tmp_path / "nobin").mkdir()
    for tool in Path("/usr/bin").iterdir():  # the system's PATH without bwrap
        if tool.name != "bwrap":
            (tmp_path / "nobin" / tool.name).symlink_to(tool)
    from conftest import VENV_BIN

    result = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--workflow-profile", "none", "-n", "results/dpo/final", "--cores", "1"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": f"{VENV_BIN}:{env_path}", "HOME": str(tmp_path)},
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines and "bubblewrap (bwrap) not found" in lines[0] and "isolation: none" in lines[0]


def test_final_salt_changes_the_hidden_draw_only_and_is_never_written(tiny_llama, tmp_path):
    """dpo's embedded hidden prompts: the same public split, other hidden items with a salt;
    the manifest (which a replay reads) records only that a salt was set."""
    from conftest import VENV_BIN

    data = tiny_config(tiny_llama)["tasks"]["dpo"]["data"]
    out = {}
    for salt in ("", "s3cret-salt"):
        root = tmp_path / (salt or "public")
        cfg = json.dumps({"data": data, "fixed_start_sha256": None, "final_salt_fingerprint": fingerprint(salt)})
        subprocess.run(
            [
                str(VENV_BIN / "python"),
                "-m",
                "replaykit",
                "assets",
                "--task",
                "dpo",
                "--cfg",
                cfg,
                "--fixed-start",
                str(tiny_llama),
                "--public",
                str(root / "public"),
                "--hidden",
                str(root / "hidden"),
                "--manifest",
                str(root / "manifest.json"),
            ],
            check=True,
            env={**os.environ, SALT_ENV: salt},
        )
        out[salt] = root
    public, salted = out[""], out["s3cret-salt"]
    for name in sorted(p.name for p in (public / "public").iterdir()):
        assert (public / "public" / name).read_bytes() == (salted / "public" / name).read_bytes()
    hidden = [json.loads(line)["prompt"] for line in (public / "hidden/final_prompts.jsonl").read_text().splitlines()]
    hidden_salted = [
        json.loads(line)["prompt"] for line in (salted / "hidden/final_prompts.jsonl").read_text().splitlines()
    ]
    assert len(hidden) == len(hidden_salted) == data["n_final"] and hidden != hidden_salted
    manifest = (salted / "manifest.json").read_text()
    assert "s3cret-salt" not in manifest and json.loads(manifest)["final_salt"] == "operator"
    assert json.loads((public / "manifest.json").read_text())["final_salt"] == "public"


SALT_SPEC = {"builder": "soup-digits", "seed": 0, "n_ingredients": 2, "pretrain_epochs": 1, "heldout_per_class": 4}


def test_final_salt_reaches_its_two_jobs_and_no_record_of_snakemake(tiny_llama, tmp_path):
    """The salt from a private config file draws soup's held-out digits and dpo's hidden prompts
    (the jobs get it in their environment), while nothing under the working directory --
    ``.snakemake/`` (metadata, log), ``logs/``, ``results/`` -- nor the terminal holds it: it
    was a rule parameter, which Snakemake records. A changed salt rebuilds both, and says so
    without naming either salt; a job started without it stops in one line."""
    from conftest import VENV_BIN
    from replaykit.harness.salt import salted_seed
    from replaykit.tasks.soup.ingredients import digits, heldout_indices

    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    config = tiny_config(tiny_llama)
    config["models"] = {"soup-salted": SALT_SPEC}
    write_config(work, config)
    private = tmp_path / "private" / "salt.yaml"
    private.parent.mkdir()
    targets = ["results/dpo/assets/manifest.json", "results/models/soup-salted.manifest.json"]
    runs = {}
    for salt in ("first-s3cret-salt", "second-s3cret-salt"):
        private.write_text(f"final_salt: {salt}\n")
        runs[salt] = snakemake(work, *targets, "--cores", "1", "--configfile", str(private), check=True)
        manifest = json.loads((work / "results/dpo/assets/manifest.json").read_text())
        assert manifest["final_salt"] == "operator"
        heldout = json.loads((work / "results/models/soup-salted.private.json").read_text())["heldout_indices"]
        assert heldout == heldout_indices(digits()[1], 4, salted_seed(0, salt))
    assert heldout != heldout_indices(digits()[1], 4, 0)  # the public draw differs
    changed = runs["second-s3cret-salt"]
    assert {"fixed_start_model", "assets"} <= set(jobs_run(changed))  # the new salt rebuilt both
    for name, run in runs.items():
        assert "s3cret" not in run.stdout + run.stderr, name
    # Snakemake prints the MD5 of its config: without the salt in it, both runs give the same
    # one (with it, one MD5 checked each guess of the salt; second hostile pass)
    md5 = [re.findall(r"Config MD5: (\w+)", run.stdout + run.stderr) for run in runs.values()]
    assert md5[0] and md5[0] == md5[1], md5
    holding = [
        str(path.relative_to(work)) for path in work.rglob("*") if path.is_file() and b"s3cret" in path.read_bytes()
    ]
    assert holding == []
    # a job of the workflow started by hand, without the salt in its environment
    cfg = {"data": config["tasks"]["dpo"]["data"], "final_salt_fingerprint": fingerprint("first-s3cret-salt")}
    argv = [str(VENV_BIN / "python"), "-m", "replaykit", "assets", "--task", "dpo", "--cfg", json.dumps(cfg)]
    argv += ["--fixed-start", str(tiny_llama), "--public", "p", "--hidden", "h", "--manifest", "m.json"]
    env = {k: v for k, v in os.environ.items() if k != SALT_ENV}
    alone = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert alone.returncode == 2 and alone.stderr.strip().splitlines() == [
        f"error: environment: {SALT_ENV}: is not set, but --cfg's final_salt_fingerprint names an operator's "
        "final_salt: the workflow hands the salt to its jobs in this variable; run the step through snakemake"
    ]
    assert not (tmp_path / "m.json").exists()


def test_a_plan_without_the_sandbox_passes_every_variable_but_the_salt():
    """``isolation: none`` gives the candidate the operator's environment as is, save the
    final-split salt (the workflow's own jobs inherit it); the sandbox's allow-list never
    passes it, by name (it is not allowed) and by the deny-list (``*SECRET*``)."""
    env = {"PATH": "/usr/bin", "CUSTOM": "1", SALT_ENV: "s3cret"}
    assert IsolationPlan("none").environment(env) == {"PATH": "/usr/bin", "CUSTOM": "1"}
    assert sandbox.allowed_env(env) == {"PATH": "/usr/bin"}


def test_a_checkpoint_symlink_to_another_run_is_never_retained(tmp_path, monkeypatch):
    """A candidate that publishes checkpoint-N as a link to another run's checkpoint (found by
    a hostile review): not counted as published, and the replay fails naming the link."""
    from replaykit.harness import replay
    from replaykit.harness.publish import published

    other = tmp_path / "other" / "checkpoint-3"
    other.mkdir(parents=True)
    (other / "model.pt").write_text("weights of another run")
    ws = one_file_workspace(
        tmp_path,
        "import json, os, sys\nfrom pathlib import Path\n"
        "r = json.loads(Path(sys.argv[2]).read_text())\n"
        f"os.symlink({str(other)!r}, Path(r['publish_dir']) / 'checkpoint-3')\n"
        "(Path(r['state_dir']) / 'train_result.json').write_text(json.dumps({'stop_reason': 'max_steps'}))\n",
    )
    with pytest.raises(replay.ReplayError, match="checkpoint-3: not a regular file"):
        bare_replay(tmp_path, ws, isolation="bwrap")
    assert published(tmp_path / "pub") == [] and not (tmp_path / "r.json").exists()


def test_a_hidden_file_stays_hidden_under_a_shown_folder_spelled_with_dotdot(tmp_path):
    """The plan holds real paths: a shown folder written as 'a/../data' cannot uncover a hidden
    file inside it (found by a hostile review)."""
    from replaykit.isolation import RunPaths, Settings, plan

    data = tmp_path / "data"
    (data / "final").mkdir(parents=True)
    (data / "final" / "f.txt").write_text("FINAL")
    (tmp_path / "a").mkdir()
    settings = Settings("bwrap", show=(str(tmp_path / "a" / ".." / "data"),), hide=(str(data / "final" / "f.txt"),))
    shown = plan("soup", {}, settings, RunPaths(tmp_path / "fixed", tmp_path / "public", writable=(tmp_path,)))
    assert data / "final" / "f.txt" in shown.masked
    argv = shown.argv(["cat", str(data / "final" / "f.txt")], chdir=tmp_path)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "FINAL" not in result.stdout


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_training_gets_the_malloc_settings_unless_the_operator_set_them(tmp_path, monkeypatch, isolation):
    """launch.MALLOC_ENV reaches train.py through the sandbox's allow-list; a value the operator
    exported wins (MALLOC_MMAP_MAX_=65536 is glibc's default)."""
    from replaykit.harness import launch, replay

    monkeypatch.setenv("MALLOC_MMAP_MAX_", "65536")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    ws = one_file_workspace(
        tmp_path,
        "import json, os, sys\nfrom pathlib import Path\n"
        "r = json.loads(Path(sys.argv[2]).read_text())\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('MALLOC_')}\n"
        "(Path(r['state_dir']) / 'env.json').write_text(json.dumps(env))\n"
        "(Path(r['state_dir']) / 'train_result.json').write_text(json.dumps({'stop_reason': 'max_steps'}))\n",
    )
    try:
        bare_replay(tmp_path, ws, isolation=isolation)
    except replay.ReplayError:
        pass  # no checkpoint published: only the environment matters here
    env = json.loads((tmp_path / "state" / "env.json").read_text())
    assert env == {"MALLOC_MMAP_MAX_": "65536", "MALLOC_TRIM_THRESHOLD_": str(2**40)}
    assert launch.MALLOC_ENV == {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40)}


# A recipe that goes past one limit, and what the limit is set to (the defaults stay for the others).
RUNAWAYS = {
    "file_size": ("open('big.bin', 'wb').write(b'x' * 2 * 1024**2)", {"file_bytes": 1024**2}),
    "memory": ("block = bytearray(1024**3)", {"memory_bytes": 256 * 1024**2}),
    "processes": (
        "import threading, time\nfor _ in range(200):\n"
        "    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()",
        {"processes": 32},
    ),
}


@pytest.mark.parametrize("kind", sorted(RUNAWAYS))
def test_a_runaway_candidate_hits_its_limit_fails_itself_and_the_record_says_which(tmp_path, kind):
    """Each limit, set low, stops a real recipe that goes past it (a 2 MiB file under a 1 MiB
    limit, 1 GiB of memory under 256 MiB, 200 threads under 32 processes): the replay fails
    with one line naming the limit, ``last-failure.json`` states the limits with ``hit``, and the
    attempt carries ``limit_hit``. The control: the same recipe under the default limits fails
    only for publishing nothing (it writes no result), with no limit named."""
    from replaykit.harness import replay
    from replaykit.harness.limits import Confinement, Limits

    code, limits = RUNAWAYS[kind]
    if kind == "processes" and Confinement(Limits(processes=32)).stated().processes is None:
        pytest.skip("neither a pids cgroup nor RLIMIT_NPROC can limit processes here (root without cgroup)")
    ws = one_file_workspace(tmp_path, "import os\nos.chdir(os.environ.get('TMPDIR', '/tmp'))\n" + code + "\n")
    with pytest.raises(replay.ReplayError, match=f"hit the sandbox's {kind.replace('_', ' ')} limit"):
        bare_replay(tmp_path, ws, isolation="bwrap", limits=limits)
    failure = json.loads((tmp_path / "pub" / "last-failure.json").read_text())
    key = {"file_size": "file_bytes", "memory": "memory_bytes", "processes": "processes"}[kind]
    assert failure["limits"]["hit"] == kind and failure["limits"][key] == limits[key]
    attempts = json.loads((tmp_path / "replay-attempts.json").read_text())  # the run folder: the state folder's parent
    assert attempts[-1]["limit_hit"] == kind
    control = make_dir(tmp_path / "control")
    with pytest.raises(replay.ReplayError) as error:
        bare_replay(
            control,
            one_file_workspace(control, "import os\nos.chdir(os.environ.get('TMPDIR', '/tmp'))\n" + code + "\n"),
            isolation="bwrap",
        )
    assert "limit" not in str(error.value)
    assert json.loads((control / "pub" / "last-failure.json").read_text())["limits"]["hit"] is None


def test_limits_default_from_the_machine_and_the_fixed_start(tmp_path):
    """``auto``: memory = memory_fraction x the machine's memory (``/proc/meminfo``'s MemTotal,
    read here independently, or a lower cgroup limit), file size = file_factor x the fixed start's
    bytes but at least 1 GiB; ``none`` lifts a limit; an unknown key is one error naming it."""
    from replaykit.harness.errors import InputError
    from replaykit.harness.limits import LimitSettings, machine_memory

    total_kib = int(next(l for l in open("/proc/meminfo") if l.startswith("MemTotal:")).split()[1])
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "model.bin").write_bytes(b"\0" * 3000)
    limits = LimitSettings().resolve(fixed)
    if machine_memory() < 0.99 * total_kib * 1024:
        pytest.skip("this process's cgroup limits memory below the machine's: auto follows the cgroup")
    # 1 %: the kernel's count of usable pages moves by a few pages between two reads (ballooning)
    assert limits.memory_bytes == pytest.approx(0.8 * total_kib * 1024, rel=0.01)
    assert limits.file_bytes == 1024**3 and limits.processes == 4096
    big = LimitSettings(file_bytes="auto", file_factor=4, memory_bytes="none").resolve(fixed)
    assert big.memory_bytes is None and big.file_bytes == 1024**3  # 4 x 3000 bytes < the 1 GiB floor
    assert LimitSettings(file_bytes=5_000_000).resolve(None).file_bytes == 5_000_000
    with pytest.raises(InputError, match="sandbox_limits.memory"):
        LimitSettings.from_config({"memory": 1})
