"""The task contract: every member a task plug-in (``replaykit.tasks.<name>``) defines, what it
means, and the defaults of the optional ones, declared once here.

A plug-in is a subpackage of :mod:`replaykit.tasks` (any but ``common``, the helpers tasks
share) or a module registered by an entry point (:data:`replaykit.tasks.ENTRY_POINT_GROUP`);
its ``__init__`` (or the module) defines the members below as module attributes. :func:`load` reads
them into a :class:`TaskPlugin`, fills in the defaults and refuses a plug-in that lacks a
required member or gives one of the wrong kind, with one :class:`ContractError` naming every
problem. The harness, the CLI, the report and the rules read plug-ins only through
:class:`TaskPlugin` (:func:`replaykit.tasks.get_task`), never with ``getattr`` defaults.

Members are named in the plug-in exactly as the fields below (constants in capitals,
functions in lower case). Their imports are the plug-in's business, but parsing the workflow
reads every configured plug-in: keep its ``__init__`` free of heavy imports (torch,
transformers) and import them inside the functions (see README, "adding a task").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import ModuleType

from ..harness.errors import InputError

DIRECTIONS = ("maximize", "minimize")
# Defaults of the optional METRIC keys.
METRIC_DEFAULTS = {"scale": 1.0, "uncertainty": "binomial_se"}


class ContractError(InputError):
    """A plug-in that does not satisfy the contract: ``<plug-in file>: <members>: <what>``."""


def _member(doc: str, default=MISSING, kind: str = "value"):
    """A contract field: ``doc`` states its meaning, shape and units; ``kind`` is ``value``,
    ``function`` or ``optional function`` (checked to be callable when given). A mapping
    default is given as ``dict`` (a fresh empty one each time)."""
    if default is dict:
        return field(default_factory=dict, metadata={"doc": doc, "kind": kind})
    return field(default=default, metadata={"doc": doc, "kind": kind})


def _required(f) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


@dataclass(frozen=True, kw_only=True)
class TaskPlugin:
    """One task's plug-in, as the harness sees it. Required members have no default."""

    name: str = field(
        metadata={"doc": "the task's name (= its subpackage or entry point, and its config key)", "kind": "name"}
    )
    module: ModuleType = field(repr=False, metadata={"doc": "the plug-in module", "kind": "name"})

    # --- what is scored, and how ---------------------------------------------------------
    METRIC: Mapping = _member(
        "``{'final': name, 'proxy': name, 'direction': 'maximize'|'minimize'}``; a name may contain "
        "``{n}`` (filled with the number of scored rows) and other fields the evaluator fills. "
        "Optional keys: ``scale`` (metric units per unit of a row's ``score``, e.g. 100 for "
        "percent; default 1.0) and ``uncertainty`` (the kind of the SE; default 'binomial_se')."
    )
    REPORT_DIAGNOSTICS: tuple[str, ...] = _member(
        "keys of the final summary's ``diagnostics`` shown as report columns", default=()
    )
    TRAINING_CURVE: str | None = _member(
        "the key of the replay record's per-step ``history`` the report plots (None: ``loss``, "
        "else the first numeric key)",
        default=None,
    )
    ROW_CLUSTER: str | None = _member(
        "the row field naming a row's cluster when the uncertainty is clustered (soup: "
        "``label``); the matched ablation's bootstrap then draws whole clusters. None: rows "
        "are independent",
        default=None,
    )
    FIXED_START_REFERENCE: bool = _member(
        "False when the fixed start cannot be scored by itself (rm: no reward head; digress: "
        "the fixed start is the method): no fixed-start reference, no normalised score",
        default=True,
    )
    REFERENCE_USES_PUBLIC: bool = _member(
        "True when the fixed-start reference selects on the public split (soup: the best "
        "ingredient by proxy accuracy); the public split is then an input of that rule",
        default=False,
    )

    # --- isolation (required: forgetting one must not silently show final-split items) ---
    FINAL_SOURCES: tuple[str, ...] = _member(
        "keys of ``tasks.<task>.data`` whose local paths hold final-split items: the replay "
        "sandbox hides them (other existing paths in ``data`` are shown read-only)"
    )
    FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = _member(
        "``(package, path inside it)`` of installed data files holding final-split items (soup: "
        "scikit-learn's digits): the replay sandbox hides them"
    )
    FIXED_START_IS_DATA: bool = _member(
        "True when the fixed start is raw data whose complement is the test split (digress's "
        "QM9 CSVs): the replay sandbox does not show it"
    )

    FINAL_ITEM_FIELDS: Mapping = _member(
        "what identifies a final-split row, for the audit's search of patches and explorations "
        "(:mod:`replaykit.harness.audit.items`): ``{'text': fields of natural-language text, "
        "'token': fields of exact identifiers (ids, SMILES, seeds), 'file': fields naming a file "
        "whose SHA-256 identifies the item, 'label': a field identifying the item beside its id}``. "
        "Default: the ``id`` field as a token",
        default=dict,
    )

    # --- the config block -----------------------------------------------------------------
    CONFIG_SCHEMA: Mapping | None = _member(
        "the task's own keys of its config block ``tasks.<task>``, as JSON Schema (draft 2020-12) "
        "dicts: at least ``data`` (checked again by ``check_data``) and ``evaluation`` (the "
        "evaluator's cfg; needs a ``runtime`` in minutes with a default, which the scoring rules "
        "read), optionally ``validation`` (else ``{dtype, runtime}``); ``$ref: '#/$defs/<name>'`` "
        "reaches the shared definitions of config/schema.yaml (fixed_start, budget, source, dtype, "
        "runtime, ...). The block is ``$defs/task_block`` of config/schema.yaml (fixed_start, "
        "budget, seeds, recipe, candidates, ...) with these keys in place "
        "(:func:`replaykit.config.config_schema`). None: the block is in config/schema.yaml "
        "(the shipped tasks); a plug-in registered by an entry point must give it",
        default=None,
    )

    # --- the fixed start ------------------------------------------------------------------
    FIXED_START_BUILDERS: Mapping[str, str] = _member(
        "builder name (``models.<name>.builder`` in the config) -> module, relative to the plug-in "
        "(``.ingredients``), whose ``build(spec, out, log=print[, final_salt]) -> dict`` makes "
        "the fixed start in folder ``out`` and returns its build summary (a ``private`` key: "
        "what the builder knows of the final split, kept out of the fixed start)",
        default=dict,
    )
    check_fixed_start: Callable | None = _member(
        "``check_fixed_start(path)``: workflow-start check of a local fixed start (soup: "
        "aligned ingredient heads; ddpo: the scheduler config); raises InputError",
        default=None,
        kind="optional function",
    )

    # --- the four parts -------------------------------------------------------------------
    check_data: Callable = _member(
        "``check_data(data)``: config check of ``tasks.<task>.data`` when the workflow starts; "
        "``KeyError(key)`` for a missing key, ``ValueError('key: message')`` for a bad value, "
        "InputError for a bad row of a local file",
        kind="function",
    )
    build_assets: Callable = _member(
        "``build_assets(cfg, fixed_start, public_dir, hidden_dir) -> dict``: writes the task's "
        "data (public: training + proxy items; hidden: the final split) and returns extra "
        "manifest fields; InputError for bad input",
        kind="function",
    )
    split_file: Callable = _member(
        "``split_file(split) -> str``: the proxy / final items' path relative to the assets "
        "folder (``split``: 'proxy' or 'final')",
        kind="function",
    )
    validate: Callable = _member(
        "``validate(checkpoint, fixed_start, cfg) -> {valid, reason, checks}``: the frozen "
        "loader's verdict; never raises for a bad checkpoint",
        kind="function",
    )
    evaluate: Callable = _member(
        "``evaluate(checkpoint, fixed_start, items_file, metric, cfg) -> (summary, rows)``: the "
        "frozen evaluator (``checkpoint`` None: the fixed start itself; ``metric``: the name "
        "pattern from METRIC); ``rows`` carry a unique ``id`` and a numeric ``score`` (paired "
        "statistics), optionally a ``weight`` (share of the metric) and a ``stratum`` "
        "(resampled within)",
        kind="function",
    )
    plot_diagnostics: Callable | None = _member(
        "``plot_diagnostics(fig, summary, docs, fixed_start) -> title``: the task's diagnostic "
        "figure in the report (``fixed_start``: the fixed-start reference's summary or None)",
        default=None,
        kind="optional function",
    )

    def builder_module(self, builder: str) -> str:
        """The absolute module name of one of :attr:`FIXED_START_BUILDERS`."""
        rel = self.FIXED_START_BUILDERS[builder]
        return f"{self.module.__name__}{rel}" if rel.startswith(".") else rel


