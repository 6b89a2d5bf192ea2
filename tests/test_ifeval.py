"""lm_eval's IFEval checkers, offline, on hand-written responses whose verdict is known."""

import inspect
import json
import random

import pytest
import yaml
from lm_eval.tasks.ifeval import instructions as lm_instructions

from conftest import ROOT
from replaykit.harness.errors import InputError
from replaykit.harness.fileio import read_jsonl
from replaykit.tasks.dpo import ifeval
from replaykit.tasks.dpo.evaluator import read_items, score_responses, summarise


def verdict(instruction_id, kwargs, response):
    item = {"id": "t", "prompt": "p", "instruction_id_list": [instruction_id], "kwargs": [kwargs]}
    return ifeval.check(item, response)["prompt_level_strict_acc"]


@pytest.mark.parametrize(
    "instruction_id, kwargs, response, expected",
    [
        ("change_case:english_lowercase", {}, "the weather today is mild and the sky is clear over the hills.", True),
        ("change_case:english_lowercase", {}, "The weather today is mild and the sky is clear over the hills.", False),
        ("change_case:english_capital", {}, "THE WEATHER TODAY IS MILD AND THE SKY IS CLEAR OVER THE HILLS.", True),
        ("punctuation:no_comma", {}, "Rain falls from clouds and wets the ground.", True),
        ("punctuation:no_comma", {}, "Rain falls from clouds, and wets the ground.", False),
        ("detectable_format:json_format", {}, '{"answer": "yes"}', True),
        ("detectable_format:json_format", {}, '```json\n{"answer": "yes"}\n```', True),  # fences are stripped
        ("detectable_format:json_format", {}, "answer: yes", False),
        ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Done. Any other questions?", True),
        ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Any other questions? Done.", False),
        ("startend:quotation", {}, '"Wrapped in quotes."', True),
        ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\n\nP.S. Bye.", True),
        ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello. Bye.", False),
        ("detectable_format:title", {}, "<<A title>>\nText.", True),
        ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two", True),
        ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two\n* three", False),
        ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and *two*", True),
        # Punkt: "Dr." is an abbreviation, so this is one sentence, not two.
        (
            "length_constraints:number_sentences",
            {"relation": "less than", "num_sentences": 2},
            "It was written by Dr. Smith in the morning.",
            True,
        ),
        (
            "length_constraints:number_sentences",
            {"relation": "less than", "num_sentences": 2},
            "It rained. Then it stopped.",
            False,
        ),
    ],
)
def test_known_verdicts(instruction_id, kwargs, response, expected):
    assert verdict(instruction_id, kwargs, response) is expected


