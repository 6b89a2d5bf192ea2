"""The internal deadline as the replay driver sees it (harness/observe.py), not as the recipe says.

A hostile tester's soup patch kept training 75 s past the internal deadline, into and beyond the
export reserve, published, then rewrote ``train_result.json`` (stop_reason deadline, training
ended 2 s before the deadline) and the ledger's times: the record said stop_reason deadline,
deadline_fraction 0.99, and the audit found nothing. Another mapped its published ``model.pt``
(MAP_SHARED), dirtied the pages just before the cutoff and wrote other weights through the
mapping after it: no size, mtime or ctime moved, so the cutoff's fingerprint matched. The
driver now kills the training process group at the internal deadline + export reserve. These
fake recipes do the same on a budget of seconds, under the real sandbox; the record's timing
must be the driver's, nothing may be written after the cutoff, and what is on disk must be
what was there at the cutoff. The control recipe stops at the deadline and publishes its last
state inside the reserve, as the contract allows.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import bare_replay_spec
from replaykit.harness.observe import Watch, judge

RECIPE = r"""
import json, sys, time
from pathlib import Path
from replaykit.harness.hashing import sha256_tree
from replaykit.harness.publish import LEDGER, publish_checkpoint

r = json.loads(Path(sys.argv[2]).read_text())
pub, state = Path(r["publish_dir"]), Path(r["state_dir"])
deadline, reserve = r["deadline_unix"], r["export_reserve_s"]
MODE = "@MODE@"
if r["resume"]:  # a later attempt of the same replay: nothing left to train
    (state / "train_result.json").write_text(json.dumps({"stop_reason": "deadline", "steps": 2}))
    raise SystemExit(0)


def weights(n):
    src = state / f"w{n}"
    src.mkdir(exist_ok=True)
    (src / "model.pt").write_text(f"weights {n}")
    return src


def until(t):
    while time.time() < t:
        time.sleep(0.05)


def forge():  # the forged account: stopped 2 s before the deadline, every publication before it
    result = {"stop_reason": "deadline", "steps": 2, "train_start_unix": start, "train_end_unix": deadline - 2,
              "publish_s": 0.1}
    rows = [json.loads(x) for x in (pub / LEDGER).read_text().splitlines() if x.strip()]
    for row in rows:
        row["time"] = min(row["time"], deadline - 3)
        if MODE == "mmap":  # vouch for what the mapping holds now
            row["sha256"] = sha256_tree(pub / f"checkpoint-{row['progress']}")
    (pub / LEDGER).write_text("".join(json.dumps(x) + "\n" for x in rows))
    (state / "train_result.json").write_text(json.dumps(result))


start = time.time()
publish_checkpoint(weights(1), pub, 1)
if MODE != "honest":  # forged before the cutoff: the driver stops the recipe there
    forge()
if MODE == "honest":  # training stops at the deadline; its last state is exported inside the reserve
    until(deadline)
    publish_checkpoint(weights(2), pub, 2)
elif MODE == "overtime":  # keeps training through the export reserve, then publishes
    until(deadline + reserve + 2)
    print(f"[overtime] publishing {time.time() - deadline:.0f} s after the internal deadline", flush=True)
    publish_checkpoint(weights(2), pub, 2)
elif MODE == "fill_later":  # an empty checkpoint folder before the cutoff, filled after it
    (pub / "checkpoint-2").mkdir()
    until(deadline + reserve + 2)
    (pub / "checkpoint-2" / "model.pt").write_text("weights 2")
    rows = [json.loads(x) for x in (pub / LEDGER).read_text().splitlines() if x.strip()]
    rows.append({"progress": 2, "sha256": sha256_tree(pub / "checkpoint-2"), "count": 2, "time": time.time(),
                 "retained": [1, 2], "state": "published"})
    (pub / LEDGER).write_text("".join(json.dumps(x) + "\n" for x in rows))
