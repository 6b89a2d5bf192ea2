"""Helpers that several task plug-ins share; not a task itself (:data:`replaykit.tasks.SHARED`).

A plug-in imports what it shares with another task from here, never from the other task:

* :mod:`.ifeval` -- IFEval instruction checking, offline (dpo's scorer, rm's data verdicts);
* :mod:`.ifeval_text` -- the verifiable-instruction table and the text helpers that build
  compliant answers from a base answer (dpo's and rm's embedded data);
* :mod:`.preference_pairs` -- preference pairs of a local JSON-lines file in TRL's
  explicit-prompt format (dpo's and rm's training data);
* :mod:`.clip` -- open_clip model building, state-dict loading and the digit CLIP's
  contrastive pre-training (soup's ingredients, ddpo's diagnostics embedder).

These modules are part of the frozen package (:mod:`replaykit.harness.frozen` hashes every
file of ``replaykit``), like the plug-ins that import them.
"""
