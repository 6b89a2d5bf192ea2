"""Checks of the workflow configuration that give one clear line per problem."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import yaml

from .harness.budget import Budget
from .harness.errors import InputError


def check_config(config: dict, schema_file: str | Path, source: str) -> None:
    """Validate ``config`` against the JSON schema, then the rules a schema cannot state.

    Raises :class:`InputError` naming ``source`` (the config file(s)) and the dotted path of
    the first offending field, e.g. ``tasks.dpo.budget.outer_limit_s``.
    """
    schema = yaml.safe_load(Path(schema_file).read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        field = ".".join(str(p) for p in error.absolute_path) or "-"
        raise InputError(source, field, error.message)
    from .tasks import get_task

    for name, task in config["tasks"].items():
        plugin = get_task(name)
        try:
            plugin.check_data(task["data"])
        except KeyError as exc:
            raise InputError(source, f"tasks.{name}.data.{exc.args[0]}", "required key missing") from None
        except ValueError as exc:
            key, _, message = str(exc).partition(": ")
            raise InputError(source, f"tasks.{name}.data.{key}", message) from None
        for cand, patch in task.get("candidates", {}).items():
            if not Path(patch).is_file():
                raise InputError(source, f"tasks.{name}.candidates.{cand}", f"patch file {patch!r} not found")
        try:
            Budget.from_config(task["budget"])
        except ValueError as exc:
            raise InputError(source, f"tasks.{name}.budget", str(exc)) from None
        fixed_start = task["fixed_start"]
        if fixed_start not in config.get("models", {}) and not any(
                (Path(fixed_start) / f).is_file() for f in ("config.json", "model_index.json")):  # HF model / diffusers pipeline
            raise InputError(source, f"tasks.{name}.fixed_start",
                             f"{fixed_start!r} is neither a name in models nor a model directory with config.json "
                             "(or a diffusers pipeline with model_index.json)")
        candidate = task.get("candidate", "shipped")
        if candidate != "shipped" and candidate not in task.get("candidates", {}):
            raise InputError(source, f"tasks.{name}.candidate", f"{candidate!r} is not a key of candidates")
