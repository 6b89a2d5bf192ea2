import copy
import hashlib
import json
import os
import re
import shlex
import socket
import sys
from types import SimpleNamespace
from pathlib import Path

from snakemake.cli import get_argument_parser
from snakemake.io import is_flagged, regex_from_filepattern
from snakemake.settings.types import DeploymentMethod

from replaykit.config import (
    CLI,
    check_config,
    check_repeated_options,
    coerce_cli_values,
    config_schema,
    fill_defaults,
    load_yaml_strict,
    profile_files,
    rebase_paths,
    source_of,
)
from replaykit.harness.budget import Budget
from replaykit.harness.checked import remembering
from replaykit.harness.errors import InputError
from replaykit.harness.yamlfile import check_plain_numbers
from replaykit.harness.fileio import wait_for_paths
from replaykit.harness.hashing import sha256_file
from replaykit.harness.joblogs import failure_lines
from replaykit.harness.salt import ENV as SALT_ENV, fingerprint as salt_fingerprint
from replaykit.harness.slots import SETTINGS_ENV
from replaykit.harness.verify import (
    put_back_interrupted,
    restore_set_aside,
    reverify,
    stamp_applies,
    stamp_of,
)
from replaykit.isolation import check_shown_paths
from replaykit.tasks import get_task

SCHEMA_FILE = Path(workflow.basedir) / "config" / "schema.yaml"


def config_file_name(path):
    """How error lines and records name a config file: relative to where snakemake started,
    or absolute for a file outside it (not `../../tmp/x.yaml`)."""
    relative = os.path.relpath(path)
    return str(Path(path).resolve()) if relative.startswith("..") else relative


def config_layers():
    """(source, mapping) of each config source, lowest priority first: the Snakefile's
    configfile, each --configfile, then --config (see replaykit.config)."""
    cli_files = [Path(f).resolve() for f in workflow.config_settings.configfiles]
    files = [f for f in workflow.configfiles if Path(f).resolve() not in cli_files]
    if workflow.config_settings.replace_workflow_config:
        files = []  # --replace-workflow-config: the Snakefile's configfile is discarded
    layers = [
        (config_file_name(f), load_yaml_strict(f, config_file_name(f)))
        for f in files + cli_files
    ]
    # a profile's config: block arrives in --config as numbers YAML 1.1 has already read
    # (`seeds: [042]` as 34): its file is checked as the config files are
    check_repeated_options(sys.argv[1:])  # `--configfile a --configfile b` reads b only
    for f in profile_files(sys.argv[1:], workflow.main_snakefile):
        check_plain_numbers(f, "config", config_file_name(f))
    return layers + [(CLI, copy.deepcopy(dict(workflow.config_settings.config)))]


SOURCE_NAME = " + ".join(map(str, workflow.configfiles)) or "config"
try:
    _layers = config_layers()
    # config/schema.yaml with the blocks of configured tasks registered by entry points
    _schema = config_schema(SCHEMA_FILE, config)
    # Snakemake's --config parser leaves the items of a list / mapping as strings
    coerce_cli_values(config, _layers[-1][1], _schema)
    with remembering():  # local data files: checked again only when they change
        check_config(
            config,
            SCHEMA_FILE,
            SOURCE_NAME,
            layers=_layers,
            recipes_root=Path(workflow.basedir) / "recipes",
        )
    # a shown path that holds the working directory, lies in its results/, logs/ or .snakemake/,
    # or holds a config file: refused now, before any job (and by each job's sandbox plan again)
    check_shown_paths(
        config,
        lambda keys: source_of(keys, _layers, SOURCE_NAME),
        config_files=[name for name, _ in _layers],
    )
except InputError as exc:
    sys.exit(f"error: {exc}")
# the schema's defaults, filled as snakemake.utils.validate fills them
fill_defaults(config, _schema)
# GPU slots: every job's pool settings (replaykit.harness.slots), passed in the environment
# rather than as params, so that a change of devices re-runs nothing
os.environ.update({SETTINGS_ENV: json.dumps(config["gpus"], sort_keys=True)})
# Campaigns: at most campaign.max_replays replays at once (each replay takes one `replays`),
# unless the command line gives --resources replays=N
if config["campaign"]["max_replays"] and "replays" not in workflow.global_resources:
    workflow.register_resource("replays", config["campaign"]["max_replays"])