MEMBERS = tuple(f for f in fields(TaskPlugin) if f.metadata["kind"] != "name")
REQUIRED = tuple(f.name for f in MEMBERS if _required(f))


def _problem(name: str, kind: str, value) -> str | None:
    """What is wrong with one member's value, or None."""
    if kind == "function":
        return None if callable(value) else "not callable"
    if kind == "optional function":
        return None if value is None or callable(value) else "not callable"
    if name == "METRIC":
        if not isinstance(value, Mapping):
            return "not a mapping"
        missing = [k for k in ("final", "proxy", "direction") if k not in value]
        if missing:
            return f"lacks {', '.join(missing)}"
        if value["direction"] not in DIRECTIONS:
            return f"direction {value['direction']!r} is not one of {', '.join(DIRECTIONS)}"
    elif name in ("REPORT_DIAGNOSTICS", "FINAL_SOURCES"):
        if not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
            return "not a tuple of strings"
    elif name == "FINAL_PACKAGE_DATA":
        if not (isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 for v in value)):
            return "not a tuple of (package, path) pairs"
    elif name in ("FIXED_START_IS_DATA", "FIXED_START_REFERENCE", "REFERENCE_USES_PUBLIC"):
        if not isinstance(value, bool):
            return "not a bool"
    elif name in ("TRAINING_CURVE", "ROW_CLUSTER"):
        if not (value is None or isinstance(value, str)):
            return "not a string or None"
    elif name == "CONFIG_SCHEMA":
        if value is None:
            return None
        if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
            return "not a mapping of block key -> JSON schema (a mapping)"
        missing = [k for k in ("data", "evaluation") if k not in value]
        if missing:
            return f"lacks {', '.join(missing)}"
    elif name == "FINAL_ITEM_FIELDS":
        kinds = {"text": tuple, "token": tuple, "file": tuple, "label": str}
        if not isinstance(value, Mapping) or any(
            k not in kinds or not isinstance(v, kinds[k]) for k, v in value.items()
        ):
            return "not a mapping of text/token/file -> tuple of field names and label -> field name"
    elif name == "FIXED_START_BUILDERS":
        if not (isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())):
            return "not a mapping of builder name -> module"
    return None


