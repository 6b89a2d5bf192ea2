"""The exploration phase (issue 20): a budgeted sandboxed workspace, proxy receipts, a GPU
lock, submit as a candidate patch, and the formal replay that records where it came from.

One tiny soup work directory (a copy of conftest's ``soup_run``: 3 ingredients, assets built by
Snakemake, the shipped run) serves every test;
each test starts its own exploration in it. Values are checked against independent
computations: the proxy receipt against a direct call of the frozen evaluator, the patch
hash against ``sha256`` of the file, lock intervals against the probes' own clocks.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, copy_run, snakemake, write_config
from conftest import soup_task as tiny_soup_task
from replaykit.harness.hashing import sha256_file, sha256_tree, tree_files

pytestmark = pytest.mark.slow


def soup_task(fixed_start: Path, **extra) -> dict:
    """conftest's tiny soup block with the shipped candidate named."""
    return tiny_soup_task(fixed_start, **{"candidate": "shipped", "candidates": {}, **extra})


@pytest.fixture(scope="module")
def work(soup_run, soup_start, tmp_path_factory):
    """A copy of conftest's shared tiny soup run (``soup_run``: its assets, built by Snakemake,
    and its shipped run), configured with the shipped candidate named. A formal replay of a
    submitted patch then replays the candidate only: the shipped run it is compared with is
    there already."""
    work = copy_run(soup_run, tmp_path_factory.mktemp("explore") / "work")
    write_config(work, {"models": {}, "tasks": {"soup": soup_task(soup_start)}})
    return work


