"""The wall-clock budget of a formal replay.

A budget has three numbers, all in seconds:

* ``outer_limit_s`` - the hard limit of the job (the cluster's wall time); the driver kills
  the recipe's process group when it is reached.
* ``internal_deadline_s`` - training stops by itself at this time after the start.
* ``export_reserve_s`` - time kept after the internal deadline to save and publish the
  last checkpoint; ``internal_deadline_s + export_reserve_s <= outer_limit_s``.

Full scale (SPEC): outer 43,200 s, internal 42,600 s, reserve 300-1,200 s.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Budget:
    outer_limit_s: float
    internal_deadline_s: float
    export_reserve_s: float

    def __post_init__(self) -> None:
        for name in ("outer_limit_s", "internal_deadline_s", "export_reserve_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"budget.{name} must be > 0, got {getattr(self, name)!r}")
        if self.internal_deadline_s + self.export_reserve_s > self.outer_limit_s:
            raise ValueError(
                "budget: internal_deadline_s + export_reserve_s "
                f"({self.internal_deadline_s} + {self.export_reserve_s}) exceeds outer_limit_s ({self.outer_limit_s})"
            )

    @classmethod
    def from_config(cls, cfg: dict) -> Budget:
        return cls(float(cfg["outer_limit_s"]), float(cfg["internal_deadline_s"]), float(cfg["export_reserve_s"]))

    def runtime_minutes(self, setup_s: float = 0.0) -> int:
        """Snakemake ``runtime`` (integer minutes): the outer limit plus job set-up, rounded up."""
        return max(1, math.ceil((self.outer_limit_s + setup_s) / 60.0))

    def as_dict(self) -> dict:
        return asdict(self)


class Clock:
    """Wall-clock time since a start, in seconds (``time.monotonic``)."""

    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start

    def elapsed(self) -> float:
        return time.monotonic() - self.start
