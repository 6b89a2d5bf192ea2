"""Platform / resource status: did an attempt of the replay fail for infrastructure reasons,
was each GPU job's device its own, did the budget accounting hold, does any record still say
``running``? Read from the replay record's ``attempts`` and the ``gpu_slot`` of every replay
attempt, validation marker and score summary of the task."""

from __future__ import annotations

import json
from pathlib import Path

from ..fileio import tree_paths
from .behaviour import overlaps
from .checks import check, key_line, line_of, read_json_or_none, where

BUDGET_SLACK_S = 5.0  # the driver stops training at the outer limit; killing it takes a moment
MAX_STATUS_BYTES = 1 << 20
CANDIDATE_FILES = ("train_result.json", "request.json")  # written by (or for) candidate code: no status of ours


def attempts_check(record_path: str, record: dict) -> dict:
    """Each attempt's cause (``attempts``, issue 28): ``platform`` is *confirmed* (the result
    came from a retry), a cause not recorded is *inconclusive*."""
    name = "attempts_ended_by_the_candidate_or_completed"
    attempts = record.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return check(name, "unknown", "the record lists no attempts", [f"{where(record_path, 1)}: no attempts"])
    fails, unknown, fine = [], [], []
    for k, a in enumerate(attempts, 1):
        no = a.get("attempt", k)
        at = where(record_path, line_of(record_path, f'"started_unix": {json.dumps(a.get("started_unix"))}'))
        cause = a.get("cause")
        text = f"{at}: attempt {no}: {cause or 'cause not recorded'}"
        text += f" ({a.get('cause_detail')})" if a.get("cause_detail") else ""
        text += f", exit {a.get('exit')}" if a.get("exit") is not None else ""
        text += f", log {a['log']}" if a.get("log") else ""
        if cause == "platform":
            fails.append(text)
        elif cause in ("completed", "deadline", "candidate") or (cause is None and k == len(attempts)):
            fine.append(text if cause else f"{at}: attempt {no}: wrote this record")
        else:
            unknown.append(text + (": ended without a record" if cause is None else ""))
    if fails:
        return check(name, "fail", f"{len(fails)} attempts failed for the platform, then retried", fails + unknown)
    if unknown:
        return check(name, "unknown", f"{len(unknown)} earlier attempts of unknown cause", unknown)
    return check(name, "pass", f"{len(attempts)} attempts", fine)


def same_patch_check(record_path: str, record: dict) -> dict:
    """Every attempt replayed the record's patch (attempts are kept per replay identity, which
    hashes the workspace; an attempt that names a patch hash is compared too)."""
    name = "retries_same_patch"
    attempts = record.get("attempts") or []
    other = [a for a in attempts if a.get("patch_sha256") not in (None, record.get("patch_sha256"))]
    line = key_line(record_path, "patch_sha256")
    if other:
        return check(
            name,
            "fail",
            "an attempt replayed another patch",
            [f"{where(record_path, line)}: {len(other)} attempts of another patch"],
        )
    ident = str(record.get("identity", ""))[:12]
    patch = (
        f"patch {str(record['patch_sha256'])[:12]}..." if record.get("patch_sha256") else "no patch (shipped recipe)"
    )
    return check(
        name,
        "pass",
        f"{len(attempts)} attempts of one replay",
        [f"{where(record_path, line)}: {patch}, replay identity {ident}..."],
    )


def gpu_records(task_dir: Path) -> list[tuple[str, int, dict]]:
    """(file, line, gpu_slot) of every replay attempt, validation marker and score summary of the
    task's runs and references (a missing ``gpu_slot`` is given as None)."""
    out = []
    for record in sorted(task_dir.glob("*/replay/record.json")):
        doc = read_json_or_none(record) or {}
        for a in doc.get("attempts") or []:
            out.append(
                (
                    str(record),
                    line_of(record, f'"started_unix": {json.dumps(a.get("started_unix"))}'),
                    a.get("gpu_slot"),
                )
            )
    receipts = sorted(task_dir.glob("*/validation/checkpoint-*.json")) + sorted(
        task_dir.glob("*/*-scores/checkpoint-*/summary.json")
    )
    receipts += sorted(task_dir.glob("reference/*/*-scores/summary.json"))
    for path in receipts:
        doc = read_json_or_none(path) or {}
        out.append((str(path), key_line(path, "gpu_slot"), doc.get("gpu_slot")))
    return out


