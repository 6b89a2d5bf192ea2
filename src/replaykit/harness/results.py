"""Official result of a run, and the numbers of the task's final result with its references
(the report writes them: :func:`replaykit.report.final.final_result`).

Chain a reader can follow by file name: ``final/summary.json`` -> per-seed
``official.json`` -> ``final-scores/checkpoint-N/summary.json`` -> ``replay/record.json``
-> workspace record (patch SHA-256) -> asset manifest.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json, read_jsonl
from .hashing import sha256_file
from .provenance import TINY_ADVISORY, workflow_provenance
from .receipts import read_complete_summary, status
from .sandbox import NO_ISOLATION_ADVISORY
from .select import best_valid
from .stats import exact_mcnemar, mean_sd, normalised_score, paired_bootstrap


def official_result(
    *,
    task: str,
    run: str,
    record_path: str | Path,
    markers: dict[int, str | Path],
    scores: dict[int, str | Path],
    direction: str,
    out: str | Path,
) -> dict:
    """Select the best valid final result among the retained checkpoints and write ``out``.

    Args:
        markers: progress -> validation marker (JSON).
        scores: progress -> final-score directory (``summary.json`` + ``.complete``).
    """
    record = read_json(record_path, required=("retained", "seed"))
    if sorted(markers) != sorted(record["retained"]) or sorted(scores) != sorted(record["retained"]):
        raise InputError(record_path, "retained", "validation markers / scores do not cover the retained checkpoints")
    checkpoints = []
    for progress in sorted(record["retained"]):
        marker = read_json(markers[progress], required=("valid", "reason"))
        if not isinstance(marker["valid"], bool):
            raise InputError(markers[progress], "valid", f"must be true or false, got {marker['valid']!r}")
        summary_path = Path(scores[progress]) / "summary.json"
        entry = {
            "progress": progress,
            "valid": marker["valid"],
            "reason": marker["reason"],
            "marker": str(markers[progress]),
            "scores": str(scores[progress]),
            "score_status": status(scores[progress]),
            "value": None,
            "se": None,
            "checkpoint_sha256": marker.get("checkpoint_sha256"),
            "marker_sha256": sha256_file(markers[progress]),
            "summary_sha256": sha256_file(summary_path) if summary_path.is_file() else None,
        }
        if entry["valid"]:
            summary = read_complete_summary(scores[progress])
            entry.update(
                value=summary["value"],
                se=summary["uncertainty"]["value"],
                n=summary["n"],
                metric=summary["metric"],
                uncertainty_kind=summary["uncertainty"]["kind"],
                diagnostics=summary["diagnostics"],
                advisories=summary["advisories"],
            )
        checkpoints.append(entry)
    best = best_valid(checkpoints, direction)
    doc = {
        "task": task,
        "run": run,
        "seed": record["seed"],
        "direction": direction,
        "record": str(record_path),
        "record_sha256": sha256_file(record_path),
        "patch_sha256": record.get("patch_sha256"),
        "asset_manifest": record.get("asset_manifest"),
        "asset_manifest_sha256": record.get("asset_manifest_sha256"),
        "workspace_record": record.get("workspace_record"),
        "budget": record.get("budget"),
        "stop_reason": record.get("stop_reason"),
        "utilisation": record.get("utilisation"),
        "publication_count": record.get("publication_count"),
        "isolation": record.get("isolation", "unknown"),
        "tiny": bool(record.get("tiny", False)),
        "exploration": record.get("exploration"),
        "checkpoints": checkpoints,
        "official": best,
    }
    atomic_write_json(out, doc)
    return doc


def official_from_paths(
    *,
    task: str,
    run: str,
    record_path: str | Path,
    markers: list[str | Path],
    scores: list[str | Path],
    direction: str,
    out: str | Path,
) -> dict:
    """:func:`official_result` of validation markers (``.../checkpoint-N.json``) and final-score
    directories (``.../checkpoint-N``) given as lists of paths, each keyed by the progress ``N``
    its name ends with. Raises what :func:`official_result` raises."""
    return official_result(
        task=task,
        run=run,
        record_path=record_path,
        markers={int(Path(m).stem.split("-")[-1]): m for m in markers},
        scores={int(Path(s).name.split("-")[-1]): s for s in scores},
        direction=direction,
        out=out,
    )


def proxy_table(scores: list[str | Path], out: str | Path) -> dict:
    """Write the proxy scores of a run's checkpoints (their complete ``summary.json``) to one
    file, ``out``, keyed by score folder name. Returns the document. Raises
    :class:`InputError` for a score directory that is not complete."""
    table = {}
    for score_dir in scores:
        s = read_complete_summary(score_dir)
        table[Path(score_dir).name] = {
            "metric": s["metric"],
            "value": s["value"],
            "se": s["uncertainty"]["value"],
            "n": s["n"],
            "summary": f"{score_dir}/summary.json",
        }
    doc = {"split": "proxy", "note": "exploration only; never mixed with final numbers", "checkpoints": table}
    atomic_write_json(out, doc)
    return doc


def _rows_by_id(score_dir: str | Path) -> dict[str, dict]:
    path = Path(score_dir) / "rows.jsonl"
    out: dict[str, dict] = {}
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
    changed after its publication."""
    message = "no valid checkpoint: there is no official result"
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
        }
        for d, p in zip(docs, officials)
    ]


