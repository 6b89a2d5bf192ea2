"""The whole DAG on a tiny random Llama, bad inputs, and recovery after kill -9."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (
    VENV_BIN,
    build_seconds,
    copy_run,
    jobs_run,
    orphan_processes,
    orphans_after,
    snakemake,
    tiny_config,
    write_config,
)

pytestmark = pytest.mark.slow
TARGET = "results/dpo/final"
RUN = Path("results/dpo/shipped-seed42")


def read(path):
    return json.loads(Path(path).read_text())


@pytest.fixture
def finished(dpo_run):
    """One complete tiny run (conftest's ``dpo_run``: ``TARGET``, then the proxy, with
    ``--cores 2 --resources gpu=1``), shared by the checks below (they must not modify it)."""
    return dpo_run, build_seconds(dpo_run)


def test_tiny_dag_completes_with_receipts(finished):
    work, seconds = finished
    final = work / TARGET
    assert (final / ".complete").exists() and (final / "report.md").exists()
    record = read(work / RUN / "replay/record.json")
    # max_steps 5, save every step: 5 publications, the 3 greatest retained
    assert record["publication_count"] == 5
    assert record["retained"] == [3, 4, 5]
    assert sorted(p.name for p in (work / RUN / "replay").glob("checkpoint-*")) == [
        "checkpoint-3",
        "checkpoint-4",
        "checkpoint-5",
    ]
    assert record["stop_reason"] == "max_steps" and record["steps"] == 5
    for key in (
        "started_at",
        "ended_at",
        "wall_s",
        "budget",
        "utilisation",
        "patch_sha256",
        "asset_manifest_sha256",
        "seed",
        "project",
        "libraries",
        "publications",
    ):
        assert key in record
    # no state left "running" (a value; the driver's own key `running_at_cutoff` may say false)
    assert '"running"' not in json.dumps(record)
    print(f"tiny DAG (final, then proxy): {seconds:.0f} s")


def test_official_is_best_valid_recomputed_from_rows(finished):
    work, _ = finished
    values = {}
    for progress in (3, 4, 5):
        assert read(work / RUN / f"validation/checkpoint-{progress}.json")["valid"] is True
        rows = [
            json.loads(l)
            for l in (work / RUN / f"final-scores/checkpoint-{progress}/rows.jsonl").read_text().splitlines()
        ]
        assert len(rows) == 8
        values[progress] = sum(r["strict"] for r in rows) / len(rows)
        summary = read(work / RUN / f"final-scores/checkpoint-{progress}/summary.json")
        p = values[progress]
        assert summary["value"] == pytest.approx(p)
        assert summary["uncertainty"]["value"] == pytest.approx((p * (1 - p) / 8) ** 0.5)
    best = max(values.values())
    expected = max(p for p, v in values.items() if v == best)  # ties -> greater progress
    final = read(work / TARGET / "summary.json")
    assert final["value"] == pytest.approx(best)
    assert final["official"]["progress"] == expected
    assert final["metric"] == "ifeval_strict_accuracy_hidden8"
    # the candidate is the shipped recipe: its paired difference with itself is exactly 0
    assert final["comparisons"]["vs_shipped"]["difference"] == 0.0
    assert final["seeds"]["n"] == 1
    report = (work / TARGET / "report.md").read_text()
    for progress in (3, 4, 5):
        assert f"checkpoint-{progress}" in report
    assert f"{final['value']:.4f}" in report


def test_proxy_is_kept_apart_from_final_numbers(finished):
    work, _ = finished
    proxy = read(work / RUN / "proxy.json")
    assert sorted(proxy["checkpoints"]) == ["checkpoint-3", "checkpoint-4", "checkpoint-5"]
    for entry in proxy["checkpoints"].values():
        assert entry["metric"] == "ifeval_strict_accuracy_public4" and entry["n"] == 4
        assert read(work / entry["summary"])["split"] == "proxy"
    # the final numbers are the final split's: the official value is its checkpoint's final
    # score; a proxy number appears only under a proxy_* key (the proxy-selected result, issue
    # 30), and the proxy's metric never names a final number
    final = read(work / TARGET / "summary.json")
    scores = read(work / final["official"]["scores"] / "summary.json")
    assert scores["split"] == "final" and final["value"] == scores["value"] and final["metric"] == scores["metric"]
    report = (work / TARGET / "report.md").read_text()
    assert "public4" not in json.dumps(final) + report

    def proxy_paths(doc, path=()):
        if isinstance(doc, dict):
            for key, value in doc.items():
                yield from ([path + (key,)] if "proxy" in key else proxy_paths(value, path + (key,)))
        elif isinstance(doc, list):
            for i, value in enumerate(doc):
                yield from proxy_paths(value, path + (i,))

    assert {p[-1] for p in proxy_paths(final)} == {"proxy_selected"}
    assert all(p[0] == "proxy_selected" or p[:2] == ("seeds", "per_seed") for p in proxy_paths(final))


def test_lineage_chain_resolves(finished):
    work, _ = finished
    final = read(work / TARGET / "summary.json")
    official = read(work / final["official"]["official"])
    record = read(work / official["record"])
    from replaykit.harness.hashing import sha256_file

    assert sha256_file(work / official["record"]) == final["lineage"]["record_sha256"]
    assert sha256_file(work / record["asset_manifest"]) == final["lineage"]["asset_manifest_sha256"]
    assert record["asset_manifest"] == final["lineage"]["asset_manifest"]
    workspace = read(work / record["workspace_record"])
    assert workspace["patch_sha256"] is None and workspace["workspace_sha256"] == record["workspace_sha256"]
    report = (work / TARGET / "report.md").read_text()
    for name in (record["asset_manifest"], record["workspace_record"], official["record"]):
        assert name in report
    manifest = read(work / record["asset_manifest"])
    assert {e["split"] for e in manifest["files"].values()} == {"public", "hidden"}


def test_hidden_split_is_read_by_scoring_rules_only():
    text = {p.stem: p.read_text() for p in (Path(__file__).parents[1] / "rules").glob("*.smk")}
    blocks = {}
    for source in text.values():
        for chunk in source.split("\nrule ")[1:] + source.split("\ncheckpoint ")[1:]:
            name = chunk.split(":", 1)[0].strip()
            blocks[name] = chunk.split("\nrule ")[0].split("\ncheckpoint ")[0]
    readers = sorted(
        name
        for name, body in blocks.items()
        if "assets/hidden" in body and "output:" in body and "assets/hidden" in body.split("output:")[0]
    )
    assert readers == ["reference_fixed_start", "score"]  # score: its final split


def test_gpu_jobs_never_overlap_under_one_gpu_slot(finished):
    """Run with --cores 2 --resources gpu=1: the GPU rules' benchmark intervals (end = the
    file's mtime, start = end - its ``s`` column) are disjoint, while CPU slots allowed two jobs."""
    import csv

    work, _ = finished
    intervals = []
    bench = work / "benchmarks/dpo"
    for tsv in [
        *bench.glob("shipped-seed42/replay.tsv"),
        *bench.glob("shipped-seed42/validate-*.tsv"),
        *bench.glob("shipped-seed42/score-*.tsv"),
        *bench.glob("reference-fixed-start.tsv"),
    ]:
        with tsv.open() as f:
            seconds = float(next(csv.DictReader(f, delimiter="\t"))["s"])
        end = tsv.stat().st_mtime
        intervals.append((end - seconds, end, tsv.name))
    assert len(intervals) == 1 + 3 + 3 + 3 + 1  # replay, validations, final and proxy scores, reference
    intervals.sort()
    for (_, end, a), (start, _, b) in zip(intervals, intervals[1:]):
        assert start >= end - 0.05, f"{a} and {b} overlap"


