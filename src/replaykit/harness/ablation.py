"""Matched ablation: is the candidate's gain over the shipped recipe established across seeds
and rows? (``results/<task>/ablation/<candidate>/``)

The candidate and the shipped recipe are replayed with the same K seeds; each run's official
result, its proxy-selected checkpoint (the one the public proxy ranks best: no choice on the
final split) and its last retained checkpoint are scored on the same final rows. Per seed the
difference is ``value(candidate) - value(shipped)``, each value read from the run's own
``official.json``. The mean difference gets a CI from
:func:`~replaykit.harness.stats.hierarchical_bootstrap` (seeds, then the rows all seeds share;
rows paired within a seed -- see there) and, beside it, a t-interval over the K per-seed
differences and the probability of improvement over seed pairs
(:func:`~replaykit.harness.stats.probability_of_improvement`).

The verdict is judged against the candidate's decision rule (:mod:`replaykit.harness.decision`),
written before its first replay: the comparison it names (official, proxy-selected or last),
its α (the CI is two-sided at 1 − α), its hypothesis and margin
(:func:`~replaykit.harness.stats.ci_verdict`); the summary records whether that rule is the
one in force when the first replay started. Several candidates compared with the same shipped
runs: :func:`holm_verdicts` adjusts their verdicts (Holm 1979). The shipped runs are the
ordinary ``results/<task>/shipped-seed<s>/`` runs, so every candidate compared with them
shares them.

Chain a reader can follow: ``summary.json`` -> each run's ``official.json`` -> the
checkpoint's ``final-scores/checkpoint-N/{summary.json,rows.jsonl}``; the decision rule ->
``decision-rules/<candidate>.json`` and its ``.history.jsonl`` -> the replay records' attempts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .decision import DEFAULTS, first_attempt_started, rule_receipt
from .errors import InputError
from .fileio import read_json, read_jsonl
from .receipts import read_complete_summary, read_verified_json, verified
from .stats import (
    ci_verdict,
    decimal,
    decision_threshold,
    detectable_difference,
    hierarchical_bootstrap,
    holm,
    interval_reading,
    normalisation_undefined,
    normalised_score,
    percentile_p_value,
    probability_of_improvement,
    seeds_for_power,
    t_interval,
)

SELECTIONS = {
    "official": "official result: best valid retained checkpoint, chosen on the final split",
    "proxy_selected": "proxy-selected checkpoint: the valid retained checkpoint the public proxy ranks best, "
    "no choice on the final split",
    "last": "last retained checkpoint: no choice on the final split",
}
POWER = 0.8
ONE_SEED = "not established (one seed: seed-to-seed variance unknown)"
CLAIMS = ("established gain", "established loss", "non-inferior (")  # the verdicts that claim something


def pick(doc: dict, selection: str) -> dict | None:
    """The checkpoint entry of a run's ``official.json`` that ``selection`` names: the official
    one, the proxy-selected one, or the retained checkpoint with the greatest progress; None
    when it is not valid (or, for an ``official.json`` without proxy scores, not there)."""
    if selection == "official":
        return doc["official"]
    if selection == "proxy_selected":
        chosen = doc.get("proxy_selected") or {}
        return next((c for c in doc["checkpoints"] if c["progress"] == chosen.get("progress")), None)
    last = max(doc["checkpoints"], key=lambda c: c["progress"], default=None)
    return last if last and last["valid"] and last.get("value") is not None else None


def read_rows(score_dir: str | Path, cluster_field: str | None) -> dict[str, tuple]:
    """``id -> (score, weight, stratum, cluster)`` of a checkpoint's ``rows.jsonl``; the
    cluster is the row's ``cluster_field`` (None without one). Raises :class:`InputError` for
    a duplicate id or a row lacking the cluster field, and for rows that differ from their
    score's receipt (``.complete``)."""
    path = Path(score_dir) / "rows.jsonl"
    out: dict[str, tuple] = {}
    if path.exists():
        verified(path)
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
    chosen = doc.get("proxy_selected")
    return {
        "run": doc["run"],
        "official": str(official_path),
        "progress": entry["progress"],
        "value": entry["value"],
        "se": entry.get("se"),
        "scores": entry["scores"],
        "proxy_selected": {k: chosen[k] for k in PROXY_KEYS} if chosen else None,
    }