elif MODE == "mmap":  # other weights through a shared mapping of the published file, after the cutoff
    import mmap, os
    fd = os.open(pub / "checkpoint-1" / "model.pt", os.O_RDWR)
    os.fsync(fd)  # clean pages: the next write stamps the file once, before the cutoff
    m = mmap.mmap(fd, os.fstat(fd).st_size)
    until(deadline + reserve - 1.5)
    m[:] = m[:]  # every page dirty before the cutoff: a write to it later moves no mtime or ctime
    until(deadline + reserve + 1.5)
    m[:] = b"LATE".ljust(len(m), b"!")
    print("[mmap] wrote other weights through the mapping after the cutoff", flush=True)
if MODE == "honest":
    (state / "train_result.json").write_text(json.dumps(
        {"stop_reason": "deadline", "steps": 2, "train_start_unix": start, "train_end_unix": time.time(),
         "publish_s": 0.1}))
else:
    forge()
"""

DEADLINE_S, RESERVE_S = 4.0, 3.0


class Plugin:
    """A frozen loader that accepts anything: only the driver's verdict is under test."""

    @staticmethod
    def validate(checkpoint, fixed_start, cfg):
        return {"valid": True, "reason": "ok"}


def fake_replay(tmp_path: Path, mode: str) -> dict:
    """``run_replay`` of a one-file recipe (``RECIPE`` in ``mode``) under bubblewrap on a budget
    of seconds: internal deadline 4 s, export reserve 3 s, outer limit 30 s."""
    from replaykit.harness import replay

    return replay.run_replay(replay_spec(tmp_path, mode))


def replay_spec(tmp_path: Path, mode: str, build: bool = True):
    """The :class:`ReplaySpec` of :func:`fake_replay`; ``build``: make its workspace, fixed start
    and assets first (else they are there from an earlier replay)."""
    from replaykit.harness.workspace import build_workspace

    workspace = tmp_path / "ws"
    if build:
        recipe = tmp_path / "recipe"
        (recipe / "configs").mkdir(parents=True)
        (recipe / "configs" / "embedded.yaml").write_text("max_steps: 1\n")
        (recipe / "train.py").write_text(RECIPE.replace("@MODE@", mode))
        build_workspace(recipe, workspace, tmp_path / "ws.json")
    budget = {"outer_limit_s": 30, "internal_deadline_s": DEADLINE_S, "export_reserve_s": RESERVE_S}
    return bare_replay_spec(tmp_path, workspace, budget, make_inputs=build)


def marker(tmp_path: Path, progress: int) -> dict:
    """The validation marker of ``checkpoint-<progress>`` against the replay record."""
    from replaykit.harness.scoring import validate_checkpoint

    return validate_checkpoint(
        plugin=Plugin,
        checkpoint=tmp_path / "pub" / f"checkpoint-{progress}",
        fixed_start=tmp_path / "fixed",
        cfg={},
        record=str(tmp_path / "record.json"),
        frozen_record=None,
        frozen=None,
        out=tmp_path / f"marker-{progress}.json",
    )


def test_a_recipe_still_running_at_the_deadline_and_reserve_is_stopped_there(tmp_path):
    """The hostile recipe forges its result and ledger to say it stopped before the deadline,
    then keeps running to publish 2 s after the internal deadline + export reserve. The driver
    kills it at that cutoff: nothing after it reaches the disk, the record's stop_reason and
    utilisation are the driver's (overtime), the attempt is the candidate's failure (the record
    is written: a retry would end the same way), and the checkpoint published in time stays
    valid."""
    from replaykit.harness.audit.platform import budget_check

    record = fake_replay(tmp_path, "overtime")
    observed = record["observed"]
    deadline, cutoff = observed["deadline_unix"], observed["cutoff_unix"]
    assert cutoff == pytest.approx(deadline + RESERVE_S)
    # what the recipe wrote is kept, as its own account
    assert record["reported_by_recipe"]["stop_reason"] == "deadline"
    assert record["reported_by_recipe"]["train_end_unix"] == pytest.approx(deadline - 2)
    # the driver's account: stopped at the cutoff (its first look after it, then SIGKILL)
    assert record["stop_reason"] == "overtime" and observed["running_at_cutoff"] is True
    assert cutoff <= observed["process_ended_unix"] < cutoff + 1.5
    assert record["utilisation"]["after_deadline_s"] == pytest.approx(RESERVE_S, abs=1.5)
    # what it meant to write after the cutoff never was
    assert record["retained"] == [1] and observed["late"] == {}
    assert not (tmp_path / "pub" / "checkpoint-2" / "model.pt").exists()
    assert [p["progress"] for p in record["publications"]] == [1]
    attempts = json.loads((tmp_path / "replay-attempts.json").read_text())
    assert sorted(attempts[-1]["observed"]["at_cutoff"]) == ["1"]
    assert attempts[-1]["cause"] == "candidate" and attempts[-1]["cause_detail"] == "stop_reason overtime"
    assert marker(tmp_path, 1)["valid"] is True
    assert budget_check(str(tmp_path / "record.json"), record)["result"] == "pass"