def rk(
    work: Path, *args: str, check: bool = True, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python -m replaykit ARGS`` in ``work`` (or ``cwd``), with this checkout's package."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run(
        [sys.executable, "-m", "replaykit", *args],
        cwd=cwd or work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def receipts(directory: Path) -> list[dict]:
    return [json.loads(l) for l in (directory / "receipts.jsonl").read_text().splitlines()]


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_explore_greedy_submit_and_formal_replay_are_linked(work):
    out = rk(work, "explore", "soup", "--name", "greedy", "--budget-s", "900").stdout
    ex = work / "explore/soup/greedy"
    assert "budget 900 s" in out and (ex / "exploration.json").is_file()
    ws = ex / "workspace"
    assert tree_files(ws) == tree_files(work / "recipes/soup")  # a fresh copy of the recipe
    config = ws / "configs/embedded.yaml"
    config.write_text(config.read_text().replace("method: uniform ", "method: greedy  "))
    rk(work, "explore", "run", cwd=ws)  # the recipe, from inside the workspace
    probe = receipts(ex)[-1]
    assert probe["kind"] == "probe" and probe["returncode"] == 0 and probe["stop"] == "exit"
    [(rel, digest)] = probe["checkpoints"].items()
    checkpoint = ex / rel
    assert rel == "runs/probe-1/publish/checkpoint-3" and digest == sha256_tree(checkpoint)
    coefficients = json.loads((checkpoint / "coefficients.json").read_text())
    assert coefficients["method"] == "greedy"

    # a folder of the exploration that is no checkpoint-N: refused before any scoring starts
    # (hostile, 2026-12-05: the frozen loader's ValueError, and a proxy folder left behind)
    before = sorted((ex / "proxy").iterdir())
    for folder in (ex / "runs", checkpoint.parent):
        line = one_error_line(rk(work, "explore", "proxy", str(folder), "-e", str(ex), check=False))
        assert line == f"error: {folder}: not a checkpoint directory (a published checkpoint-N folder)"
    # a copy in the workspace is named like one, but no probe published it (second hostile pass)
    copy = ws / "checkpoint-03"
    shutil.copytree(checkpoint, copy)
    line = one_error_line(rk(work, "explore", "proxy", str(copy), "-e", str(ex), check=False))
    assert line == f"error: {copy}: not a checkpoint a probe published (none of receipts.jsonl's probes lists it)"
    shutil.rmtree(copy)
    # the published checkpoint edited since its probe's receipt (third pass): refused too
    coefficients_file = checkpoint / "coefficients.json"
    kept = coefficients_file.read_bytes()
    coefficients_file.write_bytes(kept + b" ")
    line = one_error_line(rk(work, "explore", "proxy", str(checkpoint), "-e", str(ex), check=False))
    assert line == f"error: {checkpoint}: changed since its probe published it (its SHA-256 is not the receipt's)"
    coefficients_file.write_bytes(kept)
    assert sorted((ex / "proxy").iterdir()) == before
    rk(work, "explore", "proxy", str(checkpoint), "-e", str(ex))
    receipt = receipts(ex)[-1]
    # independent call of the frozen evaluator on the same checkpoint and proxy items
    from replaykit.tasks import get_task

    soup = get_task("soup")
    fixed = yaml.safe_load((work / "config/config.yaml").read_text())["tasks"]["soup"]["fixed_start"]
    summary, _ = soup.evaluate(
        checkpoint,
        fixed,
        work / "results/soup/assets/public/proxy.jsonl",
        soup.METRIC["proxy"],
        {"batch_size": 64, "runtime": 5},
    )
    assert receipt["kind"] == "proxy" and receipt["valid"] is True
    assert receipt["value"] == summary["value"] and receipt["se"] == summary["uncertainty"]["value"]
    assert receipt["n"] == summary["n"] == 20 and receipt["checkpoint_sha256"] == digest
    assert 0 < receipt["budget_used_s"] < 900 and receipt["waited_s"] < 1

    # a checkpoint or cache in the workspace is refused, by name, in one line
    (ws / "model.pt").write_bytes(b"\0" * 10)
    (ws / "__pycache__").mkdir()
    line = one_error_line(rk(work, "explore", "submit", "-e", str(ex), check=False))
    assert "model.pt" in line and "__pycache__/" in line and not (work / "patches/soup-greedy.diff").exists()
    (ws / "model.pt").unlink()
    (ws / "__pycache__").rmdir()
    rk(work, "explore", "submit", "-e", str(ex))
    patch = work / "patches/soup-greedy.diff"
    submission = json.loads((ex / "submission.json").read_text())
    assert submission["patch_sha256"] == sha256_file(patch)
    assert submission["receipts"] == receipts(ex) and submission["patch_touches"] == ["configs/embedded.yaml"]
    assert json.loads((work / "patches/soup-greedy.exploration.json").read_text()) == submission
    assert "already submitted" in one_error_line(rk(work, "explore", "submit", "-e", str(ex), check=False))

    # the formal replay of the submitted patch, and the final result with its report
    write_config(
        work,
        {
            "models": {},
            "tasks": {
                "soup": soup_task(Path(fixed), candidate="greedy", candidates={"greedy": "patches/soup-greedy.diff"})
            },
        },
    )
    snakemake(work, "results/soup/final", "--cores", "1", "--resources", "gpu=1", check=True)
    run = work / "results/soup/greedy-seed42"
    ws_record = json.loads((run / "workspace.json").read_text())
    record = json.loads((run / "replay/record.json").read_text())
    assert ws_record["patch_sha256"] == record["patch_sha256"] == sha256_file(patch)
    link = record["exploration"]
    assert link["linked"] and link["patch_sha256"] == sha256_file(patch)
    assert link["proxy_receipts"][0]["value"] == receipt["value"]
    # nothing of the exploration entered the formal replay: its workspace is recipe + patch
    expected = tree_files(work / "recipes/soup")
    expected["configs/embedded.yaml"] = sha256_file(ws / "configs/embedded.yaml")
    assert tree_files(run / "workspace") == expected
    assert all("explore" not in c["path"] for c in record["checkpoints"].values())
    inputs = [p for p in (run / "workspace").rglob("*") if p.is_file()]
    assert not any(p.suffix in (".pt", ".safetensors") for p in inputs)
    final = json.loads((work / "results/soup/final/summary.json").read_text())
    section = final["exploration"]
    assert section["patch_sha256"] == final["lineage"]["patch_sha256"] == sha256_file(patch)
    proxy_table = json.loads((run / "proxy.json").read_text())["checkpoints"]
    assert section["formal"][0]["proxy"] == proxy_table["checkpoint-3"]["value"]
    assert section["formal"][0]["final"] == final["value"]
    report = (work / "results/soup/final/report.md").read_text()
    assert "## Exploration" in report and f"exploration receipt {receipt['id']}" in report


def test_a_second_probe_waits_for_the_gpu_lock(work):
    rk(work, "explore", "soup", "--name", "lock")
    ex = work / "explore/soup/lock"
    # each probe records its own clock inside the sandbox
    script = (
        "import os, time, pathlib; t0 = time.time(); time.sleep(3); "
        "pathlib.Path(os.environ['REPLAYKIT_RUN_DIR'], 'times').write_text(f'{t0} {time.time()}')"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "replaykit", "explore", "run", "-e", str(ex), "--", sys.executable, "-c", script]
    first = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)
    second = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    refused = rk(work, "explore", "run", "--no-wait", "-e", str(ex), "--", "true", check=False)
    assert "GPU lock held by" in one_error_line(refused)
    assert first.wait(60) == 0 and second.wait(60) == 0
    probes = sorted((r for r in receipts(ex) if r["kind"] == "probe"), key=lambda r: r["lock_acquired_unix"])
    assert len(probes) == 2
    a, b = probes
    assert a["released_unix"] <= b["lock_acquired_unix"]  # the lock's intervals do not overlap
    clocks = [tuple(map(float, (ex / "runs" / r["id"] / "times").read_text().split())) for r in probes]
    assert clocks[0][1] <= clocks[1][0]  # nor do the probes' own
    assert a["waited_s"] < 1 and b["waited_s"] > 1 and b["waited_for"]["id"] == a["id"]


