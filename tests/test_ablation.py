"""Matched ablation (issue 16): the two-stage bootstrap against known variances, the power
figures by hand, the verdict as the difference grows, the per-seed differences against the
runs' own files, and (slow) the soup DAG: shipped runs shared by two candidates."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from replaykit.harness.errors import InputError
from replaykit.harness.receipts import seal, write_receipt, write_summary
from replaykit.harness.select import proxy_selected
from replaykit.harness.stats import (
    ZERO_WIDTH,
    ci_verdict,
    detectable_difference,
    hierarchical_bootstrap,
    paired_bootstrap,
    seeds_for_power,
    t_interval,
)
from replaykit.report.ablation import ablation_result


def test_hierarchical_bootstrap_by_hand():
    # seed 0: a - b = [1, 2, 3] -> T_0 = 2; seed 1: [3, 3, 3] -> T_1 = 3; D = 2.5
    a = [[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]
    b = [[0.0, 0.0, 0.0], [0.0, 1.0, 2.0]]
    out = hierarchical_bootstrap(a, b, n_boot=2000, seed=1)
    assert out["per_seed"] == [2.0, 3.0] and out["difference"] == 2.5
    assert out["seed_variance"] == pytest.approx(0.5)  # (0.5^2 + 0.5^2) / 1
    # every replicate is a mean of values between 1 and 3 -> inside [1, 3]
    assert 1.0 <= out["ci_low"] < 2.5 < out["ci_high"] <= 3.0
    # a constant shift on every row and seed: no variance at all
    same = hierarchical_bootstrap(np.ones((3, 5)) + 0.25, np.ones((3, 5)), n_boot=300, seed=2)
    assert same["ci_low"] == pytest.approx(0.25) and same["ci_high"] == pytest.approx(0.25)
    assert same["se"] == pytest.approx(0.0) and same["row_variance"] == pytest.approx(0.0)


def test_hierarchical_bootstrap_weights_strata_and_clusters():
    # rm-style: stratum x (2 rows, weight 0.1 each) and y (1 row, weight 0.8):
    # T = 0.1 * (1 + 0) + 0.8 * 1 = 0.9 -- the weighted score's difference
    out = hierarchical_bootstrap(
        [[1.0, 0.0, 1.0]],
        [[0.0, 0.0, 0.0]],
        n_boot=500,
        weights=[0.1, 0.1, 0.8],
        strata=["x", "x", "y"],
    )
    assert out["difference"] == pytest.approx(0.9) and out["method"].endswith("stratified")
    # stratum y keeps its one row: every replicate is 0.8 + 0.2 * (share of 1s drawn in x)
    assert 0.8 <= out["ci_low"] and out["ci_high"] <= 1.0
    with pytest.raises(ValueError, match="equal within a stratum"):
        hierarchical_bootstrap([[1.0, 0.0]], [[0.0, 0.0]], weights=[0.3, 0.7], strata=["x", "x"])
    with pytest.raises(ValueError, match="spans two strata"):
        hierarchical_bootstrap([[1.0, 0.0]], [[0.0, 0.0]], strata=["x", "y"], clusters=["c", "c"])
    # clusters of unequal size: the statistic is still the mean over rows (4 + 0 + 0) / 3
    out = hierarchical_bootstrap([[4.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]], n_boot=200, clusters=["p", "q", "q"])
    assert out["difference"] == pytest.approx(4 / 3) and out["clusters"] == 2


def _coverage(k, n, sd_seed, sd_row, sd_noise, reps, clusters=None, mu=0.1):
    """Share of ``reps`` synthetic draws of ``d_ki = mu + s_k + r_g(i) + e_ki`` whose
    two-stage CI covers ``mu``, with the true SD of the mean difference."""
    rng = np.random.default_rng(2026)
    groups = np.arange(n) if clusters is None else np.asarray(clusters)
    hits, hits_rows_only, ses = 0, 0, []
    for rep in range(reps):
        d = (
            mu
            + sd_seed * rng.standard_normal((k, 1))
            + (sd_row * rng.standard_normal(groups.max() + 1))[groups]
            + sd_noise * rng.standard_normal((k, n))
        )
        out = hierarchical_bootstrap(d, np.zeros_like(d), n_boot=1000, seed=rep, clusters=clusters)
        hits += out["ci_low"] <= mu <= out["ci_high"]
        ses.append(out["se"])
        flat = paired_bootstrap(d.mean(0), np.zeros(n), n_boot=1000, seed=rep)  # rows only, seeds ignored
        hits_rows_only += flat["ci_low"] <= mu <= flat["ci_high"]
    return hits / reps, hits_rows_only / reps, float(np.mean(ses))


def test_coverage_with_known_seed_and_row_variances():
    # K = 10 seeds, n = 50 rows; SD seed 0.15, row 0.2, noise 0.2:
    # Var(D) = 0.0225/10 + 0.04/50 + 0.04/500 = 0.00225 + 0.0008 + 0.00008 = 0.00313 -> SD 0.055946
    cover, cover_rows_only, se = _coverage(10, 50, 0.15, 0.2, 0.2, reps=400)
    # 400 draws: binomial SE of a 95 % coverage is sqrt(0.95 * 0.05 / 400) = 0.011; tolerance
    # 0.04 = 3.6 of those (the percentile interval's small-sample bias is well inside it)
    assert abs(cover - 0.95) <= 0.04
    assert se == pytest.approx(math.sqrt(0.00313), rel=0.10)
    # resampling rows only (seed variance ignored; its SD would be sqrt(0.00088) = 0.0297, about
    # half the true one, covering about 70 %) misses mu far more often
    assert cover_rows_only < 0.85


def test_coverage_with_clustered_rows():
    # soup-like: 30 classes of 10 rows sharing a class effect (SD 0.2), K = 8, noise 0.3
    labels = np.repeat(np.arange(30), 10)
    cover, _, _ = _coverage(8, 300, 0.05, 0.2, 0.3, reps=200, clusters=labels)
    assert abs(cover - 0.95) <= 0.05  # 200 draws: binomial SE 0.015
    # the same data resampled row by row: the class effect is not seen, the CI too narrow
    rng_cover = _coverage_unclustered(labels)
    assert rng_cover < 0.85


def _coverage_unclustered(labels, reps=200):
    rng = np.random.default_rng(2026)
    hits = 0
    for rep in range(reps):
        d = (
            0.1
            + 0.05 * rng.standard_normal((8, 1))
            + (0.2 * rng.standard_normal(30))[labels]
            + 0.3 * rng.standard_normal((8, labels.size))
        )
        out = hierarchical_bootstrap(d, np.zeros_like(d), n_boot=1000, seed=rep)
        hits += out["ci_low"] <= 0.1 <= out["ci_high"]
    return hits / reps


def test_t_interval_and_power_by_hand():
    # [1, 2, 3]: mean 2, sd 1, t_{2, 0.975} = 4.302653 -> half-width 4.302653 / sqrt(3) = 2.484138
    t = t_interval([1.0, 2.0, 3.0])
    assert t["ci_low"] == pytest.approx(-0.484138, abs=1e-6) and t["ci_high"] == pytest.approx(4.484138, abs=1e-6)
    assert t_interval([0.5]) is None
    # z = 1.959964 + 0.841621 = 2.801585; sqrt(0.01 / 4 + 0.0004) = sqrt(0.0029) = 0.0538516;
    # 2.801585 * 0.0538516 = 0.150869
    assert detectable_difference(0.01, 0.0004, 4) == pytest.approx(0.150869, abs=1e-6)
    assert detectable_difference(None, 0.0004, 1) is None
    # (0.2 / 2.801585)^2 = 0.0050963; minus 0.0004 = 0.0046963; 0.01 / 0.0046963 = 2.129 -> 3 seeds
    assert seeds_for_power(0.2, 0.01, 0.0004) == 3
    assert seeds_for_power(-0.2, 0.01, 0.0004) == 3  # the sign does not matter
    # rows alone too noisy: (0.05 / 2.801585)^2 = 0.000318 < 0.0004 -> no number of seeds
    assert seeds_for_power(0.05, 0.01, 0.0004) is None
    assert seeds_for_power(0.0, 0.01, 0.0004) is None and seeds_for_power(0.2, None, 0.0004) is None
    # the least K: at K = 3 the detectable difference is below 0.2, at K = 2 above
    assert detectable_difference(0.01, 0.0004, 3) <= 0.2 < detectable_difference(0.01, 0.0004, 2)


def test_ci_verdict():
    assert ci_verdict(0.01, 0.2, "maximize") == "established gain"
    assert ci_verdict(-0.2, -0.01, "maximize") == "established loss"
    assert ci_verdict(-0.01, 0.2, "maximize") == "not established (CI spans 0)"
    assert ci_verdict(0.0, 0.2, "maximize") == "not established (CI spans 0)"
    # a minimised metric (digress NLL): a negative difference is a gain
    assert ci_verdict(-3.0, -1.0, "minimize") == "established gain"
    assert ci_verdict(1.0, 3.0, "minimize") == "established loss"
    with pytest.raises(ValueError):
        ci_verdict(0.0, 1.0, "up")


def fake_run(
    root: Path,
    run: str,
    seed: int,
    checkpoints: dict[int, list[float]],
    labels=None,
    direction: str = "maximize",
    extra: list[dict] | None = None,
    scale: float = 1.0,
    proxy: dict[int, float] | None = None,
    started_unix: float | None = None,
) -> Path:
    """A run's ``official.json`` and scored checkpoints with the given per-row scores (rows
    also carry ``extra[i]``, e.g. rm's weight and stratum; the value is then ``scale × sum_i
    w_i score_i``, else the mean); the official checkpoint is the best value (rule official).
    ``proxy``: each checkpoint's proxy value (then ``proxy_selected`` is filled);
    ``started_unix``: a replay record whose first attempt started then."""
    entries = []
    for progress, scores in sorted(checkpoints.items()):
        out = root / run / "final-scores" / f"checkpoint-{progress}"
        out.mkdir(parents=True)
        rows = [
            {
                "id": f"r{i:03d}",
                "score": s,
                **({"label": labels[i]} if labels else {}),
                **(extra[i] if extra else {}),
            }
            for i, s in enumerate(scores)
        ]
        (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        value = scale * sum(r["weight"] * r["score"] for r in rows) if extra else float(np.mean(scores))
        write_summary(
            out,
            {
                "metric": "toy_top1",
                "direction": direction,
                "value": value,
                "uncertainty": {"value": 0.01, "kind": "se"},
                "n": len(scores),
                "diagnostics": {},
                "advisories": [],
            },
        )
        entries.append(
            {
                "progress": progress,
                "valid": True,
                "reason": "ok",
                "value": value,
                "se": 0.01,
                "n": len(scores),
                "scores": str(out),
            }
        )
    sign = 1 if direction == "maximize" else -1
    best = max(entries, key=lambda e: sign * e["value"])
    for e in entries:
        e["proxy_value"] = (proxy or {}).get(e["progress"])
    doc = {
        "task": "toy",
        "run": run,
        "seed": seed,
        "direction": direction,
        "checkpoints": entries,
        "official": best,
        "proxy_selected": proxy_selected(entries, direction) if proxy else None,
    }
    if started_unix is not None:
        record = root / run / "replay" / "record.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"attempts": [{"started_unix": started_unix}]}))
        doc["record"] = str(record)
    path = root / run / "official.json"
    path.write_text(json.dumps(doc))
    write_receipt(path)  # official.json.sha256, as the official step writes it
    return path


def toy_ablation(cand: list[Path], ship: list[Path], out_dir: Path, **given) -> dict:
    """``ablation_result`` of a toy task's candidate ``cand`` against ``ship``: no fixed start,
    no row clusters, metric units as the rows', 500 replicates unless ``given`` says otherwise."""
    options = {"task": "toy", "candidate": "cand", "fixed_start_scores": None, "n_boot": 500, "scale": 1.0}
    return ablation_result(
        candidate_officials=cand, shipped_officials=ship, out_dir=out_dir, **{"row_cluster": None, **options, **given}
    )


