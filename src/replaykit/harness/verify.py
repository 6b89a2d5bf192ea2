"""Receipts that are checked, not only written.

Every product downstream of a replay carries the hashes of what it was made from: a
validation marker the checkpoint's tree hash (``checkpoint_sha256``) and the record's
(``recorded_sha256``); a final or proxy score the checkpoint's tree hash and its marker's
SHA-256; ``official.json`` the record's SHA-256 and every marker's, score's and proxy score's;
``final/summary.json``, an ablation's and the campaign's ``summary.json`` every file they read
(``inputs_sha256``), ``final/`` every ``official.json``'s too. And every product has its own
receipt (:mod:`.receipts`), written with it: a score folder's, ``final/``'s, an ablation's and
the campaign's ``.complete`` lists the SHA-256 of each of its files (``summary.json``,
``rows.jsonl``, ``report.md``, ...), and ``official.json``, ``proxy.json``, ``audit.json`` and
the sandbox self-test have ``<name>.sha256`` beside them. :func:`check_run`,
:func:`check_task`, :func:`check_final` and :func:`check_product` compare them with the files
on disk and return one :class:`Finding` per receipt: ``verified``, ``stale`` (made from another
file, or no receipt), ``missing`` or ``tampered`` (a file differs from its own receipt: edited
by hand; a checkpoint that differs from its record is already marked invalid). A receipt
that is not verified names the products that can no longer be trusted (``invalidates``): the
file itself and everything built from it, up to ``final/``. :func:`reverify`, the workflow's
explicit re-verification step (``rules/common.smk`` runs it once when the workflow starts,
before the DAG is built, for every run, task product, ``final/``, ablation and campaign folder
of the configured tasks), marks those products stale by rewriting a stamp that is an input of
the rule building each one (:func:`stamp_of`): Snakemake rebuilds what is older than its
input, and nothing is deleted up front -- each rule replaces its product only once the new
one is complete.

Cost: the tree hash of each retained checkpoint, through :class:`~.hashing.HashCache`
(unchanged files are not re-read), and the SHA-256 of a few small JSON files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .fileio import atomic_write_text
from .hashing import HashCache
from .provenance import utc_now
from .receipts import INPUTS, RECEIPT, SUMMARY, folder_problem, receipt_of, receipt_problem, status
from .receipts import SELF_TESTS as SELF_TEST  # <results>/sandbox-self-test/<task>.json

CACHE = ".hash-cache.json"
ROWS = "rows.jsonl"  # a score folder's rows, listed in its .complete  # per run: results/<task>/<run>/.hash-cache.json


@dataclass
class Finding:
    """One receipt's state.

    Attributes:
        path: the receipt (file or directory).
        state: ``verified``, ``stale``, ``missing`` or ``tampered``.
        reason: why, in a few words (empty when verified).
        invalidates: files and directories that must be rebuilt (marked by :func:`mark_stale`).
    """

    path: str
    state: str
    reason: str = ""
    invalidates: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.path}: {self.state}" + (f": {self.reason}" if self.reason else "")


def _json(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _check_checkpoint(run_dir: Path, record_path: Path, record: dict, progress: int, cache: HashCache) -> list:
    """The findings of one retained checkpoint: the checkpoint against its record, its
    validation marker against the checkpoint, its final score against both."""
    checkpoint = run_dir / "replay" / f"checkpoint-{progress}"
    marker = run_dir / "validation" / f"checkpoint-{progress}.json"
    scores = run_dir / "final-scores" / f"checkpoint-{progress}"
    score_files = [str(scores / SUMMARY), str(scores / RECEIPT)]
    downstream = [str(run_dir / "official.json")]
    if not checkpoint.is_dir():
        return [Finding(str(checkpoint), "missing", f"listed in {record_path}")]
    actual = cache.tree(checkpoint)
    recorded = (record.get("checkpoints") or {}).get(str(progress), {}).get("sha256")
    tampered = actual != recorded
    doc = _json(marker)
    if doc is None:
        state = "missing" if not marker.exists() else "stale"
        return [Finding(str(marker), state, "no readable validation marker", [str(marker), *score_files, *downstream])]
    if doc.get("checkpoint_sha256") != actual or doc.get("recorded_sha256") != recorded:
        why = (
            "checkpoint changed after publication (tree hash differs from the record)"
            if tampered
            else "made from another checkpoint or record"
        )
        return [Finding(str(marker), "stale", why, [str(marker), *score_files, *downstream])]
    out = [
        Finding(str(checkpoint), "tampered", f"tree hash differs from {record_path}; its marker says invalid")
        if tampered
        else Finding(str(checkpoint), "verified"),
        Finding(str(marker), "verified"),
    ]
    entry = _recorded_entry(run_dir, progress, cache)
    finding = _check_score(scores, "final", actual, marker, cache, [*score_files, *downstream])
    out.append(_disagreeing(finding, scores, entry, marker, cache, "", [*score_files, *downstream]))
    proxy = run_dir / "proxy-scores" / f"checkpoint-{progress}"
    if proxy.is_dir():  # every retained checkpoint is proxy-scored for official.json's proxy_selected
        downstream = [*downstream, str(run_dir / "proxy.json")]
        files = [str(proxy / SUMMARY), str(proxy / RECEIPT), *downstream]
        finding = _check_score(proxy, "proxy", actual, marker, cache, files)
        out.append(_disagreeing(finding, proxy, entry, marker, cache, "proxy_", files))
    return out


def _recorded_entry(run_dir: Path, progress: int, cache: HashCache) -> dict | None:
    """``official.json``'s entry for checkpoint ``progress`` when its own receipt vouches for
    it (else None: an edited or unreceipted ``official.json`` records nothing to trust)."""
    official = run_dir / "official.json"
    doc = _json(official)
    if doc is None or receipt_problem(official, cache.file):
        return None
    entries = [c for c in doc.get("checkpoints") or [] if isinstance(c, dict) and c.get("progress") == progress]
    return entries[0] if entries else None


def _disagreeing(
    finding: Finding, scores: Path, entry: dict | None, marker: Path, cache: HashCache, prefix: str, invalidates: list
) -> Finding:
    """A score that its own receipt vouches for (``finding`` verified) but whose downstream
    record disagrees: ``official.json`` (``entry``, vouched for by its receipt), made from the
    same marker, recorded another SHA-256 of its ``summary.json`` or ``rows.jsonl``
    (``<prefix>summary_sha256``, ``<prefix>rows_sha256``). The hashes are unkeyed, so a file
    rewritten together with its ``.complete`` line passes its own receipt; the record made
    before the edit does not. The score is ``tampered`` and scored again from its checkpoint
    (its stamp), never ``official.json`` rebuilt from the edited file. An ``official.json``
    made from another marker vouches for nothing here (it is stale itself)."""
    if finding.state != "verified" or entry is None or entry.get("marker_sha256") != cache.file(marker):
        return finding
    for name in (SUMMARY, ROWS):
        key = f"{prefix}{name.split('.')[0]}_sha256"
        if key not in entry:  # an official.json made before it recorded the rows
            continue
        file = scores / name
        actual = cache.file(file) if file.is_file() else None
        if entry[key] != actual:
            why = (
                f"its downstream record disagrees: {scores.parent.parent / 'official.json'} recorded SHA-256 "
                f"{str(entry[key])[:12]}, it is {str(actual)[:12]} (rewritten with its .complete line); scored again"
            )
            return Finding(str(file), "tampered", why, invalidates)
    return finding


def _check_score(scores: Path, split: str, actual: str, marker: Path, cache: HashCache, invalidates: list) -> Finding:
    """A score folder: complete, its files (``summary.json``, ``rows.jsonl``) as its receipt
    ``.complete`` lists them (else ``tampered``: edited by hand), made from the checkpoint and
    marker it names."""
    summary = _json(scores / SUMMARY)
    if status(scores) != "complete" or summary is None:
        return Finding(str(scores / SUMMARY), "missing", f"no complete {split} score", invalidates)
    sealed = folder_problem(scores, cache.file)
    if sealed:
        return Finding(sealed[0], sealed[1], sealed[2], invalidates)
    if summary.get("checkpoint_sha256") != actual or summary.get("marker_sha256") != cache.file(marker):
        return Finding(str(scores / SUMMARY), "stale", "made from another checkpoint or marker", invalidates)
    return Finding(str(scores / SUMMARY), "verified")


def _check_official(run_dir: Path, record_path: Path, record: dict, cache: HashCache) -> Finding:
    """``official.json`` against the record and each checkpoint's marker and score."""
    official_path = run_dir / "official.json"
    official = _json(official_path)
    if official is None:
        state = "missing" if not official_path.exists() else "stale"
        return Finding(str(official_path), state, "no readable official.json", [str(official_path)])
    own = receipt_problem(official_path, cache.file)  # official.json.sha256, written with it
    if own:
        return Finding(str(official_path), *own, [str(official_path)])
    problem = None
    if official.get("record_sha256") != cache.file(record_path):
        problem = f"made from another replay record than {record_path}"
    else:
        entries = {c.get("progress"): c for c in official.get("checkpoints", [])}
        if sorted(entries) != sorted(record["retained"]):
            problem = "its checkpoints are not the record's retained ones"
        for progress, c in sorted(entries.items()) if problem is None else []:
            marker = run_dir / "validation" / f"checkpoint-{progress}.json"
            summary = run_dir / "final-scores" / f"checkpoint-{progress}" / SUMMARY
            if c.get("marker_sha256") != cache.file(marker) or c.get("summary_sha256") != cache.file(summary):
                problem = f"made from another marker or score of checkpoint-{progress}"
                break
            proxy = run_dir / "proxy-scores" / f"checkpoint-{progress}" / SUMMARY
            if "proxy_summary_sha256" in c and c["proxy_summary_sha256"] != (
                cache.file(proxy) if proxy.is_file() else None
            ):
                problem = f"made from another proxy score of checkpoint-{progress}"
                break
    if problem:
        return Finding(str(official_path), "stale", problem, [str(official_path)])
    return Finding(str(official_path), "verified")


