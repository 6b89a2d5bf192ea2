"""The attempts of a formal replay (harness/attempts.py): causes, node loss, per-attempt logs."""

import json
import os
import signal
import subprocess
import sys

from replaykit.harness.attempts import Attempts, attempt_log_name, signal_cause


def test_an_attempt_without_an_end_is_a_lost_node_at_the_next_start(tmp_path):
    path = tmp_path / "replay-attempts.json"
    first = Attempts(path, 100.0, "logs/dpo/r-seed1/replay.log", [])
    first.heartbeat(160.0)  # then the node vanished: no end was ever written
    second = Attempts(path, 500.0, "logs/dpo/r-seed1/replay.log", Attempts.earlier(path))
    lost = second.previous[0]
    assert (lost["attempt"], lost["cause"], lost["ended_unix"], lost["exit"]) == (1, "platform", None, None)
    assert "no end was recorded" in lost["cause_detail"] and "60 s after its start" in lost["cause_detail"]
    assert second.previous_s == 60.0  # counted up to when it was last seen alive
    assert second.current["attempt"] == 2
    assert second.current["log"] == "logs/dpo/r-seed1/replay.attempt-2.log"
    second.end(520.0, 0, "completed", "stop_reason max_steps")
    written = json.loads(path.read_text())
    assert [(a["attempt"], a["cause"]) for a in written] == [(1, "platform"), (2, "completed")]
    assert written[1]["ended_unix"] == 520.0


def test_an_attempt_recorded_before_causes_existed_is_unknown(tmp_path):
    legacy = tmp_path / "attempts.json"
    legacy.write_text(json.dumps([{"started_unix": 1.0, "last_seen_unix": 11.0}]))
    attempts = Attempts(tmp_path / "new.json", 20.0, None, Attempts.earlier(tmp_path / "new.json", legacy=legacy))
    assert attempts.previous[0]["cause"] == "unknown" and attempts.previous_s == 10.0
    assert attempts.current["log"] is None


def test_signal_causes():
    # 128 + n from a shell or bubblewrap, -n from Popen; a plain failure is not a signal
    assert signal_cause(128 + signal.SIGKILL)[0] == "platform"
    assert "SIGKILL" in signal_cause(137)[1] and "out-of-memory" in signal_cause(137)[1]
    assert "SIGTERM" in signal_cause(-signal.SIGTERM)[1]
    assert signal_cause(1) is None and signal_cause(3) is None and signal_cause(0) is None


def test_attempt_log_name():
    assert attempt_log_name("logs/soup/a-seed0/replay.log", 3) == "logs/soup/a-seed0/replay.attempt-3.log"
    assert attempt_log_name(None, 1) is None


def test_each_attempt_log_holds_the_whole_output_of_its_attempt(tmp_path):
    """The attempt's log gets what the job's log held before the tee, then every later line,
    also from a child process writing through this one's stdout."""
    job_log = tmp_path / "replay.log"
    code = (
        "import subprocess, sys\n"
        "from replaykit.harness.attempts import tee_attempt_log\n"
        "print('before the tee', flush=True)\n"
        f"tee_attempt_log({str(tmp_path / 'replay.attempt-1.log')!r}, {str(job_log)!r})\n"
        "print('after the tee')\n"
        "print('to stderr', file=sys.stderr)\n"
        "out = subprocess.run([sys.executable, '-c', 'print(42)'], capture_output=True, text=True).stdout\n"
        "sys.stdout.write(out)\n"
    )
    with open(job_log, "w") as log:
        subprocess.run([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, check=True, env=os.environ)
    expected = "before the tee\nafter the tee\nto stderr\n42\n"
    assert job_log.read_text() == expected
    assert (tmp_path / "replay.attempt-1.log").read_text() == expected


def test_report_lists_each_attempt_with_its_wall_time(tmp_path):
    """report.html's attempts table rows (report/html.py ``_attempts``): a lost attempt's wall
    time runs to when it was last seen; a record from before attempts had causes still shows."""
    from replaykit.report.html import _attempts

    record = tmp_path / "record.json"
    record.write_text(
        json.dumps(
            {
                "attempts": [
                    {
                        "attempt": 1,
                        "started_unix": 10.0,
                        "last_seen_unix": 70.0,
                        "ended_unix": None,
                        "cause": "platform",
                    },
                    {
                        "attempt": 2,
                        "started_unix": 100.0,
                        "last_seen_unix": 130.0,
                        "ended_unix": 130.5,
                        "cause": "completed",
                    },
                ]
            }
        )
    )
    rows = _attempts([{"run": "shipped-seed1", "record": str(record)}])
    assert [(r["run"], r["attempt"], r["cause"], r["wall_s"]) for r in rows] == [
        ("shipped-seed1", 1, "platform", 60.0),
        ("shipped-seed1", 2, "completed", 30.5),
    ]
    legacy = tmp_path / "old.json"
    legacy.write_text(json.dumps({"attempts": [{"started_unix": 1.0, "last_seen_unix": 5.0}]}))
    assert _attempts([{"run": "r-seed1", "record": str(legacy)}])[0]["wall_s"] == 4.0
