"""Matched ablation: is the candidate's gain over the shipped recipe established across seeds
and rows? (``results/<task>/ablation/<candidate>/``)

The candidate and the shipped recipe are replayed with the same K seeds; each run's official
result (and, to show the selection bias, its last retained checkpoint) is scored on the same
final rows. Per seed the difference is ``official(candidate) - official(shipped)``, each value
read from the run's own ``official.json``. The mean difference gets a 95 % CI from
:func:`~replaykit.harness.stats.hierarchical_bootstrap` (seeds, then the rows all seeds share;
rows paired within a seed -- see there) and, beside it, a t-interval over the K per-seed
differences; the verdict in words comes from the bootstrap CI
(:func:`~replaykit.harness.stats.ci_verdict`). The shipped runs are the ordinary
``results/<task>/shipped-seed<s>/`` runs, so every candidate compared with them shares them.

Chain a reader can follow: ``summary.json`` -> each run's ``official.json`` -> the
checkpoint's ``final-scores/checkpoint-N/{summary.json,rows.jsonl}``.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .fileio import read_json, read_jsonl
from .receipts import read_complete_summary
from .stats import (
    ci_verdict,
    detectable_difference,
    hierarchical_bootstrap,
    normalised_score,
    seeds_for_power,
    t_interval,
)

SELECTIONS = {
    "official": "official result: best valid retained checkpoint, chosen on the final split",
    "last": "last retained checkpoint: no choice on the final split",
}
ALPHA, POWER = 0.05, 0.8
ONE_SEED = "not established (one seed: seed-to-seed variance unknown)"


def pick(doc: dict, selection: str) -> dict | None:
    """The checkpoint entry of a run's ``official.json`` that ``selection`` names: the official
    one, or the retained checkpoint with the greatest progress; None when it is not valid."""
    if selection == "official":
        return doc["official"]
    last = max(doc["checkpoints"], key=lambda c: c["progress"], default=None)
    return last if last and last["valid"] and last.get("value") is not None else None


def read_rows(score_dir: str | Path, cluster_field: str | None) -> dict[str, tuple]:
    """``id -> (score, weight, stratum, cluster)`` of a checkpoint's ``rows.jsonl``; the
    cluster is the row's ``cluster_field`` (None without one). Raises :class:`InputError` for
    a duplicate id or a row lacking the cluster field."""
    path = Path(score_dir) / "rows.jsonl"
    out: dict[str, tuple] = {}
    for number, row in enumerate(read_jsonl(path, required=("id", "score")), start=1):
        if str(row["id"]) in out:
            raise InputError(path, f"line {number}.id", f"duplicate row id {row['id']!r}")
        if cluster_field and cluster_field not in row:
            raise InputError(path, f"line {number}.{cluster_field}", "the task's row cluster is missing")
        out[str(row["id"])] = (
            float(row["score"]),
            row.get("weight"),
            row.get("stratum"),
            row.get(cluster_field) if cluster_field else None,
        )
    return out


def _row_matrices(entries: list[tuple[dict, dict]], cluster_field: str | None) -> dict:
    """K × n candidate and shipped scores over the rows every run shares, and the rows'
    weights, strata and clusters (which must agree across runs)."""
    rows = [(read_rows(c["scores"], cluster_field), read_rows(s["scores"], cluster_field)) for c, s in entries]
    first_path = Path(entries[0][0]["scores"]) / "rows.jsonl"
    ids = sorted(rows[0][0])
    meta = {i: rows[0][0][i][1:] for i in ids}
    for (cand, ship), (c, s) in zip(rows, entries):
        for table, entry in ((cand, c), (ship, s)):
            path = Path(entry["scores"]) / "rows.jsonl"
            if sorted(table) != ids:
                raise InputError(path, "id", f"rows differ from {first_path}: not the same final rows")
            if any(table[i][1:] != meta[i] for i in ids):
                raise InputError(path, "weight", f"weight/stratum/cluster of a row differ from {first_path}")
    weighted = any(meta[i][0] is not None for i in ids)
    return {
        "a": [[cand[i][0] for i in ids] for cand, _ in rows],
        "b": [[ship[i][0] for i in ids] for _, ship in rows],
        "weights": [meta[i][0] for i in ids] if weighted else None,
        "strata": ([str(meta[i][1]) for i in ids] if any(meta[i][1] is not None for i in ids) else None),
        "clusters": [str(meta[i][2]) for i in ids] if cluster_field else None,
    }


def _side(doc: dict, entry: dict, official_path: str | Path) -> dict:
    return {
        "run": doc["run"],
        "official": str(official_path),
        "progress": entry["progress"],
        "value": entry["value"],
        "se": entry.get("se"),
        "scores": entry["scores"],
    }


def _per_seed(entries, candidate, shipped, from_rows: list[float], scale: float, fixed_start) -> list[dict]:
    """Per seed: the two sides, their difference from the runs' files (which the rows must
    reproduce, relative tolerance 1e-5: else :class:`InputError`) and the normalised score."""
    per_seed = []
    for (c, s), (doc_c, path_c), (doc_s, path_s), rows_diff in zip(entries, candidate, shipped, from_rows):
        diff = c["value"] - s["value"]
        if abs(scale * rows_diff - diff) > 1e-5 * max(1.0, abs(c["value"]), abs(s["value"])):
            raise InputError(
                Path(c["scores"]) / "rows.jsonl",
                "score",
                f"rows give a difference of {scale * rows_diff!r} from {s['scores']}, the summaries {diff!r}",
            )
        norm = normalised_score(c["value"], fixed_start, s["value"]) if fixed_start is not None else None
        per_seed.append(
            {
                "seed": doc_c["seed"],
                "candidate": _side(doc_c, c, path_c),
                "shipped": _side(doc_s, s, path_s),
                "difference": diff,
                "normalised": norm,
            }
        )
    return per_seed


def compare(
    candidate: list[tuple[dict, str]],
    shipped: list[tuple[dict, str]],
    selection: str,
    *,
    direction: str,
    scale: float,
    cluster_field: str | None,
    n_boot: int,
    fixed_start: float | None,
) -> dict:
    """One matched comparison (``selection``: ``official`` or ``last``) of the candidate's runs
    with the shipped runs of the same seeds (``(official.json doc, its path)`` pairs, in seed
    order).

    Per seed ``difference = value(candidate) - value(shipped)`` from the runs' files; the rows
    must reproduce it (``scale × sum_i w_i (a_i - b_i)``, relative tolerance 1e-5), otherwise
    :class:`InputError`. ``normalised`` per seed: ``(value - fixed start) / (shipped - fixed
    start)`` (the seed's own shipped run = 1), None without a fixed-start reference.
    """
    entries = [(pick(c, selection), pick(s, selection)) for (c, _), (s, _) in zip(candidate, shipped)]
    missing = [
        doc["run"]
        for pair, (doc_c, _), (doc_s, _) in zip(entries, candidate, shipped)
        for doc, e in ((doc_c, pair[0]), (doc_s, pair[1]))
        if e is None
    ]
    out = {"selection": selection, "description": SELECTIONS[selection]}
    if missing:
        return {
            **out,
            "available": False,
            "reason": f"no valid {selection} checkpoint in: {', '.join(dict.fromkeys(missing))}",
        }
    data = _row_matrices(entries, cluster_field)
    boot = hierarchical_bootstrap(
        data["a"],
        data["b"],
        n_boot=n_boot,
        seed=0,
        weights=data["weights"],
        strata=data["strata"],
        clusters=data["clusters"],
    )
    per_seed = _per_seed(entries, candidate, shipped, boot["per_seed"], scale, fixed_start)
    k = len(per_seed)
    diffs = [p["difference"] for p in per_seed]
    t = t_interval(diffs)
    ci = {key: scale * boot[key] for key in ("ci_low", "ci_high", "se")}
    seed_var = None if boot["seed_variance"] is None else scale**2 * boot["seed_variance"]
    row_var = scale**2 * boot["row_variance"]
    mean = sum(diffs) / k
    norms = [p["normalised"] for p in per_seed]
    return {
        **out,
        "available": True,
        "per_seed": per_seed,
        "mean_difference": mean,
        "hierarchical": {
            **{k_: v for k_, v in boot.items() if k_ not in ("per_seed", "difference")},
            **ci,
            "seed_variance": seed_var,
            "row_variance": row_var,
        },
        "t_interval": t,
        "verdict": ci_verdict(ci["ci_low"], ci["ci_high"], direction) if k > 1 else ONE_SEED,
        "t_interval_verdict": ci_verdict(t["ci_low"], t["ci_high"], direction) if t else None,
        "detectable_difference": detectable_difference(seed_var, row_var, k, ALPHA, POWER),
        "seeds_for_power": seeds_for_power(mean, seed_var, row_var, ALPHA, POWER),
        "normalised": {
            "per_seed": norms,
            "mean": (sum(norms) / k if all(v is not None for v in norms) else None),
        },
    }


def _bias(comparisons: dict, side: str) -> float | None:
    off, last = comparisons["official"], comparisons["last"]
    if not (off["available"] and last["available"]):
        return None
    pairs = [(o[side]["value"], l_[side]["value"]) for o, l_ in zip(off["per_seed"], last["per_seed"])]
    return sum(o - l_ for o, l_ in pairs) / len(pairs)


def _read_sides(candidate_officials, shipped_officials) -> tuple[list, list]:
    """``(official.json doc, path)`` of each side's runs, matched by seed. Raises
    :class:`InputError` for unequal numbers of runs, none, or a seed matched with another."""
    if len(candidate_officials) != len(shipped_officials) or not candidate_officials:
        raise InputError("ablation", "seeds", "one candidate run and one shipped run per seed are needed")
    required = ("run", "seed", "official", "checkpoints")
    cand = [(read_json(p, required=required), str(p)) for p in candidate_officials]
    ship = [(read_json(p, required=required), str(p)) for p in shipped_officials]
    for (dc, pc), (ds, ps) in zip(cand, ship):
        if dc["seed"] != ds["seed"]:
            raise InputError(pc, "seed", f"{dc['seed']} is matched with seed {ds['seed']} of {ps}")
    return cand, ship


def _advisories(main: dict, comparisons: dict, k: int, fixed) -> list[str]:
    """What a reader must know to read the verdict: too few seeds, seed-independent runs, no
    fixed-start reference, no last-checkpoint comparison."""
    advisories = []
    if k < 2:
        advisories.append("one seed: the CI covers the rows only and no verdict is drawn; give 2 or more seeds")
    if 1 < k < 5:
        advisories.append(
            f"{k} seeds: the bootstrap's seed part is understated (factor (K-1)/K, normal "
            "tails); the t-interval has the seed variance with t tails but not the rows' "
            "variance: read both"
        )
    values = [(p["candidate"]["value"], p["shipped"]["value"]) for p in main["per_seed"]]
    if k > 1 and len(set(values)) == 1:
        advisories.append(
            "every seed gave the same candidate and shipped values: these runs do not depend "
            "on the seed, so the uncertainty is the rows' alone"
        )
    if fixed is None:
        advisories.append("no fixed-start reference for this task: no normalised score")
    if not comparisons["last"]["available"]:
        advisories.append(f"last-checkpoint comparison unavailable: {comparisons['last']['reason']}")
    return advisories


def _resampling(main: dict, row_cluster: str | None) -> str:
    """How rows were resampled, in words (whole clusters, within strata)."""
    parts = (
        f"whole clusters by row field `{row_cluster}`" if row_cluster else "",
        "within strata, weighted score recomputed" if main["hierarchical"]["method"].endswith("stratified") else "",
    )
    return ", ".join(x for x in parts if x)


def ablation_summary(
    *,
    task: str,
    candidate: str,
    candidate_officials: list[str | Path],
    shipped_officials: list[str | Path],
    fixed_start_scores: str | Path | None,
    n_boot: int,
    scale: float,
    row_cluster: str | None,
) -> dict:
    """The summary of a matched ablation (``summary.json``'s fields; the report adds its
    sentence and writes it: :func:`replaykit.report.ablation.ablation_result`).

    Args:
        candidate_officials, shipped_officials: the runs' ``official.json``, one per seed, in
            the same seed order.
        fixed_start_scores: the fixed-start reference's score folder, None for a task
            without one (rm, digress): no normalised score.
        scale: metric units per unit of a row's score (100 for rm's percent).
        row_cluster: the row field naming a row's cluster (soup: ``label``), or None.

    Raises:
        InputError: different seeds on the two sides, a run's rows not the shared final rows,
        rows that do not reproduce a run's value, or a run without a valid official result.
    """
    cand, ship = _read_sides(candidate_officials, shipped_officials)
    fixed = read_complete_summary(fixed_start_scores)["value"] if fixed_start_scores else None
    direction = cand[0][0]["direction"]
    comparisons = {
        sel: compare(
            cand,
            ship,
            sel,
            direction=direction,
            scale=scale,
            cluster_field=row_cluster,
            n_boot=n_boot,
            fixed_start=fixed,
        )
        for sel in SELECTIONS
    }
    main = comparisons["official"]
    if not main["available"]:
        raise InputError(candidate_officials[0], "official", main["reason"])
    metric = read_complete_summary(main["per_seed"][0]["candidate"]["scores"])["metric"]
    summary = {
        "metric": f"{metric} difference (candidate - shipped)",
        "direction": direction,
        "value": main["mean_difference"],
        "uncertainty": {
            "value": main["hierarchical"]["se"],
            "kind": "two_stage_bootstrap_se_seeds_rows",
        },
        "n": main["hierarchical"]["n"],
        "diagnostics": {
            "t_interval": main["t_interval"],
            "detectable_difference": main["detectable_difference"],
            "seeds_for_power": main["seeds_for_power"],
        },
        "advisories": _advisories(main, comparisons, len(cand), fixed),
        "task": task,
        "candidate": candidate,
        "seeds": [p["seed"] for p in main["per_seed"]],
        "verdict": main["verdict"],
        "resampling": _resampling(main, row_cluster),
        "fixed_start": {"value": fixed, "scores": str(fixed_start_scores or "") or None},
        "comparisons": comparisons,
        "selection_bias": {
            "candidate": _bias(comparisons, "candidate"),
            "shipped": _bias(comparisons, "shipped"),
            "note": "official minus last retained checkpoint, mean over seeds",
        },
    }
    summary["sentence"] = _sentence(summary, metric, main)
    return summary


def _sentence(summary: dict, metric: str, main: dict) -> str:
    """The ablation's result in one sentence (the CLI prints it; the reports open with it)."""
    k, h = len(summary["seeds"]), main["hierarchical"]
    return (
        f"With {k} seed{'s' if k != 1 else ''} and {summary['n']} final rows, `{summary['candidate']}` "
        f"differs from the shipped recipe by {main['mean_difference']:+.4f} in {metric} "
        f"(95 % CI [{h['ci_low']:+.4f}, {h['ci_high']:+.4f}], two-stage bootstrap over seeds and rows): "
        f"{main['verdict']}."
    )
