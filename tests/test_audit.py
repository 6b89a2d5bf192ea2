"""The audit on real runs (issue 29): every formal run's ``audit.json`` written by the
workflow and carried by the final summary and reports; a clean exploration and its formal
replay; an early submission; two probes that overlap after the lock file was deleted on the
host; candidate patches that carry final-split prompts (dpo) and final labels in another form
(soup). The checks' arithmetic is tested on synthetic receipts in tests/test_audit_checks.py.

Shared runs are read only (conftest): a test that changes one works in a ``copy_run``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, copy_run, snakemake, write_config
from conftest import soup_task as tiny_soup_task
from replaykit.harness.audit import SECTIONS, VERDICTS, find_exploration
from replaykit.harness.audit.behaviour import behaviour_checks
from replaykit.harness.audit.exposure import patch_check
from replaykit.harness.audit.items import ItemFields, read_items, read_public
from replaykit.harness.submission import exploration_of
from replaykit.tasks import get_task

pytestmark = pytest.mark.slow
GPU = ("--cores", "1", "--resources", "gpu=1")


def read(path) -> dict:
    return json.loads(Path(path).read_text())


def rk(cwd: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m replaykit ARGS`` in ``cwd`` with this checkout's package."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run(
        [sys.executable, "-m", "replaykit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def verdicts(audit: dict) -> dict[str, str]:
    return {name: audit[name]["verdict"] for name in SECTIONS}


def results_of(audit: dict, name: str) -> dict[str, str]:
    return {c["check"]: c["result"] for c in audit[name]["checks"]}


def line_with(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ---------------------------------------------------------------- the shipped run (dpo_run)


def test_the_workflow_audits_each_run_and_the_final_summary_carries_it(dpo_run):
    run = dpo_run / "results/dpo/shipped-seed42"
    audit = read(run / "audit.json")
    assert sorted(audit) == sorted(SECTIONS)  # exactly the four keys
    for name in SECTIONS:
        assert set(audit[name]) == {"verdict", "evidence", "checks"} and audit[name]["verdict"] in VERDICTS
        assert audit[name]["checks"] and all(c["result"] for c in audit[name]["checks"])
    assert verdicts(audit) == dict.fromkeys(SECTIONS, "none_found"), json.dumps(audit, indent=1)[:3000]
    # the checks that ran on a shipped run, with their results
    assert results_of(audit, "protocol_exposure") == {
        "final_split_not_in_sandbox": "pass",
        "final_split_not_declared_input": "pass",
        "final_split_not_exploration_input": "skipped",
        "patch_has_no_final_items": "skipped",
        "patch_blobs": "skipped",
        "exploration_has_no_final_items": "skipped",
        "replay_outputs_have_no_final_items": "pass",
    }
    n_final = sum(1 for _ in (dpo_run / "results/dpo/assets/hidden/final_prompts.jsonl").open())
    size = next(c for c in audit["task_defect"]["checks"] if c["check"] == "final_split_declared_size")
    assert size["result"] == "pass" and size["detail"] == f"{n_final} items"
    record = run / "replay/record.json"
    budget = next(c for c in audit["platform"]["checks"] if c["check"] == "budget_held")
    used = read(record)["utilisation"]["wall_s_all_attempts"]
    line = line_with(record, '"wall_s_all_attempts"')
    assert budget["evidence"][0].startswith(f"{record.relative_to(dpo_run)}:{line}: {used:.1f} s")

    summary = read(dpo_run / "results/dpo/final/summary.json")["audit"]
    assert summary["run"] == "shipped-seed42" and summary["sections"] == audit
    assert summary["sha256"] == hashlib.sha256((run / "audit.json").read_bytes()).hexdigest()
    report = (dpo_run / "results/dpo/final/report.md").read_text()
    assert "## Audit" in report and "| protocol_exposure | **none_found** |" in report

    shown = rk(dpo_run, "audit", "dpo")  # exit 0: nothing confirmed
    assert shown.stdout.splitlines()[0] == "dpo/shipped-seed42 (results/dpo/shipped-seed42/audit.json):"
    assert [line.split(":")[0].strip() for line in shown.stdout.splitlines()[1:]] == list(SECTIONS)


def test_audit_before_any_run_says_so_and_confirms_nothing(tmp_path):
    """As ``status``: a task with no finished run is not an error (README runs both commands in
    a fresh copy); the one line names the folder, and the exit is 0 (nothing confirmed)."""
    shown = rk(tmp_path, "audit", "dpo", check=False)
    assert (shown.returncode, shown.stdout) == (
        0,
        "results/dpo: nothing has run yet (no official.json): nothing to audit\n",
    )
    # the tiny runs are elsewhere (config/test.yaml's workdir): the line says where, as status does
    (tmp_path / "config").mkdir()
    (tmp_path / "config/test.yaml").write_text("workdir: tiny\n")
    (tmp_path / "tiny/results/dpo").mkdir(parents=True)
    shown = rk(tmp_path, "audit", "dpo", check=False)
    assert (shown.returncode, shown.stdout) == (
        0,
        "results/dpo: nothing has run yet (no official.json): nothing to audit; "
        "the tiny runs: audit dpo --results tiny/results\n",
    )
    # a misspelt task is no task with nothing to audit (a new user's typo had exited 0), as status
    for command in ("audit", "status"):
        typo = rk(tmp_path, command, "dppo", check=False)
        assert (typo.returncode, typo.stdout) == (2, ""), typo.stderr
        assert typo.stderr.startswith("error: command line: task: 'dppo': unknown task (known: ddpo, digress, dpo")


def test_a_patch_with_a_few_final_prompts_is_confirmed(dpo_run, tmp_path):
    """A candidate patch adding a file with three final prompts (re-wrapped, quoted, upper case)
    and one public proxy prompt. The patch is not replayed: the copy's workspace record is
    pointed at it, which is what the audit reads (the replay itself is tested elsewhere)."""
    work = copy_run(dpo_run, tmp_path / "w")
    final = [json.loads(line) for line in (work / "results/dpo/assets/hidden/final_prompts.jsonl").open()]
    proxy = [json.loads(line) for line in (work / "results/dpo/assets/public/proxy_prompts.jsonl").open()]
    chosen = [final[1], final[4], final[-1]]
    body = ['EXAMPLES = """']
    for row in chosen:
        body += textwrap.wrap(row["prompt"].upper(), 50) + [""]
    body += [proxy[0]["prompt"], '"""']
    patch = work / "patches/dpo-leaky.diff"
    patch.parent.mkdir(exist_ok=True)
    patch.write_text(
        f"--- /dev/null\n+++ b/examples.py\n@@ -0,0 +1,{len(body)} @@\n" + "".join(f"+{line}\n" for line in body)
    )
    ws = work / "results/dpo/shipped-seed42/workspace.json"
    ws.write_text(json.dumps({**read(ws), "patch": str(patch.relative_to(work))}))
    for name in ("audit.json", "audit.json.sha256"):  # computed now from the receipts
        (work / "results/dpo/shipped-seed42" / name).unlink()
    shown = rk(work, "audit", "dpo", "shipped-seed42", check=False)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    first = next(line for line in shown.stdout.splitlines() if "protocol_exposure:" in line)
    # the first prompt's first line in the patch (the header takes 3 lines, the opening quote one)
    assert first.startswith(
        f"  protocol_exposure: confirmed -- patches/dpo-leaky.diff:5: final item {chosen[0]['id']} (text:"
    )

    fields = ItemFields.of(get_task("dpo").FINAL_ITEM_FIELDS)
    items = read_items(work / "results/dpo/assets/hidden/final_prompts.jsonl", fields)
    public = read_public(work / "results/dpo/assets/public/proxy_prompts.jsonl", fields, items)
    [found, blobs] = patch_check(patch, items, public)
    assert found["result"] == "fail" and blobs["result"] == "pass"
    assert [e.split(": final item ")[1].split()[0] for e in found["evidence"]] == [r["id"] for r in chosen]
    # every public proxy prompt, verbatim: none is a final item
    public_only = tmp_path / "public.diff"
    lines = [r["prompt"].replace("\n", " ") for r in proxy]
    public_only.write_text(
        f"--- /dev/null\n+++ b/p.txt\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{x}\n" for x in lines)
    )
    assert patch_check(public_only, items, public)[0]["result"] == "pass"