PROXY_KEYS = ("progress", "proxy_value", "final_value", "oracle_gap")  # INTERFACES.md, field 4


def _per_seed(entries, candidate, shipped, from_rows: list[float], scale: float, fixed_start, direction) -> list[dict]:
    """Per seed: the two sides, their difference from the runs' files (which the rows must
    reproduce, relative tolerance 1e-5: else :class:`InputError`) and the normalised score
    (None, with the reason, where it is undefined)."""
    per_seed = []
    for (c, s), (doc_c, path_c), (doc_s, path_s), rows_diff in zip(entries, candidate, shipped, from_rows):
        diff = c["value"] - s["value"]
        if abs(scale * rows_diff - diff) > 1e-5 * max(1.0, abs(c["value"]), abs(s["value"])):
            raise InputError(
                Path(c["scores"]) / "rows.jsonl",
                "score",
                f"rows give a difference of {scale * rows_diff!r} from {s['scores']}, the summaries {diff!r}",
            )
        undefined = None if fixed_start is None else normalisation_undefined(fixed_start, s["value"], direction)
        norm = None if fixed_start is None else normalised_score(c["value"], fixed_start, s["value"], direction)
        per_seed.append(
            {
                "seed": doc_c["seed"],
                "candidate": _side(doc_c, c, path_c),
                "shipped": _side(doc_s, s, path_s),
                "difference": diff,
                "normalised": norm,
                "normalised_undefined": undefined,
            }
        )
    return per_seed


def _unavailable(entries, candidate, shipped, selection: str) -> str | None:
    """Why a selection cannot be compared (the runs without such a checkpoint), or None."""
    missing = [
        doc["run"]
        for pair, (doc_c, _), (doc_s, _) in zip(entries, candidate, shipped)
        for doc, e in ((doc_c, pair[0]), (doc_s, pair[1]))
        if e is None
    ]
    if not missing:
        return None
    hint = " (official.json without proxy scores: rebuilt by rule official)" if selection == "proxy_selected" else ""
    return f"no valid {selection} checkpoint in: {', '.join(dict.fromkeys(missing))}{hint}"


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
    rule: dict,
) -> tuple[dict, np.ndarray | None]:
    """One matched comparison (``selection``: a key of :data:`SELECTIONS`) of the candidate's
    runs with the shipped runs of the same seeds (``(official.json doc, its path)`` pairs, in
    seed order), its intervals two-sided at ``1 - alpha`` and its verdict by the hypothesis and
    margin of the decision ``rule`` (whichever comparison the rule names).

    Per seed ``difference = value(candidate) - value(shipped)`` from the runs' files; the rows
    must reproduce it (``scale × sum_i w_i (a_i - b_i)``, relative tolerance 1e-5), otherwise
    :class:`InputError`. ``normalised`` per seed: ``(value - fixed start) / (shipped - fixed
    start)`` (the seed's own shipped run = 1), None without a fixed-start reference or where
    the seed's shipped run is not better than the fixed start.

    Returns the comparison and the bootstrap replicates of the mean difference (metric units;
    None when the selection is unavailable), for :func:`judge`.
    """
    alpha = rule["alpha"]
    entries = [(pick(c, selection), pick(s, selection)) for (c, _), (s, _) in zip(candidate, shipped)]
    out = {"selection": selection, "description": SELECTIONS[selection]}
    reason = _unavailable(entries, candidate, shipped, selection)
    if reason:
        return {**out, "available": False, "reason": reason}, None
    data = _row_matrices(entries, cluster_field)
    boot = hierarchical_bootstrap(
        data["a"],
        data["b"],
        n_boot=n_boot,
        seed=0,
        confidence=1.0 - alpha,
        weights=data["weights"],
        strata=data["strata"],
        clusters=data["clusters"],
        keep_replicates=True,
    )
    per_seed = _per_seed(entries, candidate, shipped, boot["per_seed"], scale, fixed_start, direction)
    return {
        **out,
        "available": True,
        "per_seed": per_seed,
        **_figures(per_seed, boot, scale=scale, direction=direction, rule=rule, n_boot=n_boot),
    }, scale * boot["replicates"]