def check_run(run_dir: str | Path, cache: HashCache | None = None) -> list[Finding]:
    """Check the receipts of one run (``results/<task>/<run>``) against the files on disk.

    A run whose record was never written (nothing replayed yet) and that has no
    ``official.json`` gives ``[]``. An unreadable record is left to the workflow (it stops
    with one line); here it gives one ``stale`` finding that invalidates nothing.
    """
    run_dir = Path(run_dir)
    cache = cache if cache is not None else HashCache(run_dir / CACHE)
    record_path = run_dir / "replay" / "record.json"
    official_path = run_dir / "official.json"
    if not record_path.is_file():
        if official_path.exists():
            why = "the replay record is gone; official.json names it"
            return [Finding(str(record_path), "missing", why, [str(official_path)])]
        return []
    record = _json(record_path)
    if record is None or not isinstance(record.get("retained"), list):
        return [Finding(str(record_path), "stale", "unreadable replay record")]
    out = [Finding(str(record_path), "verified")]
    for progress in sorted(record["retained"]):
        out += _check_checkpoint(run_dir, record_path, record, progress, cache)
    out += _check_patch(run_dir, record_path, record, cache)
    if any(f.invalidates for f in out):
        return out
    out.append(_check_official(run_dir, record_path, record, cache))
    return out + _check_audit(run_dir, cache)