def _final_advisories(best: dict, isolation: list[str], fixed, shipped_best, normalised, tiny: bool) -> list[str]:
    """The official checkpoint's advisories, the replays' isolation first when it was not the
    sandbox, then whether the runs are tiny, then what the references could not give."""
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
    elif normalised is None and fixed is not None:
        advisories.append("normalised score undefined: fixed-start and shipped references are equal")
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
) -> tuple[dict, list[dict]]:
    """The task's final summary (``final/summary.json``'s fields) and the runs'
    ``official.json`` documents it was made from (the report lists their checkpoints).

    The headline is the official result of the first seed; with several seeds the summary
    also gives the mean and SD of the per-seed official values. ``fixed_start_scores`` is
    None for a task whose fixed start cannot be scored (``rm``: no reward head); there is
    then no comparison with it and no normalised score. ``scale``: see :func:`paired_comparison`.
    ``proxy_table``: the official run's ``proxy.json``, shown beside the exploration's proxy
    receipts when the candidate came from an exploration (:func:`exploration_section`).
    Raises :class:`InputError` when the first seed's run has no valid checkpoint.
    """
    docs = [read_json(p, required=("official", "checkpoints")) for p in officials]
    primary = docs[0]
    shipped = read_json(shipped_official, required=("official",))
    fixed = read_complete_summary(fixed_start_scores) if fixed_start_scores else None
    best = primary["official"]
    if best is None:
        raise _no_official(officials[0], primary)
    shipped_best = shipped["official"]
    comparisons = {}
    if fixed:
        comparisons["vs_fixed_start"] = paired_comparison(
            best["scores"], fixed_start_scores, n_boot, seed=0, scale=scale
        )
    if shipped_best:
        comparisons["vs_shipped"] = paired_comparison(
            best["scores"], shipped_best["scores"], n_boot, seed=0, scale=scale
        )
    normalised = (
        normalised_score(best["value"], fixed["value"], shipped_best["value"]) if shipped_best and fixed else None
    )
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
        "advisories": _final_advisories(best, isolation, fixed, shipped_best, normalised, tiny),
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
        "seeds": {**mean_sd([s["value"] for s in per_seed if s["value"] is not None]), "per_seed": per_seed},
        "exploration": exploration_section(primary, proxy_table),
        "lineage": _lineage(primary),
    }
    return summary, docs


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
    proxy = read_json(proxy_table)["checkpoints"] if proxy_table else {}
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
