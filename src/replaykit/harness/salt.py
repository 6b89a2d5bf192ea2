"""The final-split salt: a secret only the operator and the scoring side know.

Where a final split is drawn by seeded code that a replay can read (the embedded dpo, rm and
ddpo items, soup's held-out digits), its seed is combined with ``final_salt`` from the
config, so the draw cannot be recomputed from the repository. The config files are hidden
from the replay sandbox and the salt itself is never written to a file a replay reads (the
asset manifest records only whether one was set). An empty salt (the embedded default)
keeps the public, reproducible draw, and the reports say so.
"""

from __future__ import annotations

import hashlib

PUBLIC_NOTE = (
    "final split drawn with the public salt (the embedded default): anyone with the "
    "repository can recompute it; set final_salt in a private config file for a "
    "defensible benchmark"
)
PRIVATE_NOTE = "final split drawn with an operator-supplied salt (not recorded)"


def salted_seed(seed: int, salt: str) -> int:
    """``seed`` itself for an empty salt; otherwise the first 63 bits of
    SHA-256(``"<seed>:<salt>"``), a seed no one can compute without the salt."""
    if not salt:
        return int(seed)
    return int.from_bytes(hashlib.sha256(f"{int(seed)}:{salt}".encode()).digest()[:8], "big") >> 1


def note(salt: str) -> str:
    return PRIVATE_NOTE if salt else PUBLIC_NOTE
