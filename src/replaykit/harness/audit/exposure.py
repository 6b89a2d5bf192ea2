"""Protocol exposure: did an evaluator-only value (the final split) reach the candidate, its
exploration or its patch? (docs/audit.md says what each check proves and what it does not.)"""

from __future__ import annotations

import base64
import math
import os
import re
from collections import Counter
from pathlib import Path

from ..fileio import tree_paths
from .checks import check, key_line, read_json_or_none, where
from .items import Haystack, Item, Public, find_items

MAX_SEARCH_BYTES = 4 << 20  # larger exploration files are listed as not searched
# A log (a probe's, a replay attempt's) is searched up to this size: its writer chooses its size,
# so a larger one leaves the check inconclusive instead of passing it with a note
# (the search holds about 100 times a file's size in memory: 1.7 GB for 16 MiB, measured)
MAX_LOG_SEARCH_BYTES = 16 << 20
# Terminal colour and cursor codes (ANSI CSI sequences) are dropped, then control characters and
# undecodable bytes separate words and tokens: a NUL (a "binary" file), raw bytes or a colour
# code around a final item must not hide it from the search (hostile tests, 2026-12-04)
_ANSI = re.compile("\x1b\\[[0-9;?]*[ -/]*[@-~]")
_SEPARATORS = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffd]+")
BLOB_CHARS = 2000  # an added line this long is a blob
ENTROPY_BITS = 5.0  # bits per character over BLOB_MIN characters: base64 / hex / compressed data
BLOB_MIN = 200
SHOWN_KEYS = ("read_only", "writable", "system")
ENCODED_MIN = 16  # characters of a base64 or hex run worth decoding (12 or 8 bytes of text)
_BASE64_RUN = re.compile(rf"[A-Za-z0-9+/_-]{{{ENCODED_MIN},}}={{0,2}}")
_HEX_RUN = re.compile(rf"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{{2}}){{{ENCODED_MIN // 2},}}(?![0-9A-Fa-f])")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _real(p) -> Path:
    return Path(os.path.realpath(p))


def shown_final(plan: dict, final_paths: list[Path]) -> list[str]:
    """The final-split paths a sandbox plan (a record's or receipt's ``sandbox``) shows: a path
    shown (read-only, writable, linked, or the whole root with ``mode: none``) that is or holds
    one, unless a masked path over it hides it."""
    if plan.get("mode") == "none":
        return [f"{p} (isolation none: the whole machine)" for p in final_paths]
    shown = [_real(p) for k in SHOWN_KEYS for p in plan.get(k, [])]
    shown += [_real(target) for target, _ in plan.get("links", [])]
    masked = [_real(p) for p in plan.get("masked", [])]
    out = []
    for final in map(_real, final_paths):
        by = [s for s in shown if _inside(final, s)]
        if by and not any(_inside(final, m) for m in masked):
            out.append(f"{final} (shown by {by[0]})")
    return out


def sandbox_check(plans: list[tuple[str, int, dict]], final_paths: list[Path]) -> dict:
    """``plans``: (file, line, plan) of the replay record and each exploration receipt."""
    if not plans:
        return check("final_split_not_in_sandbox", "unknown", "no sandbox plan recorded")
    bad = [f"{where(f, n)}: sandbox shows {s}" for f, n, plan in plans for s in shown_final(plan, final_paths)]
    if bad:
        return check("final_split_not_in_sandbox", "fail", f"{len(bad)} final-split paths visible", bad)
    names = ", ".join(str(p) for p in final_paths)
    ok = [f"{where(f, n)}: sandbox ({plan.get('mode')}) shows none of {names}" for f, n, plan in plans[:3]]
    more = [f"... and {len(plans) - 3} more plans"] if len(plans) > 3 else []
    return check("final_split_not_in_sandbox", "pass", f"{len(plans)} sandbox plans read", ok + more)


def declared_inputs_check(records: dict[str, tuple[Path, list[str] | None]], final_paths: list[Path]) -> dict:
    """``records``: output -> (Snakemake's record of the job that made it, the inputs it lists;
    None when not recorded, e.g. a copied results folder)."""
    name = "final_split_not_declared_input"
    known = {out: rec for out, rec in records.items() if rec[1] is not None}
    if not known:
        return check(name, "skipped", "Snakemake's records (.snakemake/metadata) of the replay job are not here")
    bad = [
        f"{where(meta, 1)}: {out} was made from {i}"
        for out, (meta, inputs) in known.items()
        for i in inputs
        if any(_inside(_real(f), _real(i)) or _inside(_real(i), _real(f)) for f in final_paths)
    ]
    if bad:
        return check(name, "fail", "a replay job declared the final split as an input", bad)
    ev = [f"{where(m, 1)}: {out}: {len(i)} declared inputs, none of the final split" for out, (m, i) in known.items()]
    return check(name, "pass", "Snakemake's job records read", ev)