def _figures(per_seed: list[dict], boot: dict, *, scale: float, direction: str, rule: dict, n_boot: int) -> dict:
    """A comparison's numbers from its per-seed differences and its bootstrap ``boot``: the
    mean, the intervals at ``1 - alpha``, the verdict, P(improvement), the power figures and
    the normalised scores (:func:`compare`)."""
    alpha = rule["alpha"]
    k = len(per_seed)
    diffs = [p["difference"] for p in per_seed]
    t = t_interval(diffs, confidence=1.0 - alpha)
    ci = {key: scale * boot[key] for key in ("ci_low", "ci_high", "se")}
    seed_var = None if boot["seed_variance"] is None else scale**2 * boot["seed_variance"]
    row_var = scale**2 * boot["row_variance"]
    mean = sum(diffs) / k
    norms = [p["normalised"] for p in per_seed]
    sides = ([p["candidate"]["value"] for p in per_seed], [p["shipped"]["value"] for p in per_seed])
    skip = ("per_seed", "difference", "replicates")
    return {
        "mean_difference": mean,
        "hierarchical": {
            **{k_: v for k_, v in boot.items() if k_ not in skip},
            **ci,
            "seed_variance": seed_var,
            "row_variance": row_var,
        },
        "t_interval": t,
        "verdict": (
            ci_verdict(ci["ci_low"], ci["ci_high"], direction, hypothesis=rule["hypothesis"], margin=rule["margin"])
            if k > 1
            else ONE_SEED
        ),
        "t_interval_reading": interval_reading(t["ci_low"], t["ci_high"], direction) if t else None,
        "probability_of_improvement": probability_of_improvement(
            *sides, direction, n_boot=n_boot, seed=0, confidence=1.0 - alpha
        ),
        "detectable_difference": detectable_difference(seed_var, row_var, k, alpha, POWER),
        "seeds_for_power": seeds_for_power(mean, seed_var, row_var, alpha, POWER),
        "normalised": {
            "per_seed": norms,
            "mean": (sum(norms) / k if all(v is not None for v in norms) else None),
        },
    }


def judge(replicates: np.ndarray | None, comparison: dict, rule: dict, k: int) -> dict:
    """The verdict of ``rule`` (its α, hypothesis and margin) on a comparison, and the
    p-value that the same interval inverts (:func:`~replaykit.harness.stats.percentile_p_value`),
    for :func:`holm_verdicts`.

    The interval is the bootstrap replicates' percentile interval at ``1 - alpha`` (the
    comparison's own when it was made at that level), so the verdict agrees with ``p < alpha``
    (up to rounding exactly at the boundary). Superiority: ``p`` is the smaller of the gain side's (the
    CI beyond the margin) and the loss side's (the CI beyond 0 the other way); non-inferiority:
    the gain side's at ``-margin``. No p-value (None) where no verdict can be drawn: the
    comparison is unavailable, one seed, or a zero-width interval.
    """
    direction, alpha = rule["direction"], rule["alpha"]
    theta = decision_threshold(direction, rule["hypothesis"], rule["margin"])
    out = {"threshold": theta, "confidence": 1.0 - alpha, "p_value": None, "ci_low": None, "ci_high": None}
    if replicates is None:
        return {**out, "verdict": f"no verdict: {comparison['reason']}"}
    h = comparison["hierarchical"]
    if h["confidence"] == 1.0 - alpha:  # the rule the comparison was made with: its own interval
        low, high = h["ci_low"], h["ci_high"]
    else:  # an earlier rule's α
        low, high = (float(v) for v in np.quantile(replicates, [alpha / 2.0, 1.0 - alpha / 2.0]))
    out.update(ci_low=low, ci_high=high)
    if k < 2:
        return {**out, "verdict": ONE_SEED}
    verdict = ci_verdict(low, high, direction, hypothesis=rule["hypothesis"], margin=rule["margin"])
    if low == high:
        return {**out, "verdict": verdict}
    gain, loss = ("above", "below") if direction == "maximize" else ("below", "above")
    p = percentile_p_value(replicates, theta, gain)
    if rule["hypothesis"] == "superiority":
        p = min(p, percentile_p_value(replicates, 0.0, loss))
    return {**out, "verdict": verdict, "p_value": p}