def test_a_probe_cannot_delete_or_rewrite_its_own_log(work):
    """Hostile (2026-12-03): a probe printed a line, then deleted its ``log.txt`` (in its own
    writable run folder) and wrote a harmless one; the audit searches the logs. The log now lies
    beside the run folder (``runs/probe-<k>.log``), read-only inside, with its hash in the receipt."""
    rk(work, "explore", "soup", "--name", "logs")
    ex = work / "explore/soup/logs"
    script = (
        "import os, pathlib, sys, time; print('PRINTED-LINE digit-0079', flush=True); time.sleep(0.5)\n"
        "run = pathlib.Path(os.environ['REPLAYKIT_RUN_DIR'])\n"
        "for log in (run / 'log.txt', run.parent / (run.name + '.log')):\n"
        "    for act in (log.unlink, lambda: log.write_text('all fine')):\n"
        "        try:\n"
        "            act(); print('CHANGED', log.name, flush=True)\n"
        "        except OSError as e:\n"
        "            print('refused', log.name, e.errno, flush=True)\n"
    )
    rk(work, "explore", "run", "-e", str(ex), "--", sys.executable, "-c", script)
    (probe,) = [r for r in receipts(ex) if r["kind"] == "probe"]
    log = ex / probe["log"]
    assert probe["log"] == f"runs/{probe['id']}.log" and probe["log_sha256"] == sha256_file(log)
    text = log.read_text()
    assert "PRINTED-LINE digit-0079" in text and "CHANGED probe-1.log" not in text, text
    assert "refused probe-1.log 30" in text  # EROFS: runs/ is shown read-only
    assert not (ex / "runs" / probe["id"] / "log.txt").exists() or "CHANGED log.txt" in text


# a probe that marks its start inside the sandbox (so the host knows it holds the lock), sleeps
# and writes its own clock
TIMED = (
    "import os, time, pathlib; d = pathlib.Path(os.environ['REPLAYKIT_RUN_DIR']); t0 = time.time(); "
    "(d / 'started').write_text(str(t0)); time.sleep({s}); (d / 'times').write_text(f'{{t0}} {{time.time()}}')"
)


def probe(work: Path, ex: Path, sleep_s: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "replaykit", "explore", "run", "-e", str(ex), "--", sys.executable, "-c"]
    return subprocess.Popen([*cmd, TIMED.format(s=sleep_s)], cwd=work, env=env, stderr=subprocess.PIPE)


def wait_started(ex: Path, probe_id: str) -> None:
    end = time.time() + 120
    while not (ex / "runs" / probe_id / "started").exists():
        assert time.time() < end, f"{probe_id} never started"
        time.sleep(0.1)


def test_submit_waits_for_no_one_but_refuses_while_its_own_probe_runs(work):
    """Hostile (2026-12-05): ``explore submit`` succeeded while a probe of the same exploration
    still ran, and that probe's receipt and checkpoint were added after the submission. Submit
    now refuses while the exploration's own probe holds the GPU lock (one line, naming it),
    and holds the lock itself while it submits; another exploration's probe does not stop it."""
    rk(work, "explore", "soup", "--name", "busy")
    rk(work, "explore", "soup", "--name", "other")
    busy, other = work / "explore/soup/busy", work / "explore/soup/other"
    for ex in (busy, other):
        config = ex / "workspace/configs/embedded.yaml"
        config.write_text(config.read_text().replace("method: uniform ", "method: greedy  "))
    running = probe(work, busy, 6)
    wait_started(busy, "probe-1")
    line = one_error_line(rk(work, "explore", "submit", "-e", str(busy), check=False))
    assert line.endswith(
        ": lock: probe-1 of this exploration still runs (it holds the GPU lock): wait for it to end, then submit"
    )
    assert not (busy / "submission.json").exists()
    rk(work, "explore", "submit", "-e", str(other), "--patches", str(work / "other-patches"))
    assert running.wait(60) == 0, running.stderr.read()
    rk(work, "explore", "submit", "-e", str(busy), "--patches", str(work / "busy-patches"))
    submitted = json.loads((busy / "submission.json").read_text())
    assert [r["id"] for r in submitted["receipts"]] == [r["id"] for r in receipts(busy)] == ["probe-1"]