def make_ablation(root: Path, delta: float, seeds=(1, 2, 3, 4), n: int = 60, direction="maximize"):
    """Candidate = shipped + ``delta`` + seed and row noise, on the same rows; two checkpoints
    per run (the last one slightly worse, so selection matters)."""
    rng = np.random.default_rng(7)
    row_effect = rng.normal(0.5, 0.2, n)
    cand, ship = [], []
    for seed in seeds:
        base = row_effect + rng.normal(0, 0.05) + rng.normal(0, 0.1, n)
        gain = delta + rng.normal(0, 0.02) + rng.normal(0, 0.1, n)
        ship.append(
            fake_run(
                root,
                f"shipped-seed{seed}",
                seed,
                {1: list(base - 0.01), 2: list(base)},
                direction=direction,
            )
        )
        cand.append(
            fake_run(
                root,
                f"cand-seed{seed}",
                seed,
                {1: list(base + gain), 2: list(base + gain - 0.02)},
                direction=direction,
            )
        )
    return cand, ship


@pytest.mark.parametrize(
    "delta, verdict",
    [(0.0, "not established (CI spans 0)"), (0.2, "established gain"), (-0.2, "established loss")],
)
def test_verdict_flips_as_the_difference_grows(tmp_path, delta, verdict):
    cand, ship = make_ablation(tmp_path, delta)
    s = toy_ablation(cand, ship, tmp_path / "out", n_boot=2000)
    assert s["verdict"] == verdict
    assert (tmp_path / "out" / ".complete").exists() and verdict in (tmp_path / "out" / "report.md").read_text()
    assert f": {verdict} (no decision rule file)." in s["sentence"]
    # per-seed differences are the official.json values' differences
    for p, cp, sp in zip(s["comparisons"]["official"]["per_seed"], cand, ship):
        c, sh = json.loads(cp.read_text())["official"], json.loads(sp.read_text())["official"]
        assert p["difference"] == c["value"] - sh["value"]
        assert p["candidate"]["progress"] == c["progress"] and p["shipped"]["progress"] == sh["progress"]
    # the last retained checkpoint (progress 2) of each run, not the official one
    for p, cp, sp in zip(s["comparisons"]["last"]["per_seed"], cand, ship):
        c, sh = (
            json.loads(cp.read_text())["checkpoints"][1],
            json.loads(sp.read_text())["checkpoints"][1],
        )
        assert p["difference"] == c["value"] - sh["value"] and c["progress"] == 2


