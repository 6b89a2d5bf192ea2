"""A recipe's knobs: a frozen dataclass (as TRL's ``DPOConfig``) whose fields carry their help
text and range (:func:`knob`), filled and checked from the recipe's profile and the replay's
overrides by :func:`load_config`, refusing unknown, missing and mistyped knobs with one line
``<profile file>: <knob>: <message>``. Nothing here imports torch or transformers."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..harness.profile import load_recipe


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
        raise SystemExit(f"{path}: a recipe profile is a mapping of knobs")
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


@dataclass(frozen=True)
class TrainerKnobs:
    """The knobs every Hugging Face ``Trainer`` recipe has (:func:`replaykit.runtime.trainer.
    training_arguments` reads them); a recipe's knobs dataclass extends it with its method's
    knobs (as TRL's ``DPOConfig`` extends ``TrainingArguments``)."""

    dtype: Literal["float32", "bfloat16", "float16"] = knob("weights' dtype; bfloat16 also turns on bf16 training")
    per_device_train_batch_size: int = knob("pairs (examples) per forward/backward pass", minimum=1)
    gradient_accumulation_steps: int = knob("passes per optimizer step", minimum=1)
    optim: str = knob("transformers optimizer name (adamw_torch, paged_adamw_32bit, ...)")
    learning_rate: float = knob("peak learning rate", minimum=0)
    lr_scheduler_type: str = knob("transformers schedule name (cosine, linear, ...)")
    max_steps: int = knob("optimizer steps (progress = step)", minimum=1)
    save_steps: int = knob("publish every N steps, and at the last step (3 retained)", minimum=1)
    gradient_checkpointing: bool = knob("recompute activations in the backward pass (less memory, more time)")
