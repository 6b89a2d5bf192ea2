"""The dpo evaluator's greedy generation gives ``model.generate``'s tokens (issue 17).

:func:`greedy_batch` drops finished rows from the batch; these tests compare its tokens with
transformers' own greedy ``generate`` on the same left-padded batch (computed here, not by the
code under test). The tiny random model rarely emits its real EOS, so the tests name as EOS
a token the model does emit, which makes rows finish at different steps and the batch shrink.
"""

from __future__ import annotations

import pytest
import torch

from replaykit.tasks.dpo import evaluator
from replaykit.tasks.dpo.instructions import TRAIN_TOPICS
from replaykit.tasks.dpo.loader import load_policy, load_tokenizer

MAX_NEW = 24


@pytest.fixture(scope="module")
def model_and_batch(tiny_llama):
    """The tiny model with its matrices redrawn at std 0.3 (at the fixture's 0.02 it repeats one
    token), its tokenizer and a left-padded batch of 12 prompts of different lengths."""
    torch.set_num_threads(1)
    tokenizer = load_tokenizer(tiny_llama)
    tokenizer.padding_side = "left"
    prompts = [q * (1 + i % 3) for i, (_, q, _) in enumerate(TRAIN_TOPICS[:12])]
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    enc = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    assert len(set(enc["attention_mask"].sum(1).tolist())) > 3  # really padded
    model = load_policy(tiny_llama)
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.3)
    return model, tokenizer, prompts, enc


def hf_greedy(model, enc, eos: int, pad: int) -> list[list[int]]:
    """transformers' greedy tokens per row, up to and including the first ``eos``."""
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    rows = out[:, enc["input_ids"].shape[1] :].tolist()
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def staggered_token(model, enc, pad: int) -> int:
    """A token the model emits (without an EOS) whose first appearance comes at the most different
    steps across rows: as EOS it ends rows at different steps."""
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None, pad_token_id=pad)
    rows = out[:, enc["input_ids"].shape[1] :].tolist()

    def spread(token: int) -> int:
        firsts = {row.index(token) for row in rows if token in row}
        return len(firsts) if any(token not in row for row in rows) else 0

    return max(sorted({t for row in rows for t in row}), key=spread)


@pytest.mark.parametrize("min_rows", [1, 4, 8])
def test_tokens_equal_generate_while_rows_leave(model_and_batch, min_rows, monkeypatch):
    from transformers import DynamicCache

    model, tokenizer, _, enc = model_and_batch
    sizes = []  # batch sizes the cache is cut to
    select = DynamicCache.batch_select_indices
    monkeypatch.setattr(DynamicCache, "batch_select_indices", lambda c, i: (sizes.append(len(i)), select(c, i))[1])
    eos = staggered_token(model, enc, tokenizer.pad_token_id)
    want = hf_greedy(model, enc, eos, tokenizer.pad_token_id)
    ends = sorted(len(row) for row in want if row[-1] == eos)
    assert 6 <= len(ends) < len(want) and ends[0] < ends[-1]  # rows finish at different steps; some never
    got = evaluator.greedy_batch(model, enc["input_ids"], enc["attention_mask"], MAX_NEW, eos, min_rows=min_rows)
    assert got == want
    assert sizes and min(sizes) >= min(min_rows, 12)  # the batch did shrink, never below min_rows


def test_tokens_equal_generate_without_eos(model_and_batch):
    """The real EOS: rows run to ``max_new_tokens`` unless they emit it."""
    model, tokenizer, _, enc = model_and_batch
    want = hf_greedy(model, enc, tokenizer.eos_token_id, tokenizer.pad_token_id)
    got = evaluator.greedy_batch(model, enc["input_ids"], enc["attention_mask"], MAX_NEW, tokenizer.eos_token_id)
    assert got == want
    assert all(len(row) <= MAX_NEW for row in got)


def test_generate_texts_as_before(model_and_batch):
    """``generate``'s rows decode the tokens ``model.generate`` gives (batch 5: 3 batches)."""
    model, tokenizer, prompts, _ = model_and_batch
    out = evaluator.generate(model, tokenizer, prompts, MAX_NEW, batch_size=5)
    by_length = sorted(
        range(len(prompts)),
        key=lambda i: (
            -len(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompts[i]}], tokenize=False, add_generation_prompt=True
                )
            )
        ),
    )
    eos = tokenizer.eos_token_id
    for start in range(0, len(prompts), 5):
        idx = by_length[start : start + 5]
        chats = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompts[i]}], tokenize=False, add_generation_prompt=True
            )
            for i in idx
        ]
        enc = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
        for i, tokens in zip(idx, hf_greedy(model, enc, eos, tokenizer.pad_token_id)):
            ended = tokens[-1:] == [eos]
            n = len(tokens) - ended
            assert out[i] == {
                "text": tokenizer.decode(tokens[:n], skip_special_tokens=True),
                "new_tokens": n,
                "truncated": not ended,
            }


def test_rows_to_keep():
    """Open rows stay; finished rows fill up to min_rows; a padded row stays while there was one;
    the batch shrinks only by a quarter or more."""
    closed_first_six = torch.tensor([False] * 6 + [True] * 2)
    no_padding = torch.zeros(8, dtype=torch.bool)
    # 8 rows, 2 open, min 4: keep 2 open + 2 fillers (rows 0, 1) = 4 rows, 4 dropped >= 8 // 4
    assert evaluator._rows_to_keep(closed_first_six, no_padding, 4).tolist() == [0, 1, 6, 7]
    # min 1: the 2 open rows only
    assert evaluator._rows_to_keep(closed_first_six, no_padding, 1).tolist() == [6, 7]
    # row 3 is the only padded one: it stays as a filler
    padded = torch.tensor([False, False, False, True, False, False, False, False])
    assert evaluator._rows_to_keep(closed_first_six, padded, 1).tolist() == [3, 6, 7]
    # one finished row of 8: dropping 1 < 8 // 4 = 2 rows is not worth the cache copy
    assert evaluator._rows_to_keep(torch.tensor([False] + [True] * 7), no_padding, 1) is None
    # fewer rows than min_rows already: nothing to drop
    assert evaluator._rows_to_keep(torch.tensor([False, True, False]), no_padding, 8) is None
