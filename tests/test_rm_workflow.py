"""The rm task through the whole DAG: the embedded config shrunk onto a tiny Llama, and the
full-scale config's code path (local files, the ``full`` profile) on a tiny Mistral."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import (
    ROOT,
    copy_run,
    copy_workflow,
    make_tiny_model,
    rm_config,
    snakemake,
    ultrafeedback_rows,
    write_config,
)
from replaykit.tasks.rm import rewardbench

pytestmark = pytest.mark.slow
RUN = Path("results/rm/shipped-seed42")


def read(path):
    return json.loads(Path(path).read_text())


def read_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture
def finished(rm_run):
    """conftest's ``rm_run``: ``results/rm/report.html``, then the proxy, with ``--cores 2
    --resources gpu=1``; shared, so the checks below must not modify it."""
    return rm_run


def test_rm_dag_completes_without_a_fixed_start_reference(finished):
    work = finished
    assert (work / "results/rm/final/.complete").exists()
    assert not (work / "results/rm/reference").exists()  # no head, so nothing to score
    record = read(work / RUN / "replay/record.json")
    assert record["publication_count"] == 4 and record["retained"] == [2, 3, 4]
    summary = read(work / "results/rm/final/summary.json")
    assert summary["metric"] == "rewardbench_v1_score"
    assert summary["references"]["fixed_start"] is None and summary["normalised_score"] is None
    assert set(summary["comparisons"]) == {"vs_shipped"}
    assert summary["comparisons"]["vs_shipped"]["difference"] == 0.0
    assert summary["references"]["published"] == {"shipped": 74.568936}
    assert summary["diagnostics"]["overlap_with_training"]["prompts"] == 0
    assert summary["diagnostics"]["overlap_with_training"]["responses"] == 0
    assert any("no fixed-start reference" in a for a in summary["advisories"])
    report = (work / "results/rm/final/report.md").read_text()
    assert "none: the fixed start cannot be scored by itself" in report
    for section in ("Chat", "Chat Hard", "Reasoning", "Safety"):
        assert section in report
    html = (work / "results/rm/report.html").read_text()
    for progress in (2, 3, 4):  # every retained checkpoint, with the RewardBench diagnostic figure
        assert f'data-run="shipped-seed42" data-progress="{progress}"' in html
    assert (work / "results/rm/report/diagnostics.png").stat().st_size > 10_000


def test_rm_scores_recomputed_from_rows(finished):
    work = finished
    hidden = read_rows(work / "results/rm/assets/hidden/final_rows.jsonl")
    for progress in (2, 3, 4):
        assert read(work / RUN / f"validation/checkpoint-{progress}.json")["valid"] is True
        rows = read_rows(work / RUN / f"final-scores/checkpoint-{progress}/rows.jsonl")
        assert [r["id"] for r in rows] == [r["id"] for r in hidden]
        correct = [{"subset": r["subset"], "correct": int(r["reward_chosen"] > r["reward_rejected"])} for r in rows]
        summary = read(work / RUN / f"final-scores/checkpoint-{progress}/summary.json")
        assert summary["value"] == pytest.approx(rewardbench.score(correct)["score"])
        assert summary["n"] == len(hidden)
    proxy = read(work / RUN / "proxy.json")
    proxy_rows = read_rows(work / "results/rm/assets/public/proxy_rows.jsonl")
    assert proxy["checkpoints"]["checkpoint-4"]["metric"] == f"rewardbench_proxy_{len(proxy_rows)}"
    assert {r["id"] for r in proxy_rows} < {r["id"] for r in hidden}  # a visible subset of the final rows
    manifest = read(work / "results/rm/assets/manifest.json")
    assert {f["split"] for k, f in manifest["files"].items() if k.startswith("hidden/")} == {"hidden"}


def _copy_finished(finished, dest):
    return copy_run(finished, dest)


@pytest.mark.parametrize(
    "prefs_rows, bench_rows, message",
    [
        (
            [
                {"prompt": "Hi?", "chosen": "Hello.", "rejected": "Go away."},
                {"prompt": "Colour?", "chosen": "Blue.", "rejected": "Blue."},
            ],
            [{"id": "1", "subset": "math-prm", "prompt": "1+1?", "chosen": "2", "rejected": "3"}],
            "{prefs}: line 2.chosen: chosen and rejected are identical",
        ),
        (
            [{"prompt": "Hi?", "chosen": "Hello.", "rejected": "Go away."}],
            [{"id": "1", "prompt": "1+1?", "chosen": "2", "rejected": "3"}],
            "{bench}: line 1.subset: required field missing (it names the row's section)",
        ),
    ],
)
def test_bad_local_rows_are_refused_before_anything_is_removed(
    finished, tmp_path, tiny_llama, prefs_rows, bench_rows, message
):
    work = _copy_finished(finished, tmp_path / "work")
    prefs, bench = tmp_path / "prefs.jsonl", tmp_path / "bench.jsonl"
    prefs.write_text("".join(json.dumps(r) + "\n" for r in prefs_rows))
    bench.write_text("".join(json.dumps(r) + "\n" for r in bench_rows))
    before = sorted(str(p.relative_to(work)) for p in (work / "results").rglob("*"))
    data = {"source": "local", "train_prefs": str(prefs), "rewardbench": str(bench), "public_seed": 1, "n_proxy": 1}
    write_config(work, rm_config(tiny_llama, data=data))
    result = snakemake(work, "results/rm/final", "--cores", "1", "--resources", "gpu=1")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == "error: " + message.format(prefs=prefs, bench=bench)
    assert sorted(str(p.relative_to(work)) for p in (work / "results").rglob("*")) == before


def test_paired_comparison_between_checkpoints_equals_the_score_difference(finished):
    from replaykit.harness.results import paired_comparison

    a, b = finished / RUN / "final-scores/checkpoint-4", finished / RUN / "final-scores/checkpoint-2"
    out = paired_comparison(a, b, n_boot=500, seed=0, scale=100.0)
    assert out["difference"] == pytest.approx(read(a / "summary.json")["value"] - read(b / "summary.json")["value"])
    assert out["ci_low"] <= out["difference"] <= out["ci_high"] and "mcnemar" not in out
    assert out["method"].endswith("stratified")


def rewardbench_rows():
    """Two rows in each of RewardBench v1's 23 subsets, in its file's format."""
    subsets = [s for section in rewardbench.SUBSET_MAPPING.values() for s in section for _ in range(2)]
    return [
        {"id": str(i), "subset": s, "prompt": f"Prompt {i} for {s}?", "chosen": f"Good {i}.", "rejected": f"Bad {i}."}
        for i, s in enumerate(subsets)
    ]


def test_full_scale_config_on_tiny_mistral(tmp_path):
    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    model = make_tiny_model(tmp_path / "tiny-mistral", "mistral")
    prefs, bench = tmp_path / "train_prefs.jsonl", tmp_path / "filtered.jsonl"
    prefs.write_text("".join(json.dumps(r) + "\n" for r in ultrafeedback_rows(8)))
    bench.write_text("".join(json.dumps(r) + "\n" for r in rewardbench_rows()))
    full = yaml.safe_load((ROOT / "config/full-scale/rm.yaml").read_text())["tasks"]["rm"]
    task = rm_config(model)["tasks"]["rm"]
    task.update({k: v for k, v in full.items() if k not in ("threads", "budget", "validation", "evaluation")})
    task["fixed_start"] = str(model)
    task["data"] = {**full["data"], "train_prefs": str(prefs), "rewardbench": str(bench), "n_proxy": 23}
    task["recipe"] = {
        "profile": "full",
        "overrides": {
            "dtype": "float32",
            "optim": "adamw_torch",
            "max_steps": 2,
            "save_steps": 1,  # a step trained after a publication, under the full profile
            "max_length": 48,
            "gradient_accumulation_steps": 2,
            "lora": {"r": 4, "alpha": 8},
        },
    }
    write_config(work, {"models": {}, "tasks": {"rm": task}})
    snakemake(work, "results/rm/final", "--cores", "1", "--resources", "gpu=1", check=True)
    manifest = read(work / "results/rm/assets/manifest.json")
    assert manifest["data"]["source"] == "local" and manifest["data"]["n_final"] == 46
    assert manifest["data"]["n_proxy"] == 23  # one per subset: exactly n_proxy
    record = read(work / RUN / "replay/record.json")
    assert record["profile"] == "full" and record["retained"] == [1, 2]
    summary = read(work / "results/rm/final/summary.json")
    assert summary["n"] == 46 and summary["references"]["published"] == {"shipped": 74.568936}
    assert summary["diagnostics"]["decomposition"]["visible"]["n"] == 23
    # every one of the 23 RewardBench subsets present: each section averages its subsets by fixed counts
    sections = summary["diagnostics"]["sections"]
    assert [len(sections[s]["subsets"]) for s in ("Chat", "Chat Hard", "Safety", "Reasoning")] == [5, 6, 5, 7]
    train = read_rows(work / "results/rm/assets/public/train_prefs.jsonl")
    assert train[0]["prompt"] == [{"role": "user", "content": "Name a colour, please (0)."}]