def test_loose_accuracy_forgives_a_preamble_line():
    item = {"id": "t", "prompt": "p", "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]}
    out = ifeval.check(item, "Sure! Here it is:\nthe sky is blue and the grass is green in the spring.")
    assert out["prompt_level_strict_acc"] is False and out["prompt_level_loose_acc"] is True


def test_verdicts_are_reproducible():
    # langdetect is random unless seeded; the english checks must not flip between calls
    text = "hello world ok"
    first = verdict("change_case:english_lowercase", {}, text)
    assert all(verdict("change_case:english_lowercase", {}, text) == first for _ in range(5))


# --- kwargs outside a checker's domain (issue 31) ------------------------------------------------
# One row inside the domain for each of the 25 registered instructions (google-research IFEval's
# own spellings where it has them).
IN_DOMAIN = {
    "change_case:capital_word_frequency": {"capital_frequency": 3, "capital_relation": "less than"},
    "change_case:english_capital": {},
    "change_case:english_lowercase": {},
    "combination:repeat_prompt": {"prompt_to_repeat": "Write a poem."},
    "combination:two_responses": {},
    "detectable_content:number_placeholders": {"num_placeholders": 2},
    "detectable_content:postscript": {"postscript_marker": "P.P.S"},
    "detectable_format:constrained_response": {},
    "detectable_format:json_format": {},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 2},
    "detectable_format:number_bullet_lists": {"num_bullets": 3},
    "detectable_format:number_highlighted_sections": {"num_highlights": 1},
    "detectable_format:title": {},
    "keywords:existence": {"keywords": ["poem", "sea"]},
    "keywords:forbidden_words": {"forbidden_words": ["rock"]},
    "keywords:frequency": {"keyword": "sea", "frequency": 2, "relation": "at least"},
    "keywords:letter_frequency": {"letter": "T", "let_frequency": 2, "let_relation": "less than"},
    "language:response_language": {"language": "kn"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 3, "nth_paragraph": 3, "first_word": "Sea"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 2},
    "length_constraints:number_sentences": {"num_sentences": 5, "relation": "less than"},
    "length_constraints:number_words": {"num_words": 300, "relation": "at least"},
    "punctuation:no_comma": {},
    "startend:end_checker": {"end_phrase": "Any other questions?"},
    "startend:quotation": {},
}
LANGS = ", ".join(ifeval.languages())
DRAWN = "(lm_eval would draw one at random)"
# (instruction, kwargs, the message after "<file>: line 1.kwargs.0: id 'r': "); the last field says
# what lm_eval's own checker does with the row: "drawn" (a random criterion), "raises", or "kept"
# (a fixed but meaningless criterion).
OUT_OF_DOMAIN = [
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": -1},
        "detectable_content:number_placeholders: argument 'num_placeholders' is -1; must be a whole number ≥ 1 "
        + DRAWN,
        "drawn",
    ),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": -3},
        f"detectable_format:number_bullet_lists: argument 'num_bullets' is -3; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": -1},
        "detectable_format:number_highlighted_sections: argument 'num_highlights' is -1; must be a whole number ≥ 1 "
        + DRAWN,
        "drawn",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": -2},
        f"length_constraints:number_paragraphs: argument 'num_paragraphs' is -2; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "length_constraints:number_words",
        {"num_words": -5, "relation": "less than"},
        f"length_constraints:number_words: argument 'num_words' is -5; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "keywords:frequency",
        {"keyword": "sea", "frequency": -1, "relation": "at least"},
        f"keywords:frequency: argument 'frequency' is -1; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": -4},
        f"detectable_format:multiple_sections: argument 'num_sections' is -4; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": -1, "relation": "at least"},
        f"length_constraints:number_sentences: argument 'num_sentences' is -1; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": "3", "relation": "at least"},
        "length_constraints:number_sentences: argument 'num_sentences' is '3'; must be a whole number ≥ 1",
        "raises",
    ),
    (
        "length_constraints:number_words",
        {"num_words": True, "relation": "at least"},
        "length_constraints:number_words: argument 'num_words' is True; must be a whole number ≥ 1",
        "kept",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 50, "relation": "more than"},
        "length_constraints:number_words: argument 'relation' is 'more than'; must be 'less than' or 'at least' "
        "(lm_eval would raise)",
        "raises",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "at most"},
        "change_case:capital_word_frequency: argument 'capital_relation' is 'at most'; must be 'less than' or "
        "'at least' (lm_eval would raise)",
        "raises",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": -3, "capital_relation": "at least"},
        "change_case:capital_word_frequency: argument 'capital_frequency' is -3; must be a whole number ≥ 1 "
        "(a negative bound is met by every response or by none)",
        "kept",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "t", "let_frequency": -2, "let_relation": "less than"},
        f"keywords:letter_frequency: argument 'let_frequency' is -2; must be a whole number ≥ 1 {DRAWN}",
        "drawn",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "t", "let_frequency": 2, "let_relation": "fewer than"},
        "keywords:letter_frequency: argument 'let_relation' is 'fewer than'; must be 'less than' or 'at least' "
        "(lm_eval would raise)",
        "raises",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "th", "let_frequency": 2, "let_relation": "at least"},
        "keywords:letter_frequency: argument 'letter' is 'th'; must be one letter a–z or A–Z (or one other visible "
        f"character, counted as it is) {DRAWN}",
        "drawn",
    ),
    (
        "keywords:letter_frequency",
        {"letter": " ", "let_frequency": 2, "let_relation": "at least"},
        "keywords:letter_frequency: argument 'letter' is ' '; must be one letter a–z or A–Z (or one other visible "
        f"character, counted as it is) {DRAWN}",
        "drawn",
    ),
    (
        "keywords:letter_frequency",
        {"letter": 5, "let_frequency": 2, "let_relation": "at least"},
        "keywords:letter_frequency: argument 'letter' is 5; must be one letter a–z or A–Z (or one other visible "
        "character, counted as it is) (lm_eval would raise)",
        "raises",
    ),
    (
        "language:response_language",
        {"language": "zh"},
        f"language:response_language: argument 'language' is 'zh'; must be a language code that lm_eval names and "
        f"langdetect returns ({LANGS}) (lm_eval would raise)",
        "raises",
    ),
    (
        "language:response_language",
        {"language": "English"},
        f"language:response_language: argument 'language' is 'English'; must be a language code that lm_eval names "
        f"and langdetect returns ({LANGS}) (lm_eval would raise)",
        "raises",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "sea"},
        "length_constraints:nth_paragraph_first_word: argument 'nth_paragraph' is 3; must be a whole number from 1 "
        f"to num_paragraphs (2) {DRAWN}",
        "drawn",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": -1, "first_word": "sea"},
        f"length_constraints:nth_paragraph_first_word: argument 'nth_paragraph' is -1; must be a whole number ≥ 1 "
        f"{DRAWN}",
        "drawn",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "the sea"},
        "length_constraints:nth_paragraph_first_word: argument 'first_word' is 'the sea'; must be one word (no white "
        "space) (no paragraph's first word could match it)",
        "kept",
    ),
    (
        "keywords:existence",
        {"keywords": "rock"},
        "keywords:existence: argument 'keywords' is 'rock'; must be a list of words (lm_eval would take a string "
        "apart into single characters)",
        "kept",
    ),
    (
        "keywords:existence",
        {"keywords": ["sea", ""]},
        "keywords:existence: argument 'keywords' is ['sea', '']; must be a list of words, each a string that is not "
        "only white space (stripped to '', every response would pass)",
        "kept",
    ),
    (
        "keywords:forbidden_words",
        {"forbidden_words": ["(rock"]},
        "keywords:forbidden_words: argument 'forbidden_words' is ['(rock']; must be a list of words, each a string "
        "that compiles as a regular expression (lm_eval searches for it as one and would raise (missing ), "
        "unterminated subpattern at position 2))",
        "kept",
    ),
    (
        "keywords:frequency",
        {"keyword": "  ", "frequency": 2, "relation": "at least"},
        "keywords:frequency: argument 'keyword' is '  '; must be a string that is not only white space (stripped to "
        "'', every response would pass)",
        "kept",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": 7, "num_sections": 2},
        "detectable_format:multiple_sections: argument 'section_spliter' is 7; must be a string (lm_eval would raise)",
        "kept",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "\t"},
        "detectable_content:postscript: argument 'postscript_marker' is '\\t'; must be a string that is not only "
        "white space (stripped to '', every response would pass)",
        "kept",
    ),
    (
        "startend:end_checker",
        {"end_phrase": " "},
        "startend:end_checker: argument 'end_phrase' is ' '; must be a string that is not only white space "
        "(stripped to '', every response would pass)",
        "kept",
    ),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": ["Write a poem."]},
        "combination:repeat_prompt: argument 'prompt_to_repeat' is ['Write a poem.']; must be a string (lm_eval "
        "would raise)",
        "kept",
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 0},
        "detectable_content:number_placeholders: argument 'num_placeholders' missing or empty (needs: "
        "num_placeholders); IFEval would draw it at random",
        "drawn",
    ),
]