def test_verdict_sweep_and_minimised_metric(tmp_path):
    # growing gains: once "established gain", larger gains stay established
    verdicts = []
    for i, delta in enumerate([0.0, 0.01, 0.03, 0.1, 0.3]):
        cand, ship = make_ablation(tmp_path / str(i), delta)
        s = toy_ablation(cand, ship, tmp_path / str(i) / "out", n_boot=1000)
        verdicts.append(s["verdict"])
    assert verdicts[0] == "not established (CI spans 0)" and verdicts[-1] == "established gain"
    first = verdicts.index("established gain")
    assert all(v == "established gain" for v in verdicts[first:])
    # for a minimised metric the same positive difference is a loss
    cand, ship = make_ablation(tmp_path / "min", 0.3, direction="minimize")
    s = toy_ablation(cand, ship, tmp_path / "min" / "out", n_boot=1000)
    assert s["verdict"] == "established loss"


def test_normalised_score_selection_bias_and_power(tmp_path):
    cand, ship = make_ablation(tmp_path, 0.1, seeds=(1, 2, 3))
    fixed = tmp_path / "fixed"
    write_summary(
        fixed,
        {
            "metric": "toy_top1",
            "direction": "maximize",
            "value": 0.2,
            "uncertainty": {"value": 0.01, "kind": "se"},
            "n": 60,
            "diagnostics": {},
            "advisories": [],
        },
    )
    s = toy_ablation(cand, ship, tmp_path / "out", fixed_start_scores=fixed, n_boot=1000)
    off = s["comparisons"]["official"]
    for p in off["per_seed"]:  # fixed start 0, this seed's shipped run 1
        expected = (p["candidate"]["value"] - 0.2) / (p["shipped"]["value"] - 0.2)
        assert p["normalised"] == pytest.approx(expected)
    assert off["normalised"]["mean"] == pytest.approx(np.mean([p["normalised"] for p in off["per_seed"]]))
    # official - last: candidate's last is 0.02 below its official, shipped's last is its official
    assert s["selection_bias"]["candidate"] == pytest.approx(0.02)
    assert s["selection_bias"]["shipped"] == pytest.approx(0.0)
    h = off["hierarchical"]
    assert off["detectable_difference"] == pytest.approx(
        2.801585 * math.sqrt(h["seed_variance"] / 3 + h["row_variance"]), rel=1e-6
    )
    assert off["t_interval"]["mean"] == pytest.approx(off["mean_difference"])


