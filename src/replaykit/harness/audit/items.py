"""Final-split items' identifying text, and a near-verbatim search for them in other files.

Each task declares which fields of its final-split rows identify an item
(``FINAL_ITEM_FIELDS`` of its plug-in, :class:`ItemFields`): natural-language ``text``
(prompts, responses), exact ``token`` identifiers (ids, SMILES, latent seeds), ``file``
fields naming a file whose SHA-256 identifies the item (an image), and a ``label`` that
identifies the item when written beside its id (``{"digit-0123": 4}``, ``(123, 4)``).

A *haystack* is a file's lines (a candidate patch's added lines, an exploration's logs and
files). Matching is near-verbatim, as plagiarism detectors compare text (word n-grams after
normalisation; Broder, "On the resemblance and containment of documents", 1997):

* text: lower-cased, every run of non-alphanumeric characters read as one separator (so
  whitespace, line breaks, quoting and punctuation do not matter), cut into :data:`NGRAM`-word
  sequences; sequences that also occur in the public split's items, or in more than one final
  item, are dropped (dpo's prompts share instruction templates); an item is found when at least
  :data:`CONTAINMENT` of its remaining sequences, or :data:`MIN_SEQUENCES` of them (ten words
  in a row), are in the haystack (a text shorter than
  :data:`NGRAM` words counts as one sequence when it has at least :data:`MIN_WORDS` words);
* token: the whole token (delimited by whitespace, quotes, commas, colons, braces), at least
  :data:`MIN_TOKEN` characters, and not a token of the public split; a SHA-256 also by its
  first 16 hex digits;
* label: the item's id, or the number it ends with, followed within a few separator
  characters by its label; found when :data:`MIN_PAIRS` items are (one pair is chance: 1 in
  the number of classes).

What this does not find: paraphrases, translations, encodings (base64, compression, a
tensor), numbers computed from the items, or items of a split the task does not declare.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..hashing import sha256_file

NGRAM = 8  # words per sequence: 8-word sequences of English prose rarely repeat by chance
CONTAINMENT = 0.5  # share of an item's final-only sequences that must be present, or
MIN_SEQUENCES = 3  # this many (10 consecutive words of the item that the public split lacks)
MIN_WORDS = 4  # a shorter text is not identifying
MIN_TOKEN = 6  # characters; shorter ids and SMILES ("CCO") occur in code by chance
MIN_PAIRS = 3  # items whose (id, label) pair is present
PAIR_GAP = 6  # at most this many separator characters between an id and its label
WORD_RE = re.compile(r"[a-z0-9]+")
TOKEN_SPLIT = re.compile(r"[\s\"'`,:;{}<>]+")
# A second, lower-cased reading of each line for ids: split on everything but letters, digits,
# `_` and `-`, so that `item_id=hidden-0001`, `/data/hidden-0001.json`, `f(hidden-0001)` and
# `HIDDEN-0001` hold the id (hostile test, 2026-12-04); a SMILES keeps its whole-token reading
ID_SPLIT = re.compile(r"[^A-Za-z0-9_\-]+")
HEX_RE = re.compile(r"[0-9a-f]{16,}")
# A lookahead, so that matches overlap: in ``{79: 0, 1078: 0}`` the label 0 of one pair is not
# taken as the key of the next (finditer's matches would otherwise pair each label with the next id)
PAIR_RE = re.compile(rf"(?<![A-Za-z0-9_.\-])(?=([A-Za-z0-9_.\-]+)([^A-Za-z0-9]{{1,{PAIR_GAP}}})(\d+)(?![0-9]))")


@dataclass(frozen=True)
class ItemFields:
    """What identifies a final-split row (a plug-in's ``FINAL_ITEM_FIELDS`` as a dataclass)."""

    text: tuple[str, ...] = ()
    token: tuple[str, ...] = ("id",)
    file: tuple[str, ...] = ()
    label: str | None = None

    @classmethod
    def of(cls, spec) -> ItemFields:
        spec = dict(spec or {})
        return cls(
            text=tuple(spec.get("text", ())),
            token=tuple(spec.get("token", ("id",))),
            file=tuple(spec.get("file", ())),
            label=spec.get("label"),
        )


@dataclass
class Item:
    """One final-split item: its id, texts, tokens (ids, hashes) and (key, label) pairs."""

    id: str
    texts: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)


def words(text: str) -> list[str]:
    """Normalised words: lower case, alphanumeric runs."""
    return WORD_RE.findall(text.lower())


def ngrams(ws: list[str], n: int = NGRAM) -> set[tuple[str, ...]]:
    """The ``n``-word sequences of ``ws``; a text of :data:`MIN_WORDS` to ``n`` words is one."""
    if len(ws) < n:
        return {tuple(ws)} if len(ws) >= MIN_WORDS else set()
    return {tuple(ws[i : i + n]) for i in range(len(ws) - n + 1)}


