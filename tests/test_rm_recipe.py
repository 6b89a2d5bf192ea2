"""The rm recipe's ``causal_padding`` knob (``drop_padding_mask``): right-padded rows give the
masked rewards and gradients without the mask; left padding is refused."""

from __future__ import annotations

import pytest
import torch

from conftest import make_tiny_model, recipe_train


@pytest.fixture(scope="module")
def tiny_mistral(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-mistral", "mistral")


def reward_model(path):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = 0
    return model


def batch(lengths: list[int], width: int, left: bool = False):
    """Rows of random ids in [5, 100) (never the pad id 0), padded with 0 to ``width``."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        cols = slice(width - n, width) if left else slice(0, n)
        ids[row, cols] = torch.randint(5, 100, (n,), generator=generator)
        mask[row, cols] = 1
    return ids, mask


def rewards_and_grad(model, ids, mask):
    model.zero_grad()
    rewards = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
    chosen, rejected = rewards.chunk(2)
    (-torch.nn.functional.logsigmoid(chosen - rejected).mean()).backward()
    return rewards.detach(), model.score.weight.grad.clone()


def test_right_padded_rows_give_the_masked_rewards_and_gradients(tiny_mistral):
    ids, mask = batch([7, 12, 3, 12], width=12)
    plain = reward_model(tiny_mistral)
    expected_rewards, expected_grad = rewards_and_grad(plain, ids, mask)
    # the same rows one at a time, unpadded: the rewards the mask stands for
    alone = torch.cat([plain(input_ids=ids[r : r + 1, : int(mask[r].sum())]).logits.squeeze(-1) for r in range(4)])
    torch.testing.assert_close(expected_rewards, alone.detach(), rtol=1e-5, atol=1e-6)

    hooked = reward_model(tiny_mistral)
    recipe_train("rm").drop_padding_mask(hooked)
    seen = []  # the mask the backbone gets, after the recipe's hook
    hooked.base_model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["attention_mask"]), with_kwargs=True)
    rewards, grad = rewards_and_grad(hooked, ids, mask)
    assert seen == [None]
    torch.testing.assert_close(rewards, expected_rewards, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)


def test_left_padding_is_refused(tiny_mistral):
    model = reward_model(tiny_mistral)
    recipe_train("rm").drop_padding_mask(model)
    ids, mask = batch([7, 12], width=12, left=True)
    with pytest.raises(ValueError, match="padded on the left"):
        model(input_ids=ids, attention_mask=mask)


def test_pad_token_inside_the_rows_as_eos(tiny_mistral):
    """Mistral-7B-Instruct has no pad token: the recipe pads with EOS, which its chat template
    also puts at the end of every reply (and of earlier turns). The score head then reads the
    last token that is not EOS, with or without the mask: the rewards stay the masked ones."""
    ids, mask = batch([7, 12, 4, 10], width=12)
    for row, n in enumerate([7, 12, 4, 10]):
        ids[row, n - 1] = 0  # the reply's EOS, the pad id
        ids[row, n // 2] = 0  # an earlier turn's EOS
    plain = reward_model(tiny_mistral)
    expected, expected_grad = rewards_and_grad(plain, ids, mask)
    hooked = reward_model(tiny_mistral)
    recipe_train("rm").drop_padding_mask(hooked)
    rewards, grad = rewards_and_grad(hooked, ids, mask)
    torch.testing.assert_close(rewards, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["llama", "mistral-window-4", "qwen2-window-4"])
def test_masked_rewards_without_the_mask_across_architectures(arch):
    """The embedded backbone (Llama: SmolLM2), the full one (Mistral) and a Qwen2, the last two
    with a sliding window shorter than the rows (the window is built from positions, not from
    the padding mask): the hooked model gives the masked rewards."""
    import transformers

    common = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        num_labels=1,
        pad_token_id=0,
    )
    config = {
        "llama": lambda: transformers.LlamaConfig(**common),
        "mistral-window-4": lambda: transformers.MistralConfig(**common, sliding_window=4),
        "qwen2-window-4": lambda: transformers.Qwen2Config(
            **common, use_sliding_window=True, sliding_window=4, max_window_layers=0
        ),
    }[arch]()
    ids, mask = batch([7, 12, 3, 10], width=12)
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
        recipe_train("rm").drop_padding_mask(model)
        got = model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
