"""lm_eval's IFEval checkers, offline, on hand-written responses whose verdict is known."""

import pytest

from replaykit.tasks.dpo import ifeval


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
