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