def test_rerun_has_nothing_to_do(finished):
    work, _ = finished
    out = snakemake(work, TARGET, "--cores", "1", "--resources", "gpu=1", "-n")
    assert "Nothing to be done" in out.stdout + out.stderr
    # commands that only build the DAG evaluate the input functions too (no latency wait there)
    out = snakemake(work, TARGET, "--summary", check=True)
    assert f"{RUN}/official.json" in out.stdout


def _copy_finished(finished, tmp_path):
    work, _ = finished
    return copy_run(work, tmp_path / "copy")


def test_corrupt_checkpoint_is_invalid_and_run_still_completes(finished, tmp_path):
    work = _copy_finished(finished, tmp_path)
    weights = work / RUN / "replay/checkpoint-5/adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    # the receipts see the checkpoint's tree hash differ from its record: the next run validates
    # it again (checkpoints 3 and 4 keep their markers and scores)
    out = snakemake(work, TARGET, "--cores", "2", "--resources", "gpu=1", check=True)
    assert "checkpoint-5.json: stale: checkpoint changed after publication" in out.stderr
    assert jobs_run(out) == {"validate": 1, "score": 2, "official": 1, "audit": 1, "final": 1}, out.stderr
    marker = read(work / RUN / "validation/checkpoint-5.json")
    assert marker["valid"] is False and marker["reason"]
    final = read(work / TARGET / "summary.json")
    assert final["official"]["progress"] in (3, 4)
    assert "invalid" in (work / TARGET / "report.md").read_text()