def _write_row(tmp_path, iid, kwargs, key="r"):
    path = tmp_path / "items.jsonl"
    row = {"key": key, "prompt": "Write about the sea.", "instruction_id_list": [iid], "kwargs": [kwargs]}
    path.write_text(json.dumps(row) + "\n")
    return path


def _lm_eval_args(iid, kwargs, seed):
    """What lm_eval's own (unpatched) checker makes of ``kwargs`` with the global RNG at
    ``seed``: its arguments, or the exception's type. lm_eval drops falsy values first."""
    unpatched = lm_instructions.LetterFrequencyChecker if iid == ifeval.LETTER_FREQUENCY else ifeval.registry()[iid]
    checker = unpatched(iid)
    random.seed(seed)
    try:
        checker.build_description(**{k: v for k, v in kwargs.items() if v})
    except Exception as exc:  # noqa: BLE001  (any failure is what we record)
        return type(exc).__name__
    return json.dumps(checker.get_instruction_args(), sort_keys=True, default=list)


def test_every_argument_of_every_checker_has_a_domain():
    for iid, cls in ifeval.registry().items():
        params = inspect.signature(cls(iid).build_description).parameters
        assert set(params) <= set(ifeval.ARGUMENT_DOMAINS), iid
    assert set(IN_DOMAIN) == set(ifeval.registry())


