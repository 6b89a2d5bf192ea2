"""Seconds per optimizer step of the rm and dpo recipes themselves -- ``recipes/<task>/train.py``
with TRL's trainers and the harness's callback, as a replay runs them -- on a stand-in fixed
start (random weights at Mistral-7B's size, ``bench/full_dag.py``) and UltraFeedback-like pairs.

    python bench/recipe_steps.py prepare --size full --out DIR      # stand-in model + 256 pairs
    python bench/recipe_steps.py run --data DIR --task rm --profile full --overrides '{"micro_batch_tokens": null}' \
        --steps 2 --label plain --json out.json                      # one variant; appends to out.json

``run`` calls the recipe's ``main()`` in this process on a request like the replay driver's
(no sandbox, no Snakemake: neither touches a step), with ``max_steps``/``save_steps`` set to
``--steps``. The one addition is timing: the recipe's trainer class (its module attribute,
``RecipeRewardTrainer`` / ``RecipeDPOTrainer``) is wrapped in a subclass that adds a callback
timing each optimizer step between synchronisations (and, in the plain path, each
micro-batch), counts the step's micro-batches and real tokens, and reads the peak GPU memory.

Model FLOPs per step on real tokens (no recompute counted, as ``bench/rm_throughput.py`` and
``bench/dpo_throughput.py``): rm ``Σ L (4 N + 6 N_lora + 8 n_layers d L)``; dpo
``Σ L (6 N + 6 N_lora + 12 n_layers d L) + 6 d V R`` (policy forward + backward, reference
forward, LM head on the R response tokens), N the non-embedding parameters from the config
(so NF4 packing does not change it), over the sequences of L tokens.

Lengths: ``bench/pref_batches.py``'s UltraFeedback-like model (mean sequence ≈ 470 tokens,
cap 1,024), texts of words of the stand-in's toy tokenizer (``bench/full_dag.py``), turned
into the explicit-prompt rows the assets rule writes (``read_pairs``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]


def prepare(size: str, out: Path, n_pairs: int = 256) -> None:
    """``out/model`` (the stand-in fixed start) and ``out/public/train_prefs.jsonl``."""
    from full_dag import Texts, causal_lm, ultrafeedback
    from transformers import AutoTokenizer

    from replaykit.tasks.common.preference_pairs import read_pairs

    model = out / "model"
    if not (model / ".complete").exists():
        causal_lm(model, size)
        (model / ".complete").write_text("")
    (out / "public").mkdir(parents=True, exist_ok=True)
    raw = ultrafeedback(out / "raw.jsonl", n_pairs, Texts(AutoTokenizer.from_pretrained(model)), 1024)
    rows = read_pairs(raw)
    (out / "public" / "train_prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"[recipe_steps] {model}, {len(rows)} pairs in {out / 'public'}", flush=True)


def load_recipe(task: str):
    spec = importlib.util.spec_from_file_location(f"{task}_recipe_train", ROOT / "recipes" / task / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def non_embedding_params(config) -> int:
    """Mistral/Llama-style decoder: per layer q, o (d²), k, v (d × kv), gate, up, down (d × ff)."""
    d, ff = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (getattr(config, "head_dim", None) or d // config.num_attention_heads)
    return config.num_hidden_layers * (2 * d * d + 2 * d * kv + 3 * d * ff)


class Timing:
    """Per optimizer step: seconds, micro-batches, real tokens and model FLOPs (module docstring)."""

    def __init__(self, task: str):
        self.task, self.steps, self.micro, self.micro_s = task, [], 0, []
        self.sum_l = self.sum_l2 = self.sum_r = 0.0
        self.started = self.last = self.previous_end = None
        self.flops_of = None
        self.widest = 0  # the most padded tokens (rows x width) of one micro-batch in the step
        self.save_grads = None  # a path: the first step's gradients (float32) go there

    def count(self, inputs, model) -> None:
        if self.flops_of is None:
            config = model.config
            n = non_embedding_params(config)
            n_lora = sum(p.numel() for name, p in model.named_parameters() if p.requires_grad and "lora_" in name)
            d, layers = config.hidden_size, config.num_hidden_layers
            if self.task == "rm":
                self.flops_of = lambda s_l, s_l2, s_r: (4 * n + 6 * n_lora) * s_l + 8 * layers * d * s_l2
            else:
                v = config.vocab_size
                self.flops_of = lambda s_l, s_l2, s_r: (
                    (6 * n + 6 * n_lora) * s_l + 12 * layers * d * s_l2 + 6 * d * v * s_r
                )
        lengths = inputs["attention_mask"].sum(1).double()
        self.sum_l = self.sum_l + lengths.sum()
        self.sum_l2 = self.sum_l2 + (lengths**2).sum()
        if "completion_mask" in inputs:
            self.sum_r = self.sum_r + inputs["completion_mask"].sum().double()

    def callback(self):
        from transformers import TrainerCallback

        timing = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                sync()
                timing.started = timing.last = time.perf_counter()
                timing.micro, timing.micro_s, timing.widest = 0, [], 0

            def on_substep_end(self, args, state, control, **kwargs):
                sync()
                now = time.perf_counter()
                timing.micro_s.append(now - timing.last)
                timing.last = now

            def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
                if timing.save_grads and state.global_step == 0:  # step 1: the same weights and pairs in every run
                    import torch

                    grads = {
                        n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None
                    }
                    Path(timing.save_grads).parent.mkdir(parents=True, exist_ok=True)
                    torch.save(grads, timing.save_grads)

            def on_step_end(self, args, state, control, **kwargs):
                sync()
                now = time.perf_counter()
                tokens, l2, r = (float(x) for x in (timing.sum_l, timing.sum_l2, timing.sum_r))
                seconds = now - timing.started
                flops = timing.flops_of(tokens, l2, r)
                cycle = None if timing.previous_end is None else now - timing.previous_end
                timing.previous_end = now
                timing.steps.append(
                    {
                        "step": state.global_step,
                        "seconds": seconds,
                        "cycle_s": cycle,  # end to end: also the step's data and the previous step's logging
                        "micro_batches": timing.micro,
                        "real_tokens": int(tokens),
                        "tflops": flops / seconds / 1e12,
                        "micro_batch_s": timing.micro_s + [now - timing.last],
                        "max_micro_batch_tokens": timing.widest,
                    }
                )
                timing.sum_l = timing.sum_l2 = timing.sum_r = 0.0
                print(
                    f"[recipe_steps] step {state.global_step}: {seconds:.2f} s, {timing.micro} micro-batches, "
                    f"{int(tokens):,} real tokens, {flops / seconds / 1e12:.0f} model TFLOP/s",
                    flush=True,
                )

        return Callback()


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(trainer_class, timing: Timing):
    """``trainer_class`` with :class:`Timing`'s callback, token count and micro-batch count."""

    class Timed(trainer_class):
        def __init__(self, *args, **kwargs):
            kwargs["callbacks"] = [*kwargs.get("callbacks", []), timing.callback()]
            super().__init__(*args, **kwargs)

        def training_step(self, model, inputs, num_items_in_batch=None):
            timing.count(inputs, self.accelerator.unwrap_model(model))
            return super().training_step(model, inputs, num_items_in_batch)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                timing.micro += 1
                timing.widest = max(timing.widest, inputs["attention_mask"].numel())
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )

    return Timed