def snakemake_inputs(workdir: str | Path, output: str) -> tuple[Path, list[str] | None]:
    """Snakemake's record of the job that made ``output`` (``.snakemake/metadata/<urlsafe
    base64 of the path>``) and the inputs it lists (None when not recorded)."""
    path = Path(workdir) / ".snakemake" / "metadata" / base64.urlsafe_b64encode(output.encode()).decode()
    doc = read_json_or_none(path)
    return path, None if doc is None else list(doc.get("input") or [])


def entropy(text: str) -> float:
    """Shannon entropy of ``text``'s characters, bits per character."""
    counts, n = Counter(text), len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def patch_blobs(patch: Path, text: str) -> list[str]:
    """Large or high-entropy content a patch adds: binary patches, lines over
    :data:`BLOB_CHARS` characters, runs of :data:`BLOB_MIN`+ non-space characters above
    :data:`ENTROPY_BITS` bits per character (base64, hex dumps, compressed data)."""
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("GIT binary patch") or line.startswith("Binary files"):
            out.append(f"{where(patch, no)}: binary content ({line[:60]})")
        elif line.startswith("+") and not line.startswith("+++"):
            body = line[1:]
            runs = [r for r in re.findall(rf"\S{{{BLOB_MIN},}}", body) if entropy(r) > ENTROPY_BITS]
            if len(body) > BLOB_CHARS:
                out.append(f"{where(patch, no)}: added line of {len(body)} characters")
            elif runs:
                out.append(
                    f"{where(patch, no)}: {len(runs[0])} characters at {entropy(runs[0]):.2f} bits per character"
                )
    return out


def patch_check(patch: Path | None, items: list[Item], public: Public) -> list[dict]:
    """The candidate patch's added lines searched for final-split items, and its blobs listed."""
    if patch is None:
        skip = "no candidate patch (the shipped recipe)"
        return [check("patch_has_no_final_items", "skipped", skip), check("patch_blobs", "skipped", skip)]
    if not patch.is_file():
        gone = f"{patch}: the patch file is not here"
        return [check("patch_has_no_final_items", "unknown", gone, [gone]), check("patch_blobs", "unknown", gone)]
    text = patch.read_text(errors="replace")
    found = find_items(Haystack.of_text(str(patch), text, only_added=True), items, public)
    ev = [f"{where(patch, f['line'])}: final item {f['item']} ({f['how']}: {f['detail']})" for f in found]
    added = sum(1 for line in text.splitlines() if line.startswith("+") and not line.startswith("+++"))
    items_check = (
        check("patch_has_no_final_items", "fail", f"{len(found)} final-split items in the patch", ev)
        if found
        else check(
            "patch_has_no_final_items",
            "pass",
            f"{added} added lines searched for {len(items)} final items",
            [f"{where(patch, 1)}: {added} added lines, none holds a final-split item"],
        )
    )
    blobs = patch_blobs(patch, text)
    blob_check = (
        check("patch_blobs", "unknown", f"{len(blobs)} blobs (not searchable for encoded items)", blobs)
        if blobs
        else check("patch_blobs", "pass", "no binary, long or high-entropy added content")
    )
    return [items_check, blob_check]


def _searchable(files: list[Path], logs: frozenset[Path] = frozenset()) -> tuple[list[Path], list[str], list[str]]:
    """The plain files of ``files`` that exist; those left out as too large (named with their
    size: over :data:`MAX_SEARCH_BYTES`); and the ``logs`` among them left out (over
    :data:`MAX_LOG_SEARCH_BYTES`), which leave a check inconclusive."""
    kept, skipped, skipped_logs = [], [], []
    for p in files:
        if not p.is_file() or p.is_symlink():
            continue
        size = p.stat().st_size
        if size > (MAX_LOG_SEARCH_BYTES if p in logs else MAX_SEARCH_BYTES):
            (skipped_logs if p in logs else skipped).append(f"{p} ({size} bytes)")
        else:
            kept.append(p)
    return kept, skipped, skipped_logs


