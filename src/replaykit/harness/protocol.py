"""The replay protocol's typed hand-offs, written once and read by attribute everywhere.

* :class:`ReplaySpec` -- what the ``replay`` rule asks of one formal replay (the command
  line's options are its fields: :func:`options`), built by the CLI with the isolation plan
  and the frozen code it resolved above the harness;
* :class:`ReplayRequest` -- what the driver (:mod:`.replay`) or an exploration probe hands the
  recipe in ``request.json`` (``train.py --request request.json``);
* :class:`TrainResult` -- what the recipe leaves in ``<state_dir>/train_result.json``;
* :class:`StopReason` -- why training stopped, one spelling for each reason.

The recipe's side of the protocol is :mod:`replaykit.runtime`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from .budget import Budget
from .errors import InputError
from .fileio import atomic_write_json, read_json

KEEP = 3  # checkpoints retained (SPEC: retention)


class StopReason(StrEnum):
    """Why training stopped (``stop_reason`` of the result and the record)."""

    MAX_STEPS = "max_steps"  # the recipe's end: its steps, epochs or search done
    DEADLINE = "deadline"  # the internal deadline (or an earlier attempt spent the budget)
    NAN_LOSS = "nan_loss"  # a non-finite loss or reward: the recipe stops with an error
    OUTER_LIMIT = "outer_limit"  # the driver stopped the process group at the outer limit
    OVERTIME = "overtime"  # still running at the internal deadline + export reserve: the driver stopped it there
    UNKNOWN = "unknown"  # the recipe left no result


@dataclass(frozen=True)
class ReplayRequest:
    """``request.json``: what the recipe is asked to do (paths are absolute).

    Attributes:
        fixed_start: the fixed start's folder (read-only).
        public_dir: the public split's folder (read-only).
        publish_dir: where checkpoints are published (``checkpoint-<progress>/``).
        state_dir: the recipe's own state for a resume, and ``train_result.json``.
        seed: the run's seed.
        deadline_unix: the internal deadline, seconds since the epoch.
        export_reserve_s: seconds kept after the deadline for the last export.
        profile: the recipe profile (``configs/<profile>.yaml``).
        overrides: knobs of the profile replaced for this run.
        threads: CPU threads.
        keep: checkpoints retained.
        resume: whether an earlier attempt of the same replay left state to resume from.
    """

    fixed_start: Path
    public_dir: Path
    publish_dir: Path
    state_dir: Path
    seed: int
    deadline_unix: float
    export_reserve_s: float
    profile: str
    overrides: dict
    threads: int
    keep: int = KEEP
    resume: bool = False

    def write(self, path: str | Path) -> Path:
        doc = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        return atomic_write_json(path, doc)

    @classmethod
    def read(cls, path: str | Path) -> ReplayRequest:
        """Raises :class:`InputError` naming a missing key."""
        doc = read_json(path, required=[f.name for f in fields(cls)])
        paths = {f.name for f in fields(cls) if f.type in ("Path", Path)}
        return cls(**{f.name: Path(doc[f.name]) if f.name in paths else doc[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class TrainResult:
    """``train_result.json``: what one attempt of the recipe did (a missing key reads as its
    default: the file is written by candidate code).

    Attributes:
        stop_reason: a :class:`StopReason` value.
        steps: the last progress value reached.
        train_start_unix, train_end_unix: the training clock (s since the epoch).
        publish_s: seconds spent publishing.
        history: the training curve ``[{"progress": int, "<name>": float, ...}]`` over all
            attempts (the record's ``train_history``).
        metrics: the last curve entry's values.
        error: why the recipe failed (a non-finite loss), else None.
    """

    stop_reason: str = StopReason.UNKNOWN.value
    steps: Any = None
    train_start_unix: Any = None
    train_end_unix: Any = None
    publish_s: Any = None
    history: Any = field(default_factory=list)
    metrics: Any = field(default_factory=dict)
    error: Any = None

    def write(self, path: str | Path) -> Path:
        doc = {k: v for k, v in asdict(self).items() if k != "error" or v}
        doc["stop_reason"] = StopReason(self.stop_reason).value if self.stop_reason in _REASONS else self.stop_reason
        return atomic_write_json(path, doc)

    @classmethod
    def read(cls, path: str | Path) -> TrainResult:
        """The result at ``path`` (all defaults when there is none)."""
        doc = read_json(path) if Path(path).exists() else {}
        if not isinstance(doc, dict):
            raise InputError(path, None, "not a JSON object")
        return cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})


_REASONS = {r.value for r in StopReason}


def spec_field(help: str, option: str | None = None, **kwargs) -> Any:  # noqa: A002
    """A :class:`ReplaySpec` field given on the command line as ``option`` (default: from its
    name), with its ``help``."""
    return field(metadata={"help": help, "option": option}, **kwargs)


@dataclass(frozen=True)
class ReplaySpec:
    """What one formal replay is asked to do: the ``replay`` rule's options (fields with an
    ``option``) and what the CLI resolves above the harness (the isolation plan of
    :func:`replaykit.isolation.plan`, the installation's frozen code)."""

    task: str = spec_field("task name")
    run: str = spec_field("run name, <candidate>-seed<seed>")
    workspace: Path = spec_field("the run's workspace (shipped recipe + candidate patch)")
    workspace_record: Path = spec_field("workspace.json of that workspace")
    manifest: Path = spec_field("the asset manifest (SHA-256 of the fixed start and every asset file)")
    fixed_start: Path = spec_field("the fixed start's directory")
    public_dir: Path = spec_field("the public split's directory", option="--public")
    publish_dir: Path = spec_field("where checkpoints are published (replay/)")
    state_dir: Path = spec_field("trainer state kept for a resume (replay-state/)")
    record_path: Path = spec_field("the replay record to write (record.json)", option="--record")
    budget: Budget = spec_field("JSON: outer_limit_s, internal_deadline_s, export_reserve_s")
    seed: int = spec_field("the run's seed")
    profile: str = spec_field("recipe profile, recipes/<task>/configs/<profile>.yaml")
    overrides: dict = spec_field("JSON: keys of the recipe profile to replace")
    threads: int = spec_field("CPU threads of train.py")
    keep: int = field(default=KEEP)
    isolation: Any = field(default=None)  # an IsolationPlan (harness.sandbox)
    frozen: Any = field(default=None)  # a FrozenCode (harness.frozen)
    slot: Any = field(default=None)  # the GpuSlot the replay holds (harness.slots), taken by replay_job

    @classmethod
    def from_options(cls, values: dict[str, str], **resolved) -> ReplaySpec:
        """The spec of the command line's option ``values`` (field name -> text, as
        :func:`options` names them) and the ``resolved`` fields. Raises :class:`InputError`
        for JSON that does not parse or a bad budget."""
        kinds = {f.name: f.type for f in fields(cls)}
        out = {}
        for name, text in values.items():
            kind = kinds[name]
            if kind in ("Path", Path):
                out[name] = Path(text)
            elif kind in ("int", int):
                out[name] = int(text)
            elif kind == "Budget":
                out[name] = _budget(text)
            elif kind == "dict":
                out[name] = _json_option(text, name)
            else:
                out[name] = text
        return cls(**out, **resolved)


def options() -> list[tuple[str, str, str]]:
    """``(field name, option, help)`` of every :class:`ReplaySpec` field the command line gives."""
    out = []
    for f in fields(ReplaySpec):
        if "help" in f.metadata:
            out.append((f.name, f.metadata["option"] or "--" + f.name.replace("_", "-"), f.metadata["help"]))
    return out


def _budget(text: str) -> Budget:
    """The :class:`Budget` of a task's ``budget`` config block given as JSON text (empty: no
    keys). Raises :class:`InputError` (``config: budget``) for bad JSON, a missing key or an
    inconsistent budget."""
    try:
        return Budget.from_config(json.loads(text) if text else {})
    except (KeyError, ValueError) as exc:
        raise InputError("config", "budget", str(exc)) from None


def _json_option(text: str, name: str):
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        option = "--" + name.replace("_", "-")
        raise InputError("command line", option, f"not JSON ({exc.msg} at column {exc.colno}): {text[:80]!r}") from None
