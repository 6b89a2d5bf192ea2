"""The embedded rm data: reproducible, disjoint from training, and every verdict checkable."""

import re
from collections import Counter

import pytest

from replaykit.tasks.dpo import ifeval
from replaykit.tasks.rm import data, rewardbench


@pytest.fixture(scope="module")
def built():
    train = data.build_train_pairs(1234, 120)
    rows, dropped = data.build_eval_rows(7919, 12, train)
    return train, rows, dropped


def test_reproducible_and_sized(built):
    train, rows, _ = built
    again_train = data.build_train_pairs(1234, 120)
    assert again_train == train
    assert data.build_eval_rows(7919, 12, again_train)[0] == rows
    assert data.build_train_pairs(1235, 120) != train
    assert len(train) == 120 and len({r["id"] for r in rows}) == len(rows)
    counts = Counter(r["subset"] for r in rows)
    assert set(counts) == set(data.SUBSETS)
    assert all(n <= 12 for n in counts.values())
    assert {rewardbench.SECTION_OF[s] for s in counts} == set(rewardbench.SUBSET_MAPPING)


def test_no_overlap_with_training(built):
    train, rows, _ = built
    prompts = {data.pair_texts(p)[0] for p in train}
    responses = {t for p in train for t in data.pair_texts(p)[1:]}
    assert not any(r["prompt"] in prompts for r in rows)
    assert not any(r["chosen"] in responses or r["rejected"] in responses for r in rows)
    assert data.overlap(rows, train) == {"prompts": 0, "responses": 0, "eval_rows": len(rows), "train_pairs": 120}
    # the check itself sees a planted duplicate
    planted = rows[:1] + [{**rows[1], "chosen": data.pair_texts(train[0])[1]}]
    assert data.overlap(planted, train)["responses"] == 1


def test_math_rows_are_right_and_wrong(built):
    _, rows, _ = built
    math_rows = [r for r in rows if r["subset"] == "math-prm"]
    assert math_rows
    for r in math_rows:
        a, op, b = re.search(r"(\d+) ([-+*]) (\d+)", r["prompt"]).groups()
        truth = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert r["chosen"].endswith(f"The answer is {truth}.")
        assert not r["rejected"].endswith(f"The answer is {truth}.")


def _function(code: str):
    body = code.removeprefix("```python\n").removesuffix("\n```")
    namespace: dict = {}
    exec(body, namespace)  # the test's own generated snippets
    return next(v for k, v in namespace.items() if callable(v) and not k.startswith("__"))


def test_code_rows_chosen_correct_rejected_buggy(built):
    _, rows, _ = built
    cases = {
        "sum of a list": ([3, 4, 5],),
        "largest element": ([3, 9, 5],),
        "are even": ([1, 2, 4, 6, 7],),
        "reverses a string": ("abc",),
        "average": ([2, 4, 9],),
        "factorial": (5,),
        "vowels": ("Education",),
        "palindrome": ("level",),
    }
    truth = {
        "sum of a list": 12,
        "largest element": 9,
        "are even": 3,
        "reverses a string": "cba",
        "average": 5.0,
        "factorial": 120,
        "vowels": 5,
        "palindrome": True,
    }
    code_rows = [r for r in rows if r["subset"] == "hep-python"]
    assert code_rows
    for r in code_rows:
        key = next(k for k in cases if k in r["prompt"])
        assert _function(r["chosen"])(*cases[key]) == truth[key]
        assert _function(r["rejected"])(*cases[key]) != truth[key]


def test_instruction_rows_verified_by_ifeval(built):
    _, rows, _ = built
    instruction_rows = [r for r in rows if r["subset"] in ("mt-bench-easy", "llmbar-natural", "llmbar-adver-neighbor")]
    assert {r["subset"] for r in instruction_rows} == {"mt-bench-easy", "llmbar-natural", "llmbar-adver-neighbor"}
    for r in instruction_rows:
        item = {
            "id": r["id"],
            "prompt": r["prompt"],
            "instruction_id_list": r["instruction_id_list"],
            "kwargs": r["kwargs"],
        }
        assert ifeval.check(item, r["chosen"])["prompt_level_strict_acc"]
        assert not ifeval.check(item, r["rejected"])["prompt_level_strict_acc"]


def test_safety_rows(built):
    _, rows, _ = built
    for r in rows:
        if r["subset"] in ("refusals-dangerous", "donotanswer"):
            assert re.match(r"I('m sorry| can't)", r["chosen"]) and not re.match(r"I('m sorry| can't)", r["rejected"])
        if r["subset"] == "xstest-should-respond":
            assert re.match(r"I('m sorry| won't)", r["rejected"]) and not r["chosen"].startswith("I")


def test_stratified_subset_covers_every_subset(built):
    _, rows, _ = built
    proxy = data.stratified_subset(rows, 30, 2024)
    assert set(r["subset"] for r in proxy) == set(r["subset"] for r in rows)
    assert all(r in rows for r in proxy)
    assert proxy == data.stratified_subset(rows, 30, 2024)
    assert len(proxy) == 30
    # by hand: sizes a=10, b=4, c=1 (15 rows), n=6 -> one each, then 3 more over the spare
    # rows (9, 3, 0): quotas 2.25, 0.75, 0 -> floors 2, 0 and the largest remainder (0.75) to b
    toy = [{"subset": s} for s, k in (("a", 10), ("b", 4), ("c", 1)) for _ in range(k)]
    assert Counter(r["subset"] for r in data.stratified_subset(toy, 6, 0)) == {"a": 3, "b": 2, "c": 1}
    # RewardBench v1's real subset sizes: exactly 512 proxy rows, as SPEC names the metric
    sizes = {**rewardbench.EXAMPLE_COUNTS, "math-prm": 447, "xstest-should-refuse": 154, "xstest-should-respond": 250}
    full = [{"subset": s} for s, k in sizes.items() for _ in range(k)]
    assert len(full) == 2985 and len(data.stratified_subset(full, 512, 2024)) == 512
    with pytest.raises(ValueError, match="n_proxy"):
        data.stratified_subset(toy, 2, 0)