def check_decision_rules():
    """Every candidate's decision rule, as rules/ablation.smk will write it. A bad one
    (non-inferiority without a margin) is refused in one line before any job starts."""
    from replaykit.harness.decision import check_rule, rule_from_config

    for task, cfg in config["tasks"].items():
        for candidate in cfg["candidates"]:
            decision = rule_from_config(
                task, candidate, cfg["ablation"], cfg["seeds"], get_task(task).METRIC
            )
            check_rule(decision, f"{SOURCE_NAME}: tasks.{task}.ablation ({candidate})")


try:
    check_decision_rules()
except InputError as exc:
    sys.exit(f"error: {exc}")


def provenance_for_jobs(layers, tiny):
    """What the replay record and the markers record of this invocation's config, passed to the
    jobs in REPLAYKIT_WORKFLOW (no parameter of any rule, so a config file that changes nothing a job
    reads re-runs nothing): each config file's path and SHA-256 (and its absolute path), the keys
    given with --config (not their values: --config may carry final_salt), and the config's `tiny`.
    """
    files = [
        {"path": name, "sha256": sha256_file(name)} for name, _ in layers if name != CLI
    ]
    return {
        "config_files": files,
        # absolute: the jobs' sandboxes never show them (replaykit.isolation.plan)
        "config_paths": [
            str(Path(name).resolve()) for name, _ in layers if name != CLI
        ],
        "command_line_keys": sorted(layers[-1][1]) if layers[-1][0] == CLI else [],
        "tiny": bool(tiny),
    }


# jobs read it from their environment (the shell prefix below; braces doubled for Snakemake's
# formatting of shell commands)
WORKFLOW_ENV = shlex.quote(
    json.dumps(provenance_for_jobs(_layers, config["tiny"]), sort_keys=True)
).translate({ord("{"): "{{", ord("}"): "}}"})
# The final-split salt reaches the two jobs that draw with it (fixed_start_model, assets) in
# their environment: every job inherits this process's, and a cluster job's snakemake reads
# the same config and sets it again. Never a parameter or a command line, which Snakemake
# records in .snakemake/ and prints; the rules take its fingerprint (replaykit.harness.salt).
# --config (a profile's config: block too) would put it in Snakemake's banner and log
# ("Command: ..."): refused. And it leaves Snakemake's config, whose MD5 Snakemake prints
# ("Config MD5"), which would check a guess of the salt at one hash each.
if "final_salt" in _layers[-1][1] and _layers[-1][1]["final_salt"]:
    sys.exit(
        "error: command line: final_salt: Snakemake prints its command line and keeps it in "
        ".snakemake/log/; put the salt in a private --configfile (docs/operations.md)"
    )
FINAL_SALT_FINGERPRINT = salt_fingerprint(config["final_salt"])
if config["final_salt"]:
    os.environ[SALT_ENV] = config["final_salt"]
else:
    os.environ.pop(SALT_ENV, None)
config.pop("final_salt")
# Tiny runs (config/test.yaml) are kept apart from real ones: the workflow works in `workdir`
# (results/, logs/, benchmarks/, .snakemake/ there); relative paths of the config stay relative
# to where snakemake started. `--directory` on the command line wins, as in Snakemake.
LAUNCH_DIR = Path.cwd()
if (
    workflow.overwrite_workdir is not None
    and os.path.realpath(workflow.overwrite_workdir) == os.sep
):
    sys.exit(  # as `workdir: /` (replaykit.config): the sandbox cannot hide the root
        f"error: command line: --directory: {os.sep!r} is the file system's root: results/, logs/ "
        "and .snakemake/ would lie beside /usr and /etc; name a folder"
    )
if config["workdir"] != "." and workflow.overwrite_workdir is None:
    rebase_paths(config, LAUNCH_DIR, Path(config["workdir"]))

    workdir: config["workdir"]


# Candidate code runs in the bubblewrap sandbox: refuse to start without one, in one line.
if config["isolation"] == "bwrap":
    from replaykit.harness.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        sys.exit(f"error: config: isolation: {exc}")
# The sandbox's version and this host (its name's SHA-256): parameters of the sandbox's self-test
# (rule sandbox_self_test), so that it runs again when either changes.
from replaykit.harness.sandbox import version as sandbox_version

SANDBOX_VERSION = sandbox_version() or "none"
SANDBOX_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()

# Steps run `python -m replaykit` of the venv that runs snakemake (its bin/ goes first on
# PATH); with `--sdm conda`, of the rule's conda environment, with the project's src/ on
# PYTHONPATH.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    shell.prefix(
        f"set -euo pipefail; export PYTHONPATH={Path(workflow.basedir) / 'src'}; "
        f"export REPLAYKIT_WORKFLOW={WORKFLOW_ENV}; "
    )
