"""Per-step times of the replays that ``bench/device_replay_steps.sh`` ran, beside the real tokens
of their steps, and the mean pair of the whole stand-in training set.

Usage:
    python bench/replay_steps.py DIR            # DIR: the unpacked results/replay-steps/
    python bench/replay_steps.py DIR --pairs    # also the stand-in set's mean pair (rm, ~20 s)

For each ``DIR/<task>-<variant>/``: the recipe's progress lines in the replay log
(``[train] step N/M ... elapsed S s``, whole seconds since the replay callback's start) and
the record's ``train_history`` (TRL's running ``num_tokens``: the attention masks' sum, so
real tokens, chat template included). The step time is the mean over steps 2..M (step 1
holds the warm-up): ``(elapsed_M - elapsed_1) / (M - 1)``, good to ±1/(M - 1) s because each
stamp is rounded to the second.

``--pairs`` rebuilds rm's 8,192 stand-in pairs exactly as ``bench/full_dag.py`` does (its
``Texts`` and ``ultrafeedback`` with their fixed seeds; the toy tokenizer is the same at every
size, so the tiny model's is used), reads them as the assets rule does (``read_pairs``) and
tokenizes them as the recipe does (``tokenize_pair``, 4,096 tokens), and prints the mean
real tokens of a pair over the whole set: the mean step of a whole run at each variant's
measured tokens/s is then ``64 × mean / rate`` -- an estimate, since a step's time follows
its tokens only as closely as the variants' rates are constant.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

STEP = re.compile(r"\[train\] step (\d+)/(\d+) .*elapsed (\d+) s")
PAIRS_A_STEP = 64  # rm's full-scale step: 1 pair x 64 accumulation


def variant(folder: Path) -> dict | None:
    """Steps, mean step time (s) over steps 2..M and real tokens of one replay's folder (None
    for a replay without step lines, such as digress's epochs)."""
    record = json.loads(next(folder.glob("*-record.json")).read_text())
    log = next(p for p in folder.glob("*-replay.log"))
    elapsed = {int(m[1]): int(m[3]) for m in STEP.finditer(log.read_text())}
    steps = sorted(elapsed)
    if len(steps) < 2:
        return None
    running = [h["num_tokens"] for h in record["train_history"]]
    per_step = [running[0]] + [b - a for a, b in zip(running, running[1:])]
    span = elapsed[steps[-1]] - elapsed[steps[0]]
    tokens = sum(per_step[1:])
    return {
        "profile": record["profile"],
        "overrides": record["overrides"],
        "steps": len(steps),
        "step_s": span / (len(steps) - 1),
        "tokens_a_step": tokens / (len(steps) - 1),
        "tokens_per_s": tokens / span,
        "losses": [round(h["loss"], 4) for h in record["train_history"]],
    }


def stand_in_pairs() -> list[int]:
    """Real tokens (chosen + rejected) of each of rm's 8,192 stand-in pairs."""
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent / "recipes" / "rm")]
    import full_dag
    from train import tokenize_pair
    from transformers import AutoTokenizer

    from replaykit.tasks.common.preference_pairs import read_pairs

    with tempfile.TemporaryDirectory() as tmp:
        model = full_dag.causal_lm(Path(tmp) / "mistral-tiny", "tiny")
        tokenizer = AutoTokenizer.from_pretrained(model)
        path = full_dag.ultrafeedback(Path(tmp) / "train_prefs.jsonl", 8192, full_dag.Texts(tokenizer), 1024)
        pairs = [tokenize_pair(tokenizer, row, 4096) for row in read_pairs(path)]
    return [len(p["chosen_ids"]) + len(p["rejected_ids"]) for p in pairs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--pairs", action="store_true", help="also the stand-in set's mean pair (rm)")
    args = parser.parse_args()
    rows = {}
    print("| replay | profile, overrides | steps | step s (2..M) | real tokens a step | tokens/s | a pair |")
    print("|---|---|---|---|---|---|---|")
    for folder in sorted(p for p in args.dir.iterdir() if p.is_dir()):
        v = variant(folder)
        if v is None:
            continue
        rows[folder.name] = v
        print(
            f"| {folder.name} | {v['profile']} {v['overrides']} | {v['steps']} | {v['step_s']:.2f} "
            f"(±{1 / (v['steps'] - 1):.2f}) | {v['tokens_a_step']:,.0f} | {v['tokens_per_s']:,.0f} "
            f"| {v['tokens_a_step'] / PAIRS_A_STEP:,.0f} |"
        )
    for name, v in rows.items():
        print(f"{name} losses: {v['losses']}")
    if args.pairs:
        n = stand_in_pairs()
        mean, sd = statistics.fmean(n), statistics.pstdev(n)
        print(
            f"stand-in set: {len(n)} pairs, {mean:.1f} real tokens a pair (sd {sd:.1f}; "
            f"sd of a {PAIRS_A_STEP}-pair step's mean {sd / PAIRS_A_STEP**0.5:.1f})"
        )
        for name, v in rows.items():
            print(
                f"{name}: a mean step at {v['tokens_per_s']:,.0f} tokens/s: "
                f"{PAIRS_A_STEP * mean / v['tokens_per_s']:.2f} s"
            )


if __name__ == "__main__":
    main()
