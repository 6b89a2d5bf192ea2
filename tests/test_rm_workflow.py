"""The rm task through the whole DAG: the embedded config shrunk onto a tiny Llama, and the
full-scale config's code path (local files, the ``full`` profile) on a tiny Mistral."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, copy_workflow, make_tiny_model, rm_config, snakemake, ultrafeedback_rows, write_config
from replaykit.tasks.rm import rewardbench

pytestmark = pytest.mark.slow
RUN = Path("results/rm/shipped-seed42")


def read(path):
    return json.loads(Path(path).read_text())


def read_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def finished(tiny_llama, tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("rm-run"))
    write_config(work, rm_config(tiny_llama))
    snakemake(work, "results/rm/final", "--cores", "2", "--resources", "gpu=1", check=True)
    snakemake(work, str(RUN / "proxy.json"), "--cores", "2", "--resources", "gpu=1", check=True)
    return work


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


def test_identical_pair_in_local_training_data_is_one_clear_line(workdir, tiny_llama, tmp_path):
    prefs, bench = tmp_path / "prefs.jsonl", tmp_path / "bench.jsonl"
    prefs.write_text(json.dumps({"prompt": "Hi?", "chosen": "Hello.", "rejected": "Go away."}) + "\n"
                     + json.dumps({"prompt": "Colour?", "chosen": "Blue.", "rejected": "Blue."}) + "\n")
    bench.write_text(json.dumps({"id": "1", "subset": "math-prm", "prompt": "1+1?", "chosen": "2", "rejected": "3"}) + "\n")
    data = {"source": "local", "train_prefs": str(prefs), "rewardbench": str(bench), "public_seed": 1, "n_proxy": 1}
    write_config(workdir, rm_config(tiny_llama, data=data))
    result = snakemake(workdir, "results/rm/assets/manifest.json", "--cores", "1")
    assert result.returncode != 0
    log = (workdir / "logs/rm/assets.log").read_text().strip().splitlines()
    assert log[-1] == f"error: {prefs}: line 2.chosen: chosen and rejected are identical"
    assert not (workdir / "results/rm/assets/manifest.json").exists()


def rewardbench_rows():
    subsets = [s for section in rewardbench.SUBSET_MAPPING.values() for s in section]
    return [{"id": str(i), "subset": s, "prompt": f"Prompt {i} for {s}?", "chosen": f"Good {i}.", "rejected": f"Bad {i}."}
            for i, s in enumerate(subsets)]


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
    task["data"] = {**full["data"], "train_prefs": str(prefs), "rewardbench": str(bench), "n_proxy": 10}
    task["recipe"] = {"profile": "full", "overrides": {
        "dtype": "float32", "optim": "adamw_torch", "max_steps": 2, "save_steps": 1, "max_length": 48,
        "gradient_accumulation_steps": 2, "lora": {"r": 4, "alpha": 8}}}
    write_config(work, {"models": {}, "tasks": {"rm": task}})
    snakemake(work, "results/rm/final", "--cores", "1", "--resources", "gpu=1", check=True)
    manifest = read(work / "results/rm/assets/manifest.json")
    assert manifest["data"]["source"] == "local" and manifest["data"]["n_final"] == 23
    record = read(work / RUN / "replay/record.json")
    assert record["profile"] == "full" and record["retained"] == [1, 2]
    summary = read(work / "results/rm/final/summary.json")
    assert summary["n"] == 23 and summary["references"]["published"] == {"shipped": 74.568936}
    # every one of the 23 RewardBench subsets present: each section averages its subsets by fixed counts
    sections = summary["diagnostics"]["sections"]
    assert [len(sections[s]["subsets"]) for s in ("Chat", "Chat Hard", "Safety", "Reasoning")] == [5, 6, 5, 7]
    train = read_rows(work / "results/rm/assets/public/train_prefs.jsonl")
    assert train[0]["prompt"] == [{"role": "user", "content": "Name a colour, please (0)."}]