def test_final_labels_in_another_form_are_confirmed(soup_run, tmp_path):
    """soup: a patch adding a JSON file that maps four final images' digit indices to their
    labels; the same indices with other labels are chance, not the final split."""
    split = soup_run / "results/soup/assets/hidden/final.jsonl"
    rows = [json.loads(line) for line in split.open()][:4]
    fields = ItemFields.of(get_task("soup").FINAL_ITEM_FIELDS)
    items = read_items(split, fields)
    public = read_public(soup_run / "results/soup/assets/public/proxy.jsonl", fields, items)

    def patch_of(mapping: dict) -> Path:
        lines = json.dumps(mapping, indent=1).splitlines()
        path = tmp_path / f"soup-{len(list(tmp_path.iterdir()))}.diff"
        path.write_text(
            f"--- /dev/null\n+++ b/heldout.json\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{x}\n" for x in lines)
        )
        return path

    index = {r["id"]: str(int(r["id"].split("-")[1])) for r in rows}  # digit-0123 -> "123"
    leaky = patch_of({index[r["id"]]: r["label"] for r in rows})
    found = patch_check(leaky, items, public)[0]
    assert found["result"] == "fail"
    # the pairs are on lines 5-8 of the patch (3 header lines, then "{")
    assert [e.split(": final item ")[0] for e in found["evidence"]] == [f"{leaky}:{5 + k}" for k in range(4)]
    assert [e.split("final item ")[1].split()[0] for e in found["evidence"]] == [r["id"] for r in rows]
    chance = patch_of({index[r["id"]]: (r["label"] + 1) % 10 for r in rows})
    assert patch_check(chance, items, public)[0]["result"] == "pass"


