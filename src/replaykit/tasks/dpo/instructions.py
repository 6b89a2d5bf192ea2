"""Reproducible verifiable-instruction data for the embedded ``dpo`` task.

Every prompt is a base request plus one instruction worded by lm_eval's IFEval registry
(:func:`replaykit.tasks.common.ifeval.describe`; the instruction table and the base
answers are in :mod:`replaykit.tasks.common.ifeval_text`). Training pairs are built from a base answer:
*chosen* is the answer transformed to follow the instruction, *rejected* is the answer left
as it is. Each pair is checked with the same IFEval checker that scores the model: chosen
must pass and rejected must fail, otherwise the pair is dropped (and counted).

Training topics and evaluation topics are disjoint; proxy (public) and final (hidden)
prompts use disjoint halves of the evaluation topics and independent seeds.
"""

from __future__ import annotations

import random

from ..common import ifeval
from ..common.ifeval_text import INSTRUCTIONS, TRAIN_TOPICS, instruction

# Evaluation topics (disjoint from training); requests only, no answers needed.
EVAL_TOPICS = [
    "owls",
    "deserts",
    "umbrellas",
    "clocks",
    "glaciers",
    "lighthouses",
    "rainbows",
    "windmills",
    "dolphins",
    "candles",
    "mountains",
    "pianos",
    "comets",
    "rivers",
    "ants",
    "castles",
    "telescopes",
    "cheese",
    "hurricanes",
    "bamboo",
    "wolves",
    "mirrors",
    "coral reefs",
    "compasses",
    "tigers",
    "soap",
    "thunder",
    "violins",
    "islands",
    "sunflowers",
    "robots",
    "caves",
    "whales",
    "paper",
    "earthquakes",
    "tomatoes",
    "satellites",
    "frogs",
    "museums",
    "wind",
    "elephants",
    "glass",
    "lakes",
    "butterflies",
    "keys",
    "planets",
    "rice",
    "lanterns",
    "spiders",
    "salt",
    "waterfalls",
    "horses",
    "batteries",
    "olives",
    "stars",
    "sand",
]
EVAL_TEMPLATES = [
    "Write a short paragraph about {t}.",
    "Describe {t} in a few sentences.",
    "Tell me something interesting about {t}.",
    "Explain what {t} are good for.",
]


def build_pairs(seed: int, n: int, instruction_ids: list[str] | None = None) -> tuple[list[dict], int]:
    """``n`` preference pairs (TRL conversational format) and the number of dropped pairs.

    Each row: ``id``, ``prompt`` (messages), ``chosen``/``rejected`` (assistant messages),
    ``instruction_id_list``, ``kwargs``.
    """
    rng = random.Random(seed)
    ids = instruction_ids or sorted(INSTRUCTIONS)
    rows, dropped, attempts = [], 0, 0
    while len(rows) < n:
        attempts += 1
        if attempts > 20 * n:
            raise RuntimeError("could not build enough verified preference pairs")
        topic, request, answer = rng.choice(TRAIN_TOPICS)
        instruction_id = rng.choice(ids)
        text, args = instruction(rng, instruction_id, request)
        prompt = f"{request} {text}"
        chosen = INSTRUCTIONS[instruction_id][1](answer, args, request)
        item = {
            "id": f"train-{len(rows):05d}",
            "prompt": prompt,
            "instruction_id_list": [instruction_id],
            "kwargs": [args],
        }
        if not (
            ifeval.check(item, chosen)["prompt_level_strict_acc"]
            and not ifeval.check(item, answer)["prompt_level_strict_acc"]
        ):
            dropped += 1
            continue
        rows.append(
            {
                **item,
                "prompt": [{"role": "user", "content": prompt}],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": answer}],
            }
        )
    return rows, dropped


def build_prompts(
    seed: int, n: int, topics: list[str], prefix: str, instruction_ids: list[str] | None = None
) -> list[dict]:
    """``n`` IFEval-format items (``id``, ``prompt``, ``instruction_id_list``, ``kwargs``) on ``topics``."""
    if not topics:
        raise ValueError("no topics to build prompts from")
    rng = random.Random(seed)
    ids = instruction_ids or sorted(INSTRUCTIONS)
    items = []
    for i in range(n):
        request = rng.choice(EVAL_TEMPLATES).format(t=rng.choice(topics))
        instruction_id = rng.choice(ids)
        text, args = instruction(rng, instruction_id, request)
        items.append(
            {
                "id": f"{prefix}-{i:04d}",
                "prompt": f"{request} {text}",
                "instruction_id_list": [instruction_id],
                "kwargs": [args],
            }
        )
    return items


def split_eval_topics(seed: int) -> tuple[list[str], list[str]]:
    """Disjoint (public, hidden) halves of :data:`EVAL_TOPICS`, shuffled with ``seed``."""
    topics = list(EVAL_TOPICS)
    random.Random(seed).shuffle(topics)
    half = len(topics) // 2
    return sorted(topics[:half]), sorted(topics[half:])
