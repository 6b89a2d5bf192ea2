import json
import re
import shlex
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from replaykit.config import check_config
from replaykit.harness.budget import Budget
from replaykit.harness.errors import InputError
from replaykit.harness.fileio import wait_for_paths
from replaykit.tasks import get_task

try:
    check_config(
        config,
        Path(workflow.basedir) / "config" / "schema.yaml",
        " + ".join(map(str, workflow.configfiles)) or "config",
    )
except InputError as exc:
    sys.exit(f"error: {exc}")
validate(config, schema="../config/schema.yaml")  # fills the schema's defaults

# Candidate code runs in the bubblewrap sandbox: refuse to start without one, in one line.
if config["isolation"] == "bwrap":
    from replaykit.harness.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        sys.exit(f"error: config: isolation: {exc}")

# Steps run `python -m replaykit` of the venv that runs snakemake (its bin/ goes first on
# PATH); with `--sdm conda`, of the rule's conda environment, with the project's src/ on
# PYTHONPATH.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    shell.prefix(
        f"set -euo pipefail; export PYTHONPATH={Path(workflow.basedir) / 'src'}; "
    )
else:
    shell.prefix(
        f"set -euo pipefail; export PATH={Path(sys.executable).parent}:$PATH; "
    )
RUN_RE = r"[A-Za-z0-9_.]+-seed\d+"


wildcard_constraints:
    task="|".join(sorted(config["tasks"])),
    run=RUN_RE,
    progress=r"\d+",
    model=r"[A-Za-z0-9_.-]+",


def task_cfg(w):
    return config["tasks"][w.task]


def parse_run(run):
    """'<candidate>-seed<seed>' -> (candidate, seed)."""
    m = re.fullmatch(r"(.+)-seed(\d+)", run)
    return m.group(1), int(m.group(2))


def run_name(candidate, seed):
    return f"{candidate}-seed{seed}"


def get_fixed_start(w):
    """A name in `models` (built by rule fixed_start_model) or a local model directory."""
    fs = task_cfg(w)["fixed_start"]
    return f"results/models/{fs}" if fs in config.get("models", {}) else fs


def get_fixed_start_private(w):
    """What the fixed start's builder knows of the final split (soup's held-out digits)."""
    fs = task_cfg(w)["fixed_start"]
    return f"results/models/{fs}.private.json" if fs in config.get("models", {}) else []


def get_builder_salt(w):
    """The final-split salt, for a builder that draws a held-out split (its spec has
    heldout_per_class); other fixed starts do not depend on it, so it never rebuilds them."""
    return config["final_salt"] if "heldout_per_class" in config["models"][w.model] else ""


