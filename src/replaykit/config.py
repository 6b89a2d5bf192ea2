"""Checks of the workflow configuration that give one clear line per problem.

A value can come from ``config/config.yaml`` (the Snakefile's ``configfile:``), from files
given with ``--configfile`` and from ``--config KEY=VALUE``; each error names the source the
offending value came from (the last one that sets it), then its dotted key.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import os
from pathlib import Path

import jsonschema
import yaml

from .harness.budget import Budget
from .harness.errors import InputError, unexpanded_path
from .harness.hashing import sha256_file
from .harness.submission import read_sidecar, sidecar
from .harness.yamlfile import EXPONENT_FLOAT, load_yaml_strict, load_yaml_text

CLI = "--config"  # the source name of values given on the command line

Layer = tuple[str, dict]  # (source name, the mapping it contributes), lowest priority first


def load_schema(path: str | Path) -> dict:
    """The JSON schema of ``path`` (YAML), parsed with libyaml when PyYAML has it (the pure
    Python parser takes ~0.1 s for ``config/schema.yaml``, and the workflow reads it on every
    parse); memoised per (path, size, mtime). A fresh copy each call: callers may change it."""
    st = Path(path).stat()
    return copy.deepcopy(_load_schema(str(Path(path).resolve()), st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=4)
def _load_schema(path: str, size: int, mtime_ns: int) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as handle:
        return yaml.load(handle, Loader=loader)  # noqa: S506 (a safe loader)


TASK_BLOCK = "task_block"  # $defs/task_block: the shared keys of a registered task's block


def config_schema(schema_file: str | Path, config: dict) -> dict:
    """The schema ``config`` is checked against: ``schema_file`` (``config/schema.yaml``) with
    a block under ``tasks.properties`` for every configured task that it lacks and a
    registered plug-in has (an entry point, :data:`replaykit.tasks.ENTRY_POINT_GROUP`): a copy of
    ``$defs/task_block`` whose properties are updated by the plug-in's ``CONFIG_SCHEMA``. Their
    ``$ref: '#/$defs/...'`` resolve in the same document. Only configured tasks are imported
    (the config check imports them anyway); a name no plug-in has is left to the schema,
    which refuses it as an unknown key.

    Raises:
        InputError: a plug-in that does not load or is refused (:func:`replaykit.tasks.get_task`);
            a task outside ``schema_file`` without ``CONFIG_SCHEMA``, or one in it with one (two
            schemas of one block); a ``CONFIG_SCHEMA`` that is not a valid JSON schema, has a
            ``$ref`` that does not resolve, or lacks the defaults of ``evaluation`` (and of
            ``validation`` when it gives one) and of their ``runtime`` (:func:`_check_block`);
            ``schema_file`` without ``$defs/task_block``.
    """
    from .tasks import KNOWN, REFUSED, get_task

    schema = load_schema(schema_file)
    tasks = config.get("tasks") if isinstance(config, dict) else None
    if not isinstance(tasks, dict):
        return schema  # refused by the schema itself
    blocks = schema["properties"]["tasks"]["properties"]
    added = {}
    for name in tasks:
        if name not in KNOWN and name not in REFUSED:
            continue
        plugin = get_task(name)
        where = plugin.module.__file__ or plugin.module.__name__
        if name in blocks:
            if plugin.CONFIG_SCHEMA is not None:
                raise InputError(
                    where,
                    "CONFIG_SCHEMA",
                    f"{schema_file} already defines tasks.{name}: a block has one schema (drop one)",
                )
            continue
        if plugin.CONFIG_SCHEMA is None:
            raise InputError(
                where,
                "CONFIG_SCHEMA",
                f"task {name!r} is not in {schema_file}: its plug-in must give its block's schema "
                "(at least data and evaluation; see replaykit.tasks.contract)",
            )
        if TASK_BLOCK not in schema.get("$defs", {}):
            raise InputError(schema_file, f"$defs.{TASK_BLOCK}", "missing (the block of a registered task)")
        block = copy.deepcopy(schema["$defs"][TASK_BLOCK])
        block["properties"].update(copy.deepcopy(dict(plugin.CONFIG_SCHEMA)))
        block["description"] = f"task {name} (plug-in {plugin.module.__name__}, registered by an entry point)"
        blocks[name] = block
        added[name] = (where, tuple(plugin.CONFIG_SCHEMA))
    if added:
        _check_blocks(schema, added)
    return schema


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _resolve(root: dict, ref: str):
    """The node ``ref`` (``#/<JSON pointer>``) points at in ``root``; KeyError if none."""
    from urllib.parse import unquote

    if not ref.startswith("#"):
        raise KeyError(ref)
    node = root
    for part in filter(None, unquote(ref[1:]).split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(ref)
    return node


def _refs(node, path=()):
    """``(path, ref)`` of every ``$ref`` in a schema (not inside default / const / enum /
    examples values)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield path, value
            elif key not in ("default", "const", "enum", "examples"):
                yield from _refs(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, (*path, str(i)))


def _check_blocks(schema: dict, added: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    """Refuse, naming the plug-in's file and ``CONFIG_SCHEMA``, a block of a registered task
    (``added``: task name -> its plug-in's file and its CONFIG_SCHEMA's keys) that would break
    the config check or the DAG later with a traceback: not a valid JSON schema (draft 2020-12, checked on the whole
    merged schema), a ``$ref`` that does not resolve in it, or an ``evaluation`` (or given
    ``validation``) without a ``default`` or whose ``runtime`` has none (the scoring rules read
    ``tasks.<task>.evaluation.runtime``)."""
    blocks = schema["properties"]["tasks"]["properties"]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = list(exc.absolute_path)
        prefix = ["properties", "tasks", "properties"]
        if path[:3] == prefix and path[3] in added and path[4:5] == ["properties"]:
            where, at = added[path[3]][0], ".".join(map(str, path[5:]))
            raise InputError(
                where, "CONFIG_SCHEMA", f"not a valid JSON schema (draft 2020-12) at {at}: {_one_line(exc.message)}"
            ) from None
        raise InputError("schema", ".".join(map(str, path)) or None, _one_line(exc.message)) from None
    for name, (where, keys) in added.items():
        own = blocks[name]["properties"]
        for key in keys:
            for path, ref in _refs(own[key], (key,)):
                try:
                    _resolve(schema, ref)
                except KeyError:
                    raise InputError(
                        where,
                        "CONFIG_SCHEMA",
                        f"$ref {ref!r} at {'.'.join(path)} does not resolve (a shared definition is "
                        f"'#/$defs/<name>' of config/schema.yaml: {', '.join(sorted(schema.get('$defs', {})))})",
                    ) from None
        for key in ("evaluation", "validation"):
            if key in keys:  # else the shared validation of $defs/task_block
                _check_runtime_default(schema, own[key], blocks[name], key, where)


def _check_runtime_default(schema: dict, sub: dict, block: dict, key: str, where: str) -> None:
    """``block``'s ``key`` (evaluation / validation) must end up in the filled config with a
    ``runtime``: the key has a mapping ``default`` (or is required) and its ``runtime`` a
    ``default`` beside its ``$ref`` (or is required)."""
    node, required = sub, set(sub.get("required", []))
    props = dict(sub.get("properties", {}))
    while isinstance(node.get("$ref"), str):  # resolved above
        node = _resolve(schema, node["$ref"])
        props = {**node.get("properties", {}), **props}
        required |= set(node.get("required", []))
    filled = isinstance(sub.get("default"), dict) or key in block.get("required", [])
    runtime = props.get("runtime")
    if not filled or not ((isinstance(runtime, dict) and "default" in runtime) or "runtime" in required):
        raise InputError(
            where,
            "CONFIG_SCHEMA",
            f"{key} needs a default (a mapping, e.g. {{'runtime': 5}}) and properties.runtime a default "
            f"(minutes; the scoring rules read tasks.<task>.{key}.runtime)",
        )


def fill_defaults(config: dict, schema: dict) -> dict:
    """Fill in ``config`` (in place) the ``default`` of every property the schema gives one and
    the config lacks, as Snakemake's ``snakemake.utils.validate`` does (jsonschema's FAQ
    recipe: a default beside a ``$ref`` is filled, one inside the referenced definition is
    not), but from a schema already loaded, e.g. :func:`config_schema`'s. Returns ``config``.

    Raises:
        jsonschema.ValidationError: ``config`` does not satisfy ``schema`` (check it first
            with :func:`check_config`, which names the offending source and key).
    """
    base = jsonschema.Draft202012Validator
    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, subschema):
        if isinstance(instance, dict):
            for key, prop in properties.items():
                if isinstance(prop, dict) and "default" in prop:
                    instance.setdefault(key, prop["default"])
        yield from validate_properties(validator, properties, instance, subschema)

    filling = jsonschema.validators.extend(base, {"properties": set_defaults})
    filling(schema).validate(config)
    return config


def _lookup(mapping, path) -> bool:
    """Whether the key path (a sequence of keys / list indices) exists in ``mapping``."""
    node = mapping
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return False
    return True


def source_of(path, layers: list[Layer], default: str) -> str:
    """The source (file name or ``--config``) of the value at ``path``: the last layer that
    sets it, else the last layer that sets its longest existing parent, else ``default``."""
    path = list(path)
    for depth in range(len(path), 0, -1):
        for name, mapping in reversed(layers):
            if _lookup(mapping, path[:depth]):
                return name
    return default


def coerce_cli_values(config: dict, cli: dict, schema: dict) -> None:
    """Turn back into numbers / booleans / null the strings that Snakemake's ``--config``
    parser leaves inside a structured value, where the schema asks for that type.

    Snakemake parses ``--config 'tasks={"digress": {"seeds": [42, 43]}}'`` with YAML's
    ``BaseLoader``, which makes every scalar a string (``["42", "43"]``). Each such string
    is re-read with the strict loader (:func:`load_yaml_text`: plain decimal numbers only) and
    kept only when the result is of a type the schema expects at that place; both ``config``
    (the merged config) and ``cli`` are updated. Raises InputError for a number that YAML 1.1
    would read as another (``[042]``).
    """
    validator = jsonschema.Draft202012Validator(schema)
    for _ in range(10_000):  # one fix per pass: the error list changes as values change
        fixed = False
        for error in validator.iter_errors(config):
            for err in [error, *(error.context or [])]:
                path = list(err.absolute_path)
                if err.validator != "type" or not isinstance(err.instance, str) or not _lookup(cli, path):
                    continue
                try:
                    value = load_yaml_text(err.instance)
                except InputError as exc:  # `[042]`: YAML 1.1 would read another number
                    raise InputError(CLI, ".".join(map(str, path)), exc.message) from None
                except yaml.YAMLError:
                    continue  # not a YAML scalar: left for the schema error
                wanted = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
                if not any(validator.is_type(value, t) for t in wanted) or isinstance(value, str):
                    continue
                for target in (config, cli):
                    node = target
                    for key in path[:-1]:
                        node = node[key]
                    node[path[-1]] = value
                fixed = True
                break
            if fixed:
                break
        if not fixed:
            return


# JSON Schema's `integer` takes a whole-number float (`500.0`): a count, a thread number or a
# seed so written passes the schema and breaks a job later (`--n-boot 500.0`, OMP_NUM_THREADS=1.0)
_ConfigValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


_TYPE_CHECKS = ("type", "anyOf", "oneOf", "enum")
_NULL_WORDS = ("null", "Null", "NULL", "~", "None", "")


def _wanted_types(error: jsonschema.ValidationError) -> set[str]:
    """The JSON types the failed schema (and, for a branch of ``anyOf``/``oneOf``, its
    alternatives) accepts at the error's place."""
    types: set[str] = set()
    node = error
    while node is not None:
        schema = node.schema if isinstance(node.schema, dict) else {}
        for sub in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
            kind = sub.get("type") if isinstance(sub, dict) else None
            types |= set(kind if isinstance(kind, list) else [kind] if kind else [])
        node = node.parent
    return types


def _type_hint(error: jsonschema.ValidationError, path: list, layers: list[Layer]) -> str | None:
    """A message naming the likely slip behind a value of the wrong type, or None: a whole
    number written with a decimal point where an integer is wanted, YAML's null, a number in
    exponent form that YAML 1.1 leaves a string (``3e2``), a quoted value from ``--config``."""
    value, wanted = error.instance, _wanted_types(error)
    numeric = wanted & {"number", "integer"}
    if isinstance(value, float) and value.is_integer() and "integer" in wanted and "number" not in wanted:
        return f"{value!r}: write a whole number without a decimal point"
    if value is None and "null" not in wanted:
        null = "empty (YAML reads nothing, `~` and `null` as null)"
        if wanted:
            return f"{null}, should be of type {' or '.join(sorted(wanted))}"
        return f"{null}, should be one of {error.validator_value!r}" if error.validator == "enum" else None
    if isinstance(value, str) and numeric and EXPONENT_FLOAT.fullmatch(value):
        number = float(value)
        underflow = number == 0 and any(c in "123456789" for c in value.lower().split("e")[0])
        if not math.isfinite(number) or underflow:
            return f"{value!r} is a string in YAML 1.1, and out of a float's range"
        plain = repr(int(number)) if number.is_integer() else repr(number)
        if "e" in plain:  # 1e-05, which YAML 1.1 reads as a string again: 1.0e-05
            mantissa, exponent = plain.split("e")
            plain = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}"
        return f"{value!r} is a string in YAML 1.1 (an exponent needs a dot and a sign: 3.0e+2): write {plain}"
    if isinstance(value, str) and error.validator == "type" and source_of(path, layers, "") == CLI:
        if value in _NULL_WORDS:
            return f"{value!r}: --config cannot give a null here; leave the key out for its default"
        return (
            f"{error.message} (from --config: write numbers and booleans unquoted, e.g. "
            '--config \'tasks={"digress": {"seeds": [42, 43]}}\')'
        )
    return None