def test_an_empty_checkpoint_folder_it_meant_to_fill_after_the_cutoff_fails_the_replay(tmp_path):
    """The recipe makes an empty checkpoint folder before the cutoff to fill after it: killed at
    the cutoff, it leaves a folder no publication vouches for, which fails the replay as the
    candidate's (last-failure.json says why); the late fill never happens."""
    from replaykit.harness.replay import ReplayError

    with pytest.raises(ReplayError, match="checkpoint-2: no publication .* vouches for it") as failed:
        fake_replay(tmp_path, "fill_later")
    assert failed.value.cause == "candidate"
    assert list((tmp_path / "pub" / "checkpoint-2").iterdir()) == []
    attempts = json.loads((tmp_path / "replay-attempts.json").read_text())
    assert attempts[-1]["cause"] == "candidate" and sorted(attempts[-1]["observed"]["at_cutoff"]) == ["1", "2"]
    assert attempts[-1]["observed"]["process_ended_unix"] < attempts[-1]["observed"]["cutoff_unix"] + 1.5
    assert not (tmp_path / "record.json").exists()


def test_a_write_through_a_shared_mapping_after_the_cutoff_never_reaches_the_checkpoint(tmp_path):
    """The hostile tester's mapping: the recipe maps its published ``model.pt`` (MAP_SHARED),
    dirties every page 1.5 s before the cutoff, and would write other weights through it 1.5 s
    after (a write to a page already dirty moves no size, mtime or ctime: the fingerprint
    matches) and vouch for them in the ledger. The driver kills it at the cutoff: the file holds
    what it held then, and the checkpoint that counts is that one."""
    record = fake_replay(tmp_path, "mmap")
    observed = record["observed"]
    model = tmp_path / "pub" / "checkpoint-1" / "model.pt"
    assert model.read_bytes() == b"weights 1"  # as at the cutoff: no late bytes
    assert record["stop_reason"] == "overtime" and observed["process_ended_unix"] < observed["cutoff_unix"] + 1.5
    assert record["retained"] == [1] and observed["late"] == {}
    assert "LATE" not in (tmp_path / "pub" / "publications.jsonl").read_text()
    assert marker(tmp_path, 1)["valid"] is True


def test_a_recipe_that_stops_at_the_deadline_exports_inside_the_reserve(tmp_path):
    """The control: the recipe stops at the internal deadline and publishes its last state in
    the export reserve (as the shipped recipes do): nothing late, the recipe's stop_reason
    stands, both markers valid, budget_held passes and says when the driver saw training end."""
    from replaykit.harness.audit.platform import budget_check

    record = fake_replay(tmp_path, "honest")
    observed = record["observed"]
    assert record["stop_reason"] == "deadline" and observed["running_at_cutoff"] is False
    assert observed["late"] == {} and record["retained"] == [1, 2]
    seen = record["publications"][1]["first_seen_unix"]
    assert observed["deadline_unix"] <= seen < observed["cutoff_unix"]  # first seen inside the reserve
    assert 1.0 <= record["utilisation"]["deadline_fraction"] < (DEADLINE_S + RESERVE_S) / DEADLINE_S
    assert marker(tmp_path, 1)["valid"] and marker(tmp_path, 2)["valid"]
    budget = budget_check(str(tmp_path / "record.json"), record)
    assert budget["result"] == "pass", budget
    assert "the driver saw the training process end" in budget["evidence"][0]
    assert "after the internal deadline (export reserve 3 s)" in budget["evidence"][0]