def decoded_lines(text: str) -> list[tuple[int, str]]:
    """Each line of ``text`` (numbered from 1) in the encoded forms a program can print or save
    a final item in, decoded one layer: the line reversed, and each run of
    :data:`ENCODED_MIN`+ base64 (standard or URL-safe alphabet) or hex characters that decodes
    to UTF-8 text. A hostile replay of 2026-12-02 printed every hidden prompt in base64, hex
    and reversed into its log, which the plain search passed."""
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        views = [line[::-1]]
        for run in _HEX_RUN.findall(line):
            views.append(_utf8(bytes.fromhex(run)))
        for run in _BASE64_RUN.findall(line):
            body = run.rstrip("=").translate(str.maketrans("-_", "+/"))
            if len(body) % 4 != 1:  # a length no base64 text has
                views.append(_utf8(base64.b64decode(body + "=" * (-len(body) % 4))))
        out.append((no, " | ".join(v for v in views if v)))
    return out


def _utf8(raw: bytes) -> str:
    """``raw`` as UTF-8 text, or "" when it is not (random bytes rarely are)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _found_in(files: list[Path], items: list[Item], public: Public) -> list[str]:
    """Evidence lines (``file:line: final item ...``) of the final-split items in ``files``, as
    written or encoded (:func:`decoded_lines`). Every file is read as UTF-8 with control
    characters and undecodable bytes as separators, binary ones too: a probe that printed a NUL
    before a final item once made its log "binary" and unsearched (hostile test, 2026-12-04)."""
    ev = []
    for path in files:
        raw = path.read_bytes()
        text = _SEPARATORS.sub(" ", _ANSI.sub("", raw.decode("utf-8", errors="replace")))
        hay = Haystack.of_text(str(path), text)
        binary = b"\0" in raw
        if binary:  # binary (weights): an id beside a label digit is chance there, not a leak
            hay.pairs = {}
        found = find_items(hay, items, public)
        seen = {f["item"] for f in found}
        decoded = Haystack(str(path), decoded_lines(text))
        if binary:  # nor in its bytes read as base64 or hex (new user, 2026-12-05: soup's model.pt)
            decoded.pairs = {}
        encoded = [f for f in find_items(decoded, items, public) if f["item"] not in seen]
        ev += [f"{where(path, f['line'])}: final item {f['item']} ({f['how']}: {f['detail']})" for f in found]
        ev += [
            f"{where(path, f['line'])}: final item {f['item']} ({f['how']}: {f['detail']}; encoded: reversed, "
            "base64 or hex)"
            for f in encoded
        ]
    return ev


def exploration_files(ex_dir: Path) -> tuple[list[Path], list[str], list[str]]:
    """The exploration's files searched (workspace, probe run folders and their logs, the proxy
    scorings' folders -- their logs included, those of a scoring that failed and wrote no
    receipt too --, receipts with their commands), those left out as too large, and the probe
    logs left out (see :func:`_searchable`)."""
    roots = [ex_dir / "workspace", ex_dir / "runs", ex_dir / "proxy"]
    files = [ex_dir / "receipts.jsonl", ex_dir / "submission.json"]
    files += sorted(p for r in roots for p in tree_paths(r) if p.is_file() and not p.is_symlink())
    return _searchable(files, frozenset((ex_dir / "runs").glob("*.log")))


def changed_logs(ex_dir: Path, receipts: list[tuple[str, int, dict]]) -> list[str]:
    """Evidence lines for the probe logs that are not what the probes printed: each receipt's
    ``log`` (relative to ``ex_dir``) against its ``log_sha256``, from the exploration's
    ``receipts.jsonl`` and the submitted sidecar's copy (either may be given)."""
    from ..hashing import sha256_file

    out = []
    for file, line, receipt in receipts:
        rel, digest = receipt.get("log"), receipt.get("log_sha256")
        if not isinstance(rel, str) or not isinstance(digest, str):
            continue
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            out.append(f"{file}:{line}: {rel}: not a log of this exploration (the receipt was edited)")
            continue
        log = ex_dir / rel
        now = sha256_file(log) if log.is_file() and not log.is_symlink() else "missing"
        if now != digest:
            out.append(f"{file}:{line}: {log}: sha256 {now[:12]}, recorded {digest[:12]} when the probe ended")
    return sorted(set(out))