def _check_patch(run_dir: Path, record_path: Path, record: dict, cache: HashCache) -> list[Finding]:
    """A candidate run's patch file (the record's ``patch``, relative to the workflow's folder)
    against the SHA-256 the replay recorded: one edited since is ``stale`` (the run is of
    another patch: its workspace, replay and all after are made again); one deleted is
    ``missing`` (nothing to rebuild from). None for a shipped run."""
    patch, recorded = record.get("patch"), record.get("patch_sha256")
    if not isinstance(patch, str) or not recorded:
        return []
    path = Path(patch) if Path(patch).is_absolute() else run_dir.parent.parent.parent / patch
    if not path.is_file():
        return [Finding(str(path), "missing", f"the patch {record_path} was replayed from is gone")]
    if cache.file(path) != recorded:
        why = f"edited since {record_path} replayed it (patch_sha256 {str(recorded)[:12]}): the run is of another patch"
        return [Finding(str(path), "stale", why, [str(run_dir / "workspace.json")])]
    return [Finding(str(path), "verified")]


def _inputs_problem(doc: dict, root: Path, cache: HashCache) -> str | None:
    """Why a product whose ``doc`` records the files it read (``inputs_sha256``, paths relative
    to the workflow's folder ``root``) no longer agrees with them: none recorded, one gone, one
    changed since, or one that its own receipt does not vouch for. None when all agree."""
    inputs = doc.get(INPUTS)
    if not isinstance(inputs, dict) or not inputs:
        return f"records no {INPUTS} (made before products recorded what they read)"
    for name, digest in inputs.items():
        file = Path(name) if Path(name).is_absolute() else root / name
        if not file.is_file():
            return f"{name} is missing"
        if cache.file(file) != digest:
            return f"made from another {name}"
        problem = receipt_problem(file, cache.file) if receipt_of(file) is not None else None
        if problem:
            return f"made from {name}, which its receipt does not vouch for ({problem[0]}: {problem[1]})"
    return None


def _check_alone(path: Path, root: Path, cache: HashCache) -> Finding:
    """A JSON product that lies alone (``proxy.json``): its receipt ``<name>.sha256``, then the
    files it records it read (:func:`_inputs_problem`)."""
    own = receipt_problem(path, cache.file)
    if own:
        return Finding(str(path), *own, [str(path)])
    problem = _inputs_problem(_json(path) or {}, root, cache)
    return Finding(str(path), "stale", problem, [str(path)]) if problem else Finding(str(path), "verified")


def check_task(task_dir: str | Path, cache: HashCache | None = None) -> list[Finding]:
    """The receipts of a task's products outside its runs that ``final/`` reads: the fixed-start
    reference score (``reference/fixed-start/final-scores/``: its ``summary.json`` and
    ``rows.jsonl`` against ``.complete``) and the sandbox self-test
    (``<results>/sandbox-self-test/<task>.json`` against its ``.sha256``). One edited by hand is
    ``tampered`` and made again (it and, through its newer receipt, ``final/``)."""
    task_dir = Path(task_dir)
    cache = cache if cache is not None else HashCache(None)
    out = []
    ref = task_dir / "reference" / "fixed-start" / "final-scores"
    if ref.is_dir():
        files = [str(ref / SUMMARY), str(ref / RECEIPT)]
        complete = status(ref) == "complete"
        sealed = folder_problem(ref, cache.file) if complete else None
        if not complete:
            out.append(Finding(str(ref / SUMMARY), "missing", "no complete fixed-start reference score", files))
        elif sealed:
            out.append(Finding(sealed[0], sealed[1], sealed[2], files))
        else:
            out.append(Finding(str(ref / SUMMARY), "verified"))
    test = task_dir.parent / SELF_TEST / f"{task_dir.name}.json"
    if test.is_file():
        problem = receipt_problem(test, cache.file)
        out.append(Finding(str(test), *problem, [str(test)]) if problem else Finding(str(test), "verified"))
    return out