def run(a) -> dict:
    import torch

    if a.no_cudnn_sdp:  # sdpa then picks flash (causal, no mask) or efficient (masked): no per-shape plan
        torch.backends.cuda.enable_cudnn_sdp(False)
    overrides = {**json.loads(a.overrides), **json.loads(a.extra), "max_steps": a.steps, "save_steps": a.steps}
    state = Path(a.work) / a.label
    (state / "state").mkdir(parents=True, exist_ok=True)
    request = {
        "fixed_start": str(Path(a.data) / "model"),
        "public_dir": str(Path(a.data) / "public"),
        "publish_dir": str(state / "publish"),
        "state_dir": str(state / "state"),
        "seed": 42,
        "deadline_unix": time.time() + 3600,
        "export_reserve_s": 60,
        "profile": a.profile,
        "overrides": overrides,
        "threads": 8,
        "keep": 3,
        "resume": False,
    }
    (state / "request.json").write_text(json.dumps(request))
    recipe = load_recipe(a.task)
    name = "RecipeRewardTrainer" if a.task == "rm" else "RecipeDPOTrainer"
    timing = Timing(a.task)
    timing.save_grads = a.save_grads
    setattr(recipe, name, timed(getattr(recipe, name), timing))
    sys.argv = ["train.py", "--request", str(state / "request.json")]
    started = time.perf_counter()
    row = {"task": a.task, "label": a.label, "profile": a.profile, "overrides": json.loads(a.overrides)}
    try:
        row["rc"] = recipe.main()
    except torch.OutOfMemoryError as error:
        row.update(rc=None, error=f"OOM: {str(error).splitlines()[0][:200]}")
    except Exception as error:  # noqa: BLE001  (a variant the stack cannot run is a row, not the end of the run)
        row.update(rc=None, error=f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
    row["wall_s"] = time.perf_counter() - started
    row["cudnn_sdp"] = torch.backends.cuda.cudnn_sdp_enabled()  # after the recipe (its cudnn_attention knob)
    row["steps"] = timing.steps
    if torch.cuda.is_available():
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="stand-in model and pairs")
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=256)
    r = sub.add_parser("run", help="one variant of a recipe")
    r.add_argument("--data", required=True, help="the folder `prepare` wrote")
    r.add_argument("--task", choices=("rm", "dpo"), required=True)
    r.add_argument("--profile", default="full")
    r.add_argument("--overrides", default="{}", help="JSON: recipe knobs over the profile")
    r.add_argument("--extra", default="{}", help="JSON: more knobs, not shown in the row (a CPU check's dtype, optim)")
    r.add_argument("--steps", type=int, default=3)
    r.add_argument("--label", required=True)
    r.add_argument("--work", default="/tmp/recipe-steps", help="state and publish folders")
    r.add_argument("--json", help="append the row to this JSON list")
    r.add_argument("--save-grads", help="torch.save the first step's gradients here (bench/compare_grads.py)")
    r.add_argument("--no-cudnn-sdp", action="store_true", help="torch.backends.cuda.enable_cudnn_sdp(False) first")
    a = parser.parse_args()
    if a.command == "prepare":
        prepare(a.size, a.out, a.pairs)
        return
    row = run(a)
    print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
    if a.json:
        path = Path(a.json)
        rows = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps([*rows, row], indent=1))


if __name__ == "__main__":
    main()
