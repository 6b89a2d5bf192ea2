"""The replay protocol for a recipe without a Hugging Face ``Trainer`` (soup, digress, ddpo),
so that the recipe's ``main()`` reads as its algorithm.

The replay driver (:mod:`.replay`) starts ``train.py --request <request.json>`` and expects
the recipe to stop at the internal deadline, publish each checkpoint atomically, keep its
training state for a resume, write ``<state_dir>/train_result.json`` and exit 0 (stopped by
itself), :data:`NAN_EXIT` (a non-finite loss or reward) or 1 (nothing published). The
Trainer recipes get this from :mod:`.trainer`; the others from :class:`ReplaySession`::

    session = ReplaySession.start(SoupConfig, Path(__file__).parent / "configs", __doc__)
    recipe = session.recipe                      # a SoupConfig: typed, documented knobs
    ...
    session.begin_training()
    while ... and not session.past_deadline():
        ...
        session.publish(progress, lambda out: save(model, out))
    return session.finish("max_steps", history)

A recipe's knobs are a dataclass (as TRL's ``DPOConfig``), each field with ``help``
metadata (:func:`knob`); :func:`load_config` fills it from the recipe's profile YAML and the
replay's overrides, refusing unknown, missing and mistyped knobs with one line naming the
file and the key. Nothing here imports torch or transformers at import time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import time
import types
import typing
from pathlib import Path
from typing import Any, Literal

from .fileio import atomic_write_json
from .publish import publish_checkpoint, published, read_ledger

NAN_EXIT = 3  # exit status of a recipe stopped by a non-finite loss (the replay driver reports it)


def load_recipe(configs_dir: str | Path, profile: str, overrides: dict) -> dict:
    """The recipe's knobs: ``<configs_dir>/<profile>.yaml`` updated by ``overrides``.

    A dict-valued knob is updated key by key (``{"lora": {"r": 4}}`` keeps the other LoRA
    keys). Raises ``SystemExit`` with ``<file>: <key>: <message>`` for a missing profile or
    an override of a key the profile does not have.
    """
    import yaml

    path = Path(configs_dir) / f"{profile}.yaml"
    if not path.is_file():
        raise SystemExit(f"{path}: -: recipe profile not found")
    recipe = yaml.safe_load(path.read_text())
    for key, value in overrides.items():
        if key not in recipe:
            raise SystemExit(f"{path}: {key}: unknown recipe key in overrides")
        if isinstance(recipe[key], dict) and not isinstance(value, dict):
            raise SystemExit(f"{path}: {key}: an override of a mapping is a mapping, got {value!r}")
        recipe[key] = {**recipe[key], **value} if isinstance(recipe[key], dict) else value
    return recipe


def knob(help: str, minimum: float | None = None, maximum: float | None = None, **kwargs) -> Any:  # noqa: A002
    """A recipe config field with its ``help`` text (meaning, unit, choices; ``help`` is the
    name TRL's and HfArgumentParser's fields use) and, for a number, its allowed range
    (``minimum`` / ``maximum``, inclusive), checked by :func:`load_config`."""
    return dataclasses.field(metadata={"help": help, "minimum": minimum, "maximum": maximum}, **kwargs)


def _accepts(kind, value) -> bool:
    """Whether ``value`` (parsed YAML) is of the annotated type ``kind``: ``int`` (not bool),
    ``float`` (an int too), ``bool``, ``str``, ``dict``, ``list``, ``Literal[...]`` and unions
    (``X | None``)."""
    origin = typing.get_origin(kind)
    if origin is Literal:
        return value in typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(k, value) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or kind)


def _describe(kind) -> str:
    if typing.get_origin(kind) is Literal:
        return " | ".join(repr(v) for v in typing.get_args(kind))
    return getattr(kind, "__name__", str(kind))


def load_config(cls: type, configs_dir: str | Path, profile: str, overrides: dict):
    """An instance of the recipe config dataclass ``cls`` from ``<configs_dir>/<profile>.yaml``
    and ``overrides`` (:func:`load_recipe`). Raises ``SystemExit("<file>: <key>: <message>")``
    for a knob the dataclass does not define, one it needs that the profile lacks, or a value
    of the wrong type (``float`` knobs accept integers and are converted)."""
    path = Path(configs_dir) / f"{profile}.yaml"
    values = load_recipe(configs_dir, profile, overrides)
    if not isinstance(values, dict):
        raise SystemExit(f"{path}: -: a recipe profile is a mapping of knobs")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise SystemExit(f"{path}: {key}: not a knob of this recipe ({cls.__name__} in train.py defines them)")
    for name, f in known.items():
        if name not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SystemExit(f"{path}: {name}: missing ({f.metadata.get('help', 'no help')})")
            continue
        value = values[name]
        if not _accepts(hints[name], value):
            raise SystemExit(f"{path}: {name}: expected {_describe(hints[name])}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SystemExit(f"{path}: {name}: expected a finite number, got {value!r}")
        low, high = f.metadata.get("minimum"), f.metadata.get("maximum")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if (low is not None and value < low) or (high is not None and value > high):
                bounds = f"{'-inf' if low is None else low} <= {name} <= {'inf' if high is None else high}"
                raise SystemExit(f"{path}: {name}: {value!r} is out of range ({bounds})")
        if hints[name] is float:
            values[name] = float(value)
    return cls(**values)


class ReplaySession:
    """One replay attempt of a recipe: the driver's request, the typed recipe config and the
    bookkeeping of the replay contract.

    Attributes:
        request: the driver's request (``seed``, ``threads``, ``deadline_unix`` (s since the
            epoch), ``publish_dir``, ``state_dir``, ``public_dir``, ``fixed_start``,
            ``keep``, ``resume``, ``profile``, ``overrides``).
        recipe: the recipe config (an instance of the class given to :meth:`start`).
        published_now: progress values published by this attempt, in order.
        publish_s: seconds spent publishing in this attempt.
    """

    def __init__(self, request: dict, recipe):
        self.request = request
        self.recipe = recipe
        self.published_now: list[int] = []
        self.publish_s = 0.0
        self.train_start = time.time()

    @classmethod
    def start(cls, config_class: type, configs_dir: str | Path, doc: str | None = None, argv=None) -> ReplaySession:
        """Parse ``--request``, load the recipe config (:func:`load_config`), set torch's
        thread count and seed from the request."""
        parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
        parser.add_argument("--request", required=True, help="the replay driver's request (JSON)")
        request = json.loads(Path(parser.parse_args(argv).request).read_text())
        recipe = load_config(config_class, configs_dir, request["profile"], request["overrides"])
        import torch

        torch.set_num_threads(int(request["threads"]))
        torch.manual_seed(int(request["seed"]))
        return cls(request, recipe)

    # --- the request's paths and values ---------------------------------------------------
    @property
    def seed(self) -> int:
        return int(self.request["seed"])

    @property
    def resume(self) -> bool:
        return bool(self.request["resume"])

    @property
    def state_dir(self) -> Path:
        return Path(self.request["state_dir"])

    @property
    def publish_dir(self) -> Path:
        return Path(self.request["publish_dir"])

    @property
    def public_dir(self) -> Path:
        return Path(self.request["public_dir"])

    @property
    def fixed_start(self) -> Path:
        return Path(self.request["fixed_start"])

    def device(self, preference: str = "auto") -> str:
        """``cuda`` when ``preference`` is ``auto`` and a GPU is visible, else ``cpu``."""
        import torch

        return "cuda" if preference == "auto" and torch.cuda.is_available() else "cpu"

    # --- time -----------------------------------------------------------------------------
    def begin_training(self) -> None:
        """Start the training clock (``train_start_unix`` of the result)."""
        self.train_start = time.time()

    def past_deadline(self, ahead_s: float = 0.0) -> bool:
        """Whether the internal deadline has come, or comes within ``ahead_s`` seconds (e.g.
        the length of the last epoch: an epoch that cannot finish is not started)."""
        return time.time() + ahead_s >= self.request["deadline_unix"]

    # --- publication ----------------------------------------------------------------------
    def publish(self, progress: int, write) -> dict:
        """Publish ``checkpoint-<progress>``: ``write(folder)`` writes the checkpoint's files
        into a fresh export folder under the state folder, which is then renamed into place
        atomically (:func:`.publish.publish_checkpoint`, retention ``keep``) and removed.
        Prints the ``[publish]`` line; returns the ledger entry."""
        started = time.time()
        export = self.state_dir / f".export-{progress}"
        shutil.rmtree(export, ignore_errors=True)
        export.mkdir(parents=True)
        try:
            write(export)
            return self.publish_folder(export, progress, started)
        finally:
            shutil.rmtree(export, ignore_errors=True)

    def publish_folder(self, folder: str | Path, progress: int, started: float | None = None) -> dict:
        """Publish the files of an existing ``folder`` (left in place) as ``checkpoint-<progress>``."""
        started = time.time() if started is None else started
        entry = publish_checkpoint(folder, self.publish_dir, progress, keep=self.request["keep"])
        self.published_now.append(progress)
        self.publish_s += time.time() - started
        print(
            f"[publish] checkpoint-{progress} (publication {entry['count']}, retained {entry['retained']})", flush=True
        )
        return entry

    def published_before(self) -> list[int]:
        """Progress values published by any attempt (ledger and the folders on disk)."""
        return sorted({e["progress"] for e in read_ledger(self.publish_dir)} | set(published(self.publish_dir)))

    # --- state ----------------------------------------------------------------------------
    def save_state(self, state: dict, name: str = "train_state.pt") -> None:
        """``torch.save`` the training state to ``<state_dir>/<name>`` atomically (a kill
        mid-save leaves the previous state whole)."""
        import torch

        tmp = self.state_dir / f".tmp-{name}"
        torch.save(state, tmp)
        tmp.replace(self.state_dir / name)

    def load_state(self, name: str = "train_state.pt", **load_kwargs) -> dict | None:
        """The state saved by :meth:`save_state` when the driver asks for a resume and one
        exists, else None (``load_kwargs`` go to ``torch.load``, e.g. ``map_location``)."""
        path = self.state_dir / name
        if not (self.resume and path.is_file()):
            return None
        import torch

        return torch.load(path, weights_only=True, **load_kwargs)

    # --- the end --------------------------------------------------------------------------
    def finish(self, stop_reason: str, history: list[dict], steps: int | None = None, error: str | None = None) -> int:
        """Write ``<state_dir>/train_result.json`` (``stop_reason``, ``steps`` (default: the
        last progress in ``history``, else the last published), the training clock,
        ``publish_s``, ``history``, the last history entry's ``metrics`` and ``error``) and
        return the exit status: :data:`NAN_EXIT` with ``error`` (printed), 1 when no
        checkpoint exists at all, else 0."""
        if steps is None:
            steps = history[-1]["progress"] if history else max(self.published_now, default=0)
        result = {
            "stop_reason": stop_reason,
            "steps": steps,
            "train_start_unix": self.train_start,
            "train_end_unix": time.time(),
            "publish_s": self.publish_s,
            "history": history,
            "metrics": {k: v for k, v in (history[-1] if history else {}).items() if k != "progress"},
        }
        if error:
            result["error"] = error
        atomic_write_json(self.state_dir / "train_result.json", result)
        if error:
            print(f"error: {error}", flush=True)
            return NAN_EXIT
        if not self.published_now and not published(self.publish_dir):
            print(f"error: stopped ({stop_reason}) before the first checkpoint: nothing published", flush=True)
            return 1
        return 0
