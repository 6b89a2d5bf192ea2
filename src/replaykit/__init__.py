"""replaykit: replay machine-learning research tasks reproducibly.

The package has two halves that never import each other's task code:

* :mod:`replaykit.harness` - task-agnostic machinery: budget, atomic publication and
  retention of checkpoints, receipts, lineage hashes, statistics, selection of the
  official result, and the replay driver that runs a shipped recipe under its budget.
* :mod:`replaykit.tasks` - one plug-in per task: its assets builder, its frozen loader
  (validation) and its frozen evaluator (proxy and final scores).

The shipped recipes (the editable workspaces) live outside the package, in
``recipes/<task>/``.
"""

__version__ = "0.1.0"