def test_probes_after_the_lock_file_is_deleted_on_the_host_are_recorded_and_waits_counted(work):
    rk(work, "explore", "soup", "--name", "rmlock")
    ex = work / "explore/soup/rmlock"
    lock = work / "explore/.gpu.lock"
    # two probes that wait behind a third: probe_waits must count 2 (it counted every receipt)
    first = probe(work, ex, 3)
    wait_started(ex, "probe-1")
    waiting = [probe(work, ex, 0.5) for _ in range(2)]
    assert first.wait(120) == 0 and all(p.wait(120) == 0 for p in waiting)
    # the host deletes the lock file while probe-4 holds it: probe-5 starts at once, beside it
    held = probe(work, ex, 4)
    wait_started(ex, "probe-4")
    lock.unlink()
    bypass = probe(work, ex, 0.5)
    assert bypass.wait(120) == 0 and held.wait(120) == 0
    by_id = {r["id"]: r for r in receipts(ex) if r["kind"] == "probe"}
    clocks = {k: tuple(map(float, (ex / "runs" / k / "times").read_text().split())) for k in by_id}
    # the probes' own clocks: 1-3 one after another; 4 and 5 overlapped
    assert clocks["probe-1"][1] <= min(clocks["probe-2"][0], clocks["probe-3"][0])
    assert clocks["probe-4"][0] < clocks["probe-5"][0] < clocks["probe-5"][1] < clocks["probe-4"][1]
    assert [by_id[k]["waited_s"] > 0 for k in sorted(by_id)] == [False, True, True, False, False]
    a, b = by_id["probe-4"], by_id["probe-5"]
    assert not any(by_id[k]["lock_replaced"] for k in ("probe-1", "probe-2", "probe-3"))
    assert a["lock_replaced"] and b["lock_replaced"] and a["lock_inode"] != b["lock_inode"]
    # probe-5 saw probe-4 holding the deleted file (checked against the kernel: pid and nonce)
    [rival] = [e for e in b["lock_events"] if e["event"] == "rival"]
    assert rival["deleted"] and rival["inode"] == a["lock_inode"]
    assert rival["holder"]["id"] == "probe-4" and rival["holder"]["verified"]
    assert rival["holder"]["nonce"] == a["lock_holder"]["nonce"]
    assert "replaced" in {e["event"] for e in a["lock_events"]}  # the path names another file
    config = ex / "workspace/configs/embedded.yaml"
    config.write_text(config.read_text().replace("batch_size: 256", "batch_size: 128"))
    rk(work, "explore", "submit", "-e", str(ex))
    submission = json.loads((ex / "submission.json").read_text())
    assert submission["probes"] == 5 and submission["probe_waits"] == 2
    assert sorted(submission["lock_replaced"]) == ["probe-4", "probe-5"]  # in the order they ended


def test_a_budget_past_a_year_or_a_failed_start_leaves_no_folder(work, monkeypatch):
    """Hostile (2026-12-05): ``--budget-s inf`` and ``1e300`` ended in tracebacks (JSON has no
    infinity; no clock reaches 1e300 s) and left a half-made folder without a record, which
    then held the name. Now both are one line, like ``nan`` and ``-5``; and a start that fails
    after its folder is made removes that folder, so the name stays free."""
    from replaykit.exploration import record

    for budget in ("inf", "1e300", "nan", "-5", "31536001"):
        line = one_error_line(rk(work, "explore", "soup", "--name", "huge", "--budget-s", budget, check=False))
        assert line == (
            f"error: --budget-s: budget_s: must be > 0 and at most 31536000 seconds (a year), got {float(budget)!r}"
        )
        assert not (work / "explore/soup/huge").exists()
    monkeypatch.chdir(work)

    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(record, "build_workspace", broken)
    with pytest.raises(OSError, match="No space left"):
        record.start("soup", "huge", budget_s=60)
    assert not (work / "explore/soup/huge").exists()


