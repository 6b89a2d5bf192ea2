"""Run reports people would rather look at: figures (matplotlib, PNG) and one HTML page per task.

* :mod:`.figures` draws the per-run figures (training curve with the published checkpoints
  marked, each checkpoint's final score against the references, the budget per phase) and
  the per-task ones (each seed's official score and their spread, the task's diagnostic);
* :mod:`.html` writes ``results/<task>/report.html``: the official result, every
  checkpoint with its validity, final score ± SE, paired difference against the shipped
  reference with its bootstrap CI, advisories and lineage links, and every figure.

Everything is read from the files the workflow already wrote (``final/summary.json``, each
run's ``official.json`` and ``replay/record.json``, the score directories), so a number in
the report is the number in those files. A task plug-in may add ``plot_diagnostics`` and
``TRAINING_CURVE`` (see :mod:`replaykit.tasks.contract`).
"""

from __future__ import annotations

import functools

import jinja2

from .formats import fmt_number, fmt_percent, fmt_seconds, md_cell


@functools.cache
def templates(trim: bool = True) -> jinja2.Environment:
    """The Jinja2 environment of ``report/templates/``: ``final.md.j2`` and ``ablation.md.j2``
    (``trim``: a block tag's line leaves no blank line) and, written for Jinja's default
    whitespace, ``report.html.j2``, ``checkpoints.html.j2`` and ``ablation.html.j2`` (``trim=False``).
    Undefined names raise in the trimmed environment; ``*.html.j2`` is autoescaped. Filters:
    ``fmt``, ``pct``, ``sec``, ``cell`` (:mod:`.formats`)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("replaykit.report", "templates"),
        undefined=jinja2.StrictUndefined if trim else jinja2.Undefined,
        trim_blocks=trim,
        lstrip_blocks=trim,
        keep_trailing_newline=False,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
    )
    env.filters.update(fmt=fmt_number, pct=fmt_percent, sec=fmt_seconds, cell=md_cell)
    return env