def check_proxy_tables(task_dir: str | Path, cache: HashCache | None = None) -> list[Finding]:
    """Each run's ``proxy.json`` (:func:`_check_alone`): a table beside the run that only a
    ``final/`` of an explored candidate reads, so it is checked apart from the run's chain (one
    being rebuilt makes no ``final/`` stale that did not read it)."""
    task_dir = Path(task_dir)
    cache = cache if cache is not None else HashCache(None)
    tables = sorted(p for p in task_dir.glob("*-seed*/proxy.json") if p.is_file())
    return [_check_alone(p, task_dir.parent.parent, cache) for p in tables]


def check_product(folder: str | Path, root: str | Path = ".", cache: HashCache | None = None) -> Finding | None:
    """A product folder built from runs (an ablation ``results/<task>/ablation/<candidate>/``,
    the campaign ``results/campaign/``): its files against its ``.complete`` (``tampered``),
    then the files its ``summary.json`` records it read (``stale``; :func:`_inputs_problem`,
    paths relative to the workflow's folder ``root``). None when ``folder`` does not exist."""
    folder = Path(folder)
    if not folder.exists():
        return None
    cache = cache if cache is not None else HashCache(None)
    summary = _json(folder / SUMMARY)
    if not (folder / RECEIPT).is_file() or summary is None:
        return Finding(str(folder), "stale", "no complete summary", [str(folder)])
    problem = _product_problem(folder, summary, Path(root), cache)
    if problem:
        return Finding(str(folder), problem[0], problem[1], [str(folder)])
    return Finding(str(folder), "verified")


def _product_problem(folder: Path, summary: dict, root: Path, cache: HashCache) -> tuple[str, str] | None:
    """``(state, why)`` of a sealed product folder: a file that differs from its ``.complete``
    (named), or an input its summary records that differs from the file on disk."""
    sealed = folder_problem(folder, cache.file)
    if sealed:
        return sealed[1], f"{Path(sealed[0]).name}: {sealed[2]}"
    problem = _inputs_problem(summary, root, cache)
    return ("stale", problem) if problem else None


def _check_audit(run_dir: Path, cache: HashCache) -> list[Finding]:
    """The run's ``audit.json`` against its receipt (``audit.json.sha256``, written with it):
    one edited afterwards is ``tampered``, one gone (or no file) ``missing``; either is made
    again (and ``final/`` from it). None without the receipt (an audit not run yet, or
    written before receipts)."""
    audit, receipt = run_dir / "audit.json", run_dir / "audit.json.sha256"
    if not receipt.is_file():
        return []
    if not audit.is_file() or audit.is_symlink():
        return [Finding(str(audit), "missing", f"gone or no file, but {receipt.name} names it", [str(audit)])]
    recorded = receipt.read_text(errors="replace").split(" ")[0].strip()
    if cache.file(audit) != recorded:
        return [Finding(str(audit), "tampered", f"edited since the audit wrote it (not {receipt.name})", [str(audit)])]
    return [Finding(str(audit), "verified")]


def check_final(
    final_dir: str | Path, officials: list[str | Path], cache: HashCache | None = None, root: str | Path = "."
) -> Finding | None:
    """Check ``final/`` against the ``official.json`` files it must be made from (None when
    ``final/`` does not exist). ``officials``: as the summary records them, relative to the
    workflow's working directory ``root`` (``tiny/`` for the tiny runs) unless absolute."""
    final_dir = Path(final_dir)
    if not final_dir.exists():
        return None
    cache = cache if cache is not None else HashCache(None)
    summary = _json(final_dir / SUMMARY)
    if status(final_dir) != "complete" or summary is None:
        return Finding(str(final_dir), "stale", "no complete final summary", [str(final_dir)])
    blamed = _laundered(final_dir, summary, Path(root), cache)
    if blamed:
        return blamed
    recorded = summary.get("officials_sha256") or {}
    for path in dict.fromkeys(str(p) for p in officials):
        if not (Path(root) / path).is_file():
            return Finding(str(final_dir), "stale", f"{path} is missing", [str(final_dir)])
        if recorded.get(path) != cache.file(Path(root) / path):
            return Finding(str(final_dir), "stale", f"made from another {path}", [str(final_dir)])
    mismatch = _final_mismatch(final_dir, summary, Path(root), cache)
    if mismatch:
        return Finding(str(final_dir), "tampered", mismatch, [str(final_dir)])
    problem = _product_problem(final_dir, summary, Path(root), cache)  # its .complete, then its inputs
    if problem:
        return Finding(str(final_dir), problem[0], problem[1], [str(final_dir)])
    return Finding(str(final_dir), "verified")


def _producer(name: str, file: Path) -> tuple[list[str], str | None] | None:
    """What makes the file ``file`` (``name``: as ``final/`` records it, relative to the workflow's
    folder) that ``final/`` read: the products to make again, and the ``official.json`` (as
    recorded) of the run it belongs to (None for a task's product), or None for a file of no
    known producer."""
    folder, run_dir = file.parent, Path(name).parent
    if file.name in (SUMMARY, ROWS) and folder.name.startswith("checkpoint-"):  # a run's score
        run, rel_run = folder.parent.parent, run_dir.parent.parent
        made = [str(folder / SUMMARY), str(folder / RECEIPT), str(run / "official.json")]
        if folder.parent.name == "proxy-scores":
            made.append(str(run / "proxy.json"))
        return made, str(rel_run / "official.json")
    if file.name in (SUMMARY, ROWS) and folder.name == "final-scores":  # the fixed-start reference
        return [str(folder / SUMMARY), str(folder / RECEIPT)], None
    if file.name == "official.json" or folder.name == SELF_TEST:
        return [str(file)], None
    if file.name in ("audit.json", "proxy.json"):
        return [str(file)], str(run_dir / "official.json")
    return None


