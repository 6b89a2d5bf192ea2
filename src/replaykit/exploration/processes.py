"""What the audit reads of a submission (docs/audit.md, agent behaviour): the processes of the
exploration still alive when it is submitted, and the files earlier submit attempts refused."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "fish", "tmux", "screen", "login"})  # a user's terminal, not a job


def _ancestors() -> set[int]:
    """This process and its parents (the submit command and the shell that started it)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def alive_processes(directory: str | Path) -> list[dict]:
    """Processes (not this one, its parents, or a shell) whose working directory is inside
    ``directory`` or whose command line names it: ``{"pid", "command", "cwd"}``, read from
    ``/proc`` (processes of other users that cannot be read are not seen)."""
    root, mine, found = str(Path(directory).resolve()), _ancestors(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            if (entry / "comm").read_text().strip() in SHELLS:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + "/") or root in command:
            found.append({"pid": int(entry.name), "command": command[:300], "cwd": cwd})
    return found


def record_refusal(directory: str | Path, files: list[str]) -> None:
    """Append a refused submit attempt to ``<exploration>/refusals.jsonl``."""
    line = json.dumps({"at": time.time(), "files": files}, sort_keys=True) + "\n"
    with open(Path(directory) / "refusals.jsonl", "a") as f:
        f.write(line)


def refusals(directory: str | Path) -> list[dict]:
    """The refused submit attempts recorded so far."""
    path = Path(directory) / "refusals.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