def test_final_items_in_the_replays_log_or_checkpoint_are_confirmed(soup_run, tmp_path):
    """A candidate that printed four final rows (id and label) into its replay log, or wrote
    them into a published checkpoint's text file: ``replay_outputs_have_no_final_items``
    fails, naming the file and line (a hostile run of 2026-12-02 had printed the hidden split
    into its log and the audit said none_found). The untouched copy passes."""
    work = copy_run(soup_run, tmp_path / "w")
    run = work / "results/soup/shipped-seed42"
    rows = (work / "results/soup/assets/hidden/final.jsonl").read_text().splitlines()[:4]
    first_id = json.loads(rows[0])["id"]

    def audited(name: str) -> tuple[subprocess.CompletedProcess, dict]:
        for name_ in ("audit.json", "audit.json.sha256"):  # shown as computed now, not as the workflow wrote it
            (run / name_).unlink(missing_ok=True)
        shown = rk(work, "audit", "soup", "shipped-seed42", check=False)
        rk(work, "audit", "soup", "shipped-seed42", "--out", str(tmp_path / f"{name}.json"))
        return shown, read(tmp_path / f"{name}.json")

    shown, audit = audited("clean")
    assert (
        shown.returncode == 0 and results_of(audit, "protocol_exposure")["replay_outputs_have_no_final_items"] == "pass"
    )
    log = work / read(run / "replay/record.json")["attempts"][0]["log"]
    kept = log.read_text()
    log.write_text(kept + "".join(f"{row}\n" for row in rows))
    shown, audit = audited("log")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    expected = (
        f"  protocol_exposure: confirmed -- {log.relative_to(work)}:{len(kept.splitlines()) + 1}: final item {first_id}"
    )
    assert any(line.startswith(expected) for line in shown.stdout.splitlines()), shown.stdout
    assert results_of(audit, "protocol_exposure")["replay_outputs_have_no_final_items"] == "fail"
    # the same rows encoded (a hostile replay printed the hidden split in base64, hex and
    # reversed): one row per form, each found on its line
    import base64

    forms = [
        base64.b64encode(rows[0].encode()).decode(),
        base64.urlsafe_b64encode(rows[1].encode()).decode().rstrip("="),
        "rows: " + rows[2].encode().hex(),
        rows[3][::-1],
    ]
    log.write_text(kept + "".join(f"{form}\n" for form in forms))
    shown, audit = audited("encoded")
    assert shown.returncode == 1, shown.stdout
    evidence = audit["protocol_exposure"]["evidence"]
    for k, row in enumerate(rows):
        line = f"{log.relative_to(work)}:{len(kept.splitlines()) + 1 + k}: final item {json.loads(row)['id']}"
        assert any(e.startswith(line) and e.endswith("; encoded: reversed, base64 or hex)") for e in evidence), (
            line,
            evidence,
        )
    # the same rows in a text file of a published checkpoint, the log restored
    log.write_text(kept)
    checkpoint = sorted((run / "replay").glob("checkpoint-*"))[-1]
    (checkpoint / "notes.txt").write_text("\n".join(rows) + "\n")
    shown, audit = audited("checkpoint")
    assert shown.returncode == 1
    evidence = audit["protocol_exposure"]["evidence"]
    assert evidence[0].startswith(f"{(checkpoint / 'notes.txt').relative_to(work)}:1: final item {first_id}")


