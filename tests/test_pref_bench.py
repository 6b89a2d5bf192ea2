"""The rm and dpo step benchmarks' fast layouts compute the straightforward step (issue 17).

``bench/rm_throughput.py`` and ``bench/dpo_throughput.py`` time one optimizer step in
several layouts (``bench/pref_batches.py``). Their speed-ups count only if each layout gives
the same loss and the same gradients as one padded batch of all pairs: checked here in
float32 on a tiny random Mistral (2 layers, hidden 64) whose LoRA B matrices are random
(PEFT's default B = 0 would make every LoRA A gradient 0 and the DPO policy equal its
reference). The DPO loss is also computed by hand from each sequence alone.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import dpo_throughput as dpo  # noqa: E402
import pref_batches as pb  # noqa: E402
import rm_throughput as rm  # noqa: E402

MAX_LENGTH = 64
BUDGET = 5 * MAX_LENGTH  # c3: micro-batches of 2, 3, 3 pairs; c4: 4, 3, 1 (pair weighting matters)


@pytest.fixture(scope="module")
def pairs() -> list[pb.Pair]:
    torch.set_num_threads(1)
    return pb.make_pairs(pb.ultrafeedback_lengths(8, MAX_LENGTH, seed=3), rm.TINY["vocab_size"], seed=3)


def grads(model) -> dict[str, torch.Tensor]:
    """The trainable parameters' gradients (LoRA A and B; rm: the score head), then zeroed."""
    out = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    assert any("lora_A" in name for name in out) and all(g.abs().sum() > 0 for g in out.values())
    return out


def assert_same(loss, g, ref_loss, ref_g):
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=0)
    assert g.keys() == ref_g.keys()
    for name in g:
        torch.testing.assert_close(g[name], ref_g[name], atol=1e-5, rtol=1e-4, msg=name)


def test_layouts_cover_every_pair_once(pairs):
    for layout in pb.LAYOUTS:
        batches = pb.plan(layout, pairs, 2, BUDGET)
        assert sorted(i for idx in batches for i in idx) == list(range(len(pairs)))
    grouped = pb.plan("grouped", pairs, 2, BUDGET)
    assert len({len(idx) for idx in grouped}) > 1
    for idx in pb.plan("packed", pairs, 2, BUDGET):
        assert len(idx) == 1 or sum(len(pairs[i].chosen) + len(pairs[i].rejected) for i in idx) <= BUDGET
    lengths = [p + r for p, rc, rr in pb.ultrafeedback_lengths(2000) for r in (rc, rr)]
    assert min(lengths) >= 16 and max(lengths) <= 1024 and 420 < sum(lengths) / len(lengths) < 520


def test_block_diagonal_mask():
    mask = pb.block_diagonal_mask(torch.tensor([[0, 1, 2, 0, 1]]))[0, 0].int()
    expected = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]]
    assert mask.tolist() == expected


@pytest.mark.parametrize("explicit_mask", [False, True])
def test_rm_layouts_match_one_padded_batch(pairs, monkeypatch, explicit_mask):
    if explicit_mask:  # the path for a transformers without packed-sequence detection
        monkeypatch.setattr(pb, "packed_masking_available", lambda: False)
    model, _, _ = rm.build("tiny", None, "cpu", torch.float32, False, init_lora_weights=False)
    model.train()
    one = [list(range(len(pairs)))]
    ref_loss = rm.rm_step_loss(model, pairs, one, pb.Variant("one", "pad_longest"), MAX_LENGTH, "cpu")
    ref_g = grads(model)
    # the loss by hand: mean over pairs of -log σ(r_c - r_r), each sequence alone
    with torch.no_grad():
        r = [model(input_ids=s[None]).logits.squeeze() for p in pairs for s in (p.chosen, p.rejected)]
    by_hand = sum(-math.log(1 / (1 + math.exp(-(r[2 * i] - r[2 * i + 1])))) for i in range(len(pairs))) / len(pairs)
    assert ref_loss.item() == pytest.approx(by_hand, abs=1e-5)
    for name in ("c1", "c2", "c3", "c4", "c2n", "c3n"):
        v = dataclasses.replace(rm.VARIANTS[name], micro_pairs=2)
        batches = pb.plan(v.layout, pairs, 2, BUDGET)
        assert len(batches) > 1
        loss = rm.rm_step_loss(model, pairs, batches, v, MAX_LENGTH, "cpu")
        assert_same(loss, grads(model), ref_loss, ref_g)


def hand_dpo_loss(model, pairs, beta: float) -> float:
    """Mean over pairs of -log σ(β((π_c - ref_c) - (π_r - ref_r))), each log π a sum over the
    response tokens of one sequence run alone, from a full log-softmax."""

    def logp(s, prompt_len):
        logits = model(input_ids=s[None]).logits[0].log_softmax(-1)
        return sum(logits[t - 1, s[t]].item() for t in range(prompt_len, len(s)))

    total = 0.0
    with torch.no_grad():
        for p in pairs:
            pc, pr = logp(p.chosen, p.prompt_len), logp(p.rejected, p.prompt_len)
            with model.disable_adapter():
                rc, rr = logp(p.chosen, p.prompt_len), logp(p.rejected, p.prompt_len)
            total += math.log1p(math.exp(-beta * ((pc - rc) - (pr - rr))))
    return total / len(pairs)


@pytest.mark.parametrize("beta", [0.01, 0.5])
def test_dpo_layouts_match_straightforward_and_hand(pairs, beta):
    model, _, _ = dpo.build("tiny", "cpu", torch.float32, init_lora_weights=False)
    model.train()
    straightforward = pb.Variant("one", "pad_longest", sliced=False)
    one = [list(range(len(pairs)))]
    ref_loss = dpo.dpo_step_loss(model, pairs, one, straightforward, beta, MAX_LENGTH, "cpu")
    ref_g = grads(model)
    assert ref_loss.item() == pytest.approx(hand_dpo_loss(model, pairs, beta), abs=1e-5)
    assert abs(ref_loss.item() - math.log(2)) > 1e-4  # random B: the policy differs from its reference
    for name in ("c1", "c2", "c3", "c4", "c2n", "c3n"):
        v = dataclasses.replace(dpo.VARIANTS[name], micro_pairs=2)
        batches = pb.plan(v.layout, pairs, 2, BUDGET)
        loss = dpo.dpo_step_loss(model, pairs, batches, v, beta, MAX_LENGTH, "cpu")
        assert_same(loss, grads(model), ref_loss, ref_g)