def gpu_check(task_dir: Path, run_dir: Path) -> dict:
    """No two GPU jobs of the task held one device at once, and no slot's lock file was
    replaced while held; this run's jobs must record their slot (else *inconclusive*)."""
    name = "gpu_exclusive"
    records = gpu_records(task_dir)
    mine = [r for r in records if Path(r[0]).is_relative_to(run_dir)]
    missing = [f"{where(f, n)}: no gpu_slot" for f, n, slot in mine if not slot]
    intervals = [
        (f"GPU {d}", float(s["acquired_unix"]), float(s["released_unix"]), (f, n, s))
        for f, n, s in records
        if s and s.get("acquired_unix") is not None and s.get("released_unix") is not None
        for d in s.get("devices") or []
    ]
    bad = [
        f"{where(a[0], a[1])} and {where(b[0], b[1])} held {what} together for {sec:.2f} s"
        for what, sec, a, b in overlaps(intervals)
    ]
    bad += [
        f"{where(f, n)}: {'; '.join(e.get('detail', '') for e in s.get('lock_events') or []) or 'lock_replaced'}"
        for f, n, s in records
        if s and s.get("lock_replaced")
    ]
    if bad:
        return check(name, "fail", f"{len(bad)} findings", bad)
    if missing:
        return check(name, "unknown", f"{len(missing)} of this run's GPU jobs record no slot", missing)
    devices = sorted({d for _, _, s in mine for d in (s or {}).get("devices") or []})
    what = f"devices {', '.join(devices)}" if devices else "no GPU (slots without a device: a CPU-only machine)"
    return check(
        name,
        "pass",
        f"{len(mine)} GPU jobs of this run, {len(records)} of the task",
        [
            f"{where(mine[0][0], mine[0][1]) if mine else task_dir}: {len(intervals)} device intervals of "
            f"{len(records)} jobs, none overlapping; {what}"
        ],
    )


def budget_check(record_path: str, record: dict) -> dict:
    """The budget held, by the replay driver's own account (the record's ``utilisation`` and
    ``observed``, never the recipe's ``train_result.json`` or ledger times): wall time over all
    attempts within the outer limit (+ :data:`BUDGET_SLACK_S`), and no retained checkpoint
    published or changed after the internal deadline + export reserve (``observed.late``:
    *confirmed*, naming each). A record without the driver's observation is *inconclusive*."""
    name = "budget_held"
    used = (record.get("utilisation") or {}).get("wall_s_all_attempts")
    outer = (record.get("budget") or {}).get("outer_limit_s")
    if used is None or outer is None:
        return check(
            name, "unknown", "the record has no budget accounting", [f"{where(record_path, 1)}: no utilisation"]
        )
    at = (
        f"{where(record_path, key_line(record_path, 'wall_s_all_attempts'))}: {used:.1f} s of the {outer:.0f} s "
        f"outer limit over all attempts ({used / outer:.0%}), stop_reason {record.get('stop_reason')}"
    )
    observed = record.get("observed")
    if used > outer + BUDGET_SLACK_S:
        return check(name, "fail", "over the outer limit", [at])
    if not isinstance(observed, dict):
        return check(
            name,
            "unknown",
            "the record has no observation of the internal deadline by the replay driver",
            [f"{at}; no observed (a record written before the driver kept its own account of the deadline)"],
        )
    late = observed.get("late") or {}
    if late:
        found = [  # each at its checkpoint's entry in the record (checkpoints.<N>.late)
            f"{where(record_path, key_line(record_path, 'late', why))}: checkpoint-{p}: late: {why}"
            for p, why in late.items()
        ]
        return check(name, "fail", f"{len(late)} retained checkpoints published after the internal deadline", found)
    after = observed.get("ended_after_deadline_s")
    reserve = (record.get("budget") or {}).get("export_reserve_s")
    if after is not None:
        when = f"{after:.1f} s after" if after >= 0 else f"{-after:.1f} s before"
        allowed = f" (export reserve {reserve:.0f} s)" if isinstance(reserve, int | float) else ""
        at += f"; the driver saw the training process end {when} the internal deadline{allowed}"
    return check(
        name, "pass", "within the outer limit; no checkpoint after the internal deadline + export reserve", [at]
    )


def stale_check(run_dir: Path, record: dict, record_path: str) -> dict:
    """No record of the run says ``running`` after its job ended, and no attempt of a
    finished replay is left without an end."""
    name = "no_stale_status"
    bad = []
    for path in sorted(tree_paths(run_dir, "*.json")):
        rel = path.relative_to(run_dir)
        if any(p.startswith("checkpoint-") or p == "workspace" for p in rel.parts[:-1]) or rel.name in CANDIDATE_FILES:
            continue
        if path.stat().st_size <= MAX_STATUS_BYTES and _says_running(read_json_or_none(path)):
            bad.append(f"{where(path, key_line(path, 'status', 'running'))}: status running after its job ended")
    attempts = record.get("attempts") or []
    if attempts and "ended_unix" in attempts[-1] and attempts[-1]["ended_unix"] is None:
        bad.append(
            f"{where(record_path, key_line(record_path, 'attempts'))}: the last attempt has no end in a finished record"
        )
    if bad:
        return check(name, "fail", f"{len(bad)} stale statuses", bad)
    return check(name, "pass", "no record says running", [f"{run_dir}: no JSON record has status running"])


def _says_running(doc) -> bool:
    """A harness record that says ``running``: its own ``status``, or an attempt's (values
    nested deeper, e.g. the recipe's ``train_metrics``, are the candidate's, not a status)."""
    if not isinstance(doc, dict):
        return False
    attempts = doc.get("attempts") if isinstance(doc.get("attempts"), list) else []
    return doc.get("status") == "running" or any(isinstance(a, dict) and a.get("status") == "running" for a in attempts)


def platform_checks(task_dir: Path, run_dir: Path, record_path: str, record: dict) -> list[dict]:
    """Every platform check of one run."""
    return [
        attempts_check(record_path, record),
        same_patch_check(record_path, record),
        gpu_check(task_dir, run_dir),
        budget_check(record_path, record),
        stale_check(run_dir, record, record_path),
    ]