# ---------------------------------------------------------------- explorations (one soup copy)


@pytest.fixture(scope="module")
def explored(soup_run, tmp_path_factory):
    """A copy of the tiny soup run to explore in (its assets and shipped run built)."""
    return copy_run(soup_run, tmp_path_factory.mktemp("audit") / "w")


def start(work: Path, name: str, budget_s: float) -> Path:
    rk(work, "explore", "soup", "--name", name, "--budget-s", str(budget_s))
    ex = work / "explore/soup" / name
    config = ex / "workspace/configs/embedded.yaml"  # a change to submit
    config.write_text(config.read_text().replace("batch_size: 256", "batch_size: 128"))
    return ex


def probe_and_proxy(work: Path, ex: Path, seconds: float) -> None:
    """A probe that runs ``seconds``, then the proxy score of a checkpoint in its run folder (the
    shipped run's, copied in on the host: the sandboxed probe cannot read results/)."""
    import shutil

    # the probe publishes it (a proxy scores only what a probe's receipt lists), from a copy put
    # in its workspace, taken out again before the patch is made
    source = ex / "workspace/shipped-checkpoint"
    shutil.copytree(work / "results/soup/shipped-seed42/replay/checkpoint-3", source)
    publish = (
        "import os, shutil, time; "
        "shutil.copytree('shipped-checkpoint', os.environ['REPLAYKIT_RUN_DIR'] + '/publish/checkpoint-3'); "
        f"time.sleep({seconds})"
    )
    rk(work, "explore", "run", "-e", str(ex), "--", sys.executable, "-c", publish)
    shutil.rmtree(source)
    rk(work, "explore", "proxy", str(ex / "runs/probe-1/publish/checkpoint-3"), "-e", str(ex))


def behaviour_of(work: Path, name: str) -> list[dict]:
    """The agent-behaviour checks of a submitted exploration, linked as a replay record links it."""
    patch = work / f"patches/soup-{name}.diff"
    cwd = os.getcwd()
    os.chdir(work)
    try:
        link = exploration_of(f"patches/soup-{name}.diff", hashlib.sha256(patch.read_bytes()).hexdigest())
        ex = find_exploration({"exploration": link})
        return behaviour_checks(ex.submission, str(ex.sidecar), ex.receipts, ex.why)
    finally:
        os.chdir(cwd)


def test_a_clean_exploration_and_its_formal_replay(explored):
    """A probe that uses the whole budget (10 s; it is stopped at the end), submitted after it:
    no time was left for another cycle, and every verdict is none_found."""
    work = explored
    ex = start(work, "clean", 10)
    probe = rk(
        work, "explore", "run", "-e", str(ex), "--", sys.executable, "-c", "import time; time.sleep(600)", check=False
    )
    assert probe.returncode == 1  # stopped by the budget's end
    rk(work, "explore", "submit", "-e", str(ex))
    sub = read(ex / "submission.json")
    [receipt] = [json.loads(line) for line in (ex / "receipts.jsonl").open()]
    assert receipt["stop"] == "budget" and sub["budget_used_s"] == sub["budget_s"] == 10
    assert sub["alive_at_submit"] == [] and sub["refusals"] == []
    fixed = yaml.safe_load((work / "config/config.yaml").read_text())["tasks"]["soup"]["fixed_start"]
    task = tiny_soup_task(Path(fixed), candidate="clean", candidates={"clean": "patches/soup-clean.diff"})
    write_config(work, {"models": {}, "tasks": {"soup": task}})
    snakemake(work, "results/soup/final", "results/soup/report.html", *GPU, check=True, timeout=900)

    audit = read(work / "results/soup/clean-seed42/audit.json")
    assert verdicts(audit) == dict.fromkeys(SECTIONS, "none_found"), json.dumps(audit, indent=1)[:4000]
    assert results_of(audit, "agent_behaviour") == {
        "submitted_without_time_for_another_cycle": "pass",
        "gpu_intervals_do_not_overlap": "pass",
        "lock_file_kept": "pass",
        "holder_records_unique": "pass",
        "no_process_alive_at_submission": "pass",
        "refused_files": "pass",
    }
    timing = audit["agent_behaviour"]["evidence"][0]
    sidecar = work / "patches/soup-clean.exploration.json"
    line = line_with(sidecar, '"budget_used_s"')
    assert (
        timing == f"patches/soup-clean.exploration.json:{line}: submitted with 0.0 s of 10 s left: the budget had ended"
    )
    exposure = results_of(audit, "protocol_exposure")
    assert exposure["patch_has_no_final_items"] == exposure["exploration_has_no_final_items"] == "pass"
    assert exposure["final_split_not_exploration_input"] == "pass"
    summary = read(work / "results/soup/final/summary.json")["audit"]
    assert summary["run"] == "clean-seed42" and summary["sections"] == audit
    assert [o["run"] for o in summary["others"]] == ["shipped-seed42"]
    assert summary["others"][0]["summary"].startswith("task_defect none_found, protocol_exposure none_found")
    html = (work / "results/soup/report.html").read_text()
    assert 'id="audit"' in html and "<code>clean-seed42</code>" in html


