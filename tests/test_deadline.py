"""The internal deadline as the replay driver sees it (harness/observe.py), not as the recipe says.

A hostile tester's soup patch kept training 75 s past the internal deadline, into and beyond the
export reserve, published, then rewrote ``train_result.json`` (stop_reason deadline, training
ended 2 s before the deadline) and the ledger's times: the record said stop_reason deadline,
deadline_fraction 0.99, and the audit found nothing. These fake recipes do the same on a budget
of seconds, under the real sandbox; the record's timing must be the driver's, the late
checkpoint must not be eligible for the official result, and the audit must name it. The
control recipe stops at the deadline and publishes its last state inside the reserve, as the
contract allows.
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


start = time.time()
publish_checkpoint(weights(1), pub, 1)
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
result = {"stop_reason": "deadline", "steps": 2, "train_start_unix": start, "train_end_unix": time.time(),
          "publish_s": 0.1}
if MODE != "honest":  # the forged account: stopped 2 s before the deadline, every publication before it
    result["train_end_unix"] = deadline - 2
    rows = [json.loads(x) for x in (pub / LEDGER).read_text().splitlines() if x.strip()]
    for row in rows:
        row["time"] = min(row["time"], deadline - 3)
    (pub / LEDGER).write_text("".join(json.dumps(x) + "\n" for x in rows))
(state / "train_result.json").write_text(json.dumps(result))
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


@pytest.mark.parametrize("mode", ["overtime", "fill_later"])
def test_a_checkpoint_after_the_deadline_and_reserve_is_late_whatever_the_recipe_writes(tmp_path, mode):
    """The hostile recipe publishes (or fills an empty checkpoint folder) 2 s after the internal
    deadline + export reserve and forges its result and ledger to say it stopped before the
    deadline. The record's stop_reason, utilisation and publication times are the driver's, the
    late checkpoint's marker is invalid (so it cannot be the official result), the on-time one
    stays valid, and the audit's budget_held is confirmed, naming it."""
    from replaykit.harness.audit.platform import budget_check

    record = fake_replay(tmp_path, mode)
    observed = record["observed"]
    deadline, cutoff = observed["deadline_unix"], observed["cutoff_unix"]
    assert cutoff == pytest.approx(deadline + RESERVE_S)
    # what the recipe wrote is kept, as its own account
    assert record["reported_by_recipe"]["stop_reason"] == "deadline"
    assert record["reported_by_recipe"]["train_end_unix"] == pytest.approx(deadline - 2)
    # the driver's account
    assert record["stop_reason"] == "overtime" and observed["running_at_cutoff"] is True
    assert observed["process_ended_unix"] > cutoff and observed["ended_after_deadline_s"] > RESERVE_S
    assert record["utilisation"]["deadline_fraction"] > 1.5  # it ran past 4 + 3 s of a 4 s deadline
    assert record["utilisation"]["after_deadline_s"] > RESERVE_S
    assert record["retained"] == [1, 2] and list(observed["late"]) == ["2"]
    why = "published after" if mode == "overtime" else "changed after"
    assert observed["late"]["2"].startswith(f"{why} the internal deadline + export reserve 3 s")
    assert record["checkpoints"]["2"]["late"] == observed["late"]["2"] and "late" not in record["checkpoints"]["1"]
    first, second = record["publications"]
    assert first["first_seen_unix"] < deadline
    if mode == "overtime":
        assert second["time"] <= deadline - 3  # the forged ledger time, kept as the recipe wrote it
        assert second["first_seen_unix"] >= cutoff  # when the driver saw it
        assert "first seen" in observed["late"]["2"]
    # the driver's own file (the run folder, outside the sandbox) holds what the cutoff found
    attempts = json.loads((tmp_path / "replay-attempts.json").read_text())
    at_cutoff = attempts[-1]["observed"]["at_cutoff"]
    assert sorted(at_cutoff) == (["1"] if mode == "overtime" else ["1", "2"])
    assert attempts[-1]["cause"] == "deadline" and attempts[-1]["cause_detail"] == "stop_reason overtime"
    # not eligible for the official result: its marker is invalid; the on-time one is judged as usual
    late_marker = marker(tmp_path, 2)
    assert late_marker["valid"] is False and late_marker["reason"].startswith(f"late: {why}")
    assert marker(tmp_path, 1)["valid"] is True
    # the audit reads the driver's account
    budget = budget_check(str(tmp_path / "record.json"), record)
    assert budget["result"] == "fail" and len(budget["evidence"]) == 1
    assert f"checkpoint-2: late: {why} the internal deadline" in budget["evidence"][0]
    line = int(budget["evidence"][0].split(":")[1])  # at the checkpoint's entry in the record
    assert (tmp_path / "record.json").read_text().splitlines()[line - 1].strip().startswith('"late": "')


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