def _bias(comparisons: dict, side: str, other: str) -> float | None:
    """Mean over seeds of official − ``other`` (``last`` or ``proxy_selected``) on ``side``,
    in the metric's units; None when either comparison is unavailable."""
    off, alt = comparisons["official"], comparisons[other]
    if not (off["available"] and alt["available"]):
        return None
    pairs = [(o[side]["value"], a[side]["value"]) for o, a in zip(off["per_seed"], alt["per_seed"])]
    return sum(o - a for o, a in pairs) / len(pairs)


def _read_sides(candidate_officials, shipped_officials) -> tuple[list, list]:
    """``(official.json doc, path)`` of each side's runs, matched by seed. Raises
    :class:`InputError` for unequal numbers of runs, none, or a seed matched with another."""
    if len(candidate_officials) != len(shipped_officials) or not candidate_officials:
        raise InputError("ablation", "seeds", "one candidate run and one shipped run per seed are needed")
    required = ("run", "seed", "official", "checkpoints")
    cand = [(read_verified_json(p, required=required), str(p)) for p in candidate_officials]
    ship = [(read_verified_json(p, required=required), str(p)) for p in shipped_officials]
    for (dc, pc), (ds, ps) in zip(cand, ship):
        if dc["seed"] != ds["seed"]:
            raise InputError(pc, "seed", f"{dc['seed']} is matched with seed {ds['seed']} of {ps}")
    return cand, ship


def _first_start(docs: list[tuple[dict, str]]) -> float | None:
    """The earliest first-attempt start of the runs (from their replay records, or the copy in
    ``official.json``); None when a run has neither."""
    starts = []
    for doc, _ in docs:
        record = Path(doc.get("record") or "")
        started = first_attempt_started(read_json(record)) if record.is_file() else None
        if started is None:
            started = (doc.get("decision_rule") or {}).get("first_attempt_started_unix")
        starts.append(started)
    return None if not starts or None in starts else min(starts)


def _decision_rule(path, cand, task: str, candidate: str, direction: str, seeds: list) -> dict:
    """The decision rule to judge by, with its receipt: the file's, checked against the
    ablation (its direction and seeds must be the runs'), or -- without a file -- the default
    rule, recorded as not fixed in advance. Raises :class:`InputError` for a rule that does
    not fit the runs."""
    if not path:
        rule = {"task": task, "candidate": candidate, "metric": None, "direction": direction, "seeds": seeds}
        rule.update(DEFAULTS)
        note = "no decision rule file: the default rule was applied, and nothing shows it was fixed in advance"
        return {"rule": rule, "path": None, "sha256": None, "fixed_in_advance": False, "note": note}
    receipt = rule_receipt(path, _first_start(cand))
    rule = receipt["rule"]
    for key, value in (("direction", direction), ("seeds", seeds)):
        if rule[key] != value:
            raise InputError(path, f"rule.{key}", f"{rule[key]!r}, but the ablation's runs have {value!r}")
    return receipt


def _advisories(main: dict, comparisons: dict, k: int, fixed, decision: dict) -> list[str]:
    """What a reader must know to read the verdict: too few seeds, seed-independent runs, an
    undefined normalised score, a decision rule not fixed in advance, unavailable comparisons."""
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
            "on the seed, so the uncertainty is the rows' alone, the t-interval has zero width and "
            "P(candidate better) is 0, 1/2 or 1 by construction"
        )
    if fixed is None:
        advisories.append("no fixed-start reference for this task: no normalised score")
    undefined = [(p["seed"], p["normalised_undefined"]) for p in main["per_seed"] if p["normalised_undefined"]]
    if undefined:
        seeds = ", ".join(str(seed) for seed, _ in undefined)
        advisories.append(f"seed {seeds}: {undefined[0][1]}; no normalised score is given")
    if not decision.get("fixed_in_advance"):
        advisories.append(f"decision rule: {decision['note']}")
    if decision.get("hand_edited"):
        advisories.append("decision rule: its file was edited by hand (its sha256 field is not its content's)")
    for c in comparisons.values():
        if not c["available"]:
            advisories.append(f"{c['selection']} comparison unavailable: {c['reason']}")
    return advisories