def test_clustered_rows_and_refusals(tmp_path):
    labels = [i % 5 for i in range(60)]
    cand, ship = make_ablation(tmp_path, 0.1)
    # rewrite rows with a label field: only the resampling changes, not the values
    for path in cand + ship:
        for score_dir in (path.parent / "final-scores").iterdir():
            rows = [json.loads(line) for line in (score_dir / "rows.jsonl").read_text().splitlines()]
            (score_dir / "rows.jsonl").write_text(
                "".join(json.dumps({**r, "label": labels[i]}) + "\n" for i, r in enumerate(rows))
            )
            seal(score_dir)  # as the score step would have written them
    s = toy_ablation(cand, ship, tmp_path / "c", row_cluster="label")
    assert s["comparisons"]["official"]["hierarchical"]["clusters"] == 5 and "clusters" in s["resampling"]
    # seeds not matched
    with pytest.raises(InputError, match="seed"):
        toy_ablation(cand, ship[::-1], tmp_path / "x")
    # rows that do not reproduce the summary's value are refused
    doc = json.loads(cand[0].read_text())
    rows_file = Path(doc["official"]["scores"]) / "rows.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    rows[0]["score"] += 1.0
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=f"{rows_file}: tampered: edited since it was written"):
        toy_ablation(cand, ship, tmp_path / "y")  # against its receipt: refused before it is read
    seal(rows_file.parent)  # the receipt rewritten too: the rows are checked against the summary
    with pytest.raises(InputError, match="rows give a difference"):
        toy_ablation(cand, ship, tmp_path / "y")


def job_counts(stdout: str) -> dict[str, int]:
    """Snakemake's "Job stats" table of a dry run: rule -> number of jobs."""
    table = stdout.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


@pytest.mark.slow
def test_soup_ablation_dag_shares_the_shipped_runs(campaign_run, tmp_path):
    """soup's two candidates of conftest's campaign (``greedy``, ``single``) against the same
    2 shipped seeds: planned (dry run in a fresh copy with the campaign's config) as 2 + 2 + 2
    replays, not 2 x (2 + 2); then the built campaign's ``greedy`` ablation read back."""
    import shutil

    from conftest import copy_workflow, snakemake

    fresh = copy_workflow(tmp_path)
    shutil.copy(campaign_run / "config/config.yaml", fresh / "config/config.yaml")  # its patches: absolute paths
    dry = snakemake(
        fresh,
        "results/soup/ablation/greedy",
        "results/soup/ablation/single",
        "-n",
        "--cores",
        "2",
        "--resources",
        "gpu=1",
        check=True,
    )
    counts = job_counts(dry.stdout)
    assert counts["replay"] == 6 and counts["workspace"] == 6 and counts["ablation"] == 2
    jobs = re.findall(
        r"^(?:rule|checkpoint) (\w+):\n(?:    .*\n)*?    wildcards: task=soup, run=(\S+)\n",
        dry.stdout,
        re.M,
    )
    assert sorted(run for rule, run in jobs if rule == "replay") == sorted(
        f"{c}-seed{s}" for c in ("single", "greedy", "shipped") for s in (42, 43)
    )
    assert jobs.count(("replay", "shipped-seed42")) == 1 and jobs.count(("official", "shipped-seed43")) == 1
    one = job_counts(
        snakemake(
            fresh,
            "results/soup/ablation/greedy",
            "-n",
            "--cores",
            "2",
            "--resources",
            "gpu=1",
            check=True,
        ).stdout
    )
    assert one["replay"] == 4
    work = campaign_run
    s = json.loads((work / "results/soup/ablation/greedy/summary.json").read_text())
    assert (work / "results/soup/ablation/greedy/.complete").exists()
    assert s["seeds"] == [42, 43] and s["resampling"].startswith("whole clusters by row field `label`")
    for p, seed in zip(s["comparisons"]["official"]["per_seed"], (42, 43)):
        cand = json.loads((work / f"results/soup/greedy-seed{seed}/official.json").read_text())["official"]
        ship = json.loads((work / f"results/soup/shipped-seed{seed}/official.json").read_text())["official"]
        assert p["candidate"]["official"] == f"results/soup/greedy-seed{seed}/official.json"
        assert p["difference"] == cand["value"] - ship["value"]
    fixed = json.loads((work / "results/soup/reference/fixed-start/final-scores/summary.json").read_text())["value"]
    norm = s["comparisons"]["official"]["per_seed"][0]
    if norm["shipped"]["value"] > fixed:  # maximised: defined only when shipped beats the fixed start
        assert norm["normalised"] == pytest.approx(
            (norm["candidate"]["value"] - fixed) / (norm["shipped"]["value"] - fixed)
        )
    else:  # seen on the tiny soup: the shipped uniform soup below its fixed start
        assert norm["normalised"] is None and norm["normalised_undefined"]
    html = (work / "results/soup/report.html").read_text()
    assert 'id="ablation-greedy-differences"' in html and f'data-verdict="{s["verdict"]}"' in html
    assert "## official result" in (work / "results/soup/ablation/greedy/report.md").read_text()


