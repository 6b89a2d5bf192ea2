"""The audit's building blocks: a check's result, a section's verdict, and evidence lines
that name a file and a line."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SECTIONS = ("task_defect", "protocol_exposure", "agent_behaviour", "platform")
VERDICTS = ("none_found", "confirmed", "inconclusive")
# pass: looked and found nothing; fail: found it (confirmed); unknown: could not tell
# (inconclusive); noted: listed, changes no verdict; skipped: does not apply (with why)
RESULTS = ("pass", "fail", "unknown", "noted", "skipped")


def check(name: str, result: str, detail: str, evidence: list[str] | tuple[str, ...] = ()) -> dict:
    """One check as ``audit.json`` lists it: ``{"check", "result", "detail", "evidence"}``."""
    if result not in RESULTS:
        raise ValueError(f"check {name}: result {result!r} is not one of {RESULTS}")
    return {"check": name, "result": result, "detail": detail, "evidence": list(evidence)}


def section(checks: list[dict]) -> dict:
    """A section's verdict from its checks: *confirmed* when one failed, else *inconclusive*
    when one could not tell, else *none_found*. Its evidence: the failed checks' evidence
    (else the undecided ones', else every check's), each line naming a file and a line; when no
    check looked (every one skipped or noted: a shipped run's agent behaviour), a first line
    saying so and why, so that *none_found* never reads as the outcome of checks that ran."""
    results = {c["result"] for c in checks}
    verdict = "confirmed" if "fail" in results else "inconclusive" if "unknown" in results else "none_found"
    wanted = {"confirmed": ("fail",), "inconclusive": ("unknown",), "none_found": ("pass", "noted", "skipped")}[verdict]
    evidence = [e for c in checks if c["result"] in wanted for e in (c["evidence"] or [f"{c['check']}: {c['detail']}"])]
    if verdict == "none_found" and "pass" not in results:  # nothing looked: say so first
        why = list(dict.fromkeys(c["detail"] for c in checks if c["result"] == "skipped"))
        evidence = [f"no check applies (all {len(checks)} skipped or noted): {'; '.join(why)}", *evidence]
    return {"verdict": verdict, "evidence": evidence, "checks": checks}


@lru_cache(maxsize=64)
def _lines(path: str, mtime_ns: int) -> tuple[str, ...]:
    return tuple(Path(path).read_text(errors="replace").splitlines())


def line_of(path: str | Path, *needles: str) -> int:
    """The first line (from 1) of text file ``path`` holding every one of ``needles`` (1 when
    none does or the file is unreadable: the evidence still names the file)."""
    try:
        lines = _lines(str(path), Path(path).stat().st_mtime_ns)
    except OSError:
        return 1
    for no, line in enumerate(lines, 1):
        if all(n in line for n in needles):
            return no
    return 1


def key_line(path: str | Path, key: str, value=None) -> int:
    """The line of ``"key": value`` in a JSON file written with one key a line (or of the key
    alone when ``value`` is None)."""
    needle = f'"{key}":' if value is None else f'"{key}": {json.dumps(value)}'
    return line_of(path, needle)


def where(path: str | Path, line: int) -> str:
    """``path:line``, the form every evidence line starts with."""
    return f"{path}:{line}"


def read_json_or_none(path: str | Path | None) -> dict | None:
    """A JSON document, or None when the file is missing or not JSON."""
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON lines of ``path`` (blank lines and lines that are not JSON objects skipped)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out
