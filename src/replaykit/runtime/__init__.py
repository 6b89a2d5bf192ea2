"""The recipe's side of the replay protocol: the only ``replaykit`` module a recipe imports for
it (its task's helpers, e.g. ``replaykit.tasks.soup.model``, are the task's business).

* :class:`Session` (:mod:`.session`) -- one attempt: the request (:class:`ReplayRequest`), the
  typed knobs, ``should_stop(next_step_s)``, ``checkpoint(progress, write)``, the state kept
  for a resume, ``finish(history)`` with the result file and the exit status;
* :func:`knob`, :func:`load_config`, :class:`TrainerKnobs` (:mod:`.knobs`) -- a recipe's
  knobs as a documented, checked dataclass;
* :class:`StopReason` -- why training stopped (one spelling per reason);
* :func:`atomic_write_json` -- a JSON file written whole or not at all (a checkpoint's
  metadata);
* for a Hugging Face ``Trainer``: :class:`ReplayCallback`, :func:`run_trainer`,
  :func:`training_arguments` (:mod:`.trainer`, imported on first use: it imports
  transformers).

The driver's side is :mod:`replaykit.harness.replay`; the request and the result file are
declared once in :mod:`replaykit.harness.protocol`.
"""

from __future__ import annotations

from ..harness.fileio import atomic_write_json
from ..harness.protocol import ReplayRequest, StopReason
from .knobs import TrainerKnobs, knob, load_config
from .session import NAN_EXIT, Session

_TRAINER = ("ReplayCallback", "run_trainer", "training_arguments", "last_complete_state")

__all__ = [
    "NAN_EXIT",
    "ReplayRequest",
    "Session",
    "StopReason",
    "TrainerKnobs",
    "atomic_write_json",
    "knob",
    "load_config",
    *_TRAINER,
]


def __getattr__(name: str):
    if name in _TRAINER:  # the Trainer glue imports transformers: only for the recipes that use it
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