def test_a_module_planted_in_the_scorings_folder_while_it_waits_is_never_imported(work):
    """Second hostile pass (2026-12-05): ``explore proxy`` made ``proxy/<k>/`` and then waited
    for the GPU lock; the agent wrote ``replaykit/__main__.py`` there, and ``python -m
    replaykit`` in that folder ran it as the frozen scorer (its forged score was the receipt's).
    The steps now run with ``-P`` (the folder is not on ``sys.path``), and a folder that is not
    empty when the lock is taken is refused before anything runs."""
    from replaykit.harness.lock import FileLock

    rk(work, "explore", "soup", "--name", "planted")
    ex = work / "explore/soup/planted"
    rk(work, "explore", "run", "-e", str(ex))
    checkpoint = ex / "runs/probe-1/publish/checkpoint-3"
    lock = FileLock(json.loads((ex / "exploration.json").read_text())["lock"], {"exploration": "x", "id": "holder"})
    lock.acquire(wait=False, watch_s=None)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "replaykit", "explore", "proxy", str(checkpoint), "-e", str(ex)]
    waiting = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.time() + 120
    while not any((ex / "proxy").iterdir()):
        assert time.time() < end and waiting.poll() is None, waiting.communicate()
        time.sleep(0.1)
    (folder,) = (ex / "proxy").iterdir()
    (folder / "replaykit").mkdir()
    (folder / "replaykit/__init__.py").write_text("")
    (folder / "replaykit/__main__.py").write_text("print('PLANTED')\n")
    lock.release()
    out, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 2 and "PLANTED" not in out + err
    assert err.strip().splitlines() == [
        f"error: {folder.resolve()}: the scoring's folder is not empty (replaykit): not scored"
    ]
    assert not [r for r in receipts(ex) if r["kind"] == "proxy"]


def test_a_proxy_scoring_that_fails_leaves_a_receipt(work, monkeypatch):
    """Hostile (2026-12-05): a proxy scoring that failed left ``proxy/<k>/`` and no receipt,
    so its GPU lock interval and its log were nowhere in the audit's evidence. It gets a
    receipt now (``failed``, ``valid: false``, the failing step's last line, its log and the
    lock's fields), and its error is raised as before. (The step's failure is stood in for:
    the frozen steps turn a bad checkpoint into an invalid score, not a failure.)"""
    from replaykit.exploration import proxy
    from replaykit.exploration.record import Exploration
    from replaykit.harness.errors import InputError

    rk(work, "explore", "soup", "--name", "broken")
    ex = work / "explore/soup/broken"
    junk = "import os, pathlib; c = pathlib.Path(os.environ['REPLAYKIT_RUN_DIR']) / 'publish/checkpoint-1'; "
    junk += "c.mkdir(parents=True); (c / 'coefficients.json').write_text('{}')"
    rk(work, "explore", "run", "-e", str(ex), "--", sys.executable, "-c", junk)
    checkpoint = ex / "runs/probe-1/publish/checkpoint-1"
    monkeypatch.chdir(work)

    def out_of_memory(exploration, resolved, out, slot):
        (out / "log.txt").write_text("torch.OutOfMemoryError: CUDA out of memory\n")
        raise InputError(resolved, "score", "torch.OutOfMemoryError: CUDA out of memory")

    monkeypatch.setattr(proxy, "_run_steps", out_of_memory)
    with pytest.raises(InputError, match="CUDA out of memory"):
        proxy.score_proxy(Exploration(ex), checkpoint)
    receipt = receipts(ex)[-1]
    assert receipt["kind"] == "proxy" and receipt["failed"] is True and receipt["valid"] is False
    assert receipt["reason"] == "scoring failed: torch.OutOfMemoryError: CUDA out of memory"
    assert receipt["checkpoint"] == "runs/probe-1/publish/checkpoint-1"
    assert receipt["checkpoint_sha256"] == sha256_tree(checkpoint)
    assert Path(receipt["log"]).read_text().startswith("torch.OutOfMemoryError")
    assert receipt["lock_acquired_unix"] <= receipt["released_unix"]