def load(name: str, module: ModuleType) -> TaskPlugin:
    """The :class:`TaskPlugin` of ``module``, defaults filled in.

    Raises:
        ContractError: naming the plug-in's file, every missing required member and every
            member of the wrong kind, in one line.
    """
    values, missing, wrong = {}, [], []
    for f in MEMBERS:
        if hasattr(module, f.name):
            value = getattr(module, f.name)
            problem = _problem(f.name, f.metadata["kind"], value)
            if problem:
                wrong.append(f"{f.name} {problem}")
            values[f.name] = value
        elif _required(f):
            missing.append(f.name)
    if missing or wrong:
        where = Path(module.__file__ or module.__name__)
        parts = [f"missing required member{'s' if len(missing) > 1 else ''} {', '.join(missing)}"] if missing else []
        raise ContractError(
            where,
            ", ".join(missing + [w.split()[0] for w in wrong]),
            "; ".join(parts + wrong) + f" (the task contract of {__name__}; plug-in {name!r})",
        )
    values["METRIC"] = {**METRIC_DEFAULTS, **values["METRIC"]}
    return TaskPlugin(name=name, module=module, **values)


def describe() -> str:
    """The contract as text, one member a paragraph (for documentation and error hints)."""
    lines = []
    for f in MEMBERS:
        default = {} if f.default is MISSING else f.default
        need = "required" if _required(f) else f"optional, default {default!r}"
        lines.append(f"{f.name} ({need}): {f.metadata['doc']}")
    return "\n\n".join(lines)
