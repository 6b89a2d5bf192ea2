"""The audit: the boundary review of one formal run, read off its receipts (SPEC, vocabulary:
audit). Four sections, each ``{"verdict", "evidence", "checks"}``:

* ``task_defect`` (:mod:`.defect`): is the task itself broken?
* ``protocol_exposure`` (:mod:`.exposure`): did a final-split item reach the candidate, its
  exploration or its patch?
* ``agent_behaviour`` (:mod:`.behaviour`): did the candidate's developer keep the
  exploration's rules?
* ``platform`` (:mod:`.platform`): did the infrastructure fail an attempt, share a GPU, break
  the budget accounting, or leave a stale status?

A verdict is ``confirmed`` when a check found the fault, ``inconclusive`` when a check could
not tell (its evidence says what is missing), ``none_found`` otherwise; every check that ran is
listed with its result (:mod:`.checks`). docs/audit.md says what each check proves and what it
does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..fileio import atomic_write_json, atomic_write_text, read_json
from ..hashing import sha256_file
from ..receipts import read_verified_json
from .behaviour import behaviour_checks
from .checks import SECTIONS, VERDICTS, check, line_of, read_json_or_none, read_jsonl, section
from .defect import defect_checks
from .exposure import (
    declared_inputs_check,
    exploration_check,
    exploration_inputs_check,
    patch_check,
    record_plans,
    replay_outputs_check,
    sandbox_check,
    snakemake_inputs,
)
from .items import ItemFields, read_items, read_public
from .platform import platform_checks

__all__ = [
    "SECTIONS",
    "VERDICTS",
    "AuditInputs",
    "audit_run",
    "audit_summary",
    "first_lines",
    "one_line",
    "write_audit",
]


@dataclass(frozen=True)
class AuditInputs:
    """What the audit of one run reads (paths relative to the workflow's directory).

    ``final_paths``: every path holding final-split items
    (:func:`replaykit.isolation.final_paths`); ``item_fields``: the task's
    ``FINAL_ITEM_FIELDS``; ``data``: its config ``data`` block (declared split sizes);
    ``fixed_start_scores``: the fixed-start reference's score folder (None: the task has none,
    ``has_fixed_reference`` false)."""

    task: str
    run: str
    results: Path
    final_split: Path
    proxy_split: Path | None
    shipped_official: Path
    fixed_start_scores: Path | None
    has_fixed_reference: bool
    final_paths: tuple[Path, ...]
    item_fields: ItemFields = field(default_factory=ItemFields)
    data: dict = field(default_factory=dict)
    workdir: Path = Path(".")

    @property
    def run_dir(self) -> Path:
        return self.results / self.task / self.run


@dataclass
class Exploration:
    """The exploration a run's patch came from, as far as it is here."""

    why: str  # why there is none, or how it is linked
    linked: bool = False
    sidecar: Path | None = None
    submission: dict | None = None
    directory: Path | None = None
    receipts: list = field(default_factory=list)  # (file, line, receipt)


def find_exploration(record: dict) -> Exploration:
    """The record's ``exploration`` link, its sidecar (the submission) and receipts: from the
    exploration's ``receipts.jsonl`` when its folder is here, else the sidecar's copy."""
    link = record.get("exploration")
    if not link:
        return Exploration("the run did not come from an exploration (shipped recipe or hand-made patch)")
    sidecar = Path(link.get("sidecar", ""))
    if not link.get("linked"):
        return Exploration(f"{sidecar}: names another patch hash than the replayed patch", sidecar=sidecar)
    submission = read_json_or_none(sidecar)
    ex = Exploration(
        "linked", True, sidecar, submission, Path(link["exploration"]) if link.get("exploration") else None
    )
    log = ex.directory / "receipts.jsonl" if ex.directory else None
    if log is not None and log.is_file():
        ex.receipts = [(str(log), k, r) for k, r in enumerate(read_jsonl(log), 1)]
    elif isinstance(submission, dict) and isinstance(submission.get("receipts"), list):
        ex.receipts = [
            (str(sidecar), line_of(sidecar, f'"id": "{r.get("id")}"'), r)
            for r in submission["receipts"]
            if isinstance(r, dict)
        ]
    return ex


