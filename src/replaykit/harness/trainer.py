"""Glue between a Hugging Face ``Trainer`` and the replay contract, for shipped recipes.

A recipe builds its trainer (TRL's ``DPOTrainer``, ``RewardTrainer``, ...), adds a
:class:`ReplayCallback` and calls :func:`run_training`. The callback stops training at the
internal deadline, stops on a non-finite loss, prints one progress line per logged step, and
publishes the files of each saved checkpoint atomically (:mod:`.publish`);
:func:`run_training` resumes from the last trainer state saved whole and writes
``train_result.json`` as :mod:`.replay` expects. Nothing here knows a task.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from transformers import TrainerCallback

from .fileio import atomic_write_json
from .publish import publish_checkpoint, published, read_ledger
from .session import NAN_EXIT, knob, load_config, load_recipe  # noqa: F401  (recipes import them here)


@dataclass(frozen=True)
class TrainerKnobs:
    """The knobs every Trainer recipe has (:func:`training_arguments` reads them); a recipe's
    config dataclass extends it with its method's knobs (as TRL's ``DPOConfig`` extends
    ``TrainingArguments``) and :func:`load_config` fills it from the recipe's profile."""

    dtype: Literal["float32", "bfloat16", "float16"] = knob("weights' dtype; bfloat16 also turns on bf16 training")
    per_device_train_batch_size: int = knob("pairs (examples) per forward/backward pass", minimum=1)
    gradient_accumulation_steps: int = knob("passes per optimizer step", minimum=1)
    optim: str = knob("transformers optimizer name (adamw_torch, paged_adamw_32bit, ...)")
    learning_rate: float = knob("peak learning rate", minimum=0)
    lr_scheduler_type: str = knob("transformers schedule name (cosine, linear, ...)")
    max_steps: int = knob("optimizer steps (progress = step)", minimum=1)
    save_steps: int = knob("publish every N steps, and at the last step (3 retained)", minimum=1)
    gradient_checkpointing: bool = knob("recompute activations in the backward pass (less memory, more time)")


def training_arguments(recipe: TrainerKnobs, request: dict) -> dict:
    """Keyword arguments of ``transformers.TrainingArguments`` (and TRL's configs) that the
    replay contract fixes or the recipe's common knobs set: output under
    ``<state_dir>/trainer``, the request's seed (also the data order), save every
    ``save_steps`` (2 trainer states kept for resuming), a log line per step with NaN kept
    visible, no reporting, the GPU when there is one. Recipe knobs read: batch size,
    accumulation, learning rate and schedule, ``max_steps``, ``optim``, ``dtype``
    (``bfloat16`` turns on bf16), ``gradient_checkpointing``, ``save_steps``."""
    import torch

    return dict(
        output_dir=str(Path(request["state_dir"]) / "trainer"),
        per_device_train_batch_size=recipe.per_device_train_batch_size,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        learning_rate=recipe.learning_rate,
        lr_scheduler_type=recipe.lr_scheduler_type,
        max_steps=recipe.max_steps,
        optim=recipe.optim,
        bf16=recipe.dtype == "bfloat16",
        gradient_checkpointing=recipe.gradient_checkpointing,
        seed=int(request["seed"]),
        data_seed=int(request["seed"]),
        save_strategy="steps",
        save_steps=recipe.save_steps,
        save_total_limit=2,
        logging_steps=1,
        logging_nan_inf_filter=False,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
    )


def last_complete_state(trainer_dir: str | Path) -> str | None:
    """The newest trainer checkpoint that was saved whole. A job killed mid-save leaves a
    ``checkpoint-N`` without a readable ``trainer_state.json``, which the Trainer writes last."""

    def whole(path: Path) -> bool:
        try:
            json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            return False
        return path.name.split("-")[1].isdigit()

    saved = [p for p in Path(trainer_dir).glob("checkpoint-*") if whole(p)]
    return str(max(saved, key=lambda p: int(p.name.split("-")[1]))) if saved else None


