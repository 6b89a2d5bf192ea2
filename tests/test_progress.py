"""The replay's progress relay (harness/progress.py): parsing, cleaning, de-duplication and
the compact line, with hand-computed values and a fake clock."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from replaykit.harness import progress
from replaykit.harness.profile import save_every
from replaykit.harness.progress import Progress, Relay, clean, duration, format_line


def test_clean_keeps_what_a_terminal_shows():
    assert clean(" 10%|#   | 1/10\r 50%|#####  | 5/10\r100%|#########| 10/10\n") == "100%|#########| 10/10"
    assert clean("done\r\n") == "done"  # a trailing \r is no redraw
    assert clean("\x1b[33mwarning\x1b[0m: x  \n") == "warning: x"
    assert clean("\r\r\n") == ""


def test_duration():
    assert duration(0) == "0s" and duration(59.4) == "59s"
    assert duration(95) == "1m35s"
    assert duration(3725) == "1h02m05s"  # 3600 + 2*60 + 5
    assert duration(-3) == "0s"


def test_progress_parses_steps_epochs_and_publications():
    p = Progress(every=8)
    assert p.update("[train] step 5/24 loss 0.6931 rewards/margins 0.0100 elapsed 40 s") == "progress"
    assert (p.unit, p.done, p.total, p.loss) == ("step", 5, 24, 0.6931)
    assert p.next_publication() == 8  # next multiple of 8 after 5
    assert p.update("[train] step 8/24 loss 0.5 elapsed 64 s") == "progress"
    assert p.update("[publish] checkpoint-8 (publication 1, retained [8])") == "publish"
    assert p.next_publication() == 16  # the first multiple of 8 after 8
    assert p.update("[train] step 23/24 loss 0.25 elapsed 190 s") and p.next_publication() == 24
    p.update("[train] step 24/24 loss 0.2 elapsed 198 s")
    assert p.next_publication() == 24  # printed just before it is published
    p.update("[publish] checkpoint-24 (publication 3, retained [8, 16, 24])")
    assert p.next_publication() is None  # through
    # step 8 printed, checkpoint-8 not yet published: it is the next one
    assert Progress(unit="step", done=8, total=24, every=8).next_publication() == 8
    # ddpo's line: the loss after "loss", not reward_mean; the cadence capped at the total
    q = Progress(every=5)
    q.update(
        "[train] epoch 37/40 reward_mean -1.0500 reward_std 0.0100 loss -0.00123 approx_kl 1e-05 "
        "clipfrac 0.000 epoch 3.0 s elapsed 111 s"
    )
    assert (q.unit, q.done, q.total, q.loss) == ("epoch", 37, 40, -0.00123)
    assert q.next_publication() == 40  # 40 < 37 // 5 * 5 + 5 = 40
    assert Progress().update("[data] 256 pairs") is None
    assert Progress(every=None, total=10, done=3).next_publication() == 10  # unknown cadence: the end


def test_format_line_by_hand():
    p = Progress(unit="step", done=8, total=24, loss=0.6931, published=[8], every=8)
    line = format_line("dpo/shipped-seed42", p, elapsed_s=95, deadline_left_s=145, log="logs/x.log")
    assert line == (
        "[progress] dpo/shipped-seed42: step 8/24 (33%) loss 0.6931 | elapsed 1m35s, "
        "deadline in 2m25s | next checkpoint-16 (published: 8) | log: logs/x.log"
    )
    # a recipe that prints no step or epoch lines (soup): its publications only
    soup = Progress(published=[12])
    assert format_line("soup/shipped-seed42", soup, elapsed_s=3, deadline_left_s=197) == (
        "[progress] soup/shipped-seed42: running | elapsed 3s, deadline in 3m17s | published: 12"
    )


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_relay_rate_limits_dedupes_and_counts():
    log, term, clock = io.StringIO(), io.StringIO(), Clock(1000.0)
    relay = Relay(
        log,
        term,
        label="rm/shipped-seed42",
        started_unix=1000.0,
        deadline_unix=1200.0,
        spent_s=10.0,
        every=16,
        every_s=30,
        clock=clock,
    )
    warning = "/x/trainer.py:12: UserWarning: something is deprecated"
    for t, raw in [
        (1001, warning + "\n"),
        (1001, "  warnings.warn(\n"),
        (1002, "[train] step 1/32 loss 0.7 elapsed 2 s\n"),  # first: shown
        (1003, warning + "\n"),
        (1003, "  warnings.warn(\n"),  # repeat: dropped
        (1020, "[train] step 2/32 loss 0.6 elapsed 20 s\n"),  # 18 s later: not shown
        (1032, "[train] step 3/32 loss 0.5 elapsed 32 s\n"),  # 30 s later: shown
        (1033, " 40%|####\r100%|##########|\n"),
        (1040, "[publish] checkpoint-16 (publication 1, retained [16])\n"),
    ]:  # always shown
        clock.t = t
        relay.feed(raw)
    clock.t = 1050
    relay.close()
    lines = term.getvalue().splitlines()
    # step 1, step 3, the publication; close says nothing new (the publication's line said it:
    # the last line was printed twice, new user 2026-12-05)
    assert len(lines) == 3
    # step 1: elapsed 10 + (1002 - 1000) = 12 s; deadline in 1200 - 1002 = 198 s
    assert lines[0] == (
        "[progress] rm/shipped-seed42: step 1/32 (3%) loss 0.7 | elapsed 12s, "
        "deadline in 3m18s | next checkpoint-16 (published: none)"
    )
    assert "step 3/32 (9%) loss 0.5 | elapsed 42s, deadline in 2m48s" in lines[1]
    assert "next checkpoint-32 (published: 16)" in lines[2]
    clock.t = 1055
    relay.feed("[train] step 17/32 loss 0.4\n")  # 15 s after the last line: not shown yet
    clock.t = 1060
    relay.close()  # a state no line said: written at close
    lines = term.getvalue().splitlines()
    assert len(lines) == 4 and "step 17/32 (53%) loss 0.4 | elapsed 1m10s, deadline in 2m20s" in lines[3]
    text = log.getvalue()
    assert text.count("UserWarning") == 1 and text.count("warnings.warn(") == 1
    assert "\r" not in text and "100%|##########|" in text and " 40%" not in text
    assert text.endswith("[replay] 2 lines of repeated warnings left out of this log\n")


def test_a_resumed_replay_shows_the_checkpoints_of_earlier_attempts():
    """After a resume from checkpoint-16 (published 8 and 16 before), the first line names them
    and the next checkpoint is 24 (cadence 8), not 8."""
    term, clock = io.StringIO(), Clock(0.0)
    relay = Relay(
        io.StringIO(), term, label="dpo/r", started_unix=0, deadline_unix=60, every=8, clock=clock, published=[8, 16]
    )
    assert relay.announce() == "[progress] dpo/r: training resumed after checkpoint-16"
    relay.feed("[train] step 17/32 loss 0.5 elapsed 1 s\n")
    assert term.getvalue().splitlines()[1].endswith("next checkpoint-24 (published: 8, 16)")


def test_hostile_output_is_shown_not_obeyed_and_never_stops_the_relay():
    """A candidate's output: terminal controls written as visible escapes, forged driver lines
    marked, unparsable numbers ignored, publications reach the terminal at most once a second."""
    assert clean("a\x1b]52;c;aGk=\x07b\x1bMc\x9bd\te\n") == "a\\x1b]52;c;aGk=\\x07b\\x1bMc\\x9bd\te"
    p = Progress()
    assert p.update("[train] step 1/24 loss .x") == "progress" and p.loss is None
    assert p.update("[train] step 2/24 loss 1.2.3 ok") == "progress" and p.loss is None
    assert p.update("[train] step 3/24 loss -.5e-3, lr 1") == "progress" and p.loss == -0.0005
    assert p.update("[train] step " + "9" * 5000 + "/24") is None  # Python's 4300-digit int limit
    log, term, clock = io.StringIO(), io.StringIO(), Clock(0.0)
    relay = Relay(log, term, label="t/r", started_unix=0, deadline_unix=60, clock=clock)
    relay.feed("[replay] done: stop_reason=max_steps\n")
    for i in range(1000):  # 1,000 publication lines within 0.5 s: one progress line
        clock.t = i / 2000
        relay.feed("[publish] checkpoint-1\n")
    clock.t = 1.0
    relay.feed("[publish] checkpoint-2\n")  # a second later: shown
    assert log.getvalue().splitlines()[0] == "(train.py) [replay] done: stop_reason=max_steps"
    assert len(term.getvalue().splitlines()) == 2


def test_start_announces_the_replay_and_its_log():
    term = io.StringIO()
    relay = Relay(
        io.StringIO(),
        term,
        label="dpo/shipped-seed42",
        started_unix=0,
        deadline_unix=60,
        log_name="logs/dpo/shipped-seed42/replay.log",
    )
    relay.start(io.BytesIO(b"")).join(timeout=10)
    assert term.getvalue() == (
        "[progress] dpo/shipped-seed42: training started; full log: logs/dpo/shipped-seed42/replay.log\n"
    )


def test_relay_cuts_long_lines_and_drains_the_pipe(monkeypatch):
    """A line of 3 x the cap without a newline is kept to the cap; the lines after it arrive."""
    monkeypatch.setattr(progress, "MAX_LINE_BYTES", 1000)
    log = io.StringIO()
    relay = Relay(log, None, label="t/r", started_unix=0, deadline_unix=60)
    relay.pump(io.BytesIO(b"x" * 3000 + b"\nafter\n"))
    relay.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "x" * 1000 and lines[1] == "after"
    assert lines[2] == "[replay] 2000 bytes of lines over 1000 bytes left out of this log"  # 3000 - 1000 kept


def test_relay_reaches_the_fd_named_in_the_environment(tmp_path):
    """As the replay rule runs it: fd 3 = the job's stderr, stdout = the log."""
    code = (
        "import sys; from replaykit.harness.progress import Relay, terminal_from_env;"
        "r = Relay(sys.stdout, terminal_from_env(), label='t/r', started_unix=0, deadline_unix=60,"
        " clock=lambda: 0); r.feed('[train] step 1/2 loss 1.0'); r.close()"
    )
    out = subprocess.run(
        ["bash", "-c", f'exec 3>&2; exec {sys.executable} -c "{code}" > log 2>&1'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, REPLAYKIT_PROGRESS_FD="3"),
    )
    assert out.returncode == 0, (tmp_path / "log").read_text()
    # the step's line; close adds none, as it would say the same again
    assert out.stderr.count("[progress] t/r: step 1/2 (50%) loss 1") == 1
    assert (tmp_path / "log").read_text() == "[train] step 1/2 loss 1.0\n"


def test_save_every_reads_the_recipe_profile(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs/embedded.yaml").write_text("max_steps: 24\nsave_steps: 8\n")
    assert save_every(tmp_path, "embedded", {}) == 8
    assert save_every(tmp_path, "embedded", {"save_steps": 1}) == 1
    assert save_every(tmp_path, "missing", {}) is None
