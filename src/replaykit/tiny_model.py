"""A tiny causal LM for quick runs of the dpo and rm DAGs (``config/test.yaml``, the tests).

Builder ``tiny-llama`` of :mod:`replaykit.models`: a 2-layer model of SmolLM2's (``llama``)
or Mistral's (``mistral``) architecture, hidden size 32, random weights (seeded), with a
byte-level BPE tokenizer trained on the embedded instruction texts, ChatML template, eos
``<|im_end|>``. It checks the machinery, not a method: its scores mean nothing.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tiny_model(out: str | Path, model_type: str = "llama", seed: int = 0) -> Path:
    """Write the tiny model and its tokenizer to ``out`` (HF ``save_pretrained`` layout)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from replaykit.tasks.dpo import instructions

    out = Path(out)
    corpus = [a for _, q, a in instructions.TRAIN_TOPICS] + [q for _, q, _ in instructions.TRAIN_TOPICS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build(spec: dict, out: str | Path) -> dict:
    """The ``tiny-llama`` builder: ``spec`` = ``{builder, seed, model_type?}``."""
    make_tiny_model(out, spec.get("model_type", "llama"), int(spec.get("seed", 0)))
    return {
        "model_type": spec.get("model_type", "llama"),
        "hidden_size": 32,
        "layers": 2,
        "note": "random weights: checks the machinery, its scores mean nothing",
    }
