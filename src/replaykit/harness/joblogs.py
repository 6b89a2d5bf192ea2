"""The one clear line of each failed job, for the terminal.

Rules send a job's output to its log (``> {log} 2>&1``), so the job's own ``error: ...`` line
(``cli.main`` prints exactly one on every expected failure) is not on the terminal; Snakemake
prints the failed job's block instead (rule, input, output, shell command, log path) and, for
an error in the workflow itself, a Python traceback. The workflow's ``onerror`` handler
(``rules/common.smk``) calls :func:`failure_lines` with Snakemake's own log of the invocation
and prints, last, per failed job, the job's error line and where its full log is.
"""

from __future__ import annotations

import re
from pathlib import Path

_FAILED = re.compile(r"^Error in rule (?P<rule>[\w.-]+):")
_LOG = re.compile(r"^\s+log: (?P<logs>.+?) \(check log file\(s\) for error details\)\s*$")
_TAIL = 64 * 1024  # an error line is among a log's last lines; a training log can be huge


def failed_jobs(snakemake_log: str | Path | list) -> list[tuple[str, list[str]]]:
    """``(rule, [job log, ...])`` of each failed job that Snakemake's log of one invocation
    names, in order (a job without a ``log:`` is left out). ``snakemake_log``: its file, or
    the list of them that ``onerror`` receives. Raises OSError when a log cannot be read."""
    paths = snakemake_log if isinstance(snakemake_log, list | tuple) else [snakemake_log]
    text = "\n".join(Path(p).read_text(encoding="utf-8", errors="replace") for p in paths)
    jobs, rule = [], None
    for line in text.splitlines():
        if m := _FAILED.match(line):
            rule = m["rule"]
        elif rule and (m := _LOG.match(line)):
            jobs.append((rule, [p.strip() for p in m["logs"].split(",")]))
            rule = None
    unique = dict.fromkeys((r, tuple(logs)) for r, logs in jobs)  # Snakemake may repeat a block
    return [(r, list(logs)) for r, logs in unique]


def error_line(job_log: str | Path) -> str | None:
    """The last ``error:`` line of a job's log (else its last non-empty line, e.g. a
    traceback's exception), None when the log is missing or empty."""
    path = Path(job_log)
    if not path.is_file():
        return None
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - _TAIL))
        lines = [ln.strip() for ln in handle.read().decode("utf-8", errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or [None])[-1]


def failure_lines(snakemake_log: str | Path | list) -> list[str]:
    """Per failed job: its error line (:func:`error_line`) and ``  (rule <name> failed; full
    log: <path>)``. ``[]`` when Snakemake's log names no failed job or cannot be read."""
    try:
        jobs = failed_jobs(snakemake_log)
    except OSError:
        return []
    lines = []
    for rule, logs in jobs:
        for log in logs:
            lines += [error_line(log) or f"error: rule {rule} failed", f"  (rule {rule} failed; full log: {log})"]
    return lines
