"""Decision rules of matched ablations, fixed before the candidate's first replay (issue 30).

A decision rule says how an ablation's verdict will be drawn before any number of it exists:
the task's final metric and its direction, the seeds, α (the CI is two-sided at 1 − α), the
comparison (which checkpoint of each run: ``official``, ``proxy_selected`` or ``last``) and
the hypothesis with its margin (``superiority``: the gain must exceed the margin, 0 by
default; ``non-inferiority``: the loss must stay below a positive margin, for a change meant to
be cheaper rather than better). Its SHA-256 is that of its canonical JSON (:func:`rule_sha256`).

Files, in ``results/<task>/decision-rules/``:

* ``<candidate>.json`` -- ``{"rule", "sha256", "written_unix", "written_at"}``, written by the
  workflow's ``decision_rule`` rule from the config (``tasks.<task>.ablation.decision`` and
  ``decisions.<candidate>``). Every replay of the candidate waits for it: it is an ``ancient``
  input of the replay, which orders the jobs and reruns nothing when the rule changes later
  (the shipped runs, shared by every candidate, never depend on it). A changed config key
  reruns ``decision_rule`` (its params) and, downstream, the ablation, never a replay.
* ``<candidate>.history.jsonl`` -- one line per write, ``{"sha256", "written_unix",
  "written_at", "rule"}``, appended; not a declared output, so Snakemake never removes it.

Checked from the receipts (:func:`rule_receipt`): the version in force when the candidate's
first replay started -- the last history line written before the earliest first attempt
(``attempts[0].started_unix`` of the runs' replay records) -- and whether it is the rule the
verdict is judged against. A rule changed after that start gets a new hash, and the reports
say so.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json
from .hashing import sha256_bytes

COMPARISONS = ("official", "proxy_selected", "last")
HYPOTHESES = ("superiority", "non-inferiority")
DEFAULTS = {"alpha": 0.05, "comparison": "official", "hypothesis": "superiority", "margin": 0.0}
FIELDS = ("task", "candidate", "metric", "direction", "seeds", *DEFAULTS)


def rule_from_config(task: str, candidate: str, ablation_cfg: dict, seeds: list[int], metric: dict) -> dict:
    """The decision rule of ``candidate`` from its task's config: ``ablation.decision`` (the
    task's default) updated by ``ablation.decisions.<candidate>``; ``metric``: the plug-in's
    ``METRIC`` (its final metric name pattern and direction)."""
    chosen = {**DEFAULTS, **ablation_cfg.get("decision", {}), **ablation_cfg.get("decisions", {}).get(candidate, {})}
    return {
        "task": task,
        "candidate": candidate,
        "metric": metric["final"],
        "direction": metric["direction"],
        "seeds": [int(s) for s in seeds],
        "alpha": float(chosen["alpha"]),
        "comparison": chosen["comparison"],
        "hypothesis": chosen["hypothesis"],
        "margin": float(chosen["margin"]),
    }


def rule_sha256(rule: dict) -> str:
    """SHA-256 of the rule's canonical JSON (keys sorted, no spaces, ASCII): the same rule
    always hashes the same, whenever and however often it is written."""
    return sha256_bytes(json.dumps(rule, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii"))


def check_rule(rule: dict, where: str | Path) -> dict:
    """``rule`` if it is a whole decision rule; otherwise :class:`InputError` naming ``where``
    and the field (unknown or missing key, α outside (0, 1), a negative margin, non-inferiority
    without a positive margin, no seeds, an unknown comparison, hypothesis or direction)."""
    keys = set(rule) if isinstance(rule, dict) else set()
    for key in sorted(set(FIELDS) ^ keys):
        raise InputError(where, f"rule.{key}", "missing" if key in FIELDS else "not a decision-rule field")
    checks = {
        "alpha": isinstance(rule["alpha"], float) and 0 < rule["alpha"] < 1,
        "comparison": rule["comparison"] in COMPARISONS,
        "hypothesis": rule["hypothesis"] in HYPOTHESES,
        "direction": rule["direction"] in ("maximize", "minimize"),
        "seeds": isinstance(rule["seeds"], list) and bool(rule["seeds"]),
        "margin": isinstance(rule["margin"], float)
        and rule["margin"] >= 0
        and (rule["hypothesis"] != "non-inferiority" or rule["margin"] > 0),
    }
    for key, ok in checks.items():
        if not ok:
            raise InputError(where, f"rule.{key}", f"invalid value {rule[key]!r} ({_ALLOWED[key]})")
    return rule


_ALLOWED = {
    "alpha": "a number between 0 and 1",
    "comparison": "one of " + ", ".join(COMPARISONS),
    "hypothesis": "one of " + ", ".join(HYPOTHESES),
    "direction": "maximize or minimize",
    "seeds": "a non-empty list",
    "margin": "a number >= 0, > 0 for non-inferiority",
}


def history_path(rule_path: str | Path) -> Path:
    """``<candidate>.history.jsonl`` beside ``<candidate>.json``."""
    return Path(rule_path).with_suffix(".history.jsonl")


def write_rule(rule: dict, out: str | Path, now: float | None = None) -> dict:
    """Write the decision rule to ``out`` (atomically) and append its version to the history
    beside it. Returns the document written. Raises :class:`InputError` for a bad rule
    (nothing is written then)."""
    check_rule(rule, out)
    written = time.time() if now is None else now
    doc = {
        "rule": rule,
        "sha256": rule_sha256(rule),
        "written_unix": written,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(written)),
    }
    line = json.dumps(doc, sort_keys=True) + "\n"
    history = history_path(out)
    history.parent.mkdir(parents=True, exist_ok=True)
    with open(history, "a", encoding="utf-8") as handle:  # appended first: no rule without its line
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    atomic_write_json(out, doc)
    return doc


def read_rule(path: str | Path) -> dict:
    """The decision-rule document at ``path`` with its ``sha256`` recomputed from the rule (a
    rule edited by hand gets its own hash, and ``hand_edited: true``). Raises
    :class:`InputError` for a missing file or a bad rule."""
    doc = read_json(path, required=("rule", "written_unix"))
    check_rule(doc["rule"], path)
    sha = rule_sha256(doc["rule"])
    return {**doc, "sha256": sha, "hand_edited": doc.get("sha256") != sha}


def read_history(rule_path: str | Path) -> list[dict]:
    """Every version written (``sha256``, ``written_unix``, ``rule``), oldest first; ``[]``
    without a history file. Raises :class:`InputError` for a line that is not JSON."""
    path = history_path(rule_path)
    if not path.is_file():
        return []
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            entry = json.loads(line)
            out.append({"sha256": rule_sha256(entry["rule"]), "written_unix": float(entry["written_unix"]), **entry})
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(path, f"line {number}", f"not a decision-rule version ({exc})") from None
    return sorted(out, key=lambda e: e["written_unix"])


def first_attempt_started(record: dict) -> float | None:
    """When the replay's first attempt started (``attempts[0].started_unix`` of its record);
    None for a record without attempts."""
    attempts = record.get("attempts") or []
    return attempts[0].get("started_unix") if attempts else None


def rule_receipt(rule_path: str | Path, first_started: float | None) -> dict:
    """Which decision rule was in force when the first replay started, checked from the files.

    ``first_started``: the earliest first-attempt start of the runs judged (:func:`first_attempt_started`).
    Returns ``{path, sha256, written_unix, mtime_unix, hand_edited, first_attempt_started_unix,
    in_force_at_first_attempt, versions, fixed_in_advance, note}``: ``in_force_at_first_attempt``
    the last version written before that start (``{sha256, written_unix, rule}``, or None);
    ``fixed_in_advance`` True when it is the current rule, False when there was none or another,
    None when the start is unknown. Raises :class:`InputError` for a missing or bad rule file.
    """
    doc = read_rule(rule_path)
    versions = read_history(rule_path)
    before = [v for v in versions if first_started is not None and v["written_unix"] < first_started]
    in_force = before[-1] if before else None
    fixed = None if first_started is None else (in_force is not None and in_force["sha256"] == doc["sha256"])
    if fixed is None:
        note = "the replay records hold no attempt start: whether the rule came first cannot be checked"
    elif fixed:
        note = "the rule judged is the one written before the candidate's first replay started"
    elif in_force is None:
        note = "no version of the rule was written before the candidate's first replay started"
    else:
        note = (
            f"the rule changed after the candidate's first replay started: {in_force['sha256'][:12]} was in force "
            f"then, {doc['sha256'][:12]} is judged now"
        )
    return {
        "path": str(rule_path),
        "sha256": doc["sha256"],
        "rule": doc["rule"],
        "written_unix": doc["written_unix"],
        "written_at": doc.get("written_at"),
        "mtime_unix": Path(rule_path).stat().st_mtime,
        "hand_edited": doc["hand_edited"],
        "first_attempt_started_unix": first_started,
        "in_force_at_first_attempt": (
            {k: in_force[k] for k in ("sha256", "written_unix", "rule")} if in_force else None
        ),
        "versions": [{"sha256": v["sha256"], "written_unix": v["written_unix"]} for v in versions],
        "fixed_in_advance": fixed,
        "note": note,
    }
