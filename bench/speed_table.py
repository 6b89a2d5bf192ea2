"""The compact table of ``bench/device_speed.sh``: reads the JSON files its sections wrote in a
folder (``rows.json`` of ``bench/recipe_steps.py``, ``sdpa.json``, ``ddpo-ratio*.json``,
``digress.json``, ``soup.json``) and prints Markdown.

Recipe steps: ``s/step`` is the median, over steps 2 and later, of the time from one optimizer
step's end to the next (the step's data, forward/backward, optimizer and logging); step 1
(warm-up) is shown apart. A one-step run of many micro-batches (rm's plain path: 64) gets its
micro-batch count x the median micro-batch after the first 8 instead.

    python bench/speed_table.py /tmp/speed-work
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def steady_seconds(steps: list[dict]) -> tuple[float | None, str]:
    """(seconds per step, how): the median end-to-end time of steps 2 and later; for a one-step
    run of many micro-batches, their count x the median micro-batch after the first 8."""
    later = [s["cycle_s"] for s in steps[1:] if s.get("cycle_s")]
    if later:
        return statistics.median(later), f"median of steps 2-{len(steps)}"
    micro = steps[0].get("micro_batch_s", []) if steps else []
    if len(micro) > 16:
        return len(micro) * statistics.median(micro[8:]), f"{len(micro)} x its median micro-batch (9+)"
    return None, ""


def recipe_rows(rows: list[dict]) -> list[str]:
    out = [
        "| recipe variant | overrides | s/step | how | step 1 s | micro-batches | real tokens/step "
        "| model TFLOP/s | widest micro-batch (padded tokens) | sdpa | peak GiB | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_label = {}
    for r in rows:
        steps = r.get("steps", [])
        steady, how = steady_seconds(steps)
        by_label[r["label"]] = steady
        last = steps[-1] if steps else {}
        tflops = (
            statistics.median(s["tflops"] for s in steps[1:])
            if len(steps) > 1
            else (last.get("tflops") if steps else None)
        )
        cells = [
            f"{r['task']} {r['label']} ({r['profile']})",
            f"`{json.dumps(r['overrides'])}`",
            "-" if steady is None else f"**{steady:.2f}**",
            how,
            f"{steps[0]['seconds']:.1f}" if steps else "-",
            str(last.get("micro_batches", "-")),
            f"{last['real_tokens']:,}" if steps else "-",
            "-" if tflops is None else f"{tflops:.0f}",
            f"{max(s.get('max_micro_batch_tokens', 0) for s in steps):,}" if steps else "-",
            "cudnn allowed" if r.get("cudnn_sdp", True) else "no cudnn",
            f"{r.get('peak_gib', 0):.1f}",
            r.get("error", ""),
        ]
        out.append("| " + " | ".join(cells) + " |")
    pairs = [("rm-plain", "rm-grouped"), ("rm-plain", "rm-grouped-nogc"), ("dpo-nf4-plain", "dpo-nf4")]
    pairs += [("dpo-bf16-plain", "dpo-bf16"), ("dpo-bf16", "dpo-bf16-lora-bf16")]
    pairs += [
        (p, label)
        for p, prefix in (("rm-plain", "rm-grouped-"), ("dpo-nf4-plain", "dpo-nf4-"))
        for label in by_label
        if label.startswith(prefix) and label != p and (p, label) not in pairs
    ]
    for before, after in pairs:
        if by_label.get(before) and by_label.get(after):
            out.append(f"\n{after} against {before}: {by_label[before] / by_label[after]:.2f}x")
    return out


def main() -> None:
    work = Path(sys.argv[1])
    lines = []
    rows = work / "rows.json"
    if rows.exists():
        lines += recipe_rows(json.loads(rows.read_text()))
    sdpa = work / "sdpa.json"
    if sdpa.exists():
        s = json.loads(sdpa.read_text())
        lines.append(
            f"\nsdpa (torch {s['torch']}): causal without mask -> {s['backend_causal_no_mask']}, with a padding mask "
            f"-> {s['backend_with_mask']}; {s['calls']} forward+backward at new lengths {s['new_lengths_s']:.3f} s, "
            f"at one length seen before {s['same_length_s']:.3f} s"
        )
    for path in sorted(work.glob("ddpo-ratio*.json")):
        d = json.loads(path.read_text())
        lines.append(f"\nddpo ratio before an update ({path.stem}: {d['dtype']}, {d['steps']} steps)\n")
        lines.append("| path | log-probs compared | max abs diff | mean | above clip 1e-4 | exactly 0 | sampling s |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in d["rows"]:
            for name in ("recipe", "unrounded"):
                m = r[name]
                lines.append(
                    f"| {r['path']} | {name} | {m['max']:.2e} | {m['mean']:.2e} | {m['above_clip']:.1%} "
                    f"| {m['exact']:.1%} | {r['sample_s']:.1f} |"
                )
    digress = work / "digress.json"
    if digress.exists():
        lines.append("\ndigress, `cuda_graph` + `compile` (full profile)\n")
        lines.append("| compile_scope | epoch 1 s (compiling) | later epochs s | compiling ≈ s | rc | error |")
        lines.append("|---|---|---|---|---|---|")
        for r in json.loads(digress.read_text()):
            e, error = r.get("epoch_s"), r.get("error", "").replace("|", "/")
            lines.append(
                f"| {r['compile_scope']} | {e[0]:.1f} | {', '.join(f'{x:.2f}' for x in e[1:])} "
                f"| {r['compile_s'] or 0:.0f} | {r['returncode']} | |"
                if e
                else f"| {r['compile_scope']} | - | - | - | {r['returncode']} | {error} |"
            )
    soup = work / "soup.json"
    if soup.exists():
        d = json.loads(soup.read_text())
        lines.append(f"\nsoup candidate ({d['n_ingredients']} ingredients, {d['n_proxy']} images)\n")
        lines.append("| variant | s/candidate | weighted sum s | predictions changed |")
        lines.append("|---|---|---|---|")
        for r in d["rows"]:
            lines.append(
                f"| {r['variant']} | {r['s_per_candidate']:.4f} | {r['weighted_sum_s']:.4f} "
                f"| {r['predictions_changed']} of {r['predictions']} |"
            )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
