"""Workflow config files as YAML, read strictly: a key given twice in one mapping, or a number
written in a YAML 1.1 form that reads as another number, is an :class:`InputError` naming the
file and line, where PyYAML would keep the last key or the other number silently.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from .errors import InputError


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last) and a
    number in a YAML 1.1 form that reads as another number (:func:`_plain_number`)."""


def _mapping_without_duplicates(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: explicit keys override it
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise InputError(
                node.start_mark.name,
                f"line {key_node.start_mark.line + 1}",
                f"key {key!r} given twice in one mapping (first on line {seen[key]})",
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
# `2e-4`, `3e2`: a number in exponent form that YAML 1.1 leaves a string (it wants `2.0e-4`)
EXPONENT_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def _plain_number(loader, node):
    """A number as written, or InputError for the YAML 1.1 forms that read as another number.

    PyYAML follows YAML 1.1: ``042`` is octal 34, ``0x2A`` and ``0b101010`` are 42, ``1_000`` is
    1000 and ``1:30`` is sexagesimal 90 (floats too: ``1_0.5``, ``1:30.5``). A seed or a step
    count written so would silently become another number (``seeds: [042]`` ran seed 34), so
    only plain decimal integers and floats without ``_`` or ``:`` are accepted; a quoted value
    stays a string. A tagged value that is no number (``!!int "1e5"``) is an InputError too.
    """
    text = node.value
    where = f"line {node.start_mark.line + 1}"
    integer = node.tag.endswith(":int")
    try:
        value = loader.construct_yaml_int(node) if integer else loader.construct_yaml_float(node)
    except (ValueError, IndexError) as exc:  # `!!int "1e5"`, `!!float ""`
        raise InputError(node.start_mark.name, where, f"{text!r} is not a number ({exc})") from None
    plain = bool(_PLAIN_INT.fullmatch(text)) if integer else "_" not in text and ":" not in text
    if not plain:
        raise InputError(
            node.start_mark.name,
            where,
            f"{text!r} is read by YAML 1.1 as {value!r}: write the number in plain decimal digits "
            "(no leading zero, '_', ':', 0x or 0b), or quote it for a string",
        )
    return value


def check_plain_numbers(path: str | Path, key: str, name: str | None = None) -> None:
    """Refuse, as :func:`load_yaml_strict` would, the numbers under top-level ``key`` of YAML file
    ``path`` that YAML 1.1 reads as another number: for files that another program parses (a
    Snakemake profile's ``config:``, which reaches the workflow as numbers already read).

    Raises:
        InputError: ``<name>: line <n>: '042' is read by YAML 1.1 as 34 ...`` (``name``
            defaults to ``path``), or the parser's message for YAML that does not parse.
    """
    name = str(path) if name is None else name
    try:
        with open(path) as handle:
            root = yaml.compose(handle, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = f"line {exc.problem_mark.line + 1}" if exc.problem_mark else None
        raise InputError(name, line, str(exc.problem)) from None
    if not isinstance(root, yaml.MappingNode):
        return
    loader = _StrictLoader("")
    todo = [value for k, value in root.value if isinstance(k, yaml.ScalarNode) and k.value == key]
    while todo:
        node = todo.pop()
        if isinstance(node, yaml.MappingNode):
            todo.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
        elif node.tag.endswith((":int", ":float")):
            try:
                _plain_number(loader, node)
            except InputError as exc:
                raise InputError(name, exc.field, exc.message) from None


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _plain_number)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _plain_number)


def load_yaml_text(text: str):
    """``text`` parsed as :func:`load_yaml_strict` parses a file (no duplicate keys, plain
    decimal numbers only). Raises InputError (its path ``<unicode string>``) or YAMLError."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except (ValueError, KeyError, AttributeError, TypeError) as exc:  # a tag's constructor: `!!bool maybe`
        raise InputError("<unicode string>", None, f"not valid YAML ({type(exc).__name__}: {exc})") from None


def load_yaml_strict(path: str | Path, name: str | None = None):
    """Parse a YAML file, refusing duplicate keys; errors name the file as ``name``
    (default: ``path``).

    Raises:
        InputError: ``<path>: line <n>: key 'k' given twice ...``, ``<path>: line <n>: '042' is
            read by YAML 1.1 as 34 ...`` or the parser's message for YAML that does not parse.
    """
    name = str(path) if name is None else name
    try:
        with open(path) as handle:
            return yaml.load(handle, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except InputError as exc:
        raise InputError(name, exc.field, exc.message) from None
    except yaml.MarkedYAMLError as exc:
        line = f"line {exc.problem_mark.line + 1}" if exc.problem_mark else None
        raise InputError(name, line, str(exc.problem)) from None
    except (ValueError, KeyError, AttributeError, TypeError) as exc:  # a tag's constructor: `!!bool maybe`
        raise InputError(name, None, f"not valid YAML for a config ({type(exc).__name__}: {exc})") from None