def test_rm_style_weighted_rows_in_percent(tmp_path):
    # RewardBench-like: 3 subsets of unequal size and weight; 0/1 rows; value in percent
    rng = np.random.default_rng(3)
    sizes, shares = {"a": 10, "b": 20, "c": 30}, {"a": 0.5, "b": 0.3, "c": 0.2}
    extra = [{"stratum": k, "weight": shares[k] / n} for k, n in sizes.items() for _ in range(n)]
    cand, ship = [], []
    for seed in (1, 2, 3):
        base = (rng.random(60) < 0.6).astype(float)
        better = np.maximum(base, rng.random(60) < 0.3)
        ship.append(fake_run(tmp_path, f"shipped-seed{seed}", seed, {5: list(base)}, extra=extra, scale=100.0))
        cand.append(fake_run(tmp_path, f"cand-seed{seed}", seed, {5: list(better)}, extra=extra, scale=100.0))
    s = toy_ablation(cand, ship, tmp_path / "o", task="rm", n_boot=1000, scale=100.0)
    off = s["comparisons"]["official"]
    for p, cp, sp in zip(off["per_seed"], cand, ship):
        assert p["difference"] == pytest.approx(
            json.loads(cp.read_text())["official"]["value"] - json.loads(sp.read_text())["official"]["value"]
        )
        assert p["normalised"] is None
    assert off["hierarchical"]["method"].endswith("stratified") and off["hierarchical"]["clusters"] == 60
    # in percent: the CI is around the mean difference, with points of a percent as units
    assert off["hierarchical"]["ci_low"] <= off["mean_difference"] <= off["hierarchical"]["ci_high"]
    assert off["mean_difference"] > 1.0 and "no normalised score" in " ".join(s["advisories"])


def test_readme_example_as_written_plans_3_seeds_of_both(tmp_path):
    """docs/operations.md's ablation commands (embedded and tiny config), as written, in a copy
    of the workflow (dry run): 3 seeds of both sides, the decision rule before the replays."""
    import shlex
    import shutil

    from conftest import ROOT, copy_workflow, snakemake

    lines = [
        l
        for l in (ROOT / "docs/operations.md").read_text().splitlines()
        if l.startswith(".venv/bin/snakemake results/rm/ablation/margin")
    ]
    assert len(lines) == 2
    work = copy_workflow(tmp_path)
    shutil.copytree(ROOT / "patches", work / "patches")
    for line in lines:
        dry = snakemake(work, *shlex.split(line)[1:], "-n", check=True)
        counts = job_counts(dry.stdout)
        assert counts["replay"] == 6 and counts["ablation"] == 1 and counts["decision_rule"] == 1, line
        runs = set(re.findall(r"run=((?:margin|shipped)-seed4[234])\b", dry.stdout))
        assert runs == {f"{c}-seed{s}" for c in ("margin", "shipped") for s in (42, 43, 44)}


@pytest.mark.slow
def test_rm_ablation_dag_weighted_rows(campaign_run):
    """rm on a tiny model, 2 seeds (conftest's campaign: candidate ``lr4``, one checkpoint per
    run, at step 2): rows drawn within RewardBench subsets, the weighted score in percent
    recomputed; the per-seed differences are the runs' official values'."""
    work = campaign_run
    s = json.loads((work / "results/rm/ablation/lr4/summary.json").read_text())
    off = s["comparisons"]["official"]
    assert off["hierarchical"]["method"].endswith("stratified") and s["fixed_start"]["value"] is None
    for p, seed in zip(off["per_seed"], (42, 43)):
        cand = json.loads((work / f"results/rm/lr4-seed{seed}/official.json").read_text())["official"]
        ship = json.loads((work / f"results/rm/shipped-seed{seed}/official.json").read_text())["official"]
        assert p["difference"] == cand["value"] - ship["value"] and p["normalised"] is None
    last = s["comparisons"]["last"]
    assert last["available"] and all(p["candidate"]["progress"] == 2 for p in last["per_seed"])
    decision = s["decision"]
    if decision["ci_low"] == decision["ci_high"]:  # the tiny model scored the same at both seeds (seen: 0.0, 0.0)
        assert s["verdict"] == ZERO_WIDTH and all(p["difference"] == 0 for p in off["per_seed"])
    else:
        assert s["verdict"] in ("established gain", "established loss", "not established (CI spans 0)")


def test_one_seed_draws_no_verdict(tmp_path):
    cand, ship = make_ablation(tmp_path, 0.3, seeds=(1,))
    s = toy_ablation(cand, ship, tmp_path / "o")
    off = s["comparisons"]["official"]
    assert s["verdict"] == "not established (one seed: seed-to-seed variance unknown)"
    assert off["t_interval"] is None and off["detectable_difference"] is None
    assert off["seeds_for_power"] is None and off["hierarchical"]["seed_variance"] is None
    # the bootstrap still gives the rows' CI, which alone would have excluded 0
    assert off["hierarchical"]["ci_low"] > 0 and "one seed" in s["advisories"][0]


def _summary_file(folder: Path, value: float, direction: str = "maximize") -> Path:
    write_summary(
        folder,
        {
            "metric": "toy_top1",
            "direction": direction,
            "value": value,
            "uncertainty": {"value": 0.01, "kind": "se"},
            "n": 20,
            "diagnostics": {},
            "advisories": [],
        },
    )
    return folder