def get_recipe_files(w):
    root = Path(workflow.basedir) / "recipes" / w.task
    return sorted(
        str(p.relative_to(workflow.basedir))
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def get_patch(w):
    candidate, _ = parse_run(w.run)
    if candidate == "shipped":
        return []
    patches = task_cfg(w)["candidates"]
    if candidate not in patches:
        raise ValueError(
            f"config: tasks.{w.task}.candidates: no candidate named {candidate!r}"
        )
    return [patches[candidate]]


def frozen_package_files(w=None):
    """Every file of the frozen package (harness, loaders, evaluators): rule frozen_code's input."""
    from replaykit.harness.frozen import package_dir

    root = package_dir()
    return sorted(
        str(p) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def sandbox_paths(w):
    """What the replay sandbox hides and shows besides its defaults (see harness/sandbox.py):
    the final split's local sources hidden, the task's other local data paths shown."""
    plugin = get_task(w.task)
    hide = [workflow.basedir, *map(str, workflow.configfiles), *config["sandbox_hide"]]
    show = []
    for key, value in task_cfg(w)["data"].items():
        if isinstance(value, str) and value and Path(value).exists():
            (hide if key in plugin.FINAL_SOURCES else show).append(value)
    return {"hide": hide, "show": show, "hide_fixed_start": plugin.FIXED_START_IS_DATA}


def sandbox_args(w):
    paths = sandbox_paths(w)
    quote = lambda items: " ".join(shlex.quote(str(i)) for i in items)
    return (
        f"--isolation {config['isolation']} --hide {quote(paths['hide'])} --show {quote(paths['show'])}"
        + (" --hide-fixed-start" if paths["hide_fixed_start"] else "")
    )


def get_budget(w):
    return Budget.from_config(task_cfg(w)["budget"])


def replay_dir(w):
    return f"results/{w.task}/{w.run}/replay"


def stop(message):
    """One error line and exit 1, also from an input function evaluated mid-run (after a
    checkpoint), where Snakemake would swallow the message of ``sys.exit(message)``."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def retained(w):
    """Progress values retained by a finished replay (read from its record)."""
    record = checkpoints.replay.get(task=w.task, run=w.run).output.record
    try:
        progress = json.loads(Path(record).read_text())["retained"]
    except (ValueError, KeyError) as exc:
        stop(
            f"{record}: retained: unreadable replay record ({exc}); "
            "remove it and rerun with --rerun-incomplete"
        )
    # Snakemake waits (--latency-wait) for the record, a declared output, but not for the
    # checkpoints it lists: on a shared filesystem they may become visible later. Commands
    # that only build the DAG (--report, --summary, --dag) have no execution settings.
    if workflow.execution_settings is None:
        return progress
    latency_s = workflow.execution_settings.latency_wait
    missing = wait_for_paths(
        [f"{replay_dir(w)}/checkpoint-{p}" for p in progress],
        latency_s,
        on_wait=lambda paths: print(
            f"Waiting at most {latency_s} s for checkpoints listed in {record}: "
            + ", ".join(map(str, paths)),
            file=sys.stderr,
        ),
    )
    if missing:
        stop(
            f"{record}: retained: {missing[0]} is listed but not visible after {latency_s} s; "
            "on a shared filesystem raise --latency-wait (if it was removed, remove the record "
            "too and rerun)"
        )
    return progress


def get_markers(w):
    return expand(
        "results/{task}/{run}/validation/checkpoint-{progress}.json",
        task=w.task,
        run=w.run,
        progress=retained(w),
    )


def get_final_scores(w):
    return expand(
        "results/{task}/{run}/final-scores/checkpoint-{progress}/.complete",
        task=w.task,
        run=w.run,
        progress=retained(w),
    )


def get_proxy_scores(w):
    return expand(
        "results/{task}/{run}/proxy-scores/checkpoint-{progress}/.complete",
        task=w.task,
        run=w.run,
        progress=retained(w),
    )


def get_officials(w):
    cfg = task_cfg(w)
    return [
        f"results/{w.task}/{run_name(cfg['candidate'], seed)}/official.json"
        for seed in cfg["seeds"]
    ]


def get_shipped_official(w):
    return (
        f"results/{w.task}/{run_name('shipped', task_cfg(w)['seeds'][0])}/official.json"
    )


def get_fixed_start_reference(w):
    """The fixed-start reference's receipt, or nothing for a task without one (rm)."""
    if not getattr(get_task(w.task), "FIXED_START_REFERENCE", True):
        return []
    return f"results/{w.task}/reference/fixed-start/final-scores/.complete"


def get_reference_public(w):
    """The public split, for a task whose fixed-start reference selects on it (soup)."""
    if getattr(get_task(w.task), "REFERENCE_USES_PUBLIC", False):
        return f"results/{w.task}/assets/public"
    return []


def split_items(w, split):
    return get_task(w.task).split_file(split)


def as_json(key):
    return lambda w: json.dumps(task_cfg(w)[key], sort_keys=True)


def get_report_officials(w):
    """The runs a task's report shows: the candidate's seeds, then the shipped reference."""
    return list(dict.fromkeys(get_officials(w) + [get_shipped_official(w)]))


def get_report_figures(w):
    return [
        str(Path(p).parent / "figures" / f"{kind}.png")
        for p in get_report_officials(w)
        for kind in ("training", "checkpoints", "budget")
    ]


def get_exploration_proxy(w):
    """The official run's proxy table when its candidate patch came from an exploration
    (``patches/<task>-<name>.exploration.json`` beside it): the report puts the formal proxy
    beside the exploration's proxy receipts."""
    from replaykit.harness.explore import sidecar

    cfg = task_cfg(w)
    patch = cfg["candidates"].get(cfg["candidate"])
    if not patch or not sidecar(patch).is_file():
        return []
    return f"results/{w.task}/{run_name(cfg['candidate'], cfg['seeds'][0])}/proxy.json"