def _resampling(main: dict, row_cluster: str | None) -> str:
    """How rows were resampled, in words (whole clusters, within strata)."""
    parts = (
        f"whole clusters by row field `{row_cluster}`" if row_cluster else "",
        "within strata, weighted score recomputed" if main["hierarchical"]["method"].endswith("stratified") else "",
    )
    return ", ".join(x for x in parts if x)


def _decision_section(decision: dict, comparisons: dict, replicates: dict, k: int) -> dict:
    """The summary's ``decision``: the rule, its receipt, the verdict and p-value it gives, and
    -- when the rule changed after the first replay started -- the verdict under the version
    in force then (when it compared the same seeds)."""
    rule = decision["rule"]
    verdict = judge(replicates[rule["comparison"]], comparisons[rule["comparison"]], rule, k)
    earlier = decision.get("in_force_at_first_attempt")
    then = None
    if earlier and not decision["fixed_in_advance"]:
        old = earlier["rule"]
        then = {"sha256": earlier["sha256"], "rule": old}
        if old["seeds"] == rule["seeds"]:
            then.update(judge(replicates[old["comparison"]], comparisons[old["comparison"]], old, k))
        else:
            then["verdict"] = f"not computed: that rule named seeds {old['seeds']}, these runs are {rule['seeds']}"
    keys = ("alpha", "comparison", "hypothesis", "margin")
    return {**{key: rule[key] for key in keys}, **verdict, "rule_file": decision, "under_rule_in_force": then}


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
    decision_rule: str | Path | None = None,
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
        decision_rule: the candidate's ``decision-rules/<candidate>.json``; None: the default
            rule (official result, α 0.05, superiority), recorded as not fixed in advance.

    Raises:
        InputError: different seeds on the two sides, a run's rows not the shared final rows,
        rows that do not reproduce a run's value, a run without a valid checkpoint of the kind
        the rule compares, or a decision rule whose seeds or direction are not the runs'.
    """
    cand, ship = _read_sides(candidate_officials, shipped_officials)
    fixed = read_complete_summary(fixed_start_scores)["value"] if fixed_start_scores else None
    direction = cand[0][0]["direction"]
    decision = _decision_rule(decision_rule, cand, task, candidate, direction, [d["seed"] for d, _ in cand])
    rule = decision["rule"]
    options = {"direction": direction, "scale": scale, "cluster_field": row_cluster, "n_boot": n_boot}
    done = {sel: compare(cand, ship, sel, **options, fixed_start=fixed, rule=rule) for sel in SELECTIONS}
    comparisons, replicates = ({sel: pair[i] for sel, pair in done.items()} for i in (0, 1))
    main = comparisons[rule["comparison"]]
    if not main["available"]:
        raise InputError(candidate_officials[0], rule["comparison"], main["reason"])
    section = _decision_section(decision, comparisons, replicates, len(cand))
    metric = read_complete_summary(main["per_seed"][0]["candidate"]["scores"])["metric"]
    summary = {
        "metric": f"{metric} difference (candidate - shipped)",
        "direction": direction,
        "value": main["mean_difference"],
        "uncertainty": {"value": main["hierarchical"]["se"], "kind": "two_stage_bootstrap_se_seeds_rows"},
        "n": main["hierarchical"]["n"],
        "diagnostics": {
            "t_interval": main["t_interval"],
            "probability_of_improvement": main["probability_of_improvement"],
            "detectable_difference": main["detectable_difference"],
            "seeds_for_power": main["seeds_for_power"],
        },
        "advisories": _advisories(main, comparisons, len(cand), fixed, decision),
        "task": task,
        "candidate": candidate,
        "seeds": [p["seed"] for p in main["per_seed"]],
        "verdict": section["verdict"],
        "decision": section,
        "comparisons_made": 1,  # this summary alone; holm_verdicts adjusts several
        "resampling": _resampling(main, row_cluster),
        "fixed_start": {"value": fixed, "scores": str(fixed_start_scores or "") or None},
        "comparisons": comparisons,
        **_selection(comparisons),
    }
    summary["sentence"] = _sentence(summary, metric, main)
    return summary


def _selection(comparisons: dict) -> dict:
    """``proxy_selected`` per seed (candidate and shipped) and ``selection_bias``: what choosing
    the checkpoint on the final split added (mean official − last and official − proxy-selected)."""
    return {
        "proxy_selected": [
            {"seed": p["seed"], **{side: p[side]["proxy_selected"] for side in ("candidate", "shipped")}}
            for p in comparisons["official"]["per_seed"]
        ],
        "selection_bias": {
            "candidate": _bias(comparisons, "candidate", "last"),
            "shipped": _bias(comparisons, "shipped", "last"),
            "oracle_gap": {side: _bias(comparisons, side, "proxy_selected") for side in ("candidate", "shipped")},
            "note": "official minus last retained checkpoint (candidate, shipped) and official minus "
            "proxy-selected (oracle_gap), mean over seeds, in the metric's units",
        },
    }


def _sentence(summary: dict, metric: str, main: dict) -> str:
    """The ablation's result in one sentence (the CLI prints it; the reports open with it)."""
    k, h, d = len(summary["seeds"]), main["hierarchical"], summary["decision"]
    pi = main["probability_of_improvement"]
    level = f"{100 * h['confidence']:g} %"
    in_advance = d["rule_file"].get("fixed_in_advance")
    rule = (
        f"decision rule {d['rule_file']['sha256'][:12]} "
        + ("fixed before the first replay" if in_advance else "NOT fixed before the first replay")
        if d["rule_file"].get("sha256")
        else "no decision rule file"
    )
    return (
        f"With {k} seed{'s' if k != 1 else ''} and {summary['n']} final rows, `{summary['candidate']}` "
        f"differs from the shipped recipe by {decimal(main['mean_difference'], signed=True)} in {metric} "
        f"({main['selection'].replace('_', '-')} checkpoints; {level} CI "
        f"[{decimal(h['ci_low'], signed=True)}, {decimal(h['ci_high'], signed=True)}], "
        f"two-stage bootstrap over seeds and rows; P(candidate better) {pi['value']:.2f} "
        f"[{pi['ci_low']:.2f}, {pi['ci_high']:.2f}]): {summary['verdict']} ({rule})."
    )


