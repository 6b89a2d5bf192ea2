"""Verifiable-instruction text shared by the embedded dpo and rm data: the instruction table and
the base answers it transforms.

:data:`INSTRUCTIONS` maps an IFEval instruction id to (a sampler of its kwargs, a transform
that turns a base answer into one that follows the instruction); :func:`instruction` words an
instruction with lm_eval's registry (:func:`.ifeval.describe`). :data:`TRAIN_TOPICS` holds the
base requests and answers of the training pairs: each answer has capitals, commas and three
sentences, so left as it is it violates every instruction of the table.

Moved from ``replaykit.tasks.dpo.instructions`` unchanged (the data they build is the same).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

from . import ifeval

# (topic, request, base answer). Base answers have capitals, commas and 3 sentences, so the
# untransformed answer violates every instruction below.
TRAIN_TOPICS = [
    (
        "cats",
        "Write a short note about cats.",
        "Cats are small, curious animals that sleep for most of the day. They groom themselves often, and they like warm places. Many people keep them as calm, independent pets.",
    ),
    (
        "rain",
        "Explain what rain is.",
        "Rain is water that falls from clouds, one drop at a time. Clouds form when warm, moist air rises and cools. When the droplets grow heavy enough, they fall to the ground.",
    ),
    (
        "bicycles",
        "Describe a bicycle.",
        "A bicycle is a light vehicle with two wheels, a frame and pedals. The rider pushes the pedals, which turn a chain and the rear wheel. Bicycles are cheap, quiet and good for short trips.",
    ),
    (
        "bread",
        "Tell me how bread is made.",
        "Bread is made from flour, water, salt and yeast. The dough is kneaded, left to rise, and shaped into a loaf. Finally, it is baked in a hot oven until the crust is brown.",
    ),
    (
        "the moon",
        "Say something about the Moon.",
        "The Moon is Earth's only natural satellite, and it orbits us about once a month. Its surface is covered with craters, dust and old lava plains. Its gravity causes most of the tides in the oceans.",
    ),
    (
        "tea",
        "Write a few lines about tea.",
        "Tea is a drink made by steeping dried leaves in hot water. Black, green and white teas all come from the same plant. In many countries, people share tea with guests as a sign of welcome.",
    ),
    (
        "libraries",
        "Describe what a library offers.",
        "A library lends books, films and music to the public for free. It also offers quiet rooms, computers and help from trained staff. Many libraries run reading groups, classes and events for children.",
    ),
    (
        "volcanoes",
        "Explain how volcanoes work.",
        "A volcano is an opening in the crust where molten rock, gas and ash escape. Pressure builds up under the surface until the magma breaks through. Some volcanoes erupt often, while others stay quiet for centuries.",
    ),
    (
        "gardening",
        "Give some advice on gardening.",
        "Start small, with a few plants that suit your climate and soil. Water them early in the morning, and check the leaves for pests. Compost, mulch and patience will help your garden grow strong.",
    ),
    (
        "chess",
        "Tell me about chess.",
        "Chess is a strategy game for two players on a board of 64 squares. Each player controls sixteen pieces, including a king, a queen and eight pawns. The goal is to trap the other king, which is called checkmate.",
    ),
    (
        "bees",
        "Write about bees.",
        "Bees are flying insects that collect nectar and pollen from flowers. While they feed, they carry pollen from plant to plant, which helps fruit grow. A honey bee colony can hold tens of thousands of workers.",
    ),
    (
        "recycling",
        "Explain why recycling matters.",
        "Recycling turns used paper, glass, metal and plastic into new products. It saves energy, reduces waste in landfills, and protects natural resources. Sorting your rubbish correctly makes the whole process work better.",
    ),
    (
        "the ocean",
        "Describe the ocean.",
        "The ocean covers about seventy percent of the Earth's surface. It holds most of the planet's water, and it shapes the weather and climate. Whales, fish, corals and countless tiny organisms live in it.",
    ),
    (
        "coffee",
        "Write a short text about coffee.",
        "Coffee is brewed from roasted beans, and it contains caffeine. People drink it hot, iced, black or with milk. Brazil, Vietnam and Colombia are among the largest producers.",
    ),
    (
        "trains",
        "Tell me something about trains.",
        "Trains carry people and goods along steel rails over long distances. Modern trains run on electricity or diesel, and some reach very high speeds. They are an efficient, relatively clean way to travel.",
    ),
    (
        "sleep",
        "Explain why sleep is important.",
        "Sleep lets the body repair itself, and it helps the brain store memories. Adults usually need seven to nine hours each night. Too little sleep makes people tired, irritable and less focused.",
    ),
    (
        "maps",
        "Describe what maps are used for.",
        "Maps show places, roads, rivers and borders on a flat surface. Travelers use them to plan routes, and scientists use them to study regions. Today, many maps are digital, and they update in real time.",
    ),
    (
        "snow",
        "Write about snow.",
        "Snow forms when water vapour freezes into ice crystals inside cold clouds. Each flake has six sides, and no two look exactly alike. Fresh snow reflects sunlight, which keeps the ground cold.",
    ),
    (
        "music",
        "Say a few words about music.",
        "Music combines rhythm, melody and harmony to express feelings. People have made music with voices, drums and strings for thousands of years. Listening to music can calm us, cheer us up, or bring us together.",
    ),
    (
        "forests",
        "Explain why forests matter.",
        "Forests cover large parts of the land, and they are home to many species. Trees absorb carbon dioxide, release oxygen, and hold the soil in place. Forests also give people wood, food, medicine and places to rest.",
    ),
    (
        "bridges",
        "Describe how bridges work.",
        "A bridge carries a road, railway or path across a river or valley. Its design spreads the load of traffic into the ground through piers and supports. Beam, arch and suspension bridges are the most common types.",
    ),
    (
        "honey",
        "Write a note about honey.",
        "Honey is a sweet, thick liquid made by bees from flower nectar. Its taste and colour depend on the flowers the bees visited. Because it contains little water, honey can last for many years.",
    ),
    (
        "kites",
        "Tell me about kites.",
        "A kite is a light frame covered with fabric or paper, flown on a long string. Wind pushes against the kite, and the string holds it at an angle. Kites have been flown in China, India and Europe for centuries.",
    ),
    (
        "penguins",
        "Describe penguins.",
        "Penguins are flightless birds that live mostly in the Southern Hemisphere. They swim with their wings, and they catch fish, squid and krill. Emperor penguins huddle together to survive the Antarctic winter.",
    ),
]


def sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by white space."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def bullets(text: str, n: int) -> str:
    """``n`` markdown bullets, one sentence each (padded with a closing sentence)."""
    parts = sentences(text)
    while len(parts) < n:
        parts.append("That is all there is to it.")
    return "\n".join(f"* {p}" for p in parts[:n])


# instruction id -> (kwargs sampler, transform(answer, kwargs, request) -> compliant answer)
Spec = tuple[Callable[[random.Random, str], dict], Callable[[str, dict, str], str]]
INSTRUCTIONS: dict[str, Spec] = {
    "change_case:english_lowercase": (lambda r, q: {}, lambda a, k, q: a.lower()),
    "change_case:english_capital": (lambda r, q: {}, lambda a, k, q: a.upper()),
    "punctuation:no_comma": (lambda r, q: {}, lambda a, k, q: a.replace(",", "")),
    "detectable_format:json_format": (lambda r, q: {}, lambda a, k, q: json.dumps({"answer": a}, indent=1)),
    "startend:end_checker": (
        lambda r, q: {
            "end_phrase": r.choice(
                [
                    "Is there anything else I can help with?",
                    "Any other questions?",
                    "Let me know if you have additional questions.",
                ]
            )
        },
        lambda a, k, q: f"{a} {k['end_phrase']}",
    ),
    "startend:quotation": (lambda r, q: {}, lambda a, k, q: f'"{a}"'),
    "detectable_content:postscript": (
        lambda r, q: {"postscript_marker": r.choice(["P.S.", "P.P.S"])},
        lambda a, k, q: f"{a}\n\n{k['postscript_marker']} Thank you for asking.",
    ),
    "detectable_format:title": (lambda r, q: {}, lambda a, k, q: f"<<{sentences(a)[0].split()[0]} notes>>\n\n{a}"),
    "detectable_format:number_highlighted_sections": (
        lambda r, q: {"num_highlights": r.randint(1, 3)},
        lambda a, k, q: " ".join(f"*{s}*" if i < k["num_highlights"] else s for i, s in enumerate(sentences(a))),
    ),
    "detectable_format:number_bullet_lists": (
        lambda r, q: {"num_bullets": r.randint(2, 3)},
        lambda a, k, q: bullets(a, k["num_bullets"]),
    ),
    "combination:repeat_prompt": (lambda r, q: {"prompt_to_repeat": q}, lambda a, k, q: f"{q}\n{a}"),
    "detectable_content:number_placeholders": (
        lambda r, q: {"num_placeholders": r.randint(1, 2)},
        lambda a, k, q: (
            a + " " + " ".join(["You can write to [name].", "Visit us at [address]."][: k["num_placeholders"]])
        ),
    ),
    "length_constraints:number_sentences": (
        lambda r, q: {"relation": "less than", "num_sentences": 2},
        lambda a, k, q: sentences(a)[0],
    ),
    "combination:two_responses": (lambda r, q: {}, lambda a, k, q: f"{a}\n******\n{' '.join(reversed(sentences(a)))}"),
}


def instruction(rng: random.Random, instruction_id: str, request: str) -> tuple[str, dict]:
    """(instruction text, its kwargs as IFEval stores them) for ``request``, kwargs drawn with ``rng``."""
    sampler, _ = INSTRUCTIONS[instruction_id]
    kwargs = sampler(rng, request)
    text, args = ifeval.describe(instruction_id, kwargs)
    return text, args