def _laundered(final_dir: Path, summary: dict, root: Path, cache: HashCache) -> Finding | None:
    """A file ``final/`` read that its own receipt vouches for but that differs from the SHA-256
    ``final/`` recorded when it read it (``inputs_sha256``, ``officials_sha256``): rewritten
    together with its receipt (the hashes are unkeyed). It is ``tampered``, and its producer is
    made again from its own inputs (a score from its checkpoint, ``official.json`` from its
    scores, ...), with ``final/`` after it -- never ``final/`` rebuilt from the edited file. A
    file of a run whose ``official.json`` is not the one ``final/`` read was legitimately made
    again since (``final/`` is only stale: :func:`check_final`)."""
    recorded = {**(summary.get(INPUTS) or {}), **(summary.get("officials_sha256") or {})}
    for name, digest in recorded.items():
        file = Path(name) if Path(name).is_absolute() else root / name
        made = _producer(name, file)
        if made is None or not file.is_file() or cache.file(file) == digest:
            continue
        if receipt_of(file) is None or receipt_problem(file, cache.file):
            continue  # not vouched for by its receipt: found as such (tampered, stale) elsewhere
        products, official = made
        if official is not None:
            now = root / official
            if not now.is_file() or recorded.get(official) != cache.file(now):
                continue
        why = (
            f"its downstream record disagrees: {final_dir / SUMMARY} recorded SHA-256 {str(digest)[:12]}, "
            f"it is {cache.file(file)[:12]} (rewritten with its receipt); made again from its own inputs"
        )
        return Finding(str(file), "tampered", why, [*products, str(final_dir)])
    return None


def _final_mismatch(final_dir: Path, summary: dict, root: Path, cache: HashCache) -> str | None:
    """What of ``final/`` disagrees with the ``official.json`` files it names (their hashes
    already checked): the headline (value, uncertainty, progress, checkpoint), each seed's value,
    each run's ``audit.json`` and ``report.md`` against the hashes the summary recorded when it
    was made. An edited
    number is found; the hashes are unkeyed, so one who rewrites every file and hash of the
    chain is not (docs/audit.md)."""
    headline = summary.get("official") or {}
    doc = _json(root / str(headline.get("official", ""))) or {}
    best = doc.get("official") or {}
    expected = {
        "value": best.get("value"),
        "uncertainty": best.get("se"),
        "progress": best.get("progress"),
        "checkpoint_sha256": best.get("checkpoint_sha256"),
    }
    found = {
        "value": summary.get("value"),
        "uncertainty": (summary.get("uncertainty") or {}).get("value"),
        "progress": headline.get("progress"),
        "checkpoint_sha256": headline.get("checkpoint_sha256"),
    }
    for key, value in expected.items():
        if found[key] != value:
            return f"summary.json: {key} {found[key]!r} is not its official.json's {value!r}"
    for entry in (summary.get("seeds") or {}).get("per_seed") or []:
        seed_best = (_json(root / str(entry.get("official", ""))) or {}).get("official") or {}
        if entry.get("value") != seed_best.get("value"):
            return (
                f"summary.json: seed {entry.get('seed')}: value {entry.get('value')!r} is not {entry.get('official')}'s"
            )
    audit = summary.get("audit") or {}
    for entry in [audit, *(audit.get("others") or [])]:
        path, digest = entry.get("path"), entry.get("sha256")
        if isinstance(path, str) and isinstance(digest, str):
            file = Path(path) if Path(path).is_absolute() else root / path
            if not file.is_file() or cache.file(file) != digest:
                return f"{path}: not the audit final/ was made with (its hash differs from summary.json's)"
    report = final_dir / "report.md"
    if "report_sha256" in summary and (not report.is_file() or cache.file(report) != summary["report_sha256"]):
        return "report.md: not the report rendered with summary.json (its hash differs)"
    return None


STAMPS = ".receipts"  # beside each product: <folder>/.receipts/<name>, the product's stale-receipt stamp


def stamp_of(product: str | Path) -> Path:
    """The stale-receipt stamp of ``product`` (``<folder>/.receipts/<name>``): an input of the
    rule that builds ``product`` (when it exists), rewritten -- so newer than ``product`` -- when
    a receipt ``product`` is built from is found stale or missing."""
    product = Path(product)
    return product.parent / STAMPS / product.name


def mark_stale(findings: list[Finding], now: str, finals: dict | None = None) -> list[str]:
    """Write the stamp (:func:`stamp_of`) of every product a stale or missing receipt
    invalidates, saying which receipts and why; return those products. Nothing is removed:
    Snakemake sees an input newer than the product and rebuilds it, and the rule keeps the
    current product until its rebuild succeeds. A ``final/`` folder's stamp also records the
    ``official.json`` files the config builds it from (``finals``: ``final/`` -> those files),
    since its staleness can depend on the config: a stamp written for other files (a dry run
    with another candidate) does not apply to this config's ``final/`` (:func:`stamp_applies`)."""
    products = list(dict.fromkeys(p for f in findings for p in f.invalidates))
    for product in products:
        why = [f.line() for f in findings if product in f.invalidates]
        stamp = stamp_of(product)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        record = {"stale_since": now, "receipts": why}
        if finals and str(product) in finals:
            record["officials"] = sorted(map(str, finals[str(product)]))
        atomic_write_text(stamp, json.dumps(record, indent=1) + "\n")
    return products


