"""Per-prompt reward normalisation (DDPO's advantage estimate).

kvablack/ddpo-pytorch's ``PerPromptStatTracker``: each prompt keeps a history buffer of its
last ``buffer_size`` rewards; a reward's advantage is ``(r - mean) / (std + 1e-6)`` over the
prompt's buffer (the current rewards included) once it holds at least ``min_count`` rewards,
and over the whole current batch before that (the batch-statistics fallback). ``std`` is the
population standard deviation (numpy's default, ddof 0). SPEC: buffer 32, min count 16.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class PerPromptStatTracker:
    def __init__(self, buffer_size: int, min_count: int):
        self.buffer_size = buffer_size
        self.min_count = min_count
        self.stats: dict[str, deque] = {}

    def update(self, prompts: list[str], rewards) -> np.ndarray:
        """Advantages (float array, the shape of ``rewards``) of a batch; the buffers are updated first."""
        prompts = np.array(prompts)
        rewards = np.asarray(rewards, dtype=float)
        advantages = np.empty_like(rewards)
        for prompt in np.unique(prompts):
            mine = rewards[prompts == prompt]
            buffer = self.stats.setdefault(str(prompt), deque(maxlen=self.buffer_size))
            buffer.extend(mine.tolist())
            pool = np.array(buffer) if len(buffer) >= self.min_count else rewards
            advantages[prompts == prompt] = (mine - pool.mean()) / (pool.std() + 1e-6)
        return advantages

    def state_dict(self) -> dict:
        return {"buffer_size": self.buffer_size, "min_count": self.min_count,
                "stats": {k: list(v) for k, v in self.stats.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.buffer_size, self.min_count = state["buffer_size"], state["min_count"]
        self.stats = {k: deque(v, maxlen=self.buffer_size) for k, v in state["stats"].items()}