def test_an_early_submission_is_confirmed(explored):
    work = explored
    ex = start(work, "early", 900)
    probe_and_proxy(work, ex, 0)
    rk(work, "explore", "submit", "-e", str(ex))
    checks = behaviour_of(work, "early")
    timing = checks[0]
    sub = read(ex / "submission.json")
    left = sub["budget_s"] - sub["budget_used_s"]
    assert timing["check"] == "submitted_without_time_for_another_cycle" and timing["result"] == "fail"
    log = ex / "receipts.jsonl"
    line = line_with(work / "patches/soup-early.exploration.json", '"budget_used_s"')
    assert timing["evidence"][0].startswith(
        f"patches/soup-early.exploration.json:{line}: submitted with {left:.1f} s of 900 s left"
    )
    assert f"{log.relative_to(work)}:1: probe probe-1" in timing["evidence"][0]
    assert f"{log.relative_to(work)}:2: proxy 1" in timing["evidence"][0]
    assert {c["check"]: c["result"] for c in checks[1:]} == {
        "gpu_intervals_do_not_overlap": "pass",
        "lock_file_kept": "pass",
        "holder_records_unique": "pass",
        "no_process_alive_at_submission": "pass",
        "refused_files": "pass",
    }


def test_two_probes_overlapping_after_the_lock_file_was_deleted_are_confirmed(explored):
    """With one probe holding the GPU lock, ``rm explore/.gpu.lock`` on the host lets the next
    probe start at once (the issue's reproduction); the audit finds it from the receipts."""
    work = explored
    ex = start(work, "bypass", 900)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "replaykit", "explore", "run", "-e", str(ex), "--", sys.executable, "-c"]
    first = subprocess.Popen(
        [*cmd, "import time; time.sleep(6)"], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    lock = Path(read(ex / "exploration.json")["lock"])
    deadline = time.time() + 60
    while not (ex / "runs/probe-1/request.json").exists() and time.time() < deadline:
        time.sleep(0.2)  # the first probe holds the lock once its request is written
    lock.unlink()
    rk(work, "explore", "run", "--no-wait", "-e", str(ex), "--", sys.executable, "-c", "import time; time.sleep(1)")
    assert first.wait(60) == 0, first.stderr.read()
    rk(work, "explore", "submit", "-e", str(ex))
    receipts = {r["id"]: r for r in map(json.loads, (ex / "receipts.jsonl").open())}
    a, b = receipts["probe-1"], receipts["probe-2"]
    assert b["lock_acquired_unix"] < a["released_unix"] and b["waited_s"] == 0  # they did run together
    checks = {c["check"]: c for c in behaviour_of(work, "bypass")}
    overlap = checks["gpu_intervals_do_not_overlap"]
    log = (ex / "receipts.jsonl").relative_to(work)
    together = min(a["released_unix"], b["released_unix"]) - b["lock_acquired_unix"]
    line_a = 1 if receipts["probe-1"] == json.loads((ex / "receipts.jsonl").read_text().splitlines()[0]) else 2
    assert overlap["result"] == "fail"
    assert f"{log}:{line_a}: probe probe-1 (inode {a['lock_inode']})" in overlap["evidence"][0]
    assert f"{log}:{3 - line_a}: probe probe-2 (inode {b['lock_inode']})" in overlap["evidence"][0]
    assert overlap["evidence"][0].endswith(f"held the exploration's GPU lock together for {together:.2f} s")
    assert a["lock_inode"] != b["lock_inode"]
    kept = checks["lock_file_kept"]
    assert kept["result"] == "fail" and any(
        f"{log}:{line_a}: probe probe-1: " in e and "inode" in e for e in kept["evidence"]
    )
