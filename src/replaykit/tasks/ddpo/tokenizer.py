"""CLIP's BPE tokenizer as a transformers ``CLIPTokenizer``, built offline.

open_clip ships OpenAI CLIP's BPE merges (``bpe_simple_vocab_16e6.txt.gz``). The vocabulary
is derived from them exactly as OpenAI's ``clip/simple_tokenizer.py`` (and open_clip's
``SimpleTokenizer``) do: the 256 byte-unicode symbols, the same with ``</w>``, one token per
merge (the first 49,152 - 256 - 2 merge lines), then ``<|startoftext|>`` and
``<|endoftext|>`` -- 49,408 tokens, the vocabulary of Stable Diffusion v1.5's tokenizer.
Written as ``vocab.json`` + ``merges.txt``, the files ``CLIPTokenizer`` reads.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def write_clip_tokenizer(out: str | Path, model_max_length: int) -> Path:
    """Write a ``CLIPTokenizer`` to ``out`` (``vocab.json``, ``merges.txt`` and the
    tokenizer config, ``model_max_length`` tokens per prompt incl. start/end). Returns ``out``."""
    from open_clip.tokenizer import bytes_to_unicode, default_bpe
    from transformers import CLIPTokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = gzip.open(default_bpe()).read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    (out / "vocab.json").write_text(json.dumps({tok: i for i, tok in enumerate(vocab)}, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
    tokenizer = CLIPTokenizer(
        str(out / "vocab.json"), str(out / "merges.txt"), model_max_length=model_max_length, pad_token="<|endoftext|>"
    )
    tokenizer.save_pretrained(out)
    return out
