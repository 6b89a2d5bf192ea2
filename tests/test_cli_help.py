"""`python -m replaykit --help` and every step's --help describe every argument."""

from __future__ import annotations

import argparse
import subprocess
import sys

from replaykit.cli import parser


def walk(p: argparse.ArgumentParser, path: str):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_argument_has_help():
    missing = [
        f"{path}: {'/'.join(a.option_strings) or a.dest}" for path, a in walk(parser(), "replaykit") if not a.help
    ]
    assert not missing, missing


def test_help_runs():
    out = subprocess.run([sys.executable, "-m", "replaykit", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "status" in out.stdout and "explore" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "replaykit", "explore", "proxy", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "checkpoint" in out.stdout


def test_an_argument_that_is_not_json_is_one_line():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "replaykit", "fixed-start", "--spec", "notjson", "--out", "x", "--manifest", "x.json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "error: command line: --spec: not JSON (Expecting value at column 1): 'notjson'"


def test_no_option_drops_its_earlier_values_when_given_twice():
    """argparse's ``nargs="+"`` keeps the last occurrence only (``--configfile a --configfile b``
    would read b); every option of ours that takes a list extends it instead."""
    stores = [
        f"{path}: {a.option_strings[0]}"
        for path, a in walk(parser(), "replaykit")
        if a.option_strings and a.nargs in ("+", "*") and not isinstance(a, argparse._ExtendAction)
    ]
    assert not stores, stores
    args = parser().parse_args(["explore", "soup", "--configfile", "a.yaml", "--configfile", "b.yaml", "c.yaml"])
    assert args.configfile == ["a.yaml", "b.yaml", "c.yaml"]