def test_truncated_record_is_one_clear_line(finished, tmp_path):
    work = _copy_finished(finished, tmp_path)
    record = work / RUN / "replay/record.json"
    record.write_text(record.read_text()[:300])
    out = snakemake(work, TARGET, "--cores", "1", "--resources", "gpu=1", "-n")
    assert out.returncode != 0
    assert f"error: {RUN}/replay/record.json: retained: unreadable replay record" in out.stderr
    assert "Traceback" not in out.stderr


def _delay_visibility(work, seconds):
    """Fault injection in this copy of the workflow: after a replay job ends, its last
    checkpoint (checkpoint-5) stays invisible for ``seconds`` while its record is already
    there, as on a shared filesystem whose other clients see files late."""
    rule = work / "rules/replay.smk"
    text = rule.read_text()
    end = '" > {log} 2>&1"'  # the replay command's last line
    assert text.count(" exec python -m replaykit replay") == 1 and text.count(end) == 1
    text = text.replace(" exec python -m replaykit replay", " python -m replaykit replay").replace(
        end,
        '" > {log} 2>&1;'
        ' mv {params.publish_dir}/checkpoint-5 {params.publish_dir}/.not-yet-visible;"'
        f'" (sleep {seconds}; mv {{params.publish_dir}}/.not-yet-visible {{params.publish_dir}}/checkpoint-5)'
        ' > /dev/null 2>&1 &"',
    )
    rule.write_text(text)


def test_checkpoints_visible_after_their_record_are_waited_for(finished, tmp_path):
    """Shared filesystems: a replay's record (a declared output, covered by Snakemake's own
    --latency-wait) is visible but a checkpoint it lists appears seconds later. Within
    --latency-wait the run goes on; beyond it, one clear line and no false "invalid" verdict."""
    work = _copy_finished(finished, tmp_path)
    _delay_visibility(work, 10)
    run43, run44 = Path("results/dpo/shipped-seed43"), Path("results/dpo/shipped-seed44")
    # within --latency-wait: the seed-43 replay runs, then its checkpoint-5 is waited for (the
    # proxy table reads the retained checkpoints as official.json does, with 3 scorings fewer)
    out = snakemake(
        work, str(run43 / "proxy.json"), "--cores", "1", "--resources", "gpu=1", "--latency-wait", "90", check=True
    )
    assert "Waiting at most 90 s for checkpoints listed in" in out.stderr
    assert all(read(work / run43 / f"validation/checkpoint-{p}.json")["valid"] for p in (3, 4, 5))
    assert sorted(read(work / run43 / "proxy.json")["checkpoints"]) == [f"checkpoint-{p}" for p in (3, 4, 5)]
    # beyond it: the seed-44 replay runs, the wait runs out mid-run, and the line says so
    out = snakemake(work, str(run44 / "official.json"), "--cores", "1", "--resources", "gpu=1", "--latency-wait", "2")
    assert out.returncode != 0
    assert (
        f"error: {run44}/replay/record.json: retained: {run44}/replay/checkpoint-5 is listed but not "
        "visible after 2 s; on a shared filesystem raise --latency-wait"
    ) in out.stderr
    assert not (work / run44 / "validation/checkpoint-5.json").exists()
    assert "Traceback" not in out.stderr