@pytest.mark.parametrize("iid", sorted(IN_DOMAIN))
def test_in_domain_rows_are_accepted_and_fix_the_criterion(tmp_path, iid):
    kwargs = IN_DOMAIN[iid]
    (item,) = read_items(_write_row(tmp_path, iid, kwargs))
    assert item["kwargs"] == [kwargs]
    # lm_eval's own checker takes every argument as given: nothing is drawn (20 seeds agree).
    assert len({_lm_eval_args(iid, kwargs, seed) for seed in range(20)}) == 1


@pytest.mark.parametrize("iid, kwargs, message, lm_eval", OUT_OF_DOMAIN, ids=[m[:70] for _, _, m, _ in OUT_OF_DOMAIN])
def test_out_of_domain_rows_are_refused_in_one_line(tmp_path, iid, kwargs, message, lm_eval):
    path = _write_row(tmp_path, iid, kwargs)
    with pytest.raises(InputError) as caught:
        read_items(path)
    assert str(caught.value) == f"{path}: line 1.kwargs.0: id 'r': {message}"
    assert "\n" not in str(caught.value)
    # the scorer refuses the row too, whoever hands it over
    with pytest.raises(ValueError, match="argument"):
        ifeval.check({"id": "r", "prompt": "p", "instruction_id_list": [iid], "kwargs": [kwargs]}, "Some text.")
    # what the table says lm_eval does with the row is what lm_eval does (seeds 0-19)
    outcomes = {_lm_eval_args(iid, kwargs, seed) for seed in range(20)}
    if lm_eval == "drawn":
        assert len(outcomes) > 1, outcomes
    elif lm_eval == "raises":
        assert all(o.isidentifier() for o in outcomes), outcomes  # an exception's name, every time
    else:
        assert len(outcomes) == 1 and not next(iter(outcomes)).isidentifier(), outcomes


# google-research IFEval input_data.jsonl rows 1122 and 1129 (the upstream benchmark's only rows
# outside a checker's domain): a letter that is not a-z, which lm_eval replaces by a random letter.
UPSTREAM_LITERAL = [
    {
        "key": 1122,
        "prompt": "make a tweet for playboy's twitter account without using capital letters. Include at least 4 "
        "hashtags, starting with '#'",
        "instruction_id_list": ["change_case:english_lowercase", "keywords:letter_frequency"],
        "kwargs": [{}, {"let_relation": "at least", "letter": "#", "let_frequency": 4}],
    },
    {
        "key": 1129,
        "prompt": 'Write a short startup pitch for a new kind of ice cream called "Sunnis ice cream". Contain 6 or '
        'more exclamation marks "!" in your response.',
        "instruction_id_list": ["keywords:letter_frequency"],
        "kwargs": [{"let_relation": "at least", "letter": "!", "let_frequency": 6}],
    },
]