else:
    shell.prefix(
        f"set -euo pipefail; export PATH={Path(sys.executable).parent}:$PATH; "
        f"export REPLAYKIT_WORKFLOW={WORKFLOW_ENV}; "
    )
RUN_RE = r"[A-Za-z0-9_.]+-seed\d+"


wildcard_constraints:
    task="|".join(sorted(config["tasks"])),
    run=RUN_RE,
    progress=r"\d+",
    split="final|proxy",
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


def get_builder_salt_fingerprint(w):
    """The final-split salt's fingerprint, for a builder that draws a held-out split (its spec
    has heldout_per_class); other fixed starts do not depend on it, so it never rebuilds them.
    """
    return (
        FINAL_SALT_FINGERPRINT
        if "heldout_per_class" in config["models"][w.model]
        else ""
    )


def recipe_dir(w):
    """The task's shipped recipe, relative to the working directory (``workdir``)."""
    return os.path.relpath(Path(workflow.basedir) / "recipes" / w.task)


def get_recipe_files(w):
    root = Path(workflow.basedir) / "recipes" / w.task
    return sorted(
        os.path.relpath(p)
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
    """Every file of the frozen package (harness, loaders, evaluators) and of the task plug-ins
    registered by entry points: rule frozen_code's input."""
    from replaykit.tasks import frozen_code

    # braces in a file name are Snakemake wildcards: escaped, they name the file itself
    return sorted(
        str(p).replace("{", "{{").replace("}", "}}") for p in frozen_code().paths()
    )


def sandbox_settings(w):
    """The config's isolation keys, as JSON: the replay computes its isolation plan and limits
    from them, the task's plug-in and data, and its own paths (replaykit.isolation); they are
    the same whichever config files were given."""
    keys = ("isolation", "sandbox_show", "sandbox_hide", "sandbox_limits")
    return json.dumps({k: config[k] for k in keys}, sort_keys=True)


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
            "on a shared filesystem raise --latency-wait (if it was removed, start a fresh formal "
            f"replay: rm -r {replay_dir(w)} results/{w.task}/{w.run}/replay-state, then rerun)"
        )
    return progress


def per_retained(pattern):
    """An input function: ``pattern`` (with ``{task}``, ``{run}``, ``{progress}``) for every
    checkpoint the run's replay retained."""

    def files(w):
        return expand(pattern, task=w.task, run=w.run, progress=retained(w))

    return files


