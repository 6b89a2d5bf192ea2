"""One exploration's folder, record, clock and receipts (``explore/<task>/<name>/``)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from ..harness.assets import verify_assets
from ..harness.errors import InputError
from ..harness.fileio import atomic_write_json, read_json
from ..harness.hashing import sha256_tree
from ..harness.provenance import utc_now
from ..harness.workspace import build_workspace
from ..isolation import Settings

BUDGET_FRACTION = 14_400 / 43_200  # SPEC: exploration budget / formal replay outer limit
DEFAULT_LOCK = Path("explore/.gpu.lock")
NAME_RE = re.compile(r"[A-Za-z0-9_.]+")  # the formal run is <candidate>-seed<seed>


def config_paths(config: dict, task: str) -> dict:
    """Where the workflow keeps a task's fixed start, public split, manifest and recipe
    (relative to the working directory, as ``rules/common.smk`` names them)."""
    fs = config["tasks"][task]["fixed_start"]
    return {
        "fixed_start": f"results/models/{fs}" if fs in config.get("models", {}) else fs,
        "public_dir": f"results/{task}/assets/public",
        "manifest": f"results/{task}/assets/manifest.json",
        "recipe": f"recipes/{task}",
    }


def load_config(configfile: str | Path, task: str) -> dict:
    """The workflow config (checked against ``config/schema.yaml`` beside it, defaults filled).

    Raises:
        InputError: a missing file, a config the schema refuses, or an unknown task.
    """
    import yaml

    from ..config import check_config, config_schema, fill_defaults

    configfile = Path(configfile)
    if not configfile.is_file():
        raise InputError(configfile, "-", "config file not found")
    config = yaml.safe_load(configfile.read_text()) or {}
    schema = configfile.parent / "schema.yaml"
    check_config(config, schema, str(configfile))
    fill_defaults(config, config_schema(schema, config))
    if task not in config["tasks"]:
        raise InputError(configfile, "tasks", f"no task named {task!r}")
    return config


def _budget_s(cfg: dict, budget_s: float | None) -> float:
    if budget_s is None:
        budget_s = float(cfg["budget"]["outer_limit_s"]) * BUDGET_FRACTION
    if not budget_s > 0:
        raise InputError("--budget-s", "budget_s", f"must be > 0 seconds, got {budget_s!r}")
    return float(budget_s)


def start(
    task: str,
    name: str,
    *,
    config: dict | None = None,
    configfile: str | Path,
    root: str | Path = "explore",
    lock: str | Path = DEFAULT_LOCK,
    budget_s: float | None = None,
) -> dict:
    """Create ``<root>/<task>/<name>/``: a fresh workspace, the budget's clock started.

    Args:
        config: the workflow config (default: :func:`load_config` of ``configfile``).
        budget_s: wall-clock budget in seconds; default the task's outer limit × 1/3.

    Returns the exploration record (``exploration.json``).

    Raises:
        InputError: a config :func:`load_config` refuses, a bad name, an existing exploration,
            a non-positive budget, or assets
            that are missing or differ from their manifest (build them first with
            ``snakemake results/<task>/assets/manifest.json``).
    """
    from ..tasks import frozen_code

    if config is None:
        config = load_config(configfile, task)
    if not NAME_RE.fullmatch(name):
        raise InputError("--name", "name", f"{name!r}: use letters, digits, '_' and '.' only")
    cfg = config["tasks"][task]
    budget_s = _budget_s(cfg, budget_s)
    paths = config_paths(config, task)
    manifest = Path(paths["manifest"])
    if not manifest.is_file():
        raise InputError(manifest, "-", f"assets not built: run `snakemake {manifest} --cores 1` first")
    verify_assets(manifest, paths["fixed_start"], split="public")
    out = Path(root) / task / name
    if out.exists():
        raise InputError(out, "-", "exploration already exists (choose another --name)")
    out.mkdir(parents=True)
    atomic_write_json(out / "frozen-code.json", frozen_code().record())
    build_workspace(paths["recipe"], out / "workspace", out / "workspace.json")
    (out / "runs").mkdir()
    (out / "proxy").mkdir()
    (out / "receipts.jsonl").touch()
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
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
        "configfile": str(configfile),
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
            raise InputError(self.record_path, "-", "not an exploration (run `explore` first)")
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

    def receipts(self) -> list[dict]:
        path = self.dir / "receipts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def add_receipt(self, receipt: dict) -> dict:
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
        """The config's isolation keys recorded at the start."""
        return Settings.from_config(self.info.get("sandbox", {"isolation": self.info.get("isolation", "bwrap")}))

    def status(self) -> dict:
        receipts = self.receipts()
        return {
            "exploration": str(self.dir),
            "budget_s": self.info["budget_s"],
            "used_s": self.used_s(),
            "left_s": self.left_s(),
            "probes": sum(r["kind"] == "probe" for r in receipts),
            "proxy_scores": [
                {k: r.get(k) for k in ("id", "checkpoint", "value", "se", "waited_s")}
                for r in receipts
                if r["kind"] == "proxy"
            ],
            "submitted": (self.dir / "submission.json").is_file(),
        }


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
