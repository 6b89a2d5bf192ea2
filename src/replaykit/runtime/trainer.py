"""The replay protocol for a recipe built on a Hugging Face ``Trainer`` (TRL's ``DPOTrainer``,
``RewardTrainer``, ...): a thin wrapper around its :class:`~replaykit.runtime.session.Session`.

A recipe passes a :class:`ReplayCallback` to its trainer and calls :func:`run_trainer`. The
callback asks the session whether to stop (the internal deadline), stops on a non-finite loss,
prints one progress line per logged step, and publishes the artifact files of each saved
trainer checkpoint through the session; :func:`run_trainer` resumes from the last trainer
state saved whole and finishes the session (``train_result.json``, the exit status).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

from transformers import TrainerCallback

from .knobs import TrainerKnobs
from .session import Session


def training_arguments(session: Session) -> dict:
    """Keyword arguments of ``transformers.TrainingArguments`` (and TRL's configs) that the
    replay contract fixes or the common knobs (:class:`~replaykit.runtime.knobs.TrainerKnobs`)
    set: output under ``<state_dir>/trainer``, the request's seed (also the data order), save
    every ``save_steps`` (2 trainer states kept for resuming), a log line per step with NaN
    kept visible, no reporting, the GPU when there is one; batch size, accumulation, learning
    rate and schedule, ``max_steps``, ``optim``, ``dtype`` (``bfloat16`` turns on bf16),
    ``gradient_checkpointing``."""
    import torch

    knobs: TrainerKnobs = session.knobs
    seed = int(session.request.seed)
    return dict(
        output_dir=str(session.request.state_dir / "trainer"),
        per_device_train_batch_size=knobs.per_device_train_batch_size,
        gradient_accumulation_steps=knobs.gradient_accumulation_steps,
        learning_rate=knobs.learning_rate,
        lr_scheduler_type=knobs.lr_scheduler_type,
        max_steps=knobs.max_steps,
        optim=knobs.optim,
        bf16=knobs.dtype == "bfloat16",
        gradient_checkpointing=knobs.gradient_checkpointing,
        seed=seed,
        data_seed=seed,
        save_strategy="steps",
        save_steps=knobs.save_steps,
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
    """The session's deadline, a NaN guard, progress lines and publication of each saved
    checkpoint, for a ``Trainer``.

    Args:
        session: the recipe's session; its knobs' ``max_steps`` is the last step (always saved).
        files: names, inside the Trainer's ``checkpoint-N``, of the artifact to publish (e.g.
            the PEFT adapter's two files); optimizer state is never published.
        log_keys: ``{label: log key}`` printed after the loss on each progress line.
    """

    def __init__(self, session: Session, files: tuple[str, ...], log_keys: dict[str, str] | None = None):
        self.session = session
        self.max_steps = session.knobs.max_steps
        self.files = files
        self.log_keys = log_keys or {}
        self.started = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.max_steps:
            control.should_save = True
        elif self.session.should_stop():
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            self.session.nan_loss(f"NaN loss at step {state.global_step}; earlier checkpoints kept")
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
        self.session.checkpoint(step, self.artifact(Path(args.output_dir) / f"checkpoint-{step}"))
        return control

    def artifact(self, saved: Path):
        """``write(folder)`` copying the artifact files of the trainer checkpoint ``saved`` (the
        session's export folder is not inside it: a subfolder holding an adapter there would
        be loaded as a second adapter on resume)."""
        return lambda out: [shutil.copy2(saved / name, out / name) for name in self.files]


def _resumed_state(callback: ReplayCallback):
    """The trainer state to resume from (its folder and ``TrainerState``), or ``(None, None)``."""
    session = callback.session
    if not session.request.resume:
        return None, None
    resume = last_complete_state(session.request.state_dir / "trainer")
    print(
        f"[train] resuming from {resume}" if resume else "[train] no trainer state to resume; starting at step 0",
        flush=True,
    )
    if resume is None:
        return None, None
    from transformers import TrainerState

    return resume, TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))


def run_trainer(trainer, callback: ReplayCallback) -> int:
    """Train (resuming when the driver asks and a whole trainer state exists), then finish the
    session (:meth:`~replaykit.runtime.session.Session.finish`). The Trainer's raw log printer
    is replaced by the callback's progress lines. Returns the recipe's exit status."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    session = callback.session
    resume, resumed = _resumed_state(callback)
    session.begin_training()
    at_end = resumed is not None and resumed.global_step >= callback.max_steps
    if at_end or session.should_stop():
        # Nothing left to train: the resumed state is at the recipe's end (Trainer.train would
        # run one step more from there), or earlier attempts spent the budget. Report the
        # resumed state (steps, history), not an empty one, so the record agrees with what
        # was published, and publish that state if a kill came between its save and its
        # publication.
        if at_end:
            session.stop_reason = type(session.stop_reason).MAX_STEPS
        if resumed is not None:
            trainer.state = resumed
            session.checkpoint_if_missing(resumed.global_step, callback.artifact(Path(resume)))
            print(
                f"[train] resumed at step {resumed.global_step} of {callback.max_steps}: "
                f"no training ({session.stop_reason.value})",
                flush=True,
            )
    else:
        trainer.train(resume_from_checkpoint=resume)
    history = [h for h in trainer.state.log_history if "loss" in h]
    finite = lambda entry: {k: v for k, v in entry.items() if isinstance(v, int | float) and math.isfinite(v)}  # noqa: E731
    curve = [
        {"progress": int(h["step"]), **{k: v for k, v in finite(h).items() if k not in ("step", "epoch")}}
        for h in history
    ]
    return session.finish(curve, steps=trainer.state.global_step, metrics=finite(history[-1] if history else {}))
