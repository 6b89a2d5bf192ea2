"""A recipe's profile and a replay's overrides of it: the one owner of both readings.

A recipe's knobs live in ``configs/<profile>.yaml`` of its workspace. The workflow checks a
run's ``overrides`` against the shipped profile when it starts (:func:`check_overrides`, from
:mod:`replaykit.config`), the replay driver against the run's workspace before training, and
the recipe reads the profile with them applied (:func:`load_recipe`, through
:func:`replaykit.runtime.load_config`, which also checks the knobs' types).
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .yamlfile import EXPONENT_FLOAT

SAVE_KEYS = ("save_steps", "save_freq", "save_every")  # the recipes' publication cadence


def load_recipe(configs_dir: str | Path, profile: str, overrides: dict) -> dict:
    """The recipe's knobs: ``<configs_dir>/<profile>.yaml`` updated by ``overrides``.

    A dict-valued knob is updated key by key (``{"lora": {"r": 4}}`` keeps the other LoRA
    keys). Raises ``SystemExit`` with ``<file>: <key>: <message>`` for a missing profile or
    an override of a key the profile does not have.
    """
    import yaml

    path = Path(configs_dir) / f"{profile}.yaml"
    if not path.is_file():
        raise SystemExit(f"{path}: recipe profile not found")
    recipe = yaml.safe_load(path.read_text())
    for key, value in overrides.items():
        if key not in recipe:
            raise SystemExit(f"{path}: {key}: unknown recipe key in overrides")
        if isinstance(recipe[key], dict) and not isinstance(value, dict):
            raise SystemExit(f"{path}: {key}: an override of a mapping is a mapping, got {value!r}")
        recipe[key] = {**recipe[key], **value} if isinstance(recipe[key], dict) else value
    return recipe


def _kind(value) -> str:
    """The YAML kind of a knob's value: what an override of it must also be. Integers and
    floats are one kind here (a profile may write ``0`` for a float knob); the recipe's knobs
    dataclass tells them apart when the replay starts."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "a list", dict: "a mapping"}.get(type(value), "any value")


def _coerced(default, value):
    """``value`` (an override) read as the kind of the profile's ``default`` where it is a
    string that spells one: Snakemake's ``--config`` parser leaves numbers inside a mapping as
    strings, and YAML 1.1 reads ``2e-4`` (no dot) as a string. Anything else is returned as is."""
    import yaml

    from .yamlfile import load_yaml_text

    if not isinstance(value, str) or isinstance(default, str) or default is None:
        return value
    try:
        parsed = load_yaml_text(value)
    except (yaml.YAMLError, InputError):  # InputError: `042`, which YAML 1.1 reads as 34
        return value
    if _kind(default) == "a number" and isinstance(parsed, str):
        if not EXPONENT_FLOAT.fullmatch(parsed):  # float() would take `1_0e-4`, `nan`, ` 1e-4`
            return value
        parsed = float(parsed)
    return parsed if _kind(parsed) == _kind(default) else value


def _kind_problem(default, value) -> str | None:
    """Why ``value`` cannot replace the profile's ``default`` (None when it can): a boolean for
    a boolean, a finite number for a number, a string for a string, a list for a list, a
    mapping for a mapping; a null default takes anything, and null may replace anything (a
    knob that allows none, e.g. ``quantization``: the knobs dataclass decides)."""
    import math

    if default is None or value is None:
        return None
    want, got = _kind(default), _kind(value)
    if want != got:
        return f"expected {want} (the profile has {default!r}), got {value!r}"
    if want == "a number" and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    return None


def check_overrides(workspace: Path, profile: str, overrides: dict, coerce: bool = False) -> None:
    """Recipe contract: knobs live in ``configs/<profile>.yaml`` of the workspace; overrides
    may only replace keys it has (inside a mapping knob too), each with a value of the same
    kind as the profile's (:func:`_kind_problem`). Checked before anything is removed or
    started. With ``coerce``, string overrides that spell the profile value's kind are
    replaced in ``overrides`` (in place) by that value first (:func:`_coerced`).

    Raises:
        InputError: the profile is missing or not valid YAML (naming it), or an override
            names no knob or has the wrong kind (field ``recipe.overrides.<key>[.<sub>]``).
    """
    import yaml

    path = workspace / "configs" / f"{profile}.yaml"
    if not path.is_file():
        raise InputError(path, None, f"recipe profile {profile!r} not found in the workspace")
    try:
        knobs = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(path, None, f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(knobs, dict):
        raise InputError(path, None, "a recipe profile is a mapping of knobs")

    def check(defaults: dict, values: dict, prefix: str) -> None:
        for key, value in list(values.items()):
            field = f"recipe.overrides.{prefix}{key}"
            if key not in defaults:
                raise InputError("config", field, f"not a key of {path}")
            if coerce:
                values[key] = value = _coerced(defaults[key], value)
            problem = _kind_problem(defaults[key], value)
            if problem:
                raise InputError("config", field, f"{problem} ({path})")
            if isinstance(value, dict):
                check(defaults[key], value, f"{prefix}{key}.")

    check(knobs, overrides, "")


def save_every(workspace, profile: str, overrides: dict) -> int | None:
    """The publication cadence the recipe's ``configs/<profile>.yaml`` (after ``overrides``)
    names under one of :data:`SAVE_KEYS`, or None (display only: a wrong guess shows a wrong
    "next checkpoint", nothing else)."""
    import yaml

    try:
        knobs = yaml.safe_load((Path(workspace) / "configs" / f"{profile}.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    knobs = {**knobs, **(overrides or {})}
    for key in SAVE_KEYS:
        if isinstance(knobs.get(key), int) and knobs[key] > 0:
            return knobs[key]
    return None