get_markers = per_retained("results/{task}/{run}/validation/checkpoint-{progress}.json")
get_final_scores = per_retained(
    "results/{task}/{run}/final-scores/checkpoint-{progress}/.complete"
)
get_proxy_scores = per_retained(
    "results/{task}/{run}/proxy-scores/checkpoint-{progress}/.complete"
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


def get_audits(w):
    """The audit of each seed's official run and of the shipped run (rule audit)."""
    runs = [Path(p).parent for p in get_officials(w) + [get_shipped_official(w)]]
    return [str(run / "audit.json") for run in dict.fromkeys(runs)]


def get_exploration_sidecar(w):
    """The sidecar of the run's candidate patch when it came from an exploration (its
    submission: the audit reads its receipts), else nothing."""
    from replaykit.harness.submission import sidecar

    patch = task_cfg(w)["candidates"].get(parse_run(w.run)[0])
    return str(sidecar(patch)) if patch and sidecar(patch).is_file() else []


def get_fixed_start_reference(w):
    """The fixed-start reference's receipt, or nothing for a task without one (rm)."""
    if not get_task(w.task).FIXED_START_REFERENCE:
        return []
    return f"results/{w.task}/reference/fixed-start/final-scores/.complete"


def get_reference_public(w):
    """The public split, for a task whose fixed-start reference selects on it (soup)."""
    if get_task(w.task).REFERENCE_USES_PUBLIC:
        return f"results/{w.task}/assets/public"
    return []


def split_items(w, split=None):
    """The items file of ``split`` (default: the job's ``{split}``), under the assets folder."""
    return get_task(w.task).split_file(split or w.split)


def split_dir(w):
    """The assets folder a scoring job reads: the final (hidden) split, or the public one."""
    return f"results/{w.task}/assets/" + ("hidden" if w.split == "final" else "public")


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


def refuse_unknown_task(w):
    """Input function of the unknown_task target rule, in targets.smk; refuses a target under a
    task that is not configured, while the DAG is built (also in a dry run)."""
    from replaykit.tasks import KNOWN

    configured = ", ".join(sorted(config["tasks"]))
    if w.other in KNOWN:
        stop(
            f"{SOURCE_NAME}: tasks.{w.other}: the target names task {w.other!r}, which the "
            f"config does not define (configured: {configured})"
        )
    stop(
        f"{SOURCE_NAME}: tasks: the target names an unknown task {w.other!r} "
        f"(tasks: {', '.join(KNOWN)}; configured: {configured})"
    )


def target_forms():
    """The output patterns of the rules under results/ (a wildcard shown as <name>, dot files
    left out): those under results/<task>/ (the prefix dropped), then the others."""
    forms = [
        re.sub(r"\{(\w+)[^}]*\}", r"<\1>", str(o))
        for r in workflow.rules
        if r.name != "unknown_task"
        for o in r.output
        if str(o).startswith("results/") and not Path(str(o)).name.startswith(".")
    ]
    forms = list(dict.fromkeys(forms))
    prefix = "results/<task>/"
    return [f.removeprefix(prefix) for f in forms if f.startswith(prefix)], [
        f for f in forms if not f.startswith(prefix)
    ]


def refuse_unknown_targets(targets):
    """One error line, before Snakemake's MissingRuleException, for a target under results/ that
    does not exist and that no rule makes (``results/soup/finall``), listing the target forms;
    a path inside a folder that one rule makes as a whole names that folder."""
    for target in targets:
        path = Path(os.path.relpath(os.path.abspath(target))).as_posix().rstrip("/")
        if not path.startswith("results/") or Path(path).exists():
            continue
        if any(r.is_producer(path) for r in workflow.rules):
            continue
        whole = [
            p
            for p in map(str, Path(path).parents)
            if any(r.is_producer(p) for r in workflow.rules)
        ]
        inside = (
            f"; it is inside {whole[0]}, which is built as a whole" if whole else ""
        )
        per_task, others = target_forms()
        stop(
            f"{target}: no rule makes this target{inside}; targets are "
            f"results/<task>/ (task: {', '.join(sorted(config['tasks']))}) + one of "
            f"{', '.join(per_task)}; or {', '.join(others)}"
        )


def get_ablation_officials(w, candidate):
    """The official.json of ``candidate`` for every seed of ``tasks.<task>.seeds``; the
    shipped ones are the same files for every candidate, so they are replayed once."""
    cfg = task_cfg(w)
    if candidate != "shipped" and candidate not in cfg["candidates"]:
        stop(
            f"config: tasks.{w.task}.candidates: no candidate named {candidate!r} to ablate"
        )
    return [
        f"results/{w.task}/{run_name(candidate, seed)}/official.json"
        for seed in cfg["seeds"]
    ]


def get_decision_rule(w):
    """A candidate run's decision-rule file, ancient (it orders the jobs and reruns none
    when it changes); nothing for a shipped run, shared by every candidate."""
    candidate, _ = parse_run(w.run)
    if candidate == "shipped":
        return []
    return ancient(f"results/{w.task}/decision-rules/{candidate}.json")


def get_decision_rule_json(w):
    """What the decision_rule job writes (replaykit.harness.decision.rule_from_config from
    tasks.<task>.ablation.decision, then decisions.<candidate>, the seeds and the plug-in's
    metric), as JSON: a change of the rule itself, and nothing else, reruns it (params).
    """
    from replaykit.harness.decision import rule_from_config

    cfg = task_cfg(w)
    decision = rule_from_config(
        w.task, w.candidate, cfg["ablation"], cfg["seeds"], get_task(w.task).METRIC
    )
    return json.dumps(decision, sort_keys=True)


def get_campaign_ablations(w):
    """Every candidate's matched ablation of each campaign task (``campaign.tasks``); the
    shipped runs of a task are the same files for all its candidates, so replayed once.
    """
    if not config["campaign"]["tasks"]:
        stop(f"{SOURCE_NAME}: campaign.tasks: empty: no campaign to build")
    return [
        f"results/{task}/ablation/{candidate}"
        for task in config["campaign"]["tasks"]
        for candidate in sorted(config["tasks"][task]["candidates"])
    ]


def get_report_ablations(w):
    """The ablations report.html shows (``tasks.<task>.ablation.report``)."""
    return [
        f"results/{w.task}/ablation/{c}"
        for c in task_cfg(w).get("ablation", {}).get("report", [])
    ]


def get_exploration_proxy(w):
    """The official run's proxy table when its candidate patch came from an exploration
    (``patches/<task>-<name>.exploration.json`` beside it): the report puts the formal proxy
    beside the exploration's proxy receipts."""
    from replaykit.harness.submission import sidecar

    cfg = task_cfg(w)
    patch = cfg["candidates"].get(cfg["candidate"])
    if not patch or not sidecar(patch).is_file():
        return []
    return f"results/{w.task}/{run_name(cfg['candidate'], cfg['seeds'][0])}/proxy.json"


# Receipts are re-verified once per invocation, here, when the workflow starts and before
# Snakemake builds the DAG, for every run and final/ folder of the configured tasks: a stale or
# missing receipt marks itself and everything built from it, up to official.json and final/,
# stale (replaykit.harness.verify.reverify) by rewriting a stamp that is an input of the rule
# building each product (`receipt_stamp`), so that Snakemake rebuilds them. Snakemake alone
# would not: it never looks inside a checkpoint, does not notice a deleted output of a
# `checkpoint` rule, and skips a missing intermediate file whose consumers are up to date.
# Nothing is deleted: each rule keeps its current product until the new one is complete, so a
# run that fails keeps what the last one produced. A job run remotely (SLURM) does not check.


def receipt_scope():
    """The run folders on disk of the configured tasks; each task's final/ folder -> the
    official.json files it is built from; the task folders (their fixed-start reference score
    and sandbox self-test); the product folders on disk built from the runs (each ablation of
    a configured task, the campaign)."""
    runs = sorted(
        str(p)
        for task in config["tasks"]
        for p in Path("results", task).glob("*-seed*")
        if p.is_dir() and re.fullmatch(RUN_RE, p.name)
    )
    finals = {
        f"results/{task}/final": [
            f"results/{task}/{run}/official.json" for run in runs_of_final(task)
        ]
        for task in config["tasks"]
    }
    tasks = [f"results/{task}" for task in config["tasks"]]
    products = sorted(
        str(p)
        for task in config["tasks"]
        for p in Path("results", task, "ablation").glob("*")
        if p.is_dir() and not p.name.startswith(".")
    ) + (["results/campaign"] if Path("results/campaign").is_dir() else [])
    return runs, finals, tasks, products


def receipt_stamp(product):
    """Input function: the stale-receipt stamp of ``product`` (a path pattern with wildcards)
    when reverify has written one that applies to this config (replaykit.harness.verify.
    stamp_of, stamp_applies: a final/ stamp written for another candidate's or seeds'
    official.json files, by a dry run with another config, does not), else nothing."""

    def stamp(w):
        path = product.format(**dict(w.items()))
        # the official.json files this config builds a final/ folder from (None otherwise)
        officials = receipt_scope()[1].get(path)
        return [str(stamp_of(path))] if stamp_applies(path, officials) else []

    return stamp


def runs_of_final(task):
    cfg = config["tasks"][task]
    runs = [run_name(cfg["candidate"], seed) for seed in cfg["seeds"]]
    return list(dict.fromkeys(runs + [run_name("shipped", cfg["seeds"][0])]))


# (reverify runs at the end of rules/targets.smk, once a refused target can no longer stop the
# workflow halfway: a command refused in one line changes nothing under results/)

# Another Snakemake instance works here when its lock files exist while this one reads the
# Snakefile (its own are taken later): the receipts are then left to that instance. A dry run
# beside a running job had marked a score folder being written stale and set files aside, and
# the next run re-scored a finished checkpoint. (A lock left by a killed run: `--unlock`.)
OTHER_INSTANCE = workflow.is_main_process and any(
    Path(".snakemake/locks").glob("*.lock")
)
if OTHER_INSTANCE:
    print(
        "receipts: not re-verified: another Snakemake instance holds this folder's lock "
        f"({os.path.relpath(Path('.snakemake/locks').resolve(), LAUNCH_DIR)}/)",
        file=sys.stderr,
    )


onsuccess:
    if not OTHER_INSTANCE:
        restore_set_aside(
            receipt_scope()[0], say=lambda line: print(line, file=sys.stderr)
        )


onerror:
    if not OTHER_INSTANCE:
        restore_set_aside(
            receipt_scope()[0], say=lambda line: print(line, file=sys.stderr)
        )
    # each failed job's own error line and its log, last on the terminal (harness/joblogs.py)
    for _line in failure_lines(log):
        print(_line, file=sys.stderr)