def publish(root: Path, progress: int) -> None:
    from replaykit.harness.publish import publish_checkpoint

    src = root.parent / f"src-{progress}"
    src.mkdir(exist_ok=True)
    (src / "model.pt").write_text(f"weights {progress}")
    publish_checkpoint(src, root, progress)


def test_the_watch_fingerprints_at_the_cutoff_and_judges_what_changed_since(tmp_path):
    """Unit: before the cutoff a look only notes new checkpoints; the first look after it
    fingerprints what is there (by lstat: nothing is opened). Afterwards a new checkpoint, one
    whose file was rewritten (same size, mtime set back: ctime still moves) and one renamed
    into another's place are late; an untouched one is not. Without a fingerprint (the process
    ended before the cutoff) nothing is late."""
    import os

    root = tmp_path / "pub"
    root.mkdir()
    for p in (1, 2, 3):
        publish(root, p)
    observed: dict = {}
    now = time.time()
    watch = Watch(root, observed, deadline_unix=now + 100, export_reserve_s=10, started_unix=now)
    assert observed["first_seen"] == {"1": None, "2": None, "3": None}  # there before the attempt
    assert watch.look(now) is False and observed["at_cutoff"] is None
    assert judge(root, dict(observed)) == {}  # no cutoff reached: nothing late
    assert watch.look(now + 111) is True and sorted(observed["at_cutoff"]) == ["1", "2", "3"]
    assert watch.look(now + 112) is False  # once
    model = root / "checkpoint-2" / "model.pt"
    st = model.stat()
    time.sleep(0.01)
    model.write_text("weights X")  # same size
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back; ctime moved
    os.rename(root / "checkpoint-3", root / "checkpoint-9")
    late = judge(root, observed)
    assert sorted(late) == ["2", "9"] and observed["late"] == late
    assert late["2"] == "changed after the internal deadline + export reserve 10 s"
    assert late["9"] == "published after the internal deadline + export reserve 10 s"


def test_an_attempt_whose_driver_died_after_its_cutoff_is_judged_when_the_next_one_starts(tmp_path):
    """The driver fingerprints the publish folder at the cutoff and records it at once; when it
    dies before judging (kill -9, node loss), the next attempt of the same replay judges that
    attempt before it starts: a checkpoint not there at the earlier cutoff is late for good."""
    from replaykit.harness import replay
    from replaykit.harness.audit.platform import budget_check
    from replaykit.harness.observe import fingerprint

    fake_replay(tmp_path, "honest")
    # as the driver left it had it died after fingerprinting only checkpoint-1 at its cutoff
    path = tmp_path / "replay-attempts.json"
    attempts = json.loads(path.read_text())
    observed = attempts[-1]["observed"]
    observed["at_cutoff"] = {"1": fingerprint(tmp_path / "pub" / "checkpoint-1")}
    del observed["late"]
    attempts[-1].update(ended_unix=None, cause="unknown")
    path.write_text(json.dumps(attempts))
    (tmp_path / "record.json").unlink()
    record = replay.run_replay(replay_spec(tmp_path, "honest", build=False))
    assert record["resumed"] is True and len(record["attempts"]) == 2
    assert record["attempts"][0]["cause"] == "platform"  # no end recorded
    late = record["observed"]["late"]
    assert list(late) == ["2"] and late["2"].startswith("published after the internal deadline")
    assert late["2"].endswith("(attempt 1)") and record["checkpoints"]["2"]["late"] == late["2"]
    assert record["attempts"][0]["observed"]["late"] == {"2": late["2"].removesuffix(" (attempt 1)")}
    assert budget_check(str(tmp_path / "record.json"), record)["result"] == "fail"
