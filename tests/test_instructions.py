"""Reproducible verifiable-instruction data of the embedded dpo task."""

import json

from replaykit.tasks import dpo
from replaykit.tasks.dpo import ifeval, instructions


def test_pairs_are_reproducible_and_verified():
    rows, dropped = instructions.build_pairs(seed=5, n=40)
    again, _ = instructions.build_pairs(seed=5, n=40)
    other, _ = instructions.build_pairs(seed=6, n=40)
    assert rows == again and rows != other
    assert dropped <= 2
    for row in rows:
        item = {
            "id": row["id"],
            "prompt": row["prompt"][0]["content"],
            "instruction_id_list": row["instruction_id_list"],
            "kwargs": row["kwargs"],
        }
        assert ifeval.check(item, row["chosen"][0]["content"])["prompt_level_strict_acc"] is True
        assert ifeval.check(item, row["rejected"][0]["content"])["prompt_level_strict_acc"] is False
        assert row["prompt"][0]["role"] == "user" and row["chosen"][0]["role"] == "assistant"


def test_transforms_by_hand():
    answer = "Cats sleep a lot, and they purr. They like warm places."
    lower = instructions.INSTRUCTIONS["change_case:english_lowercase"][1](answer, {}, "q")
    assert lower == "cats sleep a lot, and they purr. they like warm places."
    no_comma = instructions.INSTRUCTIONS["punctuation:no_comma"][1](answer, {}, "q")
    assert no_comma == "Cats sleep a lot and they purr. They like warm places."
    bullets = instructions.INSTRUCTIONS["detectable_format:number_bullet_lists"][1](answer, {"num_bullets": 2}, "q")
    assert bullets == "* Cats sleep a lot, and they purr.\n* They like warm places."


def test_public_and_hidden_topics_are_disjoint():
    public, hidden = instructions.split_eval_topics(11)
    assert not set(public) & set(hidden)
    assert sorted(public + hidden) == sorted(instructions.EVAL_TOPICS)
    assert not {t for t, _, _ in instructions.TRAIN_TOPICS} & set(instructions.EVAL_TOPICS)


def test_build_assets_writes_disjoint_splits(tmp_path):
    cfg = {
        "source": "embedded",
        "train_seed": 1,
        "n_train_pairs": 6,
        "topic_split_seed": 11,
        "public_seed": 2,
        "n_proxy": 5,
        "hidden_seed": 3,
        "n_final": 7,
    }
    info = dpo.build_assets(cfg, tmp_path / "model", tmp_path / "public", tmp_path / "hidden")

    def read(path):
        return [json.loads(line) for line in path.read_text().splitlines()]

    proxy, final = read(tmp_path / "public/proxy_prompts.jsonl"), read(tmp_path / "hidden/final_prompts.jsonl")
    assert (len(read(tmp_path / "public/train_prefs.jsonl")), len(proxy), len(final)) == (6, 5, 7)
    assert not {p["prompt"] for p in proxy} & {p["prompt"] for p in final}
    assert sorted(p.name for p in (tmp_path / "public").iterdir()) == ["proxy_prompts.jsonl", "train_prefs.jsonl"]
    assert info["proxy_final_prompt_overlap"] == 0
