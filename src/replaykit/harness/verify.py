"""Receipts that are checked, not only written.

Every product downstream of a replay carries the hashes of what it was made from: a
validation marker the checkpoint's tree hash (``checkpoint_sha256``) and the record's
(``recorded_sha256``); a final score the checkpoint's tree hash and its marker's SHA-256;
``official.json`` the record's SHA-256 and every marker's and summary's; ``final/summary.json``
every ``official.json``'s. :func:`check_run` and :func:`check_final` compare them with the
files on disk and return one :class:`Finding` per receipt: ``verified``, ``stale`` (a hash
differs), ``missing`` or ``tampered`` (a checkpoint differs from its record, already marked
invalid). A stale or missing receipt names the products that can no longer be trusted
(``invalidates``): the receipt itself and everything built from it, up to ``final/``.
:func:`reverify`, the workflow's explicit re-verification step (``rules/common.smk`` runs it
once when the workflow starts, before the DAG is built, for every run and ``final/`` folder of
the configured tasks), marks those products stale by rewriting a stamp that is an input of
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
from .receipts import RECEIPT, SUMMARY, status

CACHE = ".hash-cache.json"  # per run: results/<task>/<run>/.hash-cache.json


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
    summary = _json(scores / SUMMARY)
    if status(scores) != "complete" or summary is None:
        return out + [Finding(str(scores / SUMMARY), "missing", "no complete final score", [*score_files, *downstream])]
    if summary.get("checkpoint_sha256") != actual or summary.get("marker_sha256") != cache.file(marker):
        why = "made from another checkpoint or marker"
        return out + [Finding(str(scores / SUMMARY), "stale", why, [*score_files, *downstream])]
    return out + [Finding(str(scores / SUMMARY), "verified")]


def _check_official(run_dir: Path, record_path: Path, record: dict, cache: HashCache) -> Finding:
    """``official.json`` against the record and each checkpoint's marker and score."""
    official_path = run_dir / "official.json"
    official = _json(official_path)
    if official is None:
        state = "missing" if not official_path.exists() else "stale"
        return Finding(str(official_path), state, "no readable official.json", [str(official_path)])
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
    if any(f.invalidates for f in out):
        return out
    out.append(_check_official(run_dir, record_path, record, cache))
    return out + _check_audit(run_dir, cache)


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
    recorded = summary.get("officials_sha256") or {}
    for path in dict.fromkeys(str(p) for p in officials):
        if not (Path(root) / path).is_file():
            return Finding(str(final_dir), "stale", f"{path} is missing", [str(final_dir)])
        if recorded.get(path) != cache.file(Path(root) / path):
            return Finding(str(final_dir), "stale", f"made from another {path}", [str(final_dir)])
    mismatch = _final_mismatch(final_dir, summary, Path(root), cache)
    if mismatch:
        return Finding(str(final_dir), "tampered", mismatch, [str(final_dir)])
    return Finding(str(final_dir), "verified")


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


def reverify(runs, finals: dict, *, say=print) -> list[str]:
    """The re-verification step: check the receipts of each run folder in ``runs`` (with its
    hash cache) and of each ``final/`` folder in ``finals`` (``final/`` -> the ``official.json``
    files it is built from; their runs are checked too, and ``final/`` is stale when one of
    them is being rebuilt); ``say`` one ``receipts: <file>: <state>: <why>`` line per receipt
    that is not verified, and one line per product to rebuild; mark those products stale
    (:func:`mark_stale`). Each run is checked once. Returns the products to rebuild."""
    checked: dict[Path, list[Finding]] = {}

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
        stale_runs = any(f.invalidates for o in officials for f in of_run(Path(o).parent))
        if stale_runs and Path(final_dir).exists():
            of_finals.append(Finding(str(final_dir), "stale", "built from receipts being rebuilt", [str(final_dir)]))
        elif not stale_runs:
            of_finals += [v for v in [check_final(final_dir, officials)] if v is not None]
    bad = [f for f in [*(f for fs in checked.values() for f in fs), *of_finals] if f.state != "verified"]
    for f in bad:
        say(f"receipts: {f.line()}")
    products = mark_stale(bad, utc_now(), finals)
    moved = set_aside(bad, say)
    for product in products:
        if Path(product).exists() and product not in moved:
            say(f"receipts: {product}: will be rebuilt; kept as it is until its rebuild succeeds")
    return products


def _final_status(final_dir: Path, runs: dict[str, list[Finding]], results: Path) -> Finding:
    """``final/``'s finding for ``status``: :func:`check_final` against the ``official.json``
    files its summary names (relative to the workflow's folder, ``results``' parent); stale
    also when a run those files belong to is not verified (``runs``: ``<task>/<run>`` -> its
    findings), or when the workflow marked it stale (:func:`stamp_of`, newer than its
    ``.complete``) and has not rebuilt it since."""
    recorded = (_json(final_dir / SUMMARY) or {}).get("officials_sha256")
    if not isinstance(recorded, dict) or not recorded:
        return Finding(str(final_dir), "stale", "its summary names no official.json hashes", [str(final_dir)])
    names = list(recorded)
    verdict = check_final(final_dir, names, root=results.parent)
    if verdict.state != "verified":
        return verdict
    task = final_dir.parent
    for name in names:
        run = Path(name).parent
        # a run of this task under these results, checked above: one elsewhere is not vouched for
        inside = (results.parent / run).resolve().parent == task.resolve()
        findings = runs.get(f"{task.name}/{run.name}") if inside else None
        if not findings or any(f.state != "verified" for f in findings):
            why = "whose receipts are not verified" if inside else f"not a run of {task}"
            return Finding(str(final_dir), "stale", f"built from {run}, {why}", [str(final_dir)])
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
    """What is verified, stale or missing, per run and per ``final/``, from the receipts alone
    (nothing is rebuilt, removed or cached; every file is hashed, the runs' hash caches unread).
    Runs are the ``<task>/<name>-seed<N>`` directories under ``results``; ``final/`` is checked
    against the ``official.json`` files its summary names. Returns the report's lines and
    whether everything is verified."""
    results = Path(results)
    lines, ok = [], True
    task_dirs = sorted(p for p in results.iterdir() if p.is_dir() and p.name != "models") if results.is_dir() else []
    for task_dir in task_dirs:
        if tasks and task_dir.name not in tasks:
            continue
        entries = []
        for run_dir in sorted(p for p in task_dir.iterdir() if p.is_dir() and "-seed" in p.name):
            # every file hashed here: the run's cache is writable by whoever edits the run, so a
            # forged entry would pass a changed file (the workflow's own re-verification keeps it
            # for speed; this is the check a reader runs)
            findings = check_run(run_dir, HashCache(None))
            if not findings and not (run_dir / "replay").exists():
                continue
            entries.append(
                (
                    f"{task_dir.name}/{run_dir.name}",
                    findings or [Finding(str(run_dir / "replay" / "record.json"), "missing", unrecorded(run_dir))],
                )
            )
        final_dir = task_dir / "final"
        if final_dir.exists():
            entries.append((f"{task_dir.name}/final", [_final_status(final_dir, dict(entries), results)]))
        for name, findings in entries:
            bad = [f for f in findings if f.state != "verified"]
            states = {f.state for f in bad}
            overall = ("stale" if states & {"stale", "tampered"} else "missing") if bad else "verified"
            ok = ok and not bad
            counted = len(findings) - len(bad)
            lines.append(f"{name}: {overall} ({counted} of {len(findings)} receipts verified)")
            lines += [f"  {f.line()}" for f in bad]
    return lines, ok
