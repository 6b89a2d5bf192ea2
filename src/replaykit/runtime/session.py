"""One attempt of a recipe under the replay protocol: the request, the knobs, the deadline,
publication, the state kept for a resume, and the result file with the exit status.

The replay driver (:mod:`replaykit.harness.replay`) starts ``train.py --request
<request.json>`` and expects the recipe to stop at the internal deadline, publish each
checkpoint atomically, keep its training state for a resume, write
``<state_dir>/train_result.json`` and exit 0 (stopped by itself), :data:`NAN_EXIT` (a
non-finite loss or reward) or 1 (nothing published)::

    session = Session.start(SoupKnobs, Path(__file__).parent / "configs", __doc__)
    knobs = session.knobs                         # typed, documented knobs
    ...
    session.begin_training()
    while ... and not session.should_stop(next_step_s=last_step_s):
        ...
        session.checkpoint(progress, lambda out: save(model, out))
    return session.finish(history)

A Hugging Face ``Trainer`` recipe gets the same protocol through
:class:`replaykit.runtime.trainer.ReplayCallback`, a thin wrapper around its session.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..harness.protocol import ReplayRequest, StopReason, TrainResult
from ..harness.publish import publish_checkpoint, published, published_entries
from .knobs import load_config

NAN_EXIT = 3  # exit status of a recipe stopped by a non-finite loss (the replay driver reports it)


class Session:
    """One replay attempt of a recipe.

    Attributes:
        request: the driver's :class:`~replaykit.harness.protocol.ReplayRequest`.
        knobs: the recipe's knobs (an instance of the class given to :meth:`start`).
        stop_reason: why training stopped (:class:`StopReason`; ``max_steps`` until
            :meth:`should_stop` or :meth:`nan_loss` says otherwise).
        error: why the recipe failed (a non-finite loss), else None.
        published_now: progress values published by this attempt, in order.
        publish_s: seconds spent publishing in this attempt.
        train_start: the training clock's start (s since the epoch).
    """

    def __init__(self, request: ReplayRequest, knobs=None):
        self.request = request
        self.knobs = knobs
        self.stop_reason = StopReason.MAX_STEPS
        self.error: str | None = None
        self.published_now: list[int] = []
        self.publish_s = 0.0
        self.train_start = time.time()

    @classmethod
    def start(cls, knobs_class: type, configs_dir: str | Path, doc: str | None = None, argv=None) -> Session:
        """Parse ``--request``, load the knobs (:func:`~replaykit.runtime.knobs.load_config`:
        ``SystemExit`` naming the profile file and knob when one is bad), set torch's thread
        count and seed ``random``, NumPy and torch (every device) from the request, as
        ``transformers.set_seed`` does."""
        parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
        parser.add_argument("--request", required=True, help="the replay driver's request (JSON)")
        request = ReplayRequest.read(parser.parse_args(argv).request)
        knobs = load_config(knobs_class, configs_dir, request.profile, request.overrides)
        import random

        import numpy as np
        import torch

        torch.set_num_threads(int(request.threads))
        random.seed(request.seed)
        np.random.seed(request.seed)
        torch.manual_seed(request.seed)
        return cls(request, knobs)

    def device(self, preference: str = "auto") -> str:
        """``cuda`` when ``preference`` is ``auto`` and a GPU is visible, else ``cpu``."""
        import torch

        return "cuda" if preference == "auto" and torch.cuda.is_available() else "cpu"

    # --- time -----------------------------------------------------------------------------
    def begin_training(self) -> None:
        """Start the training clock (``train_start_unix`` of the result)."""
        self.train_start = time.time()

    def should_stop(self, next_step_s: float = 0.0) -> bool:
        """Whether the internal deadline has come, or comes within ``next_step_s`` seconds (the
        length of the next step or epoch: one that cannot finish is not started); then the stop
        reason is ``deadline``."""
        if time.time() + next_step_s >= self.request.deadline_unix:
            self.stop_reason = StopReason.DEADLINE
            return True
        return False

    def nan_loss(self, message: str) -> None:
        """Training stops on a non-finite loss or reward: :meth:`finish` reports ``message``
        and returns :data:`NAN_EXIT`; earlier checkpoints are kept."""
        self.stop_reason, self.error = StopReason.NAN_LOSS, message

    # --- publication ----------------------------------------------------------------------
    def checkpoint(self, progress: int, write: Callable[[Path], Path | None]) -> dict:
        """Publish ``checkpoint-<progress>``: ``write(folder)`` writes its files into a fresh
        export folder under the state folder (removed afterwards) -- or returns another folder (a
        ``Path``) whose files are published as they are (a state just saved) --, then the files are
        copied under a temporary name and renamed into place atomically
        (:func:`~replaykit.harness.publish.publish_checkpoint`, retention ``keep``). The time
        of both counts as publishing. Prints the ``[publish]`` line; returns the ledger entry."""
        started = time.time()
        export = self.request.state_dir / f".export-{progress}"
        shutil.rmtree(export, ignore_errors=True)
        export.mkdir(parents=True)
        try:
            folder = write(export)
            return self._publish(folder if isinstance(folder, Path) else export, progress, started)
        finally:
            shutil.rmtree(export, ignore_errors=True)

    def _publish(self, folder: Path, progress: int, started: float) -> dict:
        entry = publish_checkpoint(folder, self.request.publish_dir, progress, keep=self.request.keep)
        self.published_now.append(progress)
        self.publish_s += time.time() - started
        print(
            f"[publish] checkpoint-{progress} (publication {entry['count']}, retained {entry['retained']})", flush=True
        )
        return entry

    def last_published(self) -> int:
        """The greatest progress any attempt published (the ledger's published entries and the
        folders on disk, which the driver reconciled before this attempt), 0 if none."""
        root = self.request.publish_dir
        return max([e["progress"] for e in published_entries(root)] + published(root), default=0)

    def checkpoint_if_missing(self, progress: int, write: Callable[[Path], Path | None]) -> bool:
        """:meth:`checkpoint` unless ``progress`` is 0 or no later than what any attempt
        published: after a resume, the state saved last but killed before its publication
        (or, at the deadline, the last whole step) is published once. Returns whether it was."""
        if not progress or progress <= self.last_published():
            return False
        self.checkpoint(progress, write)
        return True

    # --- state ----------------------------------------------------------------------------
    def save_state(self, state: dict, name: str = "train_state.pt") -> None:
        """``torch.save`` the training state to ``<state_dir>/<name>`` atomically (a kill
        mid-save leaves the previous state whole)."""
        import torch

        tmp = self.request.state_dir / f".tmp-{name}"
        torch.save(state, tmp)
        tmp.replace(self.request.state_dir / name)

    def load_state(self, name: str = "train_state.pt", **load_kwargs) -> dict | None:
        """The state saved by :meth:`save_state` when the driver asks for a resume and one
        exists, else None (``load_kwargs`` go to ``torch.load``, e.g. ``map_location``)."""
        path = self.request.state_dir / name
        if not (self.request.resume and path.is_file()):
            return None
        import torch

        return torch.load(path, weights_only=True, **load_kwargs)

    # --- the end --------------------------------------------------------------------------
    def finish(self, history: list[dict], steps: int | None = None, metrics: dict | None = None) -> int:
        """Write ``<state_dir>/train_result.json`` (:class:`~replaykit.harness.protocol.TrainResult`:
        the stop reason, ``steps`` (default: the last progress in ``history``, else the last
        published), the training clock, ``publish_s``, ``history``, ``metrics`` (default: the
        last history entry's values) and the error) and return the exit status:
        :data:`NAN_EXIT` after a non-finite loss (its message printed), 1 when no checkpoint
        exists at all, else 0."""
        if steps is None:
            steps = history[-1]["progress"] if history else max(self.published_now, default=0)
        if metrics is None:
            metrics = {k: v for k, v in (history[-1] if history else {}).items() if k != "progress"}
        result = TrainResult(
            stop_reason=self.stop_reason.value,
            steps=steps,
            train_start_unix=self.train_start,
            train_end_unix=time.time(),
            publish_s=self.publish_s,
            history=history,
            metrics=metrics,
            error=self.error,
        )
        result.write(self.request.state_dir / "train_result.json")
        if self.error:
            print(f"error: {self.error}", flush=True)
            return NAN_EXIT
        if not self.published_now and not published(self.request.publish_dir):
            print(
                f"error: stopped ({self.stop_reason.value}) before the first checkpoint: nothing published", flush=True
            )
            return 1
        return 0