class ReplayCallback(TrainerCallback):
    """Deadline, NaN guard, progress lines and atomic publication of each saved checkpoint.

    Args:
        request: the replay driver's request (``deadline_unix``, ``publish_dir``,
            ``state_dir``, ``keep``).
        max_steps: optimizer steps of the recipe; the last one is always saved.
        files: names, inside the Trainer's ``checkpoint-N``, of the artifact to publish
            (e.g. the PEFT adapter's two files); optimizer state is never published.
        log_keys: ``{label: log key}`` printed after the loss on each progress line.
    """

    def __init__(self, request: dict, max_steps: int, files: tuple[str, ...], log_keys: dict[str, str] | None = None):
        self.deadline = request["deadline_unix"]
        self.publish_dir = Path(request["publish_dir"])
        self.state_dir = Path(request["state_dir"])
        self.keep = request["keep"]
        self.max_steps = max_steps
        self.files = files
        self.log_keys = log_keys or {}
        self.publish_s = 0.0
        self.stop_reason = "max_steps"
        self.nan_step = None
        self.started = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.max_steps:
            control.should_save = True
        elif time.time() >= self.deadline:
            self.stop_reason = "deadline"
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            self.nan_step = state.global_step
            control.should_save = False
            control.should_training_stop = True
        if loss is not None:
            extra = "".join(f" {label} {logs.get(key, float('nan')):.4f}" for label, key in self.log_keys.items())
            print(
                f"[train] step {state.global_step}/{self.max_steps} loss {loss:.4f}{extra} "
                f"elapsed {time.time() - self.started:.0f} s",
                flush=True,
            )
        return control

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        self.publish_saved(Path(args.output_dir) / f"checkpoint-{step}", step)
        return control

    def publish_saved(self, saved: Path, step: int) -> None:
        """Publish the artifact files of the trainer checkpoint ``saved`` as
        ``checkpoint-<step>``."""
        # Export through a scratch folder that is NOT inside the trainer checkpoint: a
        # subfolder holding an adapter there would be loaded as a second adapter on resume.
        started = time.time()
        export = Path(tempfile.mkdtemp(prefix=".export-", dir=self.state_dir))
        try:
            for name in self.files:
                shutil.copy2(saved / name, export / name)
            entry = publish_checkpoint(export, self.publish_dir, step, keep=self.keep)
        finally:
            shutil.rmtree(export, ignore_errors=True)
        self.publish_s += time.time() - started
        print(f"[publish] checkpoint-{step} (publication {entry['count']}, retained {entry['retained']})", flush=True)

    def publish_if_missing(self, saved: Path, step: int) -> None:
        """After a resume that trains no more: publish the resumed state's artifact unless it
        was published already (a kill between the trainer's save and the publication)."""
        done = [e["progress"] for e in read_ledger(self.publish_dir)] + published(self.publish_dir)
        if not done or step > max(done):
            self.publish_saved(saved, step)


def run_training(trainer, callback: ReplayCallback, request: dict) -> int:
    """Train (resuming when the driver asks and a whole trainer state exists), then write
    ``<state_dir>/train_result.json``. The Trainer's raw log printer is replaced by the
    callback's progress lines. Returns the recipe's exit status: 0 when it stopped by itself
    (``max_steps`` or ``deadline``), :data:`NAN_EXIT` on a non-finite loss."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    state_dir = Path(request["state_dir"])
    resume, resumed_state = None, None
    if request["resume"]:
        resume = last_complete_state(state_dir / "trainer")
        print(
            f"[train] resuming from {resume}" if resume else "[train] no trainer state to resume; starting at step 0",
            flush=True,
        )
    if resume is not None:
        from transformers import TrainerState

        resumed_state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
    train_start = time.time()
    at_end = resumed_state is not None and resumed_state.global_step >= callback.max_steps
    if at_end or train_start >= request["deadline_unix"]:
        # Nothing left to train: the resumed state is at the recipe's end (Trainer.train would
        # run one step more from there), or earlier attempts spent the budget. Report the
        # resumed state (steps, history), not an empty one, so the record agrees with what
        # was published, and publish that state if a kill came between its save and its
        # publication.
        callback.stop_reason = "max_steps" if at_end else "deadline"
        if resumed_state is not None:
            trainer.state = resumed_state
            callback.publish_if_missing(Path(resume), resumed_state.global_step)
            print(
                f"[train] resumed at step {resumed_state.global_step} of {callback.max_steps}: "
                f"no training ({callback.stop_reason})",
                flush=True,
            )
    else:
        trainer.train(resume_from_checkpoint=resume)
    history = [h for h in trainer.state.log_history if "loss" in h]
    curve = [
        {
            "progress": int(h["step"]),
            **{
                k: v
                for k, v in h.items()
                if k not in ("step", "epoch") and isinstance(v, (int, float)) and math.isfinite(v)
            },
        }
        for h in history
    ]
    result = {
        "stop_reason": callback.stop_reason,
        "steps": trainer.state.global_step,
        "history": curve,
        "train_start_unix": train_start,
        "train_end_unix": time.time(),
        "publish_s": callback.publish_s,
        "metrics": {
            k: v
            for k, v in (history[-1] if history else {}).items()
            if isinstance(v, (int, float)) and math.isfinite(v)
        },
    }
    if callback.nan_step is not None:
        result.update(stop_reason="nan_loss", error=f"NaN loss at step {callback.nan_step}; earlier checkpoints kept")
        atomic_write_json(state_dir / "train_result.json", result)
        print(f"error: {result['error']}", flush=True)
        return NAN_EXIT
    atomic_write_json(state_dir / "train_result.json", result)
    return 0
