"""The exploration phase: a budgeted, sandboxed workspace where a candidate is developed
against the proxy and submitted as a candidate patch (SPEC, vocabulary: exploration, proxy).

Layout of one exploration, ``explore/<task>/<name>/``::

    exploration.json   paths, budget (s), start time (unix s), isolation, lock, recipe hash
    frozen-code.json   SHA-256 of the frozen package at the start (scoring verifies it)
    workspace/         fresh copy of recipes/<task>/: the editable workspace
    runs/probe-<k>/    one probe: request.json, publish/, state/ (writable in it)
    runs/probe-<k>.log its output (written by the host; read-only inside)
    proxy/<k>/         one proxy score: marker.json, summary.json, rows.jsonl, .complete
    receipts.jsonl     one JSON line per probe and per proxy score (appended, never rewritten)
    submission.json    written by submit (then also patches/<task>-<name>.exploration.json)

Rules:

* The budget is wall-clock seconds from the start (full scale 14,400 s; default a third of
  the task's outer limit, the full-scale ratio 14,400 / 43,200). A probe or proxy score is
  refused once it has ended and killed when it ends; submit always works.
* Probes run in the replay's sandbox, with the plan :func:`replaykit.isolation.plan` makes for
  every run: the workspace and the probe's run directory writable, earlier runs, the fixed
  start (unless it is raw data) and the public split read-only; nothing else of the working
  directory (``results/``, the config, the final split, the exploration's own records, the
  lock file), no final-split package data, no network. The proxy scoring runs in the same
  sandbox too (frozen code only; it may read the fixed start).
* Probes and proxy scores hold one GPU lock (:class:`replaykit.harness.lock.FileLock`, an
  ``fcntl.flock`` on a file outside the sandbox's view): a second one waits for it (or, with
  ``wait=False``, is refused); its receipt says how long it waited and for whom, and whether the
  lock file was deleted or replaced while held (``lock_replaced``). Each also holds a GPU slot
  (:mod:`replaykit.harness.slots`: one device, shared with the workflow's GPU jobs on the same
  host), recorded as ``gpu_slot``.
* Submit writes the workspace's difference from the shipped recipe as a patch, checked like
  every candidate patch (applied to a fresh copy, the result must equal the workspace), and
  refuses files that are not code or config (checkpoints, caches, data), naming them.
"""

from __future__ import annotations

from .probe import probe_plan, run_probe
from .proxy import score_proxy
from .record import BUDGET_FRACTION, Exploration, find_exploration, load_config, start
from .submit import make_diff, not_code, submit

__all__ = [
    "BUDGET_FRACTION",
    "Exploration",
    "find_exploration",
    "load_config",
    "make_diff",
    "not_code",
    "probe_plan",
    "run_probe",
    "score_proxy",
    "start",
    "submit",
]