def holm_verdicts(summaries: list[dict]) -> list[dict]:
    """The verdicts of several ablations that share the shipped runs, adjusted for the number
    of comparisons by Holm's step-down procedure (:func:`~replaykit.harness.stats.holm`) on the
    p-values their own intervals invert (``decision.p_value``).

    A verdict that claims something (a gain, a loss, non-inferiority) stands only when its
    adjusted p-value is below α; otherwise it reads ``not established after Holm's adjustment
    for m comparisons``, with the adjusted p and the unadjusted verdict beside it. With one
    summary nothing changes. The task's report and a campaign's page call this.

    Args:
        summaries: ablation ``summary.json`` documents (their ``decision`` section; one written
            before decision rules, without it, counts with p = 1).

    Returns:
        One dict per summary, same order: ``{candidate, verdict, unadjusted_verdict, p_value,
        adjusted_p_value, m, alpha, rejected}``.

    Raises:
        ValueError: the summaries' rules use different α (Holm needs one family-wise level).

    Source: Holm (1979), Scand. J. Statist. 6(2), 65-70.
    """
    alphas = sorted({s.get("decision", DEFAULTS)["alpha"] for s in summaries})
    if len(alphas) > 1:
        raise ValueError(f"Holm's adjustment needs one alpha; the decision rules use {alphas}")
    alpha = alphas[0] if alphas else DEFAULTS["alpha"]
    p_values = [(s.get("decision") or {}).get("p_value") for s in summaries]
    adjusted = holm(p_values, alpha)
    out = []
    for s, p, adj, rejected in zip(summaries, p_values, adjusted["adjusted"], adjusted["reject"]):
        unadjusted = s["verdict"]
        claims = unadjusted.startswith(CLAIMS)
        if adjusted["m"] == 1 or (claims and rejected) or not claims:
            verdict = unadjusted
        else:
            verdict = (
                f"not established after Holm's adjustment for {adjusted['m']} comparisons "
                f"(adjusted p {adj:.3g} >= {alpha:g}; unadjusted: {unadjusted})"
            )
        out.append(
            {
                "candidate": s["candidate"],
                "verdict": verdict,
                "unadjusted_verdict": unadjusted,
                "p_value": p,
                "adjusted_p_value": adj,
                "m": adjusted["m"],
                "alpha": alpha,
                "rejected": bool(claims and rejected),
            }
        )
    return out