def test_the_budget_stops_probes_and_only_submit_works_after_it(work):
    rk(work, "explore", "soup", "--name", "short", "--budget-s", "6")
    ex = work / "explore/soup/short"
    config = ex / "workspace/configs/embedded.yaml"
    config.write_text(config.read_text().replace("batch_size: 256", "batch_size: 128"))
    t0 = time.time()
    result = rk(
        work, "explore", "run", "-e", str(ex), "--", sys.executable, "-c", "import time; time.sleep(60)", check=False
    )
    assert result.returncode == 1 and time.time() - t0 < 30
    assert result.stdout.startswith("[explore] probe-1: stopped at the budget's end, exit "), result.stdout
    probe = receipts(ex)[-1]
    assert probe["stop"] == "budget" and probe["budget_left_s"] == 0
    assert "budget" in one_error_line(rk(work, "explore", "run", "-e", str(ex), check=False))
    fake = ex / "runs/probe-1"
    assert "budget" in one_error_line(rk(work, "explore", "proxy", str(fake), "-e", str(ex), check=False))
    status = json.loads(rk(work, "explore", "status", "--json", "-e", str(ex)).stdout)
    assert status["left_s"] == 0 and status["used_s"] == 6 and status["probes"] == 1
    rk(work, "explore", "submit", "-e", str(ex))
    assert json.loads((ex / "submission.json").read_text())["budget_used_s"] == 6


PROBE = r"""
import json, os, socket, sys
from pathlib import Path

work, port, private = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
results = {}


def attempt(name, action):
    try:
        results[name] = {"managed": True, "detail": str(action())[:200]}
    except Exception as exc:
        results[name] = {"managed": False, "detail": f"{type(exc).__name__}: {exc}"[:200]}


hidden = work / "results/soup/assets/hidden"
attempt("list_hidden", lambda: os.listdir(hidden) or 1 / 0)
attempt("read_final", lambda: (hidden / "final.jsonl").read_text())
attempt("read_manifest", lambda: (work / "results/soup/assets/manifest.json").read_text())
attempt("read_private", lambda: private.read_text())  # the fixed start's private file (final salt)
attempt("read_config", lambda: (work / "config/config.yaml").read_text() or 1 / 0)
attempt("read_receipts", lambda: (work / "explore/soup/hostile/receipts.jsonl").read_text())
attempt("read_lock_holder", lambda: (work / "explore/.gpu.lock").read_text() or 1 / 0)
attempt("network_interfaces", lambda: [n for _, n in socket.if_nameindex() if n != "lo"] or 1 / 0)
attempt("connect_host_loopback", lambda: socket.create_connection(("127.0.0.1", port), timeout=3))
request = json.loads(Path(os.environ["REPLAYKIT_REQUEST"]).read_text())
attempt("read_public", lambda: len((Path(request["public_dir"]) / "proxy.jsonl").read_text()))
attempt("write_workspace", lambda: Path("note.txt").write_text("ok"))
run = Path(os.environ["REPLAYKIT_RUN_DIR"])
(run / "notes.txt").symlink_to(hidden / "final.jsonl")  # names the hidden split for the host to read
(run / "publish").mkdir(exist_ok=True)
(run / "publish/checkpoint-9").symlink_to(hidden)
run.joinpath("probe.json").write_text(json.dumps(results))
"""


def test_a_probe_finds_no_final_split_and_no_network(work, soup_start):
    private = Path(f"{soup_start}.private.json")  # beside the fixed start, as the model rule writes it
    assert private.is_file()  # (the probe's read_private would fail for want of a file otherwise)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    accepted, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(1)
                conn.close()
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        rk(work, "explore", "soup", "--name", "hostile")
        ex = work / "explore/soup/hostile"
        (ex / "workspace/probe.py").write_text(PROBE)
        rk(
            work,
            "explore",
            "run",
            "-e",
            str(ex),
            "--",
            sys.executable,
            "probe.py",
            str(work),
            str(server.getsockname()[1]),
            str(private),
        )
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()
    probe = json.loads((ex / "runs/probe-1/probe.json").read_text())
    managed = {k for k, v in probe.items() if v["managed"]}
    assert managed == {"read_public", "write_workspace"}, probe
    assert not accepted and (work / "results/soup/assets/hidden/final.jsonl").is_file()
    assert (ex / "workspace/note.txt").read_text() == "ok"
    # the links it planted are named in its receipt and never read as checkpoints (a hostile
    # probe of 2026-12-02), as the formal replay refuses them
    [receipt] = [json.loads(line) for line in (ex / "receipts.jsonl").open()]
    assert receipt["special_files"] == ["notes.txt", "publish/checkpoint-9"] and receipt["checkpoints"] == {}