def test_upstream_non_letter_is_counted_literally_with_an_advisory(tmp_path):
    path = tmp_path / "upstream.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in UPSTREAM_LITERAL))
    items = read_items(path)
    hashtags = "new flavours today #icecream #summer #sweet #cold"  # 4 '#', by hand
    three = "new flavours today #icecream #summer #sweet"
    cheers = "Try it! Now! Sweet! Cold! Creamy! Yes!"  # 6 '!'
    assert ifeval.check(items[0], hashtags)["inst_level_strict_acc"] == [True, True]
    assert ifeval.check(items[0], three)["inst_level_strict_acc"] == [True, False]
    assert ifeval.check(items[1], cheers)["prompt_level_strict_acc"] is True
    assert ifeval.check(items[1], cheers[:-1])["prompt_level_strict_acc"] is False
    # lm_eval alone picks a random letter for the same row: its criterion changes with the seed
    assert len({_lm_eval_args("keywords:letter_frequency", items[1]["kwargs"][0], s) for s in range(20)}) > 1
    responses = [{"text": t, "new_tokens": 5, "truncated": False} for t in (hashtags, cheers)]
    summary = summarise(score_responses(items, responses), "m")
    assert summary["value"] == 1.0
    assert summary["advisories"] == [
        "1 row scored with a fixed interpretation (ids 1122): keywords:letter_frequency: letter '#' is not a letter "
        "a-z; counted as that character (lm_eval would draw a random letter)",
        "1 row scored with a fixed interpretation (ids 1129): keywords:letter_frequency: letter '!' is not a letter "
        "a-z; counted as that character (lm_eval would draw a random letter)",
    ]


def _embedded_item_files(tmp_path) -> dict[str, list[dict]]:
    """Every item file the assets rule builds from IFEval instructions, on the embedded default
    (config/config.yaml), read back the way their readers read them."""
    from replaykit.tasks import dpo, rm

    tasks = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["tasks"]
    out = {}
    for name, module in (("dpo", dpo), ("rm", rm)):
        public, hidden = tmp_path / name / "public", tmp_path / name / "hidden"
        module.build_assets(tasks[name]["data"], None, public, hidden)
        for path in sorted([*public.glob("*.jsonl"), *hidden.glob("*.jsonl")]):
            rows = read_items(path) if path.name.endswith("_prompts.jsonl") else read_jsonl(path)
            out[f"{name}/{path.parent.name}/{path.name}"] = [r for r in rows if r.get("instruction_id_list")]
    return out


def test_every_row_the_project_builds_or_reads_scores_the_same_twice(tmp_path):
    files = _embedded_item_files(tmp_path)
    upstream = tmp_path / "upstream.jsonl"
    upstream.write_text("".join(json.dumps(r) + "\n" for r in UPSTREAM_LITERAL))
    files["upstream rows 1122, 1129"] = read_items(upstream)
    assert {k for k, rows in files.items() if rows} >= {
        "dpo/public/train_prefs.jsonl",
        "dpo/public/proxy_prompts.jsonl",
        "dpo/hidden/final_prompts.jsonl",
        "rm/hidden/final_rows.jsonl",
    }
    scored = 0
    for name, rows in files.items():
        for row in rows:
            item = {**row, "id": row.get("id", row.get("key")), "prompt": ""}
            for field in ("chosen", "rejected"):
                if field in row:
                    content = row[field]
                    responses = [content[-1]["content"] if isinstance(content, list) else content]
                    break
            else:
                responses = []
            # half the letters a-z at least 6 times: a letter drawn at random would pass half the time
            responses += ["The sea is wide. #waves! #salt!", "the sea is wide and calm today.", "abcdefghijklm " * 6]
            for text in responses:
                first, second = ifeval.check(item, text), ifeval.check(item, text)
                assert first == second, (name, row.get("id"), text)
                scored += 1
    assert scored > 1000


def test_the_docs_list_every_instruction_and_argument():
    """docs/tasks/dpo.md's table of domains names every registered instruction that takes
    arguments, with each of its arguments, and counts the others."""
    docs = (ROOT / "docs" / "tasks" / "dpo.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in docs.splitlines() if line.startswith("| `")}
    without = 0
    for iid, cls in ifeval.registry().items():
        params = inspect.signature(cls(iid).build_description).parameters
        if not params:
            without += 1
            continue
        assert iid in rows, iid
        assert all(f"`{name}`:" in rows[iid] for name in params), iid
    assert f"| the other {without} | no arguments" in docs
