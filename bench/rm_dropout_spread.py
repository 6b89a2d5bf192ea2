"""Does the rm recipe's LoRA dropout (full profile: 0.05) make length-grouped micro-batches draw
other dropout masks than the plain path's? Two plain runs that differ only in their dropout
stream, and a grouped one, compared.

The rm recipe (``recipes/rm/train.py``, embedded profile, float32, CPU) on the tiny Mistral of
the tests and 16 pairs of varied lengths, 4 steps of 8 pairs, ``lora.dropout: 0.05``: plain with
the global torch stream reseeded to A at the first step (after the Trainer's own seeding; data
order and initial weights keep the request's seed), plain with stream B, and
``micro_batch_tokens: 64`` with stream A. Prints the largest weight difference of each pair of
runs against the largest weight change of a plain run (lora_B starts at 0).

Found (2026-12-01): the two plain runs are identical -- TRL's ``RewardTrainer`` (and
``DPOTrainer``) sets every ``nn.Dropout`` to p = 0 (``disable_dropout=True``, their default), the
LoRA's included, so the profiles' ``lora.dropout`` is inert and grouping changes float rounding
only.

    python bench/rm_dropout_spread.py      # CPU, about 2 minutes
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(ROOT / "tests")]


def main() -> None:
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from conftest import make_tiny_model, recipe_train, write_request

    scratch = Path(tempfile.mkdtemp(prefix="rm-dropout-"))
    model = make_tiny_model(scratch / "model", "mistral")
    public = scratch / "public"
    public.mkdir()
    rng = random.Random(3)
    words = "blue red green the a colour sky name one two three four five yes no".split()

    def text(k):
        return " ".join(rng.choice(words) for _ in range(k))

    rows = [
        {"prompt": text(rng.randint(1, 12)), "chosen": text(rng.randint(1, 40)), "rejected": text(rng.randint(1, 40))}
        for _ in range(16)
    ]
    (public / "train_prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lora = {"r": 4, "alpha": 8, "dropout": 0.05, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    common = {"max_steps": 4, "save_steps": 4, "lora": {**lora, "modules_to_save": ["score"]}}

    def run(name: str, stream: int, overrides: dict) -> dict[str, torch.Tensor]:
        train = recipe_train("rm")
        original = train.RecipeRewardTrainer

        class Reseeded(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                if state.global_step == 0:  # after the Trainer's own seeding: the dropout masks' stream only
                    torch.manual_seed(stream)

        class Trainer(original):
            def __init__(self, *args, **kwargs):
                kwargs["callbacks"] = [*kwargs["callbacks"], Reseeded()]
                super().__init__(*args, **kwargs)

        train.RecipeRewardTrainer = Trainer
        state = scratch / name
        request = write_request(state, model, public, {**common, **overrides})
        sys.argv = ["train.py", "--request", str(request)]
        assert train.main() == 0
        return load_file(str(state / "publish/checkpoint-4/adapter_model.safetensors"))

    a = run("plain-a", 1234, {})
    b = run("plain-b", 5678, {})
    g = run("grouped-a", 1234, {"micro_batch_tokens": 64, "causal_padding": True})
    change = max(v.abs().max().item() for k, v in a.items() if "lora_B" in k)

    def diff(x, y):
        return max((x[k] - y[k]).abs().max().item() for k in x)

    print(f"[dropout] largest lora_B change of a plain run: {change:.3e}")
    print(f"[dropout] plain (stream A) vs plain (stream B): {diff(a, b):.3e} ({diff(a, b) / change:.1%} of it)")
    print(f"[dropout] grouped (stream A) vs plain (stream A): {diff(g, a):.3e} ({diff(g, a) / change:.1%} of it)")


if __name__ == "__main__":
    main()