def stamp_applies(product: str | Path, officials: list[str] | None = None) -> bool:
    """Whether ``product``'s stamp (:func:`stamp_of`) exists and marks it stale for a ``final/``
    built from ``officials``: a stamp that records other ``official.json`` files was written
    under another config (another candidate or seeds) and is not this one's concern. Without
    ``officials``, or for a stamp that records none (a run's products), any stamp applies."""
    stamp = stamp_of(product)
    if not stamp.is_file():
        return False
    recorded = (_json(stamp) or {}).get("officials")
    return recorded is None or officials is None or sorted(map(str, officials)) == recorded


PREVIOUS = ".previous"  # a product set aside: <folder>/.receipts/<name>.previous


def set_aside(findings: list[Finding], say=print) -> list[str]:
    """Move aside (``<folder>/.receipts/<name>.previous``, never deleted) each product of a
    *missing replay record*: Snakemake reruns no job for a deleted output of a ``checkpoint``
    rule while its consumers exist, and skips the timestamp check of a job whose input waits
    on a checkpoint, so a stamp cannot trigger it; a missing product can. The product comes
    back when its rebuild does not happen (:func:`restore_set_aside`). Returns the products."""
    moved = []
    for f in findings:
        if f.state != "missing" or not f.path.endswith("replay/record.json"):
            continue
        for product in [p for p in f.invalidates if Path(p).is_file()]:
            kept = stamp_of(product).with_name(Path(product).name + PREVIOUS)
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.replace(product, kept)
            moved.append(product)
            say(f"receipts: {product}: set aside as {kept} until its rebuild succeeds; put back if it fails")
    return moved


def restore_set_aside(run_dirs, say=print) -> list[str]:
    """Put back each product of ``run_dirs`` set aside by :func:`set_aside` that was not
    rebuilt (the product is missing); drop the copy of one that was. Returns the products
    put back."""
    restored = []
    for run_dir in map(Path, run_dirs):
        for kept in sorted((run_dir / STAMPS).glob(f"*{PREVIOUS}")):
            product = run_dir / kept.name[: -len(PREVIOUS)]
            if product.exists():
                kept.unlink()  # rebuilt: the copy set aside is the old product
                continue
            os.replace(kept, product)
            restored.append(str(product))
            say(f"receipts: {product}: not rebuilt; put back as it was")
    return restored


def put_back_interrupted(backups: Path, patterns, say=print) -> list[str]:
    """Put back Snakemake's backup of each ``update()`` output whose job was interrupted.

    Snakemake copies such an output to ``.snakemake/backups/<output>`` before its job runs and
    restores it if the job fails; a run killed mid-job leaves the copy behind, and Snakemake
    9.27 then fails every later run of that job (``FileExistsError`` copying onto it). The copy
    is the last finished version: it replaces whatever the interrupted job left (which
    Snakemake marks incomplete and builds again). Call it only when no other instance holds
    the folder's lock (a running job's copy is no leftover).

    Args:
        backups: the backups folder (``.snakemake/backups``), relative to the working directory.
        patterns: compiled regular expressions of the ``update()`` outputs' paths (relative).
        say: called with one ``receipts: ...`` line per output put back.

    Returns:
        The outputs put back (relative paths).
    """
    import shutil

    found = []
    for copy in sorted(backups.rglob("*")) if backups.is_dir() else []:
        output = copy.relative_to(backups)
        if any(p.fullmatch(str(output)) for p in patterns) and not any(f in output.parents for f in found):
            found.append(output)
    for output in found:
        if output.is_dir() and not output.is_symlink():
            shutil.rmtree(output)
        elif output.exists() or output.is_symlink():
            output.unlink()
        output.parent.mkdir(parents=True, exist_ok=True)
        os.replace(backups / output, output)
        say(f"receipts: {output}: its job was interrupted; put back as last finished (Snakemake's backup)")
    return [str(o) for o in found]