def test_tiny_soup_case_normalisation_undefined_and_zero_width_t_interval(tmp_path):
    """The tiny soup of issue 30: fixed start 0.45, shipped 0.40, candidate 0.35 on every seed.
    The normalised score once read (0.35 - 0.45) / (0.40 - 0.45) = 2.0000, and the t-interval of
    identical seeds, [-0.05, -0.05], read "established loss" beside "not established"."""
    shipped_rows = [1.0] * 8 + [0.0] * 12  # 8 / 20 = 0.40
    cand_rows = [0.0] + [1.0] * 7 + [0.0] * 12  # 7 / 20 = 0.35: row 0 is the one difference
    cand = [fake_run(tmp_path, f"greedy-seed{s}", s, {3: cand_rows}) for s in (42, 43)]
    ship = [fake_run(tmp_path, f"shipped-seed{s}", s, {3: shipped_rows}) for s in (42, 43)]
    s = toy_ablation(
        cand,
        ship,
        tmp_path / "out",
        task="soup",
        candidate="greedy",
        fixed_start_scores=_summary_file(tmp_path / "fixed", 0.45),
        n_boot=1000,
    )
    off = s["comparisons"]["official"]
    assert [p["normalised"] for p in off["per_seed"]] == [None, None] and off["normalised"]["mean"] is None
    assert all("(0.4000) is below the fixed start (0.4500)" in p["normalised_undefined"] for p in off["per_seed"])
    assert any(a.startswith("seed 42, 43: normalised score undefined") for a in s["advisories"])
    # every replicate is -(times row 0 is drawn) / 20 <= 0, and row 0 is missed by about (19/20)^20
    # = 36 % of the draws: the upper bound is 0, so the CI touches 0 and establishes nothing
    assert off["hierarchical"]["ci_high"] == 0.0 and s["verdict"] == "not established (CI spans 0)"
    t = off["t_interval"]
    assert t["ci_low"] == t["ci_high"] == pytest.approx(-0.05)
    assert off["t_interval_reading"].startswith("zero width") and "established" not in off["t_interval_reading"]
    # both seeds lose on both seeds' pairs: P = 0 of 4, an interval of zero width
    assert off["probability_of_improvement"]["value"] == 0.0 and off["probability_of_improvement"]["pairs"] == 4
    report = (tmp_path / "out" / "report.md").read_text()
    assert "2.0000" not in report and "| undefined |" in report and "established loss" not in report


def test_probability_of_improvement_from_the_runs_files(tmp_path):
    cand, ship = make_ablation(tmp_path, 0.0, seeds=(1, 2, 3, 4))
    s = toy_ablation(cand, ship, tmp_path / "o")
    # by a different method: a plain loop over every pair of the runs' official values
    c = [json.loads(p.read_text())["official"]["value"] for p in cand]
    sh = [json.loads(p.read_text())["official"]["value"] for p in ship]
    wins = sum((x > y) + 0.5 * (x == y) for x in c for y in sh) / 16
    pi = s["comparisons"]["official"]["probability_of_improvement"]
    assert pi["value"] == pytest.approx(wins) and pi["ci_low"] <= wins <= pi["ci_high"]
    assert s["diagnostics"]["probability_of_improvement"] == pi


def test_proxy_selected_comparison_and_oracle_gap(tmp_path):
    """Each run's proxy ranks checkpoint 2 first; the official result of the candidate is its
    checkpoint 1 (0.02 above its 2), the shipped one's is its checkpoint 2: oracle gaps 0.02 and
    0, and the proxy-selected comparison is the last-checkpoint one here."""
    rng = np.random.default_rng(11)
    cand, ship = [], []
    for seed in (1, 2, 3):
        base = rng.normal(0.5, 0.1, 40)
        gain = 0.05 + rng.normal(0, 0.05, 40)
        proxy = {1: 0.3, 2: 0.6}
        ship.append(fake_run(tmp_path, f"shipped-seed{seed}", seed, {1: list(base - 0.01), 2: list(base)}, proxy=proxy))
        cand.append(
            fake_run(
                tmp_path, f"cand-seed{seed}", seed, {1: list(base + gain), 2: list(base + gain - 0.02)}, proxy=proxy
            )
        )
    s = toy_ablation(cand, ship, tmp_path / "o")
    for p in s["proxy_selected"]:
        assert p["candidate"]["progress"] == 2 and p["candidate"]["oracle_gap"] == pytest.approx(0.02)
        assert p["shipped"]["progress"] == 2 and p["shipped"]["oracle_gap"] == 0.0
        assert set(p["candidate"]) == {"progress", "proxy_value", "final_value", "oracle_gap"}
    assert s["selection_bias"]["oracle_gap"] == {"candidate": pytest.approx(0.02), "shipped": 0.0}
    ps, last = s["comparisons"]["proxy_selected"], s["comparisons"]["last"]
    assert [p["difference"] for p in ps["per_seed"]] == [p["difference"] for p in last["per_seed"]]
    assert ps["mean_difference"] == pytest.approx(s["comparisons"]["official"]["mean_difference"] - 0.02)
    report = (tmp_path / "o" / "report.md").read_text()
    assert "| 1 | checkpoint-2, 0.6000 → " in report


def _rule(comparison="official", alpha=0.05, seeds=(1, 2, 3), **extra) -> dict:
    from replaykit.harness.decision import rule_from_config

    metric = {"final": "toy_top1_{n}", "direction": "maximize"}
    ablation = {"decision": {"alpha": alpha, "comparison": comparison, **extra}}
    return rule_from_config("toy", "cand", ablation, list(seeds), metric)