def _branch_error(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For a mapping that matches no branch of an ``anyOf``/``oneOf`` (a ``models`` entry), the
    error inside the branch it was meant for, so that the message says what is wrong there
    (``n_ingredients: 1 is less than the minimum of 2``) rather than "not valid under any of the
    given schemas"; ``error`` itself when no one branch is meant. jsonschema's ``best_match``
    does not choose here, since every branch takes a mapping.

    The branch meant is the one with the most of the mapping's keys among its ``properties``
    (less a half for each required ``enum``/``const`` key the mapping leaves out), among those
    whose ``enum``/``const`` keys (``builder: soup-digits``) the mapping satisfies; when the
    mapping satisfies none, and one key is what they all disagree on, the error names that key
    and every branch's choices for it."""
    branches_of = error.validator_value if error.validator in ("anyOf", "oneOf") else []
    if (
        branches_of
        and not isinstance(error.instance, dict)
        and all(isinstance(b, dict) and b.get("type") == "object" for b in branches_of)
    ):  # `soup-tiny: soup-digits`: every alternative is a block of keys
        return jsonschema.ValidationError(
            f"{error.instance!r} is not a block of keys (each kind here is one: see config/README.md)",
            validator="type",
            validator_value="object",
            instance=error.instance,
            path=list(error.absolute_path),
        )
    while error.validator in ("anyOf", "oneOf") and error.context and isinstance(error.instance, dict):
        branches: dict[int, list[jsonschema.ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        scores, missed = {}, {}
        for index, errors in branches.items():
            wrong = [e for e in errors if e.validator in ("enum", "const") and len(e.relative_path) == 1]
            for e in wrong:
                missed.setdefault(e.relative_path[0], []).append(e)
            if wrong or any(e.validator == "type" and not e.relative_path for e in errors):
                continue  # its discriminator (or the mapping's own type) does not match
            branch = error.validator_value[index]
            known = branch.get("properties", {})
            if score := sum(key in known for key in error.instance):
                # a required discriminator left out (`builder`) makes the branch less likely meant
                left_out = [k for k in branch.get("required", []) if k not in error.instance]
                scores[index] = score - 0.5 * sum({"enum", "const"} & set(known.get(k, {})) != set() for k in left_out)
        best = [index for index, score in scores.items() if score == max(scores.values())]
        if len(best) == 1:
            error = jsonschema.exceptions.best_match(branches[best[0]])
        elif not scores and len(missed) == 1:  # `builder: soup-digitz`: every builder's choices
            (key, errors), choices = next(iter(missed.items())), []
            for e in errors:
                for choice in e.validator_value if e.validator == "enum" else [e.validator_value]:
                    choices += [choice] if choice not in choices else []
            return jsonschema.ValidationError(
                f"{error.instance[key]!r} is not one of {choices!r}",
                validator="enum",
                validator_value=choices,
                instance=error.instance[key],
                path=[*error.absolute_path, key],
            )
        elif not missed:  # `{}`, only keys that no kind defines, or keys that several share
            return _no_kind_error(error)
        else:
            return error
    return error


def _no_kind_error(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """A mapping that says of no one branch of ``error`` (an ``anyOf``/``oneOf`` of blocks of
    keys) that it is meant (no keys, keys no branch defines, or keys several share): the error
    names those keys and what each kind needs, e.g.
    ``unknown key 'bogus': an entry needs the keys wheel, version and member; or builder: one of
    ['soup-digits', ...]``. Raises nothing; ``error`` must be an ``anyOf``/``oneOf`` error."""
    branches = error.validator_value
    unknown = [k for k in error.instance if not any(k in b.get("properties", {}) for b in branches)]
    kinds: list[str] = []
    choices: dict[str, list] = {}
    for branch in branches:
        known = branch.get("properties", {})
        discriminators = [k for k in branch.get("required", []) if {"enum", "const"} & set(known.get(k, {}))]
        for key in discriminators:
            values = known[key]["enum"] if "enum" in known[key] else [known[key]["const"]]
            choices.setdefault(key, []).extend(v for v in values if v not in choices[key])
        if not discriminators:
            *first, last = branch.get("required", [])
            kinds.append(f"the keys {', '.join(first)} and {last}" if first else f"the key {last}")
    kinds += [f"{key}: one of {values!r}" for key, values in choices.items()]
    names = ", ".join(map(repr, unknown or error.instance))
    if unknown:
        what = f"unknown key{'s' if len(unknown) > 1 else ''} {names}"
    elif error.instance:
        what = f"{names} alone {'does' if len(error.instance) == 1 else 'do'} not say which kind"
    else:
        what = "no keys"
    return jsonschema.ValidationError(
        f"{what}: an entry needs {'; or '.join(kinds)} (see config/README.md)",
        validator="required",
        validator_value=kinds,
        instance=error.instance,
        path=list(error.absolute_path),
    )


def _schema_error(error: jsonschema.ValidationError, layers: list[Layer], default: str) -> InputError:
    """One InputError for a schema violation; an unknown key is named itself, with the keys
    its block defines (and the nearest one, for a typo)."""
    path = list(error.absolute_path)
    message = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in error.schema.get("properties", {}))
        if extra:
            path.append(extra[0])
            close = difflib.get_close_matches(str(extra[0]), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            message = f"unknown key{hint} (this block takes: {', '.join(allowed)})"
    elif error.validator in _TYPE_CHECKS and (hint := _type_hint(error, path, layers)):
        message = hint
    field = ".".join(str(p) for p in path) or None  # None: the config as a whole
    return InputError(source_of(path, layers, default), field, message)


def check_recipe(name: str, task: dict, recipes_root: Path, source: str) -> None:
    """``recipe.profile`` and ``recipe.overrides`` against the shipped recipe
    ``recipes/<task>/configs/<profile>.yaml``: every run of the task gets the overrides, the
    shipped reference too, so each must be a knob of the shipped profile with a value of the
    same kind (:func:`replaykit.harness.replay.check_overrides`; strings that spell a number
    or boolean, as ``--config`` and YAML's ``2e-4`` give, are converted in ``task`` first).
    A candidate whose patch changes that profile is checked again when its replay starts,
    on the patched workspace; a knob only the candidate has is set in its patched profile.

    Raises:
        InputError: naming ``source`` and ``tasks.<task>.recipe.profile`` or
            ``tasks.<task>.recipe.overrides.<key>``.
    """
    from .harness.replay import check_overrides
    from .harness.workspace import patch_paths

    recipe = task.get("recipe") or {}
    profile = recipe.get("profile", "embedded")
    overrides = recipe.get("overrides") or {}
    shipped = recipes_root / name
    profile_file = shipped / "configs" / f"{profile}.yaml"
    patched_profile = False
    for patch in (task.get("candidates") or {}).values():
        try:
            patched_profile |= f"configs/{profile}.yaml" in patch_paths(patch)
        except InputError:
            pass  # a malformed patch is refused, naming its line, by the workspace rule
    if not profile_file.is_file() and patched_profile:
        return  # a profile only candidates have: checked on their workspaces when they start
    if not profile_file.is_file():
        profiles = sorted(p.stem for p in (shipped / "configs").glob("*.yaml"))
        raise InputError(
            source,
            f"tasks.{name}.recipe.profile",
            f"{profile!r} is not a profile of the shipped recipe (recipes/{name}/configs/: {', '.join(profiles)})",
        )
    try:
        check_overrides(shipped, profile, overrides, coerce=True)
    except InputError as exc:
        if exc.field is None:  # the shipped profile file as a whole (not YAML, not a mapping)
            raise
        if not exc.message.startswith("not a key of"):
            raise InputError(source, f"tasks.{name}.{exc.field}", exc.message) from None
        raise InputError(
            source,
            f"tasks.{name}.{exc.field}",
            f"not a key of the shipped recipe's recipes/{name}/configs/{profile}.yaml (overrides apply to "
            "every run, the shipped reference too; a knob only a candidate has is set in its patched profile "
            "and its train.py's knobs dataclass)",
        ) from None


def check_config(
    config: dict,
    schema_file: str | Path,
    source: str,
    layers: list[Layer] | None = None,
    recipes_root: str | Path | None = None,
) -> None:
    """Validate ``config`` against the JSON schema, then the rules a schema cannot state.

    Args:
        config: the merged workflow config.
        schema_file: ``config/schema.yaml`` (plus registered tasks' blocks: :func:`config_schema`).
        source: the name used when ``layers`` cannot tell where a value came from.
        layers: ``(source name, mapping)`` of each config source, lowest priority first, so
            that an error names the file (or ``--config``) its value came from.
        recipes_root: the ``recipes/`` folder; when given, ``recipe.profile`` and
            ``recipe.overrides`` are checked against the shipped recipes.

    Raises:
        InputError: naming the source and the first offending field (``tasks.dpo.budget.outer_limit_s``).
    """
    layers = layers or [(source, config)]
    if recipes_root is not None:
        _check_config_files_outside(Path(recipes_root), [name for name, _ in layers])
    schema = config_schema(schema_file, config)
    error = jsonschema.exceptions.best_match(_ConfigValidator(schema).iter_errors(config))
    if error is not None:
        raise _schema_error(_branch_error(error), layers, source)
    _check_paths(config, layers, source)
    from .tasks import get_task

    for name, task in config["tasks"].items():

        def src(*keys, _name=name):
            return source_of(["tasks", _name, *keys], layers, source)

        plugin = get_task(name)
        try:
            plugin.check_data(task["data"])
        except KeyError as exc:
            raise InputError(src("data"), f"tasks.{name}.data.{exc.args[0]}", "required key missing") from None
        except ValueError as exc:
            key, _, message = str(exc).partition(": ")
            raise InputError(src("data", key), f"tasks.{name}.data.{key}", message) from None
        for cand, patch in task.get("candidates", {}).items():
            _check_patch(patch, src("candidates", cand), f"tasks.{name}.candidates.{cand}")
        try:
            Budget.from_config(task["budget"])
        except ValueError as exc:
            raise InputError(src("budget"), f"tasks.{name}.budget", str(exc)) from None
        fixed_start = task["fixed_start"]
        if fixed_start not in config.get("models", {}) and (problem := unexpanded_path(fixed_start)):
            raise InputError(src("fixed_start"), f"tasks.{name}.fixed_start", problem)
        if fixed_start not in config.get("models", {}) and not any(
            (Path(fixed_start) / f).is_file() for f in ("config.json", "model_index.json")
        ):  # HF model / diffusers pipeline
            raise InputError(
                src("fixed_start"),
                f"tasks.{name}.fixed_start",
                f"{fixed_start!r} is neither a name in models nor a model directory with "
                "config.json "
                "(or a diffusers pipeline with model_index.json)",
            )
        if plugin.check_fixed_start is not None and fixed_start not in config.get("models", {}):
            plugin.check_fixed_start(fixed_start)  # InputError naming the fixed start's file
        candidate = task.get("candidate", "shipped")
        if candidate != "shipped" and candidate not in task.get("candidates", {}):
            raise InputError(
                src("candidate"),
                f"tasks.{name}.candidate",
                f"{candidate!r} is not a key of candidates",
            )
        if recipes_root is not None:
            try:
                check_recipe(name, task, Path(recipes_root), source)
            except InputError as exc:
                keys = exc.field.split(".")[2:] if (exc.field or "").startswith("tasks.") else []
                raise InputError(src(*keys) if keys else exc.path, exc.field, exc.message) from None
    check_campaign(config, layers, source)


def _check_config_files_outside(recipes_root: Path, names: list[str]) -> None:
    """No config file in use lies in ``recipes_root``: every workspace (a replay's, an
    exploration's) is a copy of ``recipes/<task>/``, which candidate code reads, and the
    sandbox's masks go by path, so they would not hide the copy (hostile, 2026-12-05: a config
    holding ``final_salt`` in ``recipes/soup/``). Raises :class:`InputError` naming the file."""
    root = recipes_root.resolve()
    for name in names:
        if name != CLI and Path(name).is_file() and root in Path(name).resolve().parents:
            raise InputError(
                name,
                None,
                f"a config file in use lies in {recipes_root}/, which every workspace copies for candidate "
                "code to read (it can hold final_salt); keep config files outside it",
            )


def _check_patch(patch: str, path: str, field: str) -> None:
    """A candidate's patch file (``path``/``field``: where the config names it) exists, and its
    exploration sidecar, when there is one, is well formed: a malformed one stops the workflow
    here, not the replay after training. Raises :class:`InputError`."""
    if problem := unexpanded_path(patch):
        raise InputError(path, field, problem)
    if not Path(patch).is_file():
        raise InputError(path, field, f"patch file {patch!r} not found")
    if sidecar(patch).is_file():
        read_sidecar(sidecar(patch), sha256_file(patch))


def _check_paths(config: dict, layers: list[Layer], source: str) -> None:
    """What the schema lets through: a ``workdir`` that is a file or the root, a relative ``gpus.lock_dir``
    (each checkout would lock its own copy of a GPU) and a ``~`` or ``$HOME`` path, which
    nothing here expands (:func:`unexpanded_path`). A seed written ``42.0`` (it would name the
    run ``...-seed42.0``) is refused by the schema check's integer type (``_ConfigValidator``)."""
    workdir = config.get("workdir")
    if isinstance(workdir, str) and Path(workdir).exists() and not Path(workdir).is_dir():
        raise InputError(source_of(["workdir"], layers, source), "workdir", f"{workdir!r} is a file, not a folder")
    if isinstance(workdir, str) and workdir.strip() and os.path.realpath(workdir) == "/":
        raise InputError(
            source_of(["workdir"], layers, source),
            "workdir",
            f"{workdir!r} is the file system's root: results/, logs/ and .snakemake/ would lie beside /usr "
            "and /etc, and the sandbox cannot hide it as it hides any other working directory; name a folder",
        )
    for keys in (["workdir"], ["gpus", "lock_dir"]):
        value = functools.reduce(lambda node, key: (node or {}).get(key), keys, config)
        if isinstance(value, str) and (problem := unexpanded_path(value)):
            raise InputError(source_of(keys, layers, source), ".".join(keys), problem)
    lock_dir = (config.get("gpus") or {}).get("lock_dir")
    if isinstance(lock_dir, str) and not Path(lock_dir).is_absolute():
        raise InputError(
            source_of(["gpus", "lock_dir"], layers, source),
            "gpus.lock_dir",
            f"{lock_dir!r} is not an absolute path: every workflow and exploration on the host must find "
            "the same locks (a relative one is a separate lock folder per checkout, and two of them "
            "would share a GPU); leave the key out for the default",
        )


def check_campaign(config: dict, layers: list[Layer], source: str) -> None:
    """``campaign.tasks``: each a configured task with at least one candidate, none twice.

    Raises:
        InputError: naming the source and ``campaign.tasks``.
    """
    listed = config.get("campaign", {}).get("tasks", [])
    where = source_of(["campaign", "tasks"], layers, source)
    for name in listed:
        if name not in config["tasks"]:
            configured = ", ".join(sorted(config["tasks"]))
            raise InputError(where, "campaign.tasks", f"{name!r} is not a configured task (tasks: {configured})")
        if not config["tasks"][name].get("candidates"):
            raise InputError(where, "campaign.tasks", f"{name!r} has no candidates (tasks.{name}.candidates)")
    if len(set(listed)) != len(listed):
        raise InputError(where, "campaign.tasks", f"a task is listed twice: {listed}")


def profile_files(argv: list[str], snakefile: str | Path) -> list[Path]:
    """The profile files Snakemake reads for command line ``argv`` (``--profile`` entries or
    ``$SNAKEMAKE_PROFILE``, then the workflow profile: ``--workflow-profile``, by default
    ``profiles/default`` here or beside ``snakefile``), found as ``snakemake.cli.parse_args``
    finds them, with its own ``get_profile_dir``. Their ``config:`` blocks reach the workflow
    as values already read by YAML 1.1, so the Snakefile checks them as files
    (:func:`~replaykit.harness.yamlfile.check_plain_numbers`)."""
    from snakemake.cli import get_argument_parser, get_profile_dir
    from snakemake.exceptions import CliException

    try:
        args, _ = get_argument_parser().parse_known_args(argv)
    except (SystemExit, CliException):  # not Snakemake's command line (run through its Python API)
        return []
    names = [str(p) for p in (args.profile or []) if str(p) != "none"]
    if args.workflow_profile != "none":
        wanted = Path(args.workflow_profile or "default")
        candidates = [wanted, Path("profiles") / wanted, Path(snakefile).parent / "profiles" / wanted]
        names += [str(c) for c in candidates if c.exists()][:1]
    found = (get_profile_dir(name) for name in names)
    return [hit[1] for hit in found if hit is not None]


def check_repeated_options(argv: list[str]) -> None:
    """Refuse a Snakemake option that takes a list of values (``--configfile``, ``--config``,
    ``--resources``, ``--set-threads``, ...) given more than once in command line ``argv``:
    Snakemake's parser keeps the last occurrence's values and drops the earlier ones without a
    word (``--configfile a.yaml --configfile b.yaml`` reads b.yaml only; ``--resources gpu=1
    --resources mem_mb=9000`` loses the gpu). Long options match as argparse matches them
    (``--opt=value``, a unique prefix such as ``--configf``), short ones also attached or
    after flags (``-Cb=2``, ``-pC a=1``).

    Raises:
        InputError: ``command line: <option>: given N times ...``.
    """
    import argparse

    from snakemake.cli import get_argument_parser

    actions = get_argument_parser()._actions
    listed = [
        a for a in actions if a.option_strings and a.nargs in ("+", "*") and not isinstance(a, argparse._AppendAction)
    ]
    longs = {name: a for a in actions for name in a.option_strings if name.startswith("--")}
    shorts = {name: a for a in actions for name in a.option_strings if len(name) == 2}
    seen: dict[int, list[str]] = {}
    for token in argv:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if name.startswith("--"):
            prefixed = {id(a): a for n, a in longs.items() if n.startswith(name)}
            found = [longs.get(name) or (next(iter(prefixed.values())) if len(prefixed) == 1 else None)]
        elif token.startswith("-") and len(token) > 1:
            found = []  # -C a=1, -Cb=2, -pC a=1: flags, then at most one option that takes a value
            for char in token[1:]:
                action = shorts.get(f"-{char}")
                found.append(action)
                if action is None or action.nargs != 0:
                    break
        else:
            found = []
        for action in found:
            if action in listed:
                seen.setdefault(id(action), []).append(token)
    for action in listed:
        given = seen.get(id(action), [])
        if len(given) > 1:
            name = action.option_strings[0]
            raise InputError(
                "command line",
                name,
                f"given {len(given)} times: Snakemake keeps the values after the last one and drops the "
                f"others without a word; give all of them after one {name}",
            )


def load_workflow_config(configfiles: list[str | Path], schema_file: str | Path, recipes_root: Path | None = None):
    """The workflow config as Snakemake builds it: each file of ``configfiles`` (the Snakefile's
    ``config/config.yaml`` first, then each ``--configfile``) merged over the ones before it
    (mappings key by key, other values replaced: ``snakemake.utils.update_config``), checked
    (:func:`check_config`, naming the file a bad value came from) and defaults filled.

    Returns ``(config, layers)``. Raises :class:`InputError`: a missing file (naming it), a
    duplicate key, or what :func:`check_config` refuses.
    """
    from snakemake.utils import update_config

    config, layers = {}, []
    for path in map(Path, configfiles):
        if not path.is_file():
            raise InputError(path, None, "config file not found")
        mapping = load_yaml_strict(path) or {}
        layers.append((str(path), copy.deepcopy(mapping)))
        update_config(config, mapping)
    source = " + ".join(name for name, _ in layers)
    check_config(config, schema_file, source, layers=layers, recipes_root=recipes_root)
    fill_defaults(config, config_schema(schema_file, config))
    return config, layers


def rebase_paths(config: dict, start: Path, workdir: Path) -> None:
    """Rewrite (in place) the config's relative local paths, read from ``start`` (where snakemake
    started), as paths relative to ``workdir`` (the ``workdir`` the workflow changes to, relative
    to ``start``): each task's ``fixed_start`` (unless it names a built model), its ``data``
    values that name an existing path, its ``candidates``, and ``sandbox_show`` /
    ``sandbox_hide``. Absolute paths and other values are left as they are."""
    import os

    def moved(value: str) -> str:
        if Path(value).is_absolute():
            return value
        return os.path.relpath(start / value, start / workdir)

    for key in ("sandbox_show", "sandbox_hide"):
        config[key] = [moved(v) for v in config.get(key, [])]
    for task in config["tasks"].values():
        if task["fixed_start"] not in config.get("models", {}):
            task["fixed_start"] = moved(task["fixed_start"])
        task["candidates"] = {name: moved(path) for name, path in task.get("candidates", {}).items()}
        for key, value in task.get("data", {}).items():
            if isinstance(value, str) and value and (start / value).exists():
                task["data"][key] = moved(value)
