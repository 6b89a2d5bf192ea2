"""The final-split salt: a secret only the operator and the scoring side know.

Where a final split is drawn by seeded code that a replay can read (the embedded dpo, rm and
ddpo items, soup's held-out digits), its seed is combined with ``final_salt`` from the
config, so the draw cannot be recomputed from the repository. The config files are hidden
from the replay sandbox, and the salt itself is never written to a file: the asset manifest
records only whether one was set, and the workflow hands the salt to the two jobs that draw
with it (the fixed start's builder, the assets) in their environment (:data:`ENV`), never on
a command line or as a rule's parameter, which Snakemake writes to ``.snakemake/metadata``,
its log and its "Params have changed" lines. A rule's parameter is the salt's
:func:`fingerprint` instead, so a changed salt still rebuilds what it drew. The sandbox's
environment allow-list never passes :data:`ENV` (its name also matches the deny-list's
``*SECRET*``). An empty salt (the embedded default) keeps the public, reproducible draw, and
the reports say so.
"""

from __future__ import annotations

import hashlib
import os

from .errors import InputError

# The job environment variable that carries the salt from the workflow to its jobs.
ENV = "REPLAYKIT_SECRET_FINAL_SALT"

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


def fingerprint(salt: str) -> str:
    """What a rule's parameter holds in place of ``salt``: ``""`` for the empty (public) salt,
    else ``pbkdf2-sha256:<hex>``, PBKDF2-HMAC-SHA256 (RFC 8018) of the salt over 200,000
    iterations with a fixed label as its PBKDF2 salt: a changed salt changes it, and a guess
    of a short salt costs 200,000 hashes to check against it (about 0.1 s here)."""
    if not salt:
        return ""
    key = hashlib.pbkdf2_hmac("sha256", salt.encode(), b"replaykit final_salt", 200_000)
    return f"pbkdf2-sha256:{key.hex()}"


def from_environment(expected: str, where: str = "--final-salt-fingerprint") -> str:
    """The salt the workflow handed to this job in :data:`ENV`, checked against ``expected``
    (its :func:`fingerprint`, the job's parameter); ``""`` when ``expected`` is empty.

    Raises:
        InputError: :data:`ENV` is missing or holds a salt of another fingerprint (a job
            started outside the workflow, or an executor that does not pass the workflow's
            environment to its jobs).
    """
    if not expected:
        return ""
    salt = os.environ.get(ENV, "")
    if fingerprint(salt) != expected:
        state = "is not set" if not salt else "holds another salt"
        raise InputError(
            "environment",
            ENV,
            f"{state}, but {where} names an operator's final_salt: the workflow hands the salt "
            "to its jobs in this variable; run the step through snakemake",
        )
    return salt