def test_decision_rule_hash_and_history(tmp_path):
    import hashlib

    from replaykit.harness.decision import read_history, rule_receipt, rule_sha256, write_rule

    rule = _rule()
    # the canonical JSON, written out by hand: keys sorted, no spaces
    text = (
        '{"alpha":0.05,"candidate":"cand","comparison":"official","direction":"maximize",'
        '"hypothesis":"superiority","margin":0.0,"metric":"toy_top1_{n}","seeds":[1,2,3],"task":"toy"}'
    )
    assert rule_sha256(rule) == hashlib.sha256(text.encode()).hexdigest()
    path = tmp_path / "decision-rules" / "cand.json"
    first = write_rule(rule, path, now=1000.0)
    assert first["sha256"] == rule_sha256(rule) and json.loads(path.read_text())["sha256"] == first["sha256"]
    # the same rule written again keeps its hash; a changed α gives another
    assert write_rule(rule, path, now=1500.0)["sha256"] == first["sha256"]
    changed = write_rule(_rule(alpha=0.1), path, now=2000.0)
    assert changed["sha256"] != first["sha256"]
    assert [(v["sha256"], v["written_unix"]) for v in read_history(path)] == [
        (first["sha256"], 1000.0),
        (first["sha256"], 1500.0),
        (changed["sha256"], 2000.0),
    ]
    # the first replay started between the writes: the rule in force then is not the one now
    late = rule_receipt(path, first_started=1800.0)
    assert late["fixed_in_advance"] is False and late["in_force_at_first_attempt"]["sha256"] == first["sha256"]
    assert "changed after the candidate's first replay started" in late["note"]
    assert rule_receipt(path, first_started=2500.0)["fixed_in_advance"] is True
    none_before = rule_receipt(path, first_started=900.0)
    assert none_before["fixed_in_advance"] is False and none_before["in_force_at_first_attempt"] is None
    assert rule_receipt(path, first_started=None)["fixed_in_advance"] is None
    # a rule edited by hand gets its own hash, which no version written had
    doc = json.loads(path.read_text())
    doc["rule"]["alpha"] = 0.2
    path.write_text(json.dumps(doc))
    edited = rule_receipt(path, first_started=2500.0)
    assert edited["hand_edited"] and edited["fixed_in_advance"] is False