def reverify(runs, finals: dict, tasks=(), products=(), *, say=print) -> list[str]:
    """The re-verification step: check the receipts of each run folder in ``runs`` (with its
    hash cache), of each task folder in ``tasks`` (:func:`check_task`: its fixed-start
    reference score and sandbox self-test), of each ``final/`` folder in ``finals`` (``final/``
    -> the ``official.json`` files it is built from; their runs are checked too, and ``final/``
    is stale when one of them, or its task's reference or self-test, is being rebuilt) and of
    each product folder in ``products`` (:func:`check_product`: ablations, the campaign) and of
    each run's ``proxy.json`` (:func:`check_proxy_tables`; neither makes a ``final/`` stale);
    ``say`` one ``receipts: <file>: <state>: <why>`` line per receipt that is not verified, and
    one line per product to rebuild; mark those products stale (:func:`mark_stale`). Each run
    is checked once. Returns the products to rebuild."""
    checked: dict[Path, list[Finding]] = {}
    of_tasks = {Path(t): check_task(t) for t in tasks}

    def of_run(run_dir: Path) -> list[Finding]:
        if run_dir not in checked:
            cache = HashCache(run_dir / CACHE)
            checked[run_dir] = check_run(run_dir, cache)
            cache.save()
        return checked[run_dir]

    restore_set_aside(runs, say)  # what an earlier invocation set aside and did not rebuild
    for run_dir in runs:
        of_run(Path(run_dir))
    of_finals = []
    for final_dir, officials in finals.items():
        stale_runs = any(f.invalidates for o in officials for f in of_run(Path(o).parent)) or any(
            f.invalidates for f in of_tasks.get(Path(final_dir).parent, [])
        )
        if stale_runs and Path(final_dir).exists():
            of_finals.append(Finding(str(final_dir), "stale", "built from receipts being rebuilt", [str(final_dir)]))
        elif not stale_runs:
            of_finals += [v for v in [check_final(final_dir, officials)] if v is not None]
    of_products = [v for v in (check_product(p) for p in products) if v is not None]
    of_products += [f for t in tasks for f in check_proxy_tables(t)]
    found = [*(f for fs in checked.values() for f in fs), *(f for fs in of_tasks.values() for f in fs)]
    bad = [f for f in [*found, *of_finals, *of_products] if f.state != "verified"]
    for f in bad:
        say(f"receipts: {f.line()}")
    products = mark_stale(bad, utc_now(), finals)
    moved = set_aside(bad, say)
    for product in products:
        if Path(product).exists() and product not in moved:
            say(f"receipts: {product}: will be rebuilt; kept as it is until its rebuild succeeds")
    return products


def _vouched(folder: Path, officials: list[str], runs: dict[str, list[Finding]], others: list, results: Path):
    """Whether the runs and task products a product (``final/``, an ablation) was made from are
    verified: each run whose ``official.json`` it names (``officials``, relative to the
    workflow's folder, ``results``' parent) must be a run of its task checked here with every
    receipt verified (``runs``: ``<task>/<run>`` -> its findings), and each finding of
    ``others`` (the task's reference score and self-test, :func:`check_task`) that names a file
    the product records it read must be verified. A stale :class:`Finding` of ``folder``, or
    None."""
    task = folder.parent if folder.name == "final" else folder.parent.parent
    for name in officials:
        run = Path(name).parent
        # a run of this task under these results, checked above: one elsewhere is not vouched for
        inside = (results.parent / run).resolve().parent == task.resolve()
        findings = runs.get(f"{task.name}/{run.name}") if inside else None
        if not findings or any(f.state != "verified" for f in findings):
            why = "whose receipts are not verified" if inside else f"not a run of {task}"
            return Finding(str(folder), "stale", f"built from {run}, {why}", [str(folder)])
    inputs = (_json(folder / SUMMARY) or {}).get(INPUTS) or {}
    for f in others:
        name = os.path.relpath(f.path, results.parent)
        if f.state != "verified" and name in inputs:
            return Finding(str(folder), "stale", f"built from {name}, whose receipt is not verified", [str(folder)])
    return None


def _ablation_status(folder: Path, runs: dict[str, list[Finding]], results: Path, others: list) -> Finding:
    """An ablation's finding for ``status``: :func:`check_product` (its files against its
    ``.complete``, the files it read against the disk), then the runs and the reference it was
    made from (:func:`_vouched`)."""
    verdict = check_product(folder, results.parent, HashCache(None))
    if verdict.state != "verified":
        return verdict
    inputs = (_json(folder / SUMMARY) or {}).get(INPUTS) or {}
    officials = [name for name in inputs if Path(name).name == "official.json"]
    return _vouched(folder, officials, runs, others, results) or verdict


def _final_status(final_dir: Path, runs: dict[str, list[Finding]], results: Path, others: list = ()) -> Finding:
    """``final/``'s finding for ``status``: :func:`check_final` against the ``official.json``
    files its summary names (relative to the workflow's folder, ``results``' parent); stale
    also when a run those files belong to, or a task product it read (``others``: the task's
    reference score and self-test), is not verified (:func:`_vouched`), or when the workflow
    marked it stale (:func:`stamp_of`, newer than its ``.complete``) and has not rebuilt it since."""
    recorded = (_json(final_dir / SUMMARY) or {}).get("officials_sha256")
    if not isinstance(recorded, dict) or not recorded:
        return Finding(str(final_dir), "stale", "its summary names no official.json hashes", [str(final_dir)])
    names = list(recorded)
    verdict = check_final(final_dir, names, root=results.parent)
    if verdict.state != "verified":
        return verdict
    unvouched = _vouched(final_dir, names, runs, list(others), results)
    if unvouched:
        return unvouched
    stamp, done = stamp_of(final_dir), final_dir / RECEIPT
    if (
        stamp_applies(final_dir, names)  # one written for other official.json files: another config's
        and done.is_file()
        and stamp.stat().st_mtime_ns > done.stat().st_mtime_ns
    ):
        why = (_json(stamp) or {}).get("receipts") or ["(no reason recorded)"]
        return Finding(str(final_dir), "stale", f"marked stale by the workflow ({stamp}): {why[0]}", [str(final_dir)])
    return verdict