def exploration_check(
    ex_dir: Path | None, items: list[Item], public: Public, receipts: list[tuple[str, int, dict]] = ()
) -> dict:
    """The exploration's files, commands and logs searched for final-split items; *unknown*
    when a probe log is not what the probe printed (``receipts``' ``log_sha256``) or too large
    to search."""
    name = "exploration_has_no_final_items"
    if ex_dir is None:
        return check(name, "skipped", "the run did not come from an exploration")
    if not ex_dir.is_dir():
        gone = f"{ex_dir}: the exploration folder is not here (its files and logs were not searched)"
        return check(name, "unknown", gone, [gone])
    files, skipped, skipped_logs = exploration_files(ex_dir)
    ev = _found_in(files, items, public)
    note = f"; not searched (too large): {', '.join(skipped)}" if skipped else ""
    if ev:
        return check(name, "fail", f"{len(ev)} final-split items in the exploration's files{note}", ev)
    changed = changed_logs(ex_dir, list(receipts))
    unsearched = [f"{log}: a probe log too large to search (over {MAX_LOG_SEARCH_BYTES} bytes)" for log in skipped_logs]
    if changed or unsearched:
        why = f"{len(changed)} probe logs changed since their probe, {len(unsearched)} too large to search"
        return check(name, "unknown", why + note, changed + unsearched)
    return check(
        name,
        "pass",
        f"{len(files)} files searched{note}",
        [
            f"{where(ex_dir / 'receipts.jsonl', 1)}: {len(files)} files of {ex_dir} searched, "
            "none holds a final-split item"
        ],
    )


def replay_outputs_check(
    workdir: Path, run_dir: Path, record_path: Path, record: dict, items: list[Item], public: Public
) -> dict:
    """What the candidate's code wrote in the formal replay searched for final-split items:
    each attempt's log (``attempts[].log`` of the record, relative to ``workdir``) and the text
    files of the published checkpoints (``run_dir/replay/checkpoint-*``). A log named by the
    record but not here is *unknown*."""
    name = "replay_outputs_have_no_final_items"
    attempts = record.get("attempts") if isinstance(record.get("attempts"), list) else []
    logs = [workdir / a["log"] for a in attempts if isinstance(a, dict) and isinstance(a.get("log"), str) and a["log"]]
    missing = [
        f"{where(record_path, key_line(record_path, 'log'))}: {p} is not here (or is a link)"
        for p in logs
        if not p.is_file() or p.is_symlink()
    ]
    published = sorted(p for c in (run_dir / "replay").glob("checkpoint-*") if c.is_dir() for p in tree_paths(c))
    files, skipped, skipped_logs = _searchable([*logs, *published], frozenset(logs))
    ev = _found_in(files, items, public)
    note = f"; not searched (too large): {', '.join(skipped)}" if skipped else ""
    if ev:
        return check(name, "fail", f"{len(ev)} final-split items in the replay's logs or checkpoints{note}", ev)
    missing += [
        f"{log}: an attempt log too large to search (over {MAX_LOG_SEARCH_BYTES} bytes)" for log in skipped_logs
    ]
    if missing:
        return check(name, "unknown", f"{len(missing)} attempt logs are not here or not searched{note}", missing)
    return check(
        name,
        "pass",
        f"{len(files)} files searched{note}",
        [
            f"{where(record_path, 1)}: {len(files)} files (attempt logs, published checkpoints) searched, "
            "none holds a final-split item"
        ],
    )


def record_plans(record_path: Path, record: dict, receipts: list[tuple[str, int, dict]]) -> list[tuple[str, int, dict]]:
    """(file, line, plan) of the replay record's sandbox and of each exploration receipt's."""
    plans = []
    if isinstance(record.get("sandbox"), dict):
        plans.append((str(record_path), key_line(record_path, "sandbox"), record["sandbox"]))
    for source, line, receipt in receipts:
        if isinstance(receipt.get("sandbox"), dict):
            plans.append((source, line, receipt["sandbox"]))
    return plans


def exploration_inputs_check(ex_info_path: Path | None, final_paths: list[Path]) -> dict:
    """The exploration's record names no final-split path as one of its inputs."""
    name = "final_split_not_exploration_input"
    if ex_info_path is None:
        return check(name, "skipped", "the run did not come from an exploration")
    info = read_json_or_none(ex_info_path)
    if info is None:
        gone = f"{ex_info_path}: not here"
        return check(name, "unknown", gone, [gone])
    keys = ("fixed_start", "public_dir", "manifest", "recipe")
    bad = [
        f"{where(ex_info_path, key_line(ex_info_path, k))}: {k} = {info[k]} holds the final split"
        for k in keys
        if info.get(k) and any(_inside(_real(f), _real(info[k])) for f in final_paths)
    ]
    if bad:
        return check(name, "fail", "the exploration read the final split", bad)
    return check(
        name,
        "pass",
        f"inputs {', '.join(keys)} read",
        [f"{where(ex_info_path, 1)}: none of {', '.join(keys)} holds the final split"],
    )