def _exposure(inp: AuditInputs, record_path: Path, record: dict, ex: Exploration) -> list[dict]:
    fields = inp.item_fields
    items = read_items(inp.final_split, fields) if inp.final_split.is_file() else []
    public = read_public(inp.proxy_split, fields, items)
    ws = read_json_or_none(inp.run_dir / "workspace.json") or {}
    patch = Path(ws["patch"]) if ws.get("patch") else None
    outputs = [str(record_path)]
    checks = [
        sandbox_check(record_plans(record_path, record, ex.receipts), list(inp.final_paths)),
        declared_inputs_check({o: snakemake_inputs(inp.workdir, o) for o in outputs}, list(inp.final_paths)),
        exploration_inputs_check(ex.directory / "exploration.json" if ex.directory else None, list(inp.final_paths)),
    ]
    if not items:
        checks.append(
            check(
                "final_items_read",
                "unknown",
                f"{inp.final_split}: no final-split items to search for",
                [f"{inp.final_split}: not here"],
            )
        )
    checks += patch_check(patch, items, public)
    receipts = list(ex.receipts)
    sidecar_receipts = ex.submission.get("receipts") if isinstance(ex.submission, dict) else None
    if isinstance(sidecar_receipts, list) and all(file != str(ex.sidecar) for file, _, _ in ex.receipts):
        receipts += [
            (str(ex.sidecar), line_of(ex.sidecar, f'"id": "{r.get("id")}"'), r)
            for r in sidecar_receipts
            if isinstance(r, dict)
        ]
    checks.append(exploration_check(ex.directory if ex.linked else None, items, public, receipts))
    if items:
        checks.append(replay_outputs_check(inp.workdir, inp.run_dir, record_path, record, items, public))
    return checks


def _behaviour(ex: Exploration) -> list[dict]:
    if ex.linked and ex.submission is None:
        return [check("submission_read", "unknown", f"{ex.sidecar}: not here", [f"{ex.sidecar}: not here"])]
    if not ex.linked and ex.sidecar is not None:
        return [check("exploration_linked", "unknown", ex.why, [f"{ex.sidecar}:1: {ex.why}"])]
    return behaviour_checks(ex.submission, str(ex.sidecar) if ex.sidecar else None, ex.receipts, ex.why)


def audit_run(inp: AuditInputs) -> dict:
    """The audit of one run: ``{section: {"verdict", "evidence", "checks"}}`` for the four
    :data:`SECTIONS`. Raises :class:`~replaykit.harness.errors.InputError` when the run's
    ``official.json`` or ``replay/record.json`` is missing or unreadable."""
    official_path = inp.run_dir / "official.json"
    record_path = inp.run_dir / "replay" / "record.json"
    official = read_json(official_path, required=("official", "checkpoints"))
    record = read_json(record_path, required=("retained",))
    ex = find_exploration(record)
    defect = defect_checks(
        str(inp.shipped_official),
        str(inp.fixed_start_scores) if inp.fixed_start_scores else None,
        inp.has_fixed_reference,
        inp.final_split,
        str(record.get("asset_manifest") or inp.results / inp.task / "assets" / "manifest.json"),
        inp.data,
        official,
    )
    return {
        "task_defect": section(defect),
        "protocol_exposure": section(_exposure(inp, record_path, record, ex)),
        "agent_behaviour": section(_behaviour(ex)),
        "platform": section(platform_checks(inp.results / inp.task, inp.run_dir, str(record_path), record)),
    }


def write_audit(inp: AuditInputs, out: str | Path) -> dict:
    """:func:`audit_run`, written to ``out`` (``results/<task>/<run>/audit.json``), and its
    receipt ``<out>.sha256`` (``sha256sum``'s format, ``sha256sum -c`` checks it): the
    workflow's re-verification finds an ``audit.json`` edited afterwards by it and has the
    audit run again (:func:`replaykit.harness.verify.check_run`), so that a rebuilt ``final/``
    never takes an edited verdict."""
    doc = audit_run(inp)
    atomic_write_json(out, doc)
    atomic_write_text(audit_receipt(out), f"{sha256_file(out)}  {Path(out).name}\n")
    return doc


def audit_receipt(audit: str | Path) -> Path:
    """The receipt of ``audit`` (``audit.json.sha256`` beside it)."""
    return Path(f"{audit}.sha256")


def audit_summary(paths: list[str | Path]) -> dict | None:
    """What ``final/summary.json`` carries: the official run's audit (``paths[0]``: its path,
    SHA-256 and four sections in full) and one line for each other run's; None without audits.
    Raises :class:`~replaykit.harness.errors.InputError` for a missing or unreadable file, or
    one that differs from its receipt (``audit.json.sha256``)."""
    if not paths:
        return None
    docs = [(Path(p), read_verified_json(p, required=SECTIONS)) for p in paths]
    (path, doc), others = docs[0], docs[1:]
    return {
        "run": path.parent.name,
        "path": str(path),
        "sha256": sha256_file(path),
        "sections": {name: doc[name] for name in SECTIONS},
        "others": [
            {"run": p.parent.name, "path": str(p), "sha256": sha256_file(p), "summary": one_line(d)} for p, d in others
        ],
    }


def first_lines(doc: dict) -> list[str]:
    """One line per section: its verdict and first evidence line."""
    return [
        f"{name}: {doc[name]['verdict']}" + (f" -- {doc[name]['evidence'][0]}" if doc[name]["evidence"] else "")
        for name in SECTIONS
    ]


def one_line(doc: dict) -> str:
    """The four verdicts in one line (``task_defect none_found, ...``)."""
    return ", ".join(f"{name} {doc[name]['verdict']}" for name in SECTIONS)