def strings(value) -> list[str]:
    """Every string inside ``value`` (nested lists and dicts: chat messages), numbers as text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings(v)]
    return []


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a JSONL split file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_items(split_file: str | Path, fields: ItemFields) -> list[Item]:
    """The items of a final split file (JSONL) with their identifying text (``file`` fields are
    read relative to the split file's folder)."""
    folder, items = Path(split_file).parent, []
    for k, row in enumerate(read_rows(split_file)):
        item = Item(id=str(row.get("id", k)))
        item.texts = [s for f in fields.text for s in strings(row.get(f))]
        item.tokens = [s for f in fields.token for s in strings(row.get(f)) if len(s) >= MIN_TOKEN]
        for f in fields.file:
            for rel in strings(row.get(f)):
                if (folder / rel).is_file():
                    item.tokens.append(sha256_file(folder / rel))
        if fields.label and row.get(fields.label) is not None:
            label = str(row[fields.label])
            keys = {item.id} | ({str(int(m.group()))} if (m := re.search(r"\d+$", item.id)) else set())
            item.pairs = [(key, label) for key in sorted(keys)]
        items.append(item)
    return items


@dataclass
class Public:
    """What the public split already shows (never evidence of exposure)."""

    grams: set = field(default_factory=set)
    tokens: set = field(default_factory=set)


def read_public(split_file: str | Path | None, fields: ItemFields, final: list[Item] = ()) -> Public:
    """The word sequences and tokens of the public (proxy) split's items, and the sequences
    that several ``final`` items share (a template's wording identifies no one item)."""
    public = Public()
    if split_file is not None and Path(split_file).is_file():
        for item in read_items(split_file, fields):
            for text in item.texts:
                public.grams |= ngrams(words(text))
            public.tokens |= set(item.tokens)
    seen: dict[tuple, int] = {}
    for item in final:
        for gram in {g for text in item.texts for g in ngrams(words(text))}:
            seen[gram] = seen.get(gram, 0) + 1
    public.grams |= {g for g, n in seen.items() if n > 1}
    return public


class Haystack:
    """One file's lines, indexed for :func:`find_items` (line numbers from 1)."""

    def __init__(self, name: str, lines: list[tuple[int, str]]):
        self.name = name
        self.stream: list[tuple[str, int]] = [(w, no) for no, text in lines for w in words(text)]
        self._grams: dict[int, dict[tuple[str, ...], int]] = {}
        self.tokens: dict[str, int] = {}
        self.pairs: dict[tuple[str, str], int] = {}
        for no, text in lines:
            for tok in TOKEN_SPLIT.split(text):
                self.tokens.setdefault(tok, no)
                self.tokens.setdefault(tok.strip("()[]"), no)
            for tok in ID_SPLIT.split(text.lower()):
                self.tokens.setdefault(tok, no)
            for run in HEX_RE.findall(text.lower()):
                self.tokens.setdefault(run[:16], no)
            for m in PAIR_RE.finditer(text):
                key = m.group(1).strip(".-")
                self.pairs.setdefault((key, m.group(3)), no)
                if key.isdigit():
                    self.pairs.setdefault((str(int(key)), m.group(3)), no)

    def grams(self, n: int) -> dict[tuple[str, ...], int]:
        """Every ``n``-word sequence of the file (across lines) -> the line it starts on."""
        if n not in self._grams:
            index: dict[tuple[str, ...], int] = {}
            for i in range(max(0, len(self.stream) - n + 1)):
                index.setdefault(tuple(w for w, _ in self.stream[i : i + n]), self.stream[i][1])
            self._grams[n] = index
        return self._grams[n]

    @classmethod
    def of_text(cls, name: str, text: str, only_added: bool = False) -> Haystack:
        """A file's text; ``only_added``: of a unified diff, the added lines only."""
        lines = []
        for no, line in enumerate(text.splitlines(), 1):
            if only_added:
                if not line.startswith("+") or line.startswith("+++"):
                    continue
                line = line[1:]
            lines.append((no, line))
        return cls(name, lines)


def find_items(hay: Haystack, items: list[Item], public: Public) -> list[dict]:
    """The items found in ``hay``: ``{"item", "how", "line", "detail"}``, one per item (text,
    then token, then pair); pairs only when :data:`MIN_PAIRS` items are found by them."""
    found, by_pair = [], []
    for item in items:
        hit = _text_hit(hay, item, public) or _token_hit(hay, item, public)
        if hit:
            found.append({"item": item.id, **hit})
            continue
        lines = [hay.pairs[p] for p in item.pairs if p in hay.pairs]
        if lines:
            by_pair.append({"item": item.id, "how": "label", "line": min(lines), "detail": f"{item.pairs[0]}"})
    return found + (by_pair if len(by_pair) >= MIN_PAIRS else [])


def _text_hit(hay: Haystack, item: Item, public: Public) -> dict | None:
    for text in item.texts:
        grams = ngrams(words(text)) - public.grams
        if not grams:
            continue
        index = hay.grams(len(next(iter(grams))))
        present = [g for g in grams if g in index]
        if present and len(present) >= min(MIN_SEQUENCES, CONTAINMENT * len(grams)):
            line = min(index[g] for g in present)
            return {"how": "text", "line": line, "detail": f"{len(present)}/{len(grams)} word sequences"}
    return None


def _token_hit(hay: Haystack, item: Item, public: Public) -> dict | None:
    for tok in item.tokens:
        if tok in public.tokens:
            continue
        key = tok[:16] if re.fullmatch(r"[0-9a-f]{64}", tok) else tok
        for k in (key, key.lower()):
            if k in hay.tokens:
                return {"how": "token", "line": hay.tokens[k], "detail": tok}
    return None