# A replay driver records that its attempt is alive every 5 s (replay.HEARTBEAT_S); one not
# seen for this long is not running (or its machine cannot reach this folder).
ALIVE_S = 60.0


def unrecorded(run_dir: Path, now: float | None = None) -> str:
    """Why a run whose ``replay/`` exists has no record, from ``replay-attempts.json`` and the
    published checkpoints: ``replaying now`` (its current attempt was seen alive within
    :data:`ALIVE_S`), ``stopped before its record`` (the cause of the last attempt's end, or no
    end recorded: a driver killed), or ``not replayed yet``; with the checkpoints published so
    far, which a rerun of the workflow resumes from."""
    import time

    from .attempts import FILE, OPEN_DETAIL

    now = time.time() if now is None else now
    try:
        attempts = json.loads((run_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        attempts = []
    last = attempts[-1] if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict) else None
    published = len([p for p in (run_dir / "replay").glob("checkpoint-*") if p.is_dir()])
    checkpoints = f"{published} checkpoint{'s' if published != 1 else ''} published"
    if last is None:
        return "not replayed yet" + (f" ({checkpoints})" if published else "")
    number = last.get("attempt", len(attempts))  # 1 for the first
    seen = last.get("last_seen_unix") or last.get("started_unix")
    if last.get("ended_unix") is None and isinstance(seen, (int, float)) and now - seen <= ALIVE_S:
        return f"replaying now (attempt {number}, seen {now - seen:.0f} s ago; {checkpoints})"
    why = last.get("cause_detail") or last.get("cause") or OPEN_DETAIL
    if last.get("ended_unix") is None:  # the driver never recorded its end
        why = "no end recorded: its driver was killed, or its machine lost"
    return f"stopped before its record (attempt {number}: {why}; {checkpoints}); running the workflow again resumes it"


def status_lines(results: str | Path, tasks: list[str] | None = None) -> tuple[list[str], bool]:
    """What is verified, stale or missing, per run, per task product (the fixed-start reference
    score, the sandbox self-test), per ``final/``, per ablation and for the campaign, from the
    receipts alone (nothing is rebuilt, removed or cached; every file is hashed, the runs' hash
    caches unread). Runs are the ``<task>/<name>-seed<N>`` directories under ``results``;
    ``final/`` is checked against the ``official.json`` files its summary names and every file it
    records it read. Returns the report's lines and whether everything is verified."""
    results = Path(results)
    lines, ok = [], True
    apart = ("models", SELF_TEST, "campaign")  # not tasks
    task_dirs = (
        sorted(p for p in results.iterdir() if p.is_dir() and p.name not in apart and not p.name.startswith("."))
        if results.is_dir()
        else []
    )
    entries = []
    for task_dir in task_dirs:
        if tasks and task_dir.name not in tasks:
            continue
        runs = []
        for run_dir in sorted(p for p in task_dir.iterdir() if p.is_dir() and "-seed" in p.name):
            # every file hashed here: the run's cache is writable by whoever edits the run, so a
            # forged entry would pass a changed file (the workflow's own re-verification keeps it
            # for speed; this is the check a reader runs)
            findings = check_run(run_dir, HashCache(None))
            if not findings and not (run_dir / "replay").exists():
                continue
            runs.append(
                (
                    f"{task_dir.name}/{run_dir.name}",
                    findings or [Finding(str(run_dir / "replay" / "record.json"), "missing", unrecorded(run_dir))],
                )
            )
        others = check_task(task_dir, HashCache(None))
        tables = check_proxy_tables(task_dir, HashCache(None))
        kind = {True: SELF_TEST, False: "reference/fixed-start"}
        products = [(f"{task_dir.name}/{kind[SELF_TEST in Path(f.path).parts]}", [f]) for f in others]
        products += [(f"{task_dir.name}/{Path(f.path).parent.name}/proxy.json", [f]) for f in tables]
        others = others + tables  # final/ and an ablation are vouched for by those they read
        final_dir = task_dir / "final"
        if final_dir.exists():
            products.append((f"{task_dir.name}/final", [_final_status(final_dir, dict(runs), results, others)]))
        ablations = task_dir / "ablation"
        for folder in (
            sorted(p for p in ablations.iterdir() if p.is_dir() and p.name != STAMPS) if ablations.is_dir() else []
        ):
            products.append(
                (f"{task_dir.name}/ablation/{folder.name}", [_ablation_status(folder, dict(runs), results, others)])
            )
        entries += runs + products
    campaign = results / "campaign"
    if not tasks and campaign.is_dir():
        entries.append(("campaign", [check_product(campaign, results.parent, HashCache(None))]))
    for name, findings in entries:
        bad = [f for f in findings if f.state != "verified"]
        states = {f.state for f in bad}
        overall = ("stale" if states & {"stale", "tampered"} else "missing") if bad else "verified"
        ok = ok and not bad
        counted = len(findings) - len(bad)
        lines.append(f"{name}: {overall} ({counted} of {len(findings)} receipts verified)")
        lines += [f"  {f.line()}" for f in bad]
    return lines, ok
