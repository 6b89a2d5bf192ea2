"""One exploration's folder, record, clock and receipts (``explore/<task>/<name>/``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from ..harness.assets import verify_assets
from ..harness.errors import InputError
from ..harness.fileio import atomic_write_json, read_json
from ..harness.hashing import sha256_file, sha256_tree
from ..harness.provenance import utc_now
from ..harness.workspace import build_workspace
from ..isolation import Settings

BUDGET_FRACTION = 14_400 / 43_200  # SPEC: exploration budget / formal replay outer limit
DEFAULT_LOCK = Path("explore/.gpu.lock")
NAME_RE = re.compile(r"[A-Za-z0-9_.]+")  # the formal run is <candidate>-seed<seed>


CONFIG = Path("config/config.yaml")  # the Snakefile's configfile; --configfile files are merged over it


def config_paths(config: dict, task: str) -> dict:
    """Where the workflow keeps a task's fixed start, public split, manifest and recipe, relative
    to where it starts (the config's ``workdir`` holds results/, as ``rules/common.smk`` names it)."""
    fs, results = config["tasks"][task]["fixed_start"], Path(config.get("workdir", ".")) / "results"
    return {
        "fixed_start": str(results / "models" / fs) if fs in config.get("models", {}) else fs,
        "public_dir": str(results / task / "assets/public"),
        "manifest": str(results / task / "assets/manifest.json"),
        "recipe": f"recipes/{task}",
    }


def configfile_option(configfiles: list[dict]) -> str:
    """`` --configfile A B`` for the files after ``config/config.yaml`` of a record's
    ``config_files`` (``{"path", "sha256"}`` each), or ``""``. One option with every file:
    Snakemake 9 keeps only the last of repeated ``--configfile`` options (argparse's
    ``nargs="+"``), so ``--configfile A --configfile B`` would drop ``A``."""
    paths = [str(f["path"]) for f in configfiles[1:]]
    return f" --configfile {' '.join(paths)}" if paths else ""


def load_config(configfiles: list[str | Path], task: str) -> tuple[dict, list[dict]]:
    """The workflow config as Snakemake reads it with the same ``--configfile`` files
    (:func:`replaykit.config.load_workflow_config`: ``config/config.yaml``, then each file merged
    over it) and each file's path and SHA-256.

    Raises:
        InputError: a missing file, a config the schema refuses, a shown path that holds the
            working directory (:func:`replaykit.isolation.check_shown_paths`), or an unknown task.
    """
    from ..config import load_workflow_config, source_of
    from ..isolation import check_shown_paths

    files = [CONFIG, *(Path(f) for f in configfiles if Path(f) != CONFIG)]
    config, layers = load_workflow_config(files, CONFIG.parent / "schema.yaml", recipes_root=Path("recipes"))
    source = " + ".join(map(str, files))
    check_shown_paths(config, lambda keys: source_of(keys, layers, source), config_files=files)
    if task not in config["tasks"]:
        raise InputError(" + ".join(map(str, files)), "tasks", f"no task named {task!r}")
    return config, [{"path": str(f), "sha256": sha256_file(f)} for f in files]


# the most a budget may be, as the config's budgets (config/schema.yaml: a year)
MAX_BUDGET_S = 31_536_000


def _budget_s(cfg: dict, budget_s: float | None) -> float:
    if budget_s is None:
        budget_s = float(cfg["budget"]["outer_limit_s"]) * BUDGET_FRACTION
    if not 0 < budget_s <= MAX_BUDGET_S:  # nan and inf too: a deadline must be a time of day
        raise InputError(
            "--budget-s", "budget_s", f"must be > 0 and at most {MAX_BUDGET_S} seconds (a year), got {budget_s!r}"
        )
    return float(budget_s)


def _check_assets(paths: dict, configfiles: list[dict]) -> None:
    """The task's assets are built, from the fixed start this config names, and unchanged.

    Raises:
        InputError: not built (naming the snakemake command that builds them, with the same
            ``--configfile``), built from another fixed start, or changed since.
    """
    manifest = Path(paths["manifest"])
    # a Snakemake target is relative to the config's workdir (tiny/results/... is results/...)
    target = manifest.relative_to(manifest.parents[3])
    build = f"`snakemake {target} --cores 1{configfile_option(configfiles)}`"
    if not manifest.is_file():
        raise InputError(manifest, None, f"assets not built for this config: run {build} first")
    built_from = read_json(manifest, required=("fixed_start",))["fixed_start"].get("path")
    workdir = manifest.parents[3]  # <workdir>/results/<task>/assets/manifest.json: its paths are from there
    if built_from and (workdir / built_from).resolve() != Path(paths["fixed_start"]).resolve():
        raise InputError(
            manifest,
            "fixed_start.path",
            f"built from {built_from}, but the config ({' + '.join(f['path'] for f in configfiles)}) names "
            f"{paths['fixed_start']}: explore with the --configfile the assets were built with, or run {build}",
        )
    verify_assets(manifest, paths["fixed_start"], split="public")


def _lay_out(out: Path, recipe: str, lock: Path) -> None:
    """Fill the exploration's new folder ``out``: frozen-code record, fresh workspace, runs/,
    proxy/, an empty receipts file, and the lock file."""
    from ..tasks import frozen_code

    atomic_write_json(out / "frozen-code.json", frozen_code().record())
    build_workspace(recipe, out / "workspace", out / "workspace.json")
    (out / "runs").mkdir()
    (out / "proxy").mkdir()
    (out / "receipts.jsonl").touch()
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()


def start(
    task: str,
    name: str,
    *,
    configfiles: list[str | Path] = (),
    root: str | Path = "explore",
    lock: str | Path = DEFAULT_LOCK,
    budget_s: float | None = None,
) -> dict:
    """Create ``<root>/<task>/<name>/``: a fresh workspace, the budget's clock started.

    Args:
        configfiles: the ``--configfile`` files the workflow runs with (merged over
            ``config/config.yaml``, as Snakemake does: :func:`load_config`).
        budget_s: wall-clock budget in seconds; default the task's outer limit × 1/3.

    Returns the exploration record (``exploration.json``).

    Raises:
        InputError: a config :func:`load_config` refuses, a bad name, an existing exploration,
            a non-positive budget, or assets that are missing, built from another config or
            changed since (:func:`_check_assets`).
    """
    config, files = load_config(list(configfiles), task)
    if not NAME_RE.fullmatch(name):
        raise InputError("--name", "name", f"{name!r}: use letters, digits, '_' and '.' only")
    cfg = config["tasks"][task]
    budget_s = _budget_s(cfg, budget_s)
    paths = config_paths(config, task)
    _check_assets(paths, files)
    out, lock = Path(root) / task / name, Path(lock)
    if out.exists():
        raise InputError(out, "--name", "an exploration of this name exists already (choose another --name)")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        out.mkdir()
    except FileExistsError:
        raise InputError(out, "--name", "an exploration of this name exists already (choose another --name)") from None
    try:
        return _begin(out, lock, task, name, config, cfg, paths, files, budget_s)
    except BaseException:  # a half-made folder would hold the name without a record: none yet
        shutil.rmtree(out, ignore_errors=True)
        raise


def _begin(out: Path, lock: Path, task: str, name: str, config: dict, cfg: dict, paths: dict, files, budget_s) -> dict:
    """Lay out ``out`` and write its record: the budget's clock starts."""
    _lay_out(out, paths["recipe"], lock)
    started = time.time()
    info = {
        "task": task,
        "name": name,
        "directory": str(out),
        "workdir": str(Path.cwd().resolve()),
        "started_at": utc_now(),
        "started_unix": started,
        "budget_s": budget_s,
        "ends_unix": started + budget_s,
        "config_files": files,
        "tiny": config["tiny"],
        "lock": str(lock.resolve()),
        "isolation": config["isolation"],
        "sandbox": Settings.from_config(config).as_dict(),
        "gpus": config.get("gpus", {}),  # the GPU slots' pool settings (replaykit.harness.slots)
        "data": cfg["data"],
        "seed": int(cfg["seeds"][0]),
        "threads": int(cfg["threads"]),
        "profile": cfg["recipe"]["profile"],
        "overrides": cfg["recipe"]["overrides"],
        "replay_budget": cfg["budget"],
        "evaluation": cfg["evaluation"],
        "validation": cfg["validation"],
        "recipe_sha256": sha256_tree(paths["recipe"]),
        **paths,
    }
    atomic_write_json(out / "exploration.json", info)
    return info


class Exploration:
    """One exploration directory: its record, clock and receipts."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.record_path = self.dir / "exploration.json"
        if not self.record_path.is_file():
            raise InputError(self.record_path, None, "not an exploration (run `explore` first)")
        self.info = read_json(self.record_path, required=("task", "started_unix", "budget_s"))
        self.workspace = self.dir / "workspace"

    def used_s(self, now: float | None = None) -> float:
        """Wall-clock seconds since the start, capped at the budget."""
        return min(self.info["budget_s"], (now or time.time()) - self.info["started_unix"])

    def left_s(self, now: float | None = None) -> float:
        """Seconds of budget left (0 once it has ended)."""
        return max(0.0, self.info["ends_unix"] - (now or time.time()))

    def budget_at(self, now: float) -> dict:
        """The receipt's budget fields at ``now``: seconds used and left."""
        return {"budget_used_s": self.used_s(now), "budget_left_s": self.left_s(now)}

    def require_budget(self, what: str) -> None:
        """Raises InputError when the budget has ended (only submit works then)."""
        if self.left_s() <= 0:
            raise InputError(
                self.record_path,
                "budget_s",
                f"the exploration budget ({self.info['budget_s']:.0f} s) has ended: no more {what}; only submit works",
            )

    def require_open(self, what: str) -> None:
        """Raises InputError once the exploration was submitted: its patch is final."""
        if (self.dir / "submission.json").is_file():
            raise InputError(
                self.dir / "submission.json",
                None,
                f"this exploration was submitted: no more {what} (its patch is the candidate); "
                f"start another one with `python -m replaykit explore {self.info['task']} --name NAME`",
            )

    def receipts(self) -> list[dict]:
        path = self.dir / "receipts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def add_receipt(self, receipt: dict) -> dict:
        """Append ``receipt`` (with the exploration's ``tiny``) to ``receipts.jsonl``; return it."""
        receipt = {**receipt, "tiny": bool(self.info.get("tiny", False))}
        line = (json.dumps(receipt, sort_keys=True) + "\n").encode()
        fd = os.open(self.dir / "receipts.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)  # one write of an O_APPEND file: lines never interleave
        finally:
            os.close(fd)
        return receipt

    def new_dir(self, parent: str, prefix: str) -> Path:
        """``<parent>/<prefix><k>`` with the next free k (safe under concurrent callers)."""
        k = 1
        while True:
            path = self.dir / parent / f"{prefix}{k}"
            try:
                path.mkdir()
                return path
            except FileExistsError:
                k += 1

    def settings(self) -> Settings:
        """The config's isolation keys recorded at the start, with the config files read then
        (never shown to a probe: they may hold ``final_salt``)."""
        sandbox = self.info.get("sandbox", {"isolation": self.info.get("isolation", "bwrap")})
        where = Path(self.info.get("workdir", "."))
        files = [str((where / f["path"]).resolve()) for f in self.info.get("config_files", [])]
        return Settings.from_config({**sandbox, "config_files_in_use": files})

    def status(self) -> dict:
        """Budget (s), probes (id, exit status, stop, checkpoints), proxy scores and the
        submission, from the record and the receipts."""
        receipts = self.receipts()
        submission = self.dir / "submission.json"
        submitted = read_json(submission) if submission.is_file() else {}
        now = submitted.get("submitted_unix") or time.time()  # the clock stops at the submission
        return {
            "exploration": str(self.dir),
            "task": self.info["task"],
            "tiny": self.info.get("tiny", False),
            "budget_s": self.info["budget_s"],
            "used_s": self.used_s(now),
            "left_s": self.left_s(now),
            "ends_unix": self.info["ends_unix"],
            "probes": sum(r["kind"] == "probe" for r in receipts),
            "probe_runs": [
                {k: r.get(k) for k in ("id", "returncode", "stop", "seconds", "checkpoints")}
                for r in receipts
                if r["kind"] == "probe"
            ],
            "proxy_scores": [
                {k: r.get(k) for k in ("id", "checkpoint", "valid", "reason", "metric", "value", "se", "n", "waited_s")}
                for r in receipts
                if r["kind"] == "proxy"
            ],
            "submitted": bool(submitted),
            "patch": submitted.get("patch"),
        }

    def last_checkpoint(self) -> Path:
        """The newest probe's checkpoint of greatest progress (what ``proxy`` scores by default).

        Raises:
            InputError: no probe has published a checkpoint.
        """
        for receipt in reversed(self.receipts()):
            found = receipt.get("checkpoints") if receipt["kind"] == "probe" else None
            if found:
                return self.dir / max(found, key=lambda rel: int(rel.rsplit("-", 1)[-1]))
        raise InputError(self.dir / "receipts.jsonl", None, "no probe has published a checkpoint yet (explore run)")


def find_exploration(directory: str | Path | None = None) -> Exploration:
    """The exploration at ``directory``, else the one the working directory is inside; then
    work from the workflow directory it was started in (its paths are relative to it).

    Raises:
        InputError: no ``directory`` and the working directory is in no exploration, or
            ``directory`` is not an exploration.
    """
    if directory:
        found = Path(directory)
    else:
        here = Path.cwd().resolve()
        found = next((d for d in (here, *here.parents) if (d / "exploration.json").is_file()), None)
        if found is None:
            raise InputError(
                "-e", "exploration", "not inside an exploration directory: name one with -e explore/<task>/<name>"
            )
    ex = Exploration(found.resolve())
    os.chdir(ex.info["workdir"])
    return ex
