"""Official result of a run, and the numbers of the task's final result with its references
(the report writes them: :func:`replaykit.report.final.final_result`).

Chain a reader can follow by file name: ``final/summary.json`` -> per-seed
``official.json`` -> ``final-scores/checkpoint-N/summary.json`` -> ``replay/record.json``
-> workspace record (patch SHA-256) -> asset manifest.
"""

from __future__ import annotations

from pathlib import Path

from .decision import first_attempt_started, rule_receipt
from .errors import InputError
from .fileio import atomic_write_json, read_json, read_jsonl, recording_reads
from .hashing import sha256_file
from .provenance import TINY_ADVISORY, fingerprint, workflow_provenance
from .receipts import INPUTS, read_complete_summary, read_verified_json, status, verified, write_receipt
from .sandbox import NO_ISOLATION_ADVISORY
from .select import best_valid, proxy_selected
from .selftest import self_test_section
from .stats import exact_mcnemar, mean_sd, normalisation_undefined, normalised_score, paired_bootstrap

ROWS = "rows.jsonl"


def _sha_or_none(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def _checkpoint_entry(progress: int, marker_path, score_dir, proxy_dir) -> dict:
    """One retained checkpoint of ``official.json``: its validation verdict, its final value
    (valid ones), and its proxy value when the proxy split was scored (``proxy_dir``)."""
    marker = read_json(marker_path, required=("valid", "reason"))
    if not isinstance(marker["valid"], bool):
        raise InputError(marker_path, "valid", f"must be true or false, got {marker['valid']!r}")
    summary_path = Path(score_dir) / "summary.json"
    entry = {
        "progress": progress,
        "valid": marker["valid"],
        "reason": marker["reason"],
        "marker": str(marker_path),
        "scores": str(score_dir),
        "score_status": status(score_dir),
        "value": None,
        "se": None,
        "checkpoint_sha256": marker.get("checkpoint_sha256"),
        "marker_sha256": sha256_file(marker_path),
        "summary_sha256": sha256_file(summary_path) if summary_path.is_file() else None,
        # the rows too: a consistent rewrite of rows.jsonl and its .complete line disagrees with this
        "rows_sha256": _sha_or_none(Path(score_dir) / ROWS),
    }
    if entry["valid"]:
        summary = read_complete_summary(score_dir)
        entry.update(
            value=summary["value"],
            se=summary["uncertainty"]["value"],
            n=summary["n"],
            metric=summary["metric"],
            uncertainty_kind=summary["uncertainty"]["kind"],
            diagnostics=summary["diagnostics"],
            advisories=summary["advisories"],
        )
    if proxy_dir is not None:
        proxy = read_complete_summary(proxy_dir)
        entry.update(
            proxy_scores=str(proxy_dir),
            proxy_value=proxy["value"],
            proxy_se=proxy["uncertainty"]["value"],
            proxy_metric=proxy["metric"],
            proxy_summary_sha256=sha256_file(Path(proxy_dir) / "summary.json"),
            proxy_rows_sha256=_sha_or_none(Path(proxy_dir) / ROWS),
        )
    return entry


def _decision_receipt(decision_rule, record: dict) -> dict | None:
    """The candidate run's decision rule, as it stood against this replay's first attempt
    (:func:`replaykit.harness.decision.rule_receipt`); None for a run without one (shipped)."""
    if not decision_rule:
        return None
    return rule_receipt(decision_rule, first_attempt_started(record))


def official_result(
    *,
    task: str,
    run: str,
    record_path: str | Path,
    markers: dict[int, str | Path],
    scores: dict[int, str | Path],
    direction: str,
    out: str | Path,
    proxy_scores: dict[int, str | Path] | None = None,
    decision_rule: str | Path | None = None,
) -> dict:
    """Select the best valid final result among the retained checkpoints and, beside it, the
    proxy-selected one (:func:`replaykit.harness.select.proxy_selected`); write ``out``.

    Args:
        markers: progress -> validation marker (JSON).
        scores: progress -> final-score directory (``summary.json`` + ``.complete``).
        proxy_scores: progress -> proxy-score directory, for every retained checkpoint (None:
            no proxy-selected result, as in ``official.json`` files written before it).
        decision_rule: the candidate's ``decision-rules/<candidate>.json`` (None for a shipped
            run): recorded with the version in force at the replay's first attempt.

    Raises:
        InputError: markers, final or proxy scores that do not cover the retained checkpoints,
        a marker whose ``valid`` is not a bool, an incomplete score directory, a bad decision rule.
    """
    record = read_json(record_path, required=("retained", "seed"))
    retained = sorted(record["retained"])
    for name, given in (("validation markers", markers), ("final scores", scores), ("proxy scores", proxy_scores)):
        if given is not None and sorted(given) != retained:
            raise InputError(record_path, "retained", f"{name} do not cover the retained checkpoints {retained}")
    checkpoints = [
        _checkpoint_entry(p, markers[p], scores[p], proxy_scores[p] if proxy_scores is not None else None)
        for p in retained
    ]
    doc = {
        "task": task,
        "run": run,
        "seed": record["seed"],
        "direction": direction,
        "record": str(record_path),
        "record_sha256": sha256_file(record_path),
        **{key: record.get(key) for key in RECORD_KEYS},
        "isolation": record.get("isolation", "unknown"),
        "tiny": bool(record.get("tiny", False)),
        "checkpoints": checkpoints,
        "official": best_valid(checkpoints, direction),
        "proxy_selected": proxy_selected(checkpoints, direction) if proxy_scores is not None else None,
        "decision_rule": _decision_receipt(decision_rule, record),
    }
    atomic_write_json(out, doc)
    write_receipt(out)  # official.json.sha256: what a consumer and status check it against
    return doc


# copied from the replay record into official.json
RECORD_KEYS = (
    "patch_sha256",
    "asset_manifest",
    "asset_manifest_sha256",
    "workspace_record",
    "budget",
    "stop_reason",
    "utilisation",
    "reported_by_recipe",
    "publication_count",
    "exploration",
)


def official_from_paths(
    *,
    task: str,
    run: str,
    record_path: str | Path,
    markers: list[str | Path],
    scores: list[str | Path],
    direction: str,
    out: str | Path,
    proxy_scores: list[str | Path] | None = None,
    decision_rule: str | Path | None = None,
) -> dict:
    """:func:`official_result` of validation markers (``.../checkpoint-N.json``) and final- and
    proxy-score directories (``.../checkpoint-N``) given as lists of paths, each keyed by the
    progress ``N`` its name ends with. Raises what :func:`official_result` raises."""

    def by_progress(paths, stem=False):
        return {int((Path(p).stem if stem else Path(p).name).split("-")[-1]): p for p in paths}

    return official_result(
        task=task,
        run=run,
        record_path=record_path,
        markers=by_progress(markers, stem=True),
        scores=by_progress(scores),
        direction=direction,
        out=out,
        proxy_scores=None if proxy_scores is None else by_progress(proxy_scores),
        decision_rule=decision_rule,
    )


def proxy_table(scores: list[str | Path], out: str | Path) -> dict:
    """Write the proxy scores of a run's checkpoints (their complete ``summary.json``) to one
    file, ``out``, keyed by score folder name. Returns the document. Raises
    :class:`InputError` for a score directory that is not complete or disagrees with its
    receipt. The file records the summaries it read (``inputs_sha256``) and has its receipt
    beside it (``proxy.json.sha256``)."""
    table = {}
    with recording_reads() as reads:
        summaries = [(score_dir, read_complete_summary(score_dir)) for score_dir in scores]
    for score_dir, s in summaries:
        table[Path(score_dir).name] = {
            "metric": s["metric"],
            "value": s["value"],
            "se": s["uncertainty"]["value"],
            "n": s["n"],
            "summary": f"{score_dir}/summary.json",
        }
    doc = {"split": "proxy", "note": "exploration only; never mixed with final numbers", "checkpoints": table}
    doc[INPUTS] = dict(sorted(reads.items()))
    atomic_write_json(out, doc)
    write_receipt(out)
    return doc


def _rows_by_id(score_dir: str | Path) -> dict[str, dict]:
    path = Path(score_dir) / "rows.jsonl"
    out: dict[str, dict] = {}
    if path.exists():
        verified(path)  # the rows the score's receipt (.complete) lists, or none
    for number, row in enumerate(read_jsonl(path, required=("id", "score")), start=1):
        if str(row["id"]) in out:
            raise InputError(path, f"line {number}.id", f"duplicate row id {row['id']!r}")
        out[str(row["id"])] = {"score": float(row["score"]), "weight": row.get("weight"), "stratum": row.get("stratum")}
    return out


def paired_comparison(a_dir: str | Path, b_dir: str | Path, n_boot: int, seed: int, scale: float = 1.0) -> dict:
    """Paired bootstrap CI (and an exact McNemar test for 0/1 scores) of ``a - b`` over shared rows.

    Rows may carry a ``weight`` (their share of the metric) and a ``stratum`` (resampled
    within); the difference and CI are multiplied by ``scale`` (e.g. 100 for a percent metric
    over 0/1 rows). McNemar's test counts rows equally, so it is left out for weighted rows,
    where it would test a different quantity from the difference reported. Raises
    :class:`InputError` when the two sets of rows, or their weights and strata, differ.
    """
    a, b = _rows_by_id(a_dir), _rows_by_id(b_dir)
    if set(a) != set(b):
        raise InputError(Path(a_dir) / "rows.jsonl", "id", f"rows differ from {Path(b_dir) / 'rows.jsonl'}")
    ids = sorted(a)
    for i in ids:
        if (a[i]["weight"], a[i]["stratum"]) != (b[i]["weight"], b[i]["stratum"]):
            raise InputError(
                Path(a_dir) / "rows.jsonl", f"{i}.weight", f"weight/stratum differ from {Path(b_dir) / 'rows.jsonl'}"
            )
    xa, xb = [a[i]["score"] for i in ids], [b[i]["score"] for i in ids]
    weighted = any(a[i]["weight"] is not None for i in ids)
    out = paired_bootstrap(
        xa,
        xb,
        n_boot=n_boot,
        seed=seed,
        weights=[a[i]["weight"] for i in ids] if weighted else None,
        strata=[str(a[i]["stratum"]) for i in ids] if any(a[i]["stratum"] for i in ids) else None,
    )
    for key in ("difference", "ci_low", "ci_high"):
        out[key] *= scale
    out.update(a=str(a_dir), b=str(b_dir), scale=scale)  # difference = a - b; McNemar's a_only / b_only
    if not weighted and set(xa) | set(xb) <= {0.0, 1.0}:
        out["mcnemar"] = exact_mcnemar([v == 1.0 for v in xa], [v == 1.0 for v in xb])
    return out


def _no_official(official_path: str | Path, doc: dict) -> InputError:
    """The error of a run whose retained checkpoints are all invalid, with the repair when one
    changed after its publication, and why when one was late."""
    message = "no valid checkpoint: there is no official result"
    if any(c["reason"].startswith("late: ") for c in doc["checkpoints"]):
        message += (
            "; the replay published a retained checkpoint after the internal deadline + export reserve"
            " (the validation markers and the audit's budget_held name it): that replay has no result"
        )
    if any(c["reason"].startswith("checkpoint changed after publication") for c in doc["checkpoints"]):
        run_dir = Path(official_path).parent
        message += (
            "; a checkpoint changed after its publication: start a fresh formal "
            f"replay: rm -r {run_dir}/replay {run_dir}/replay-state, then rerun"
        )
    return InputError(official_path, "official", message)


def _references(fixed: dict | None, fixed_start_scores, shipped_best: dict | None, shipped_official, published) -> dict:
    return {
        "fixed_start": (
            {"value": fixed["value"], "se": fixed["uncertainty"]["value"], "scores": str(fixed_start_scores)}
            if fixed
            else None
        ),
        "shipped": {
            "value": shipped_best["value"] if shipped_best else None,
            "se": shipped_best["se"] if shipped_best else None,
            "official": str(shipped_official),
        },
        "published": published or {},
    }


def _per_seed(docs: list[dict], officials: list[str | Path]) -> list[dict]:
    return [
        {
            "seed": d["seed"],
            "run": d["run"],
            "value": d["official"]["value"] if d["official"] else None,
            "progress": d["official"]["progress"] if d["official"] else None,
            "official": str(p),
            "proxy_selected": _proxy_selected_of(d),
        }
        for d, p in zip(docs, officials)
    ]


def _proxy_selected_of(doc: dict) -> dict | None:
    """The run's proxy-selected result in INTERFACES.md's fields (``progress``, ``proxy_value``,
    ``final_value``, ``oracle_gap``) plus its rule; None when ``official.json`` has none."""
    chosen = doc.get("proxy_selected")
    if not chosen:
        return None
    keys = ("progress", "proxy_value", "final_value", "oracle_gap", "rule")
    return {"run": doc["run"], **{k: chosen[k] for k in keys}}


def _decision_rule_of(doc: dict) -> dict | None:
    """The official run's decision-rule receipt, short (``path``, ``sha256``, ``fixed_in_advance``,
    ``in_force_sha256``: the version in force at the first replay, ``note``); None for a run
    without one (the shipped recipe, or an ``official.json`` that predates them)."""
    receipt = doc.get("decision_rule")
    if not receipt:
        return None
    in_force = receipt.get("in_force_at_first_attempt") or {}
    return {
        **{k: receipt.get(k) for k in ("path", "sha256", "fixed_in_advance", "note")},
        "in_force_sha256": in_force.get("sha256"),
    }


def _final_advisories(
    best: dict, isolation: list[str], refs: tuple, normalisation: str | None, primary, tiny: bool
) -> list[str]:
    """The official checkpoint's advisories, the replays' isolation first when it was not the
    sandbox, then whether the runs are tiny, then what the references could not give and a missing
    proxy-selected result."""
    fixed, shipped_best = refs
    advisories = [a for a in best.get("advisories", []) if a != TINY_ADVISORY]
    if isolation != ["bwrap"]:
        advisories = [a for a in advisories if a != NO_ISOLATION_ADVISORY]
        advisories.insert(
            0,
            NO_ISOLATION_ADVISORY
            if "none" in isolation
            else f"isolation of the replays: {', '.join(isolation)} (records without it predate the sandbox)",
        )
    if tiny:  # second only to the isolation's
        advisories.insert(1 if advisories[:1] and advisories[0].startswith("isolation") else 0, TINY_ADVISORY)
    if fixed is None:
        advisories.append("no fixed-start reference: the fixed start cannot be scored by itself (no normalised score)")
    if shipped_best is None:
        advisories.append("the shipped reference has no valid checkpoint: no paired comparison or normalised score")
    elif normalisation:
        advisories.append(normalisation)
    if primary.get("proxy_selected") is None:
        why = "no valid checkpoint has a proxy score" if "proxy_selected" in primary else "official.json predates it"
        advisories.append(f"no proxy-selected result for run {primary['run']}: {why}")
    rule = _decision_rule_of(primary)
    if rule and rule["fixed_in_advance"] is not True:
        advisories.append(f"decision rule {rule['sha256'][:12]} not shown to be fixed in advance: {rule['note']}")
    return advisories


def _lineage(primary: dict) -> dict:
    keys = ("asset_manifest", "asset_manifest_sha256", "workspace_record", "patch_sha256", "record", "record_sha256")
    return {key: primary[key] for key in keys}


def final_summary(
    *,
    officials: list[str | Path],
    fixed_start_scores: str | Path | None,
    shipped_official: str | Path,
    published: dict,
    n_boot: int,
    scale: float = 1.0,
    proxy_table: str | Path | None = None,
    self_test: str | Path | None = None,
) -> tuple[dict, list[dict]]:
    """The task's final summary (``final/summary.json``'s fields) and the runs'
    ``official.json`` documents it was made from (the report lists their checkpoints).

    The headline is the official result of the first seed; with several seeds the summary
    also gives the mean and SD of the per-seed official values. ``fixed_start_scores`` is
    None for a task whose fixed start cannot be scored (``rm``: no reward head); there is
    then no comparison with it and no normalised score. ``scale``: see :func:`paired_comparison`.
    ``proxy_table``: the official run's ``proxy.json``, shown beside the exploration's proxy
    receipts when the candidate came from an exploration (:func:`exploration_section`).
    ``self_test``: the task's sandbox self-test (``sandbox_self_test``, :func:`.selftest.self_test_section`).
    Raises :class:`InputError` when the first seed's run has no valid checkpoint.
    """
    docs = [read_verified_json(p, required=("official", "checkpoints")) for p in officials]
    primary = docs[0]
    shipped = read_verified_json(shipped_official, required=("official",))
    fixed = read_complete_summary(fixed_start_scores) if fixed_start_scores else None
    best = primary["official"]
    if best is None:
        raise _no_official(officials[0], primary)
    shipped_best = shipped["official"]
    against = {
        "vs_fixed_start": fixed_start_scores if fixed else None,
        "vs_shipped": (shipped_best or {}).get("scores"),
    }
    comparisons = {
        name: paired_comparison(best["scores"], other, n_boot, seed=0, scale=scale)
        for name, other in against.items()
        if other
    }
    normalised, normalisation = _normalisation(best, fixed, shipped_best, primary["direction"])
    per_seed = _per_seed(docs, officials)
    isolation = sorted({d.get("isolation", "unknown") for d in [*docs, shipped]})
    tiny = any(d.get("tiny", False) for d in [*docs, shipped]) or workflow_provenance()["tiny"]
    summary = {
        "metric": best["metric"],
        "direction": primary["direction"],
        "value": best["value"],
        "uncertainty": {"value": best["se"], "kind": best["uncertainty_kind"]},
        "n": best["n"],
        "diagnostics": best.get("diagnostics", {}),
        "advisories": _final_advisories(best, isolation, (fixed, shipped_best), normalisation, primary, tiny),
        "isolation": isolation[0] if len(isolation) == 1 else isolation,
        "tiny": tiny,
        "final_split": _final_split(primary.get("asset_manifest")),
        "official": {
            "run": primary["run"],
            "seed": primary["seed"],
            "progress": best["progress"],
            "scores": best["scores"],
            "official": str(officials[0]),
            "checkpoint_sha256": best.get("checkpoint_sha256"),
        },
        # receipts: the exact official.json files this summary was made from
        "officials_sha256": {str(p): sha256_file(p) for p in dict.fromkeys([*officials, shipped_official])},
        "references": _references(fixed, fixed_start_scores, shipped_best, shipped_official, published),
        "comparisons": comparisons,
        "normalised_score": normalised,
        "normalised_undefined": normalisation,
        # the checkpoint the proxy ranks best and official − proxy-selected (issue 30)
        "proxy_selected": _proxy_selected_of(primary),
        "decision_rule": _decision_rule_of(primary),
        "seeds": {**mean_sd([s["value"] for s in per_seed if s["value"] is not None]), "per_seed": per_seed},
        "exploration": exploration_section(primary, proxy_table),
        "lineage": _lineage(primary),
        "sandbox_self_test": self_test_section(self_test, [_replay_record(d) for d in [*docs, shipped]]),
        "fingerprint": fingerprint(),
    }
    return summary, docs


def _normalisation(best: dict, fixed: dict | None, shipped_best: dict | None, direction: str) -> tuple:
    """``(normalised score, why it is undefined)`` of the official result: both None without a
    fixed-start or shipped reference (the advisories say which); the score None and the
    reason given where the shipped reference does not beat the fixed start."""
    if not (fixed and shipped_best):
        return None, None
    return (
        normalised_score(best["value"], fixed["value"], shipped_best["value"], direction),
        normalisation_undefined(fixed["value"], shipped_best["value"], direction),
    )


def _replay_record(official: dict) -> dict:
    """The run and its replay record's ``fingerprint`` (None when the record has none or is gone)."""
    path = official.get("record")
    record = read_json(path) if path and Path(path).is_file() else {}
    return {"run": official.get("run"), "fingerprint": record.get("fingerprint")}


def _final_split(manifest_path: str | None) -> dict:
    """How the final split was drawn (public or operator salt), from the asset manifest."""
    from .salt import PRIVATE_NOTE, PUBLIC_NOTE

    manifest = read_json(manifest_path) if manifest_path and Path(manifest_path).is_file() else {}
    salt = manifest.get("final_salt", "public")
    return {"salt": salt, "note": PRIVATE_NOTE if salt == "operator" else PUBLIC_NOTE}


def exploration_section(official: dict, proxy_table: str | Path | None) -> dict | None:
    """The exploration the official run's patch came from (its record's link), with the
    formal replay's proxy and final values per checkpoint beside its proxy receipts."""
    link = official.get("exploration")
    if not link:
        return None
    proxy = read_verified_json(proxy_table)["checkpoints"] if proxy_table else {}
    formal = [
        {
            "checkpoint": f"checkpoint-{c['progress']}",
            "proxy": (proxy.get(f"checkpoint-{c['progress']}") or {}).get("value"),
            "proxy_se": (proxy.get(f"checkpoint-{c['progress']}") or {}).get("se"),
            "final": c["value"],
            "final_se": c["se"],
        }
        for c in official["checkpoints"]
    ]
    return {**link, "proxy_table": str(proxy_table) if proxy_table else None, "formal": formal}