def test_two_invocations_on_disjoint_targets_both_complete(finished, tmp_path):
    """Two snakemake processes on one results directory, each replaying its own seed: both
    run (their outputs are disjoint; the shared assets are only read), and neither disturbs
    the other's receipts or the finished run's."""
    from replaykit.harness.hashing import sha256_tree

    work = _copy_finished(finished, tmp_path)
    untouched = sha256_tree(work / RUN / "replay")
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    targets = [f"results/dpo/shipped-seed{seed}/replay/record.json" for seed in (43, 44)]
    procs = [
        subprocess.Popen(
            [str(VENV_BIN / "snakemake"), target, "--cores", "1", "--resources", "gpu=1", "--workflow-profile", "none"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for target in targets
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    # they did overlap in time (else this shows nothing)
    from datetime import datetime

    spans = [
        (datetime.fromisoformat(r["started_at"]), datetime.fromisoformat(r["ended_at"]))
        for r in (read(work / t) for t in targets)
    ]
    assert max(a for a, _ in spans) < min(b for _, b in spans)
    for seed, target in zip((43, 44), targets):
        record = read(work / target)
        assert record["seed"] == seed and record["retained"] == [3, 4, 5]
        for progress in record["retained"]:
            path = work / f"results/dpo/shipped-seed{seed}/replay/checkpoint-{progress}"
            assert sha256_tree(path) == record["checkpoints"][str(progress)]["sha256"]
    assert sha256_tree(work / RUN / "replay") == untouched
    assert not list((work / ".snakemake/locks").glob("*"))
    out = snakemake(work, *targets, "--cores", "1", "--resources", "gpu=1", "-n")
    assert "Nothing to be done" in out.stdout + out.stderr


def test_bad_config_is_one_clear_line(workdir, tiny_llama):
    cfg = tiny_config(tiny_llama)
    cfg["tasks"]["dpo"]["budget"]["outer_limit_s"] = "ten minutes"
    write_config(workdir, cfg)
    out = snakemake(workdir, TARGET, "--cores", "1", "--resources", "gpu=1", "-n")
    assert out.returncode != 0
    assert (
        "error: config/config.yaml: tasks.dpo.budget.outer_limit_s: 'ten minutes' is not of type 'number'" in out.stderr
    )


def test_budget_that_does_not_fit_is_refused(workdir, tiny_llama):
    cfg = tiny_config(tiny_llama, budget={"outer_limit_s": 100, "internal_deadline_s": 90, "export_reserve_s": 30})
    write_config(workdir, cfg)
    out = snakemake(workdir, TARGET, "--cores", "1", "--resources", "gpu=1", "-n")
    assert out.returncode != 0 and "tasks.dpo.budget: budget: internal_deadline_s + export_reserve_s" in out.stderr


def _failing_log(workdir, name):
    return (workdir / "logs" / "dpo" / name).read_text().strip().splitlines()[-1]


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("evil", "--- a/../../Snakefile\n+++ b/../../Snakefile\n@@ -1 +1 @@\n-x\n+y\n", "leaves the workspace"),
        ("broken", "this is not a diff\n", "not a unified diff"),
    ],
)
def test_bad_patch_is_refused_before_training(workdir, tiny_llama, name, text, message):
    patch = workdir / f"{name}.diff"
    patch.write_text(text)
    write_config(workdir, tiny_config(tiny_llama, candidate=name, candidates={name: str(patch)}))
    out = snakemake(workdir, TARGET, "--cores", "1", "--resources", "gpu=1")
    assert out.returncode != 0
    line = _failing_log(workdir, f"{name}-seed42/workspace.log")
    assert line.startswith(f"error: {patch}: ") and message in line
    assert not (workdir / f"results/dpo/{name}-seed42/replay").exists()


def test_nan_loss_stops_with_a_clear_error(workdir, tiny_llama):
    """A candidate whose change makes the DPO loss NaN (β NaN inside train.py: a NaN knob in
    the profile is refused before training, by the recipe's knobs dataclass)."""
    import difflib

    train = (workdir / "recipes/dpo/train.py").read_text()
    assert train.count("beta=recipe.beta,") == 1
    patch = workdir / "nan.diff"
    patch.write_text(
        "".join(
            difflib.unified_diff(
                train.splitlines(True),
                train.replace("beta=recipe.beta,", 'beta=float("nan"),').splitlines(True),
                "a/train.py",
                "b/train.py",
            )
        )
    )
    write_config(workdir, tiny_config(tiny_llama, candidate="nan", candidates={"nan": str(patch)}))
    out = snakemake(workdir, "results/dpo/nan-seed42/replay/record.json", "--cores", "1", "--resources", "gpu=1")
    assert out.returncode != 0
    line = _failing_log(workdir, "nan-seed42/replay.log")
    assert line.startswith("error: ") and "NaN loss at step 1" in line
    failure = read(workdir / "results/dpo/nan-seed42/replay/last-failure.json")
    assert "NaN loss" in failure["error"]
    # the terminal shows that line and the log (before Snakemake's few closing lines)
    terminal = out.stderr.splitlines()
    assert terminal[terminal.index(line) + 1] == "  (rule replay failed; full log: logs/dpo/nan-seed42/replay.log)"
    # the attempt is the candidate's failure
    [attempt] = read(workdir / "results/dpo/nan-seed42/replay-attempts.json")
    assert (attempt["cause"], attempt["exit"]) == ("candidate", failure["returncode"]) and failure["returncode"] != 0
    assert "NaN loss" in attempt["cause_detail"] and attempt["ended_unix"] >= attempt["started_unix"]


def test_hash_mismatch_stops_replay_and_keeps_results(finished, tmp_path):
    work = _copy_finished(finished, tmp_path)
    train = work / "results/dpo/assets/public/train_prefs.jsonl"
    train.write_text(train.read_text().replace("Cats", "Dogs", 1))
    out = snakemake(work, TARGET, "--cores", "1", "--resources", "gpu=1", "--forcerun", "replay")
    assert out.returncode != 0
    line = _failing_log(work, "shipped-seed42/replay.log")
    assert "train_prefs.jsonl: sha256: does not match the asset manifest" in line
    assert (work / TARGET / ".complete").exists()  # the earlier final result is untouched


def test_empty_prompt_set_is_refused(workdir, tiny_llama):
    empty = workdir / "empty.jsonl"
    empty.write_text("")
    prefs = workdir / "prefs.jsonl"
    prefs.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    cfg = tiny_config(
        tiny_llama,
        data={
            "source": "local",
            "train_prefs": str(prefs),
            "ifeval_prompts": str(empty),
            "public_seed": 1,
            "n_proxy": 1,
        },
    )
    write_config(workdir, cfg)
    out = snakemake(workdir, TARGET, "--cores", "1", "--resources", "gpu=1")
    assert out.returncode != 0
    # local files are read when the workflow starts, before any rule runs or removes anything
    assert out.stderr.strip().splitlines()[-1] == f"error: {empty}: no rows (empty set)"
    assert not (workdir / "results").exists()


def test_kill_snakemake_during_replay_then_recover(workdir, tiny_llama):
    """kill -9 of snakemake after the replay's first publication (of two: steps 20 and 40; the
    training process is held there, ``publish.FAULT_ENV``, so the kill always lands mid-replay),
    then the documented recovery: the replay resumes from its trainer state and completes. The
    target is the replay's record: validation and scoring after a recovered replay are those of
    any replay (the other recovery tests build the whole DAG), and would add 2 validations and 4
    scorings here."""
    cfg = tiny_config(tiny_llama)
    cfg["tasks"]["dpo"]["recipe"]["overrides"].update(max_steps=40, save_steps=20)
    write_config(workdir, cfg)
    env = dict(
        os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH="20:hang"
    )
    target = str(RUN / "replay/record.json")
    cmd = [str(VENV_BIN / "snakemake"), target, "--cores", "1", "--resources", "gpu=1", "--workflow-profile", "none"]
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    log = workdir / "logs/dpo/shipped-seed42/replay.log"
    deadline = time.time() + 240
    while time.time() < deadline and not (log.exists() and "[publish] checkpoint-20" in log.read_text()):
        time.sleep(0.5)
    assert "[publish] checkpoint-20" in log.read_text()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # by command line or working directory, within the driver's SIGTERM grace (15 s)
    assert orphans_after(str(workdir.resolve()), 15) == []
    published_before = sorted(p.name for p in (workdir / RUN / "replay").glob("checkpoint-*"))
    assert published_before  # kept: publications live outside Snakemake's declared outputs

    # the documented recovery
    snakemake(workdir, "--unlock", check=True)
    snakemake(workdir, target, "--cores", "1", "--resources", "gpu=1", "--rerun-incomplete", check=True)
    record = read(workdir / RUN / "replay/record.json")
    assert record["resumed"] is True and record["steps"] == 40
    assert len(record["attempts"]) == 2  # one budget across attempts
    assert record["utilisation"]["wall_s_all_attempts"] > record["wall_s"]
    # the driver got SIGTERM when its job's owner died (parent-death signal): a platform cause
    first, again = record["attempts"]
    assert (first["cause"], first["exit"], again["cause"]) == ("platform", 128 + signal.SIGTERM, "completed")
    assert "[publish] checkpoint-20" in (workdir / first["log"]).read_text()
    assert (workdir / again["log"]).read_text() == (workdir / "logs/dpo/shipped-seed42/replay.log").read_text()
    # after the resume, each published adapter is the one the trainer saved at that step
    from replaykit.harness.hashing import sha256_file

    hashes = set()
    for progress in record["retained"]:
        published = workdir / RUN / f"replay/checkpoint-{progress}/adapter_model.safetensors"
        trained = workdir / RUN / f"replay-state/trainer/checkpoint-{progress}/adapter_model.safetensors"
        if trained.exists():  # the trainer keeps its 2 newest states
            assert sha256_file(published) == sha256_file(trained)
        hashes.add(sha256_file(published))
    assert len(hashes) == 2
    counts = [e["count"] for e in record["publications"]]
    assert counts == list(range(1, len(counts) + 1))
    assert record["retained"] == [20, 40]
    assert not (workdir / RUN / "replay/last-failure.json").exists()


def test_sigterm_of_the_training_process_then_resume(workdir, tiny_llama):
    """SIGTERM reaches train.py itself (an OOM killer, an admin, a node agent): the replay job
    fails with the published checkpoints kept, and the rerun resumes from the last whole
    trainer state instead of starting over."""
    cfg = tiny_config(tiny_llama)
    cfg["tasks"]["dpo"]["recipe"]["overrides"]["max_steps"] = 60
    write_config(workdir, cfg)
    target = str(RUN / "replay/record.json")
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    cmd = [str(VENV_BIN / "snakemake"), target, "--cores", "1", "--resources", "gpu=1", "--workflow-profile", "none"]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = workdir / "logs/dpo/shipped-seed42/replay.log"
    deadline = time.time() + 240
    while time.time() < deadline and not (log.exists() and "[publish] checkpoint-3" in log.read_text()):
        time.sleep(0.2)
    # the training process itself, not the bubblewrap processes that hold its sandbox
    trainers = [
        line.split()[0]
        for line in orphan_processes(str(workdir))
        if "train.py" in line and not line.split()[1].endswith("bwrap")
    ]
    assert len(trainers) == 1
    # held still, so that the 60 tiny steps cannot end while the second invocation starts
    os.kill(int(trainers[0]), signal.SIGSTOP)
    # a second invocation on the same results is refused while the first one runs
    second = snakemake(workdir, target, "--cores", "1", "--resources", "gpu=1")
    assert second.returncode != 0 and "cannot be locked" in second.stdout + second.stderr
    assert proc.poll() is None and orphan_processes(str(workdir))  # the first is untouched
    os.kill(int(trainers[0]), signal.SIGTERM)  # pending while stopped, delivered on SIGCONT
    os.kill(int(trainers[0]), signal.SIGCONT)
    assert proc.wait(timeout=120) != 0  # the replay job failed ...
    assert orphan_processes(str(workdir)) == []
    failure = read(workdir / RUN / "replay/last-failure.json")
    assert failure["returncode"] == 128 + signal.SIGTERM  # bwrap reports a signalled child so
    kept = sorted(int(p.name.split("-")[1]) for p in (workdir / RUN / "replay").glob("checkpoint-*"))
    assert kept and max(kept) >= 3  # ... and kept what it had published

    snakemake(workdir, target, "--cores", "1", "--resources", "gpu=1", "--rerun-incomplete", check=True)
    record = read(workdir / RUN / "replay/record.json")
    assert record["resumed"] is True and record["steps"] == 60 and len(record["attempts"]) == 2
    assert record["retained"] == [58, 59, 60]
    assert [e["count"] for e in record["publications"]] == list(range(1, len(record["publications"]) + 1))
    # the second attempt continued from a saved trainer state at or after the last publication
    resumed_at = re.search(r"\[train\] resuming from \S*checkpoint-(\d+)", log.read_text())
    assert resumed_at and int(resumed_at.group(1)) >= max(kept)
    assert [h["progress"] for h in record["train_history"]] == list(range(1, 61))
    assert not (workdir / RUN / "replay/last-failure.json").exists()
    # each attempt kept its own log and its cause; replay.log is the current attempt's
    first, again = record["attempts"]
    assert (first["cause"], first["exit"]) == ("platform", 128 + signal.SIGTERM), first
    assert "SIGTERM" in first["cause_detail"] and first["ended_unix"] is not None
    assert (again["cause"], again["exit"]) == ("completed", 0)
    assert (first["log"], again["log"]) == tuple(f"logs/dpo/shipped-seed42/replay.attempt-{n}.log" for n in (1, 2))
    first_log = (workdir / first["log"]).read_text()
    assert "[publish] checkpoint-3" in first_log and "resuming from" not in first_log
    assert (workdir / again["log"]).read_text() == log.read_text()


def test_missing_fixed_start_is_one_clear_line(workdir, tmp_path):
    write_config(workdir, tiny_config(tmp_path / "no-such-model"))
    out = snakemake(workdir, TARGET, "--cores", "1", "--resources", "gpu=1", "-n")
    assert out.returncode != 0
    assert f"error: config/config.yaml: tasks.dpo.fixed_start: '{tmp_path / 'no-such-model'}' is neither" in out.stderr


def test_internal_deadline_stops_training_and_exits_0(workdir, tiny_llama):
    cfg = tiny_config(tiny_llama, budget={"outer_limit_s": 240, "internal_deadline_s": 30, "export_reserve_s": 60})
    cfg["tasks"]["dpo"]["recipe"]["overrides"].update(max_steps=100_000, save_steps=25)
    write_config(workdir, cfg)
    out = snakemake(workdir, str(RUN / "replay/record.json"), "--cores", "1", "--resources", "gpu=1", check=True)
    record = read(workdir / RUN / "replay/record.json")
    assert record["stop_reason"] == "deadline"
    assert 0 < record["steps"] < 100_000
    # the terminal says why training ended (its last progress line promised a next checkpoint)
    done = f"[replay] dpo/shipped-seed42: done: stop_reason=deadline steps={record['steps']} retained="
    assert done in out.stderr, out.stderr[-2000:]
    assert record["retained"][-1] == record["steps"]  # the last state is saved at the deadline
    assert len(record["retained"]) <= 3
    assert record["wall_s"] < 30 + 60  # stopped inside internal deadline + export reserve
    assert record["utilisation"]["budget_fraction"] == pytest.approx(record["wall_s"] / 240)


def test_configfile_is_merged_and_named_in_errors(workdir, tiny_llama):
    """`--configfile` (how full-scale configs are given) works, and a bad value in it is
    reported with the files it came from."""
    write_config(workdir, tiny_config(tiny_llama))
    extra = workdir / "extra.yaml"
    extra.write_text("tasks:\n  dpo:\n    seeds: [7]\n")
    result = snakemake(workdir, "-n", TARGET, "--configfile", "config/config.yaml", str(extra))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dpo/shipped-seed7" in result.stdout
    extra.write_text("tasks:\n  dpo:\n    threads: 0\n")
    result = snakemake(workdir, "-n", TARGET, "--configfile", "config/config.yaml", str(extra))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "extra.yaml" in last and "tasks.dpo.threads" in last
