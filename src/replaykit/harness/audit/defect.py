"""Task defect: is the task itself broken? The shipped recipe's run and the fixed start must
validate and score under the frozen loader and evaluator, and the final split must have the
size its config and manifest declare."""

from __future__ import annotations

import math
from pathlib import Path

from .checks import check, key_line, line_of, read_json_or_none, where


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _at(path, key: str) -> str:
    """``path:line`` of ``"key":`` in a JSON file."""
    return where(path, key_line(path, key))


def shipped_check(shipped_path: str | None) -> list[dict]:
    """The shipped run's official result exists (a valid checkpoint with a finite score), every
    retained checkpoint was judged by the frozen loader, and each valid one scored."""
    names = ("shipped_reference_scores", "frozen_loader_ran_on_shipped", "frozen_evaluator_ran_on_shipped")
    doc = read_json_or_none(shipped_path)
    if doc is None:
        gone = f"{shipped_path}: the shipped run's official.json is not here"
        return [check(n, "unknown", gone, [gone]) for n in names]
    best, at = doc.get("official"), _at(shipped_path, "official")
    if best and _finite(best.get("value")):
        got = f"{at}: checkpoint-{best['progress']} {best.get('metric')} = {best['value']}"
        ref = check(names[0], "pass", "the shipped recipe's run has an official result", [got])
    else:
        ref = check(names[0], "fail", "the shipped recipe's run has no valid, scored checkpoint", [f"{at}: {best!r}"])
    checkpoints = doc.get("checkpoints", [])
    invalid = [c for c in checkpoints if c.get("valid") is not True]
    if invalid:
        ev = [
            f"{_at(c['marker'], 'reason')}: checkpoint-{c.get('progress')} invalid: {c.get('reason')}" for c in invalid
        ]
        loader = check(names[1], "fail", f"{len(invalid)} shipped checkpoints refused", ev)
    else:
        ev = [f"{_at(c['marker'], 'valid')}: valid" for c in checkpoints]
        loader = check(names[1], "pass", f"{len(checkpoints)} shipped checkpoints valid", ev)
    valid = [c for c in checkpoints if c.get("valid")]
    unscored = [c for c in valid if c.get("score_status") != "complete" or not _finite(c.get("value"))]
    summaries = {id(c): Path(c["scores"]) / "summary.json" for c in valid}
    if unscored:
        ev = [f"{summaries[id(c)]}: {c.get('score_status')}, value {c.get('value')}" for c in unscored]
        scored = check(names[2], "fail", f"{len(unscored)} valid shipped checkpoints without a complete score", ev)
    else:
        ev = [f"{_at(summaries[id(c)], 'value')}: {c.get('value')}" for c in valid]
        scored = check(names[2], "pass", "every valid shipped checkpoint scored", ev)
    return [ref, loader, scored]


def fixed_start_check(summary_dir: str | None, has_reference: bool) -> dict:
    """The fixed start scored under the final protocol (``summary.json`` whole, ``.complete``)."""
    name = "fixed_start_reference_scores"
    if not has_reference:
        return check(name, "skipped", "the task has no fixed-start reference (FIXED_START_REFERENCE false)")
    summary = Path(summary_dir or "") / "summary.json"
    doc = read_json_or_none(summary) if summary_dir else None
    if doc is None or not (Path(summary_dir) / ".complete").is_file():
        gone = f"{summary}: no complete fixed-start reference"
        return check(name, "unknown", gone, [gone])
    line = key_line(summary, "value")
    if not _finite(doc.get("value")):
        return check(
            name, "fail", "the fixed start's score is not a number", [f"{where(summary, line)}: {doc.get('value')}"]
        )
    return check(name, "pass", "scored", [f"{where(summary, line)}: {doc.get('metric')} = {doc['value']}"])


def split_size_check(split_file: Path, manifest_path: str, data: dict, official: dict | None) -> dict:
    """The final split's rows = the size declared in the config (``data.n_final`` /
    ``data.n_test`` when a number) = the manifest's ``n_final`` (when recorded) = the official
    summary's ``n``."""
    name = "final_split_declared_size"
    if not split_file.is_file():
        return check(name, "unknown", f"{split_file}: not here", [f"{split_file}: not here"])
    rows = sum(1 for line in split_file.read_text().splitlines() if line.strip())
    sizes = {f"{split_file} rows": (str(split_file), rows, 1)}
    manifest = read_json_or_none(manifest_path) or {}
    declared = [("config", data), (f"{manifest_path} config", manifest.get("config") or {})]
    for source, block in declared:
        for key in ("n_final", "n_test"):
            if isinstance(block.get(key), int) and not isinstance(block.get(key), bool):
                line = key_line(manifest_path, key) if source != "config" else 0
                sizes[f"{source} data.{key} (declared)"] = (source.split()[0], block[key], line)
    built = (manifest.get("data") or {}).get("n_final")
    if isinstance(built, int):
        sizes["manifest data.n_final (built)"] = (manifest_path, built, line_of(manifest_path, '"n_final"'))
    best = (official or {}).get("official") or {}
    if isinstance(best.get("n"), int):
        summary = Path(best["scores"]) / "summary.json"
        sizes["official summary n"] = (str(summary), best["n"], key_line(summary, "n"))
    ev = [f"{src}:{line}: {what} = {n}" if line else f"{src}: {what} = {n}" for what, (src, n, line) in sizes.items()]
    if len({n for _, n, _ in sizes.values()}) > 1:
        return check(name, "fail", "sizes differ", ev)
    return check(name, "pass", f"{rows} items", ev)


def defect_checks(shipped_path, fixed_dir, has_reference, split_file, manifest_path, data, official) -> list[dict]:
    """Every task-defect check."""
    return [
        *shipped_check(shipped_path),
        fixed_start_check(fixed_dir, has_reference),
        split_size_check(Path(split_file), manifest_path, data, official),
    ]