def test_decision_rule_refusals(tmp_path):
    from replaykit.harness.decision import check_rule, write_rule

    with pytest.raises(InputError, match=r"rule\.margin: invalid value 0\.0"):
        write_rule(_rule(hypothesis="non-inferiority"), tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.history.jsonl").exists()
    with pytest.raises(InputError, match=r"rule\.comparison"):
        check_rule({**_rule(), "comparison": "best"}, "cfg")
    with pytest.raises(InputError, match=r"rule\.extra: not a decision-rule field"):
        check_rule({**_rule(), "extra": 1}, "cfg")


def test_ablation_judged_against_its_rule_and_a_changed_rule_is_visible(tmp_path):
    from replaykit.harness.decision import write_rule

    started = 10_000.0
    cand, ship = make_ablation(tmp_path, 0.03, seeds=(1, 2, 3))
    for path in cand:  # the candidate's replays started at 10,000 s (their records' first attempt)
        doc = json.loads(path.read_text())
        record = path.parent / "replay" / "record.json"
        record.parent.mkdir()
        record.write_text(json.dumps({"attempts": [{"started_unix": started + doc["seed"]}]}))
        path.write_text(json.dumps({**doc, "record": str(record)}))
        write_receipt(path)
    rule_path = tmp_path / "decision-rules" / "cand.json"
    fixed = write_rule(_rule(), rule_path, now=started - 100)

    def run(out: str) -> dict:
        return toy_ablation(cand, ship, tmp_path / out, n_boot=1000, decision_rule=rule_path)

    s = run("before")
    d = s["decision"]
    assert d["rule_file"]["fixed_in_advance"] is True and d["rule_file"]["sha256"] == fixed["sha256"]
    assert d["rule_file"]["first_attempt_started_unix"] == started + 1 and d["under_rule_in_force"] is None
    assert s["verdict"] == d["verdict"] == s["comparisons"]["official"]["verdict"]
    assert f"decision rule {fixed['sha256'][:12]} fixed before the first replay" in s["sentence"]
    # after the replays: the rule now compares the last checkpoints at α 0.2 -- a new hash, said so
    later = write_rule(_rule(comparison="last", alpha=0.2), rule_path, now=started + 500)
    s = run("after")
    d = s["decision"]
    assert d["rule_file"]["fixed_in_advance"] is False and d["rule_file"]["sha256"] == later["sha256"]
    assert d["comparison"] == "last" and s["value"] == s["comparisons"]["last"]["mean_difference"]
    assert s["comparisons"]["last"]["hierarchical"]["confidence"] == pytest.approx(0.8)
    then = d["under_rule_in_force"]
    assert then["sha256"] == fixed["sha256"] and then["confidence"] == pytest.approx(0.95)
    assert "NOT fixed before the first replay" in s["sentence"]
    assert any(a.startswith("decision rule: the rule changed after") for a in s["advisories"])
    report = (tmp_path / "after" / "report.md").read_text()
    assert "- fixed in advance: **no**" in report and f"(sha256 `{fixed['sha256']}`)" in report
    # the rule judged now is named by its new hash, beside the one in force at the first replay
    assert f"(sha256 `{later['sha256']}`, written " in report and later["sha256"] != fixed["sha256"]
    # a rule whose seeds are not the runs' is refused
    write_rule(_rule(seeds=(1, 2)), rule_path, now=started + 600)
    with pytest.raises(InputError, match=r"rule\.seeds: \[1, 2\], but the ablation's runs have \[1, 2, 3\]"):
        run("seeds")


def test_judge_p_value_agrees_with_the_verdict(tmp_path):
    """The decision's p-value is below α exactly when its interval claims something (verdicts
    over a sweep of gains); a one-seed ablation has none."""
    from replaykit.harness.decision import write_rule

    rule_path = write_rule(_rule(seeds=(1, 2, 3, 4)), tmp_path / "rule.json") and tmp_path / "rule.json"
    for i, delta in enumerate((-0.3, -0.02, 0.0, 0.02, 0.05, 0.3)):
        cand, ship = make_ablation(tmp_path / str(i), delta)
        s = toy_ablation(cand, ship, tmp_path / str(i) / "o", n_boot=1000, decision_rule=rule_path)
        claims = s["verdict"].startswith(("established gain", "established loss"))
        assert (s["decision"]["p_value"] < 0.05) == claims, (delta, s["verdict"], s["decision"]["p_value"])


def test_holm_verdicts_on_three_candidates():
    from replaykit.harness.ablation import holm_verdicts

    def summary(name, verdict, p):
        return {"candidate": name, "verdict": verdict, "decision": {"alpha": 0.05, "p_value": p}}

    # p 0.01, 0.04, 0.03 -> Holm: 0.03, 0.06, 0.06 (test_stats); only `a` keeps its claim
    out = holm_verdicts(
        [
            summary("a", "established gain", 0.01),
            summary("b", "established gain", 0.04),
            summary("c", "established loss", 0.03),
        ]
    )
    assert [o["rejected"] for o in out] == [True, False, False] and {o["m"] for o in out} == {3}
    assert out[0]["verdict"] == "established gain"
    assert out[1]["verdict"] == (
        "not established after Holm's adjustment for 3 comparisons (adjusted p 0.06 >= 0.05; "
        "unadjusted: established gain)"
    )
    assert out[2]["adjusted_p_value"] == pytest.approx(0.06) and out[2]["unadjusted_verdict"] == "established loss"
    # a verdict that claims nothing stays as it is; one comparison changes nothing
    quiet = holm_verdicts([summary("a", "not established (CI spans 0)", 0.5), summary("b", "established gain", 0.001)])
    assert quiet[0]["verdict"] == "not established (CI spans 0)" and quiet[1]["verdict"] == "established gain"
    assert holm_verdicts([summary("b", "established gain", 0.04)])[0]["verdict"] == "established gain"
    with pytest.raises(ValueError, match="one alpha"):
        holm_verdicts([summary("a", "x", 0.1), {**summary("b", "y", 0.1), "decision": {"alpha": 0.1, "p_value": 0.1}}])


def test_an_edited_ablation_or_one_of_its_inputs_is_found_and_refused(tmp_path, monkeypatch):
    """Hostile (2026-12-05): an ablation's ``summary.json`` edited to ``verdict: "established
    gain"``: ``status`` did not look at ablations, and a rerun said nothing to be done. Its
    ``.complete`` lists the SHA-256 of each of its files now and its summary records every file
    it read (``inputs_sha256``): ``status`` says the edit tampered and an edited input stale, the
    workflow's stamp makes the ablation again, and the ablation refuses an edited input."""
    import hashlib

    from replaykit.harness.verify import check_product, reverify, stamp_of, status_lines

    def sha(path) -> str:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    monkeypatch.chdir(tmp_path)
    cand, ship = make_ablation(Path("results/t"), 0.0, seeds=(1, 2))
    folder = Path("results/t/ablation/cand")
    s = toy_ablation(cand, ship, folder, n_boot=200)
    names = ["report.md", "summary.json"]  # (no figure drawn here)
    assert (folder / ".complete").read_text() == "".join(f"{sha(folder / n)}  {n}\n" for n in names)
    rows = [str(Path(json.loads(Path(p).read_text())["official"]["scores"]) / "rows.jsonl") for p in cand + ship]
    assert {str(p) for p in cand + ship} | set(rows) <= set(s["inputs_sha256"])
    assert all(digest == sha(name) for name, digest in s["inputs_sha256"].items())
    assert check_product(folder).state == "verified"
    doc = json.loads((folder / "summary.json").read_text())
    recorded = sha(folder / "summary.json")
    (folder / "summary.json").write_text(json.dumps({**doc, "verdict": "established gain"}))
    finding = check_product(folder)
    assert (finding.state, finding.reason, finding.invalidates) == (
        "tampered",
        f"summary.json: edited since it was written (SHA-256 {sha(folder / 'summary.json')[:12]}, "
        f"{folder / '.complete'} recorded {recorded[:12]})",
        [str(folder)],
    )
    lines, ok = status_lines("results", ["t"])
    assert not ok and lines[-2:] == ["t/ablation/cand: stale (0 of 1 receipts verified)", f"  {finding.line()}"]
    assert reverify([], {}, [], [str(folder)], say=[].append) == [str(folder)]
    assert stamp_of(folder) == Path("results/t/ablation/.receipts/cand") and stamp_of(folder).is_file()
    # made again; then a compared checkpoint's rows edited: the ablation is stale, and refuses them
    toy_ablation(cand, ship, folder, n_boot=200)
    assert check_product(folder).state == "verified"
    edited = Path(rows[0])
    edited.write_text(edited.read_text().replace('"score": 0.', '"score": 9.', 1))
    finding = check_product(folder)
    assert (finding.state, finding.reason) == ("stale", f"made from another {edited}")
    with pytest.raises(InputError, match=rf"^{edited}: tampered: edited since it was written"):
        toy_ablation(cand, ship, tmp_path / "again", n_boot=200)
    assert not (tmp_path / "again").exists()
