"""Preference pairs with UltraFeedback-like lengths, and the ways to cut them into micro-batches.

Shared by ``bench/rm_throughput.py`` and ``bench/dpo_throughput.py`` (and their CPU test,
``tests/test_pref_bench.py``). Random token ids: only the lengths matter for cost.

Length model (tokens of the Mistral tokenizer, chat template included). UltraFeedback
binarized ``train_prefs`` holds 61,966 rows in 397,273,717 bytes of Parquet-decoded text
(its dataset card's ``dataset_info``), ≈ 6,400 bytes a row; a row stores the prompt four
times (``prompt``, ``chosen``, ``rejected``, ``messages``), the chosen response twice and the
rejected once, so 4 P + 3 R ≈ 6,400 bytes gives P ≈ 600–700 and R ≈ 1,200–1,300 bytes for a
prompt-to-response ratio of about 1 : 2 -- at ≈ 4 bytes a token, prompts of ≈ 165 and
responses of ≈ 320 tokens on average, prompt + response ≈ 490. Both are right-skewed (a
long tail of pasted documents and long generations), which we model as log-normal:

- prompt P ~ LogNormal(median 110, σ 0.9): mean 110 e^{0.405} ≈ 165; clipped to [8, 512];
- each response R ~ LogNormal(median 270, σ 0.6), chosen and rejected drawn independently:
  mean 270 e^{0.18} ≈ 323; clipped to [8, max_length − P];

so a sequence P + R lies in [16, max_length] (max_length 1,024 as in the recipes); after
clipping its mean is ≈ 470, its median ≈ 425, and ≈ 3 % of sequences reach the 1,024 cap
(the recipes' truncation) -- measured over 20,000 draws of :func:`ultrafeedback_lengths`.
These are estimates from byte counts, not a tokenisation of the data set; the cost of each
layout scales with the real-token fraction, which the benchmarks report beside the times.

Layouts of one optimizer step (``plan`` + ``padded``/``packed``), each over the same pairs:

- ``fixed``: every sequence is ``max_length`` long (the recipes' benchmark shape, no padding);
- ``pad_max``: real lengths, every micro-batch padded to ``max_length`` (padding="max_length");
- ``pad_longest``: random order, each micro-batch padded to its longest sequence;
- ``grouped``: pairs sorted by their longer sequence, micro-batches filled while
  rows × longest ≤ ``token_budget``, each padded to its longest;
- ``packed``: pairs in random order, a micro-batch filled while its real tokens ≤
  ``token_budget``, concatenated into one row with ``position_ids`` restarting at 0 for each
  sequence (no padding; attention must then be block-diagonal, see :func:`packed`).

Rows of a micro-batch are its chosen sequences, then its rejected ones (``chunk(2)``).
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
import time
from dataclasses import dataclass

import torch

H200_BF16_PEAK = 989e12  # dense bf16, datasheet
GC_FACTOR = 1.5  # time with gradient checkpointing / without, for the budget's estimates
LAYOUTS = ("fixed", "pad_max", "pad_longest", "grouped", "packed")


@dataclass(frozen=True)
class Pair:
    """One preference pair: token ids of prompt + chosen and prompt + rejected (1-D int64)."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    prompt_len: int


@dataclass
class Batch:
    """Model inputs of one micro-batch and where its response tokens are.

    ``input_ids`` (rows, T); ``attention_mask`` (rows, T) for padded layouts, None when packed;
    ``position_ids`` (1, T) when packed, else None. ``last`` (2 m,): flat index (row · T + t)
    of each sequence's last token. ``src`` (K,): flat index of the position that predicts
    each response token; ``tgt`` (K,): that token; ``seq`` (K,): its sequence (0 … 2 m − 1).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None
    last: torch.Tensor
    src: torch.Tensor
    tgt: torch.Tensor
    seq: torch.Tensor
    n_seqs: int
    real_tokens: int


def ultrafeedback_lengths(n: int, max_length: int = 1024, seed: int = 0) -> list[tuple[int, int, int]]:
    """``n`` triples (prompt, chosen response, rejected response) of token counts (module docstring)."""
    rng = random.Random(seed)
    scale = max_length / 1024  # the tiny CPU path shrinks the distribution with max_length
    out = []
    for _ in range(n):
        p = min(max(round(scale * rng.lognormvariate(math.log(110), 0.9)), 8), max_length // 2)
        rc, rr = (min(max(round(scale * rng.lognormvariate(math.log(270), 0.6)), 8), max_length - p) for _ in "cr")
        out.append((p, rc, rr))
    return out


def make_pairs(lengths: list[tuple[int, int, int]], vocab_size: int, seed: int = 0) -> list[Pair]:
    """Random ids in [10, vocab) (0 is the pad id), prompt shared by chosen and rejected."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for p, rc, rr in lengths:
        prompt = torch.randint(10, vocab_size, (p,), generator=g)
        chosen = torch.cat([prompt, torch.randint(10, vocab_size, (rc,), generator=g)])
        rejected = torch.cat([prompt, torch.randint(10, vocab_size, (rr,), generator=g)])
        pairs.append(Pair(chosen, rejected, p))
    return pairs


def fixed_lengths(n: int, max_length: int) -> list[tuple[int, int, int]]:
    """Every sequence ``max_length`` tokens, the prompt a quarter of it."""
    p = max_length // 4
    return [(p, max_length - p, max_length - p)] * n


def plan(layout: str, pairs: list[Pair], micro_pairs: int, token_budget: int, seed: int = 0) -> list[list[int]]:
    """Micro-batches (lists of pair indices) covering every pair once.

    ``fixed``/``pad_max``/``pad_longest``: ``micro_pairs`` pairs each, random order.
    ``grouped``: longest first, filled while 2 × pairs × longest ≤ ``token_budget``.
    ``packed``: random order, filled while real tokens ≤ ``token_budget``.
    A pair longer than the budget still gets a micro-batch of its own.
    """
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    longest = [max(len(p.chosen), len(p.rejected)) for p in pairs]
    if layout in ("fixed", "pad_max", "pad_longest"):
        return [order[i : i + micro_pairs] for i in range(0, len(order), micro_pairs)]
    if layout == "grouped":
        order.sort(key=lambda i: -longest[i])

        def cost(mb, i):
            return 2 * (len(mb) + 1) * max(longest[j] for j in [*mb, i])
    elif layout == "packed":

        def cost(mb, i):
            return sum(len(pairs[j].chosen) + len(pairs[j].rejected) for j in [*mb, i])
    else:
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    batches, current = [], []
    for i in order:
        if current and cost(current, i) > token_budget:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current]


def _sequences(pairs: list[Pair], idx: list[int]) -> tuple[list[torch.Tensor], list[int]]:
    seqs = [pairs[i].chosen for i in idx] + [pairs[i].rejected for i in idx]
    return seqs, [pairs[i].prompt_len for i in idx] * 2


def padded(pairs: list[Pair], idx: list[int], pad_to: int | None, device, pad_id: int = 0) -> Batch:
    """Right-padded rows (to ``pad_to``, or the longest when None) with a 0/1 attention mask."""
    seqs, prompts = _sequences(pairs, idx)
    width = pad_to or max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    src, tgt, seq, last = [], [], [], []
    for row, (s, p) in enumerate(zip(seqs, prompts, strict=True)):
        ids[row, : len(s)] = s
        mask[row, : len(s)] = 1
        last.append(row * width + len(s) - 1)
        src.append(row * width + torch.arange(p - 1, len(s) - 1))
        tgt.append(s[p:])
        seq.append(torch.full((len(s) - p,), row))
    return _batch(ids, mask, None, last, src, tgt, seq, device)


def packed(pairs: list[Pair], idx: list[int], device) -> Batch:
    """One row, sequences end to end, ``position_ids`` restarting at 0 per sequence, no mask.

    transformers (≥ 4.53's ``masking_utils.find_packed_sequence_indices``) reads such
    position ids, when ``attention_mask`` is None, as packed sequences and builds a
    block-diagonal causal mask; :func:`block_diagonal_mask` is the explicit equivalent for
    versions without it.
    """
    seqs, prompts = _sequences(pairs, idx)
    ids = torch.cat(seqs)[None]
    pos = torch.cat([torch.arange(len(s)) for s in seqs])[None]
    src, tgt, seq, last = [], [], [], []
    start = 0
    for k, (s, p) in enumerate(zip(seqs, prompts, strict=True)):
        last.append(start + len(s) - 1)
        src.append(start + torch.arange(p - 1, len(s) - 1))
        tgt.append(s[p:])
        seq.append(torch.full((len(s) - p,), k))
        start += len(s)
    return _batch(ids, None, pos, last, src, tgt, seq, device)


def block_diagonal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """(1, 1, T, T) boolean mask, True = may attend: causal within each packed sequence."""
    doc = (position_ids[0] == 0).cumsum(0)
    t = torch.arange(position_ids.shape[1], device=position_ids.device)
    return ((doc[:, None] == doc[None, :]) & (t[:, None] >= t[None, :]))[None, None]


def packed_masking_available() -> bool:
    """Whether the installed transformers detects packed sequences from ``position_ids``."""
    try:
        from transformers import masking_utils
    except ImportError:
        return False
    return hasattr(masking_utils, "find_packed_sequence_indices")


def _batch(ids, mask, pos, last, src, tgt, seq, device) -> Batch:
    def to(x):
        return None if x is None else x.to(device, non_blocking=True)

    return Batch(
        input_ids=to(ids),
        attention_mask=to(mask),
        position_ids=to(pos),
        last=to(torch.tensor(last)),
        src=to(torch.cat(src)),
        tgt=to(torch.cat(tgt)),
        seq=to(torch.cat(seq)),
        n_seqs=len(last),
        real_tokens=int(mask.sum()) if mask is not None else ids.shape[1],
    )


def micro_batch(layout: str, pairs: list[Pair], idx: list[int], max_length: int, device, mask: bool = True) -> Batch:
    """The inputs of micro-batch ``idx`` in ``layout``; ``mask=False``: no attention mask
    (right-padded rows under causal attention, see :class:`Variant`)."""
    if layout == "packed":
        return packed(pairs, idx, device)
    batch = padded(pairs, idx, max_length if layout == "pad_max" else None, device)
    return batch if mask else dataclasses.replace(batch, attention_mask=None)


def step_tokens(layout: str, pairs: list[Pair], batches: list[list[int]], max_length: int) -> tuple[int, int]:
    """(real tokens, tokens computed incl. padding) of one optimizer step."""
    real = computed = 0
    for idx in batches:
        lengths = [len(s) for s in _sequences(pairs, idx)[0]]
        real += sum(lengths)
        if layout == "packed":
            computed += sum(lengths)
        else:
            computed += len(lengths) * (max_length if layout == "pad_max" else max(lengths))
    return real, computed


@dataclass(frozen=True)
class Variant:
    """One way to run the step: ``layout`` (:data:`LAYOUTS`), ``micro_pairs`` pairs per micro-batch
    (padded layouts), gradient checkpointing, and for dpo whether log-probs come from hidden
    states sliced to response positions (``sliced``) or from full-vocabulary logits.
    ``mask=False``: padded rows go in without an attention mask -- rows are right-padded and
    attention is causal, so no real token attends to a pad and the real tokens' outputs are
    the masked ones (the pads' own outputs differ and are never read); an all-ones or absent
    mask lets sdpa take its fused causal (flash) kernel instead of the masked one.
    ``attn``: the attention implementation for the variant (``flex_attention``: block-sparse
    over the packed sequences, compiled on first use)."""

    name: str
    layout: str
    micro_pairs: int = 4
    gc: bool = False
    sliced: bool = True
    mask: bool = True
    attn: str = "sdpa"
    note: str = ""


# The variants both benchmarks run (bench/rm_throughput.py and bench/dpo_throughput.py add
# their own straightforward and checkpointing rows): bigger micro-batches at the fixed shape,
# then UltraFeedback-like lengths in each layout.
SHARED_VARIANTS = (
    Variant("b8", "fixed", 8),
    Variant("b8-gc", "fixed", 8, gc=True),
    Variant("b16-gc", "fixed", 16, gc=True),
    Variant("c1", "pad_max", 4, note="realistic lengths, padded to max_length"),
    Variant("c2", "pad_longest", 4, note="padded to the micro-batch's longest"),
    Variant("c3", "grouped", note="length-grouped under the token budget"),
    Variant("c4", "packed", note="packed into one row, block-diagonal attention"),
    Variant("c2n", "pad_longest", 4, mask=False, note="c2, right-padded, no mask: fused causal kernel"),
    Variant("c3n", "grouped", mask=False, note="c3, right-padded, no mask: fused causal kernel"),
    Variant("c4x", "packed", attn="flex_attention", note="c4 through flex attention (block-sparse)"),
)


def median_seconds(run_step, steps: int, warmup, sync) -> float:
    """Median wall seconds of ``steps`` calls of ``run_step()`` after ``warmup()`` (synchronised)."""
    warmup()
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        run_step()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def run_variants(
    a, model, variants: list[Variant], vocab_size: int, step_loss, step_flops, set_gc, device
) -> list[dict]:
    """Time each of ``variants`` on the same model and data, one after the other.

    ``a``: the parsed options (``pairs``, ``max_length``, ``token_budget``, ``steps``,
    ``budget``). ``step_loss(variant, pairs, batches)`` runs forward + backward of one step and
    returns its loss; ``step_flops(pairs)`` is the model FLOPs of one step on real tokens;
    ``set_gc(on)`` switches gradient checkpointing. Returns one dict per variant (``error``:
    OOM or skipped for the time budget), timing from a warm-up micro-batch then ``a.steps``
    steps with an AdamW step each.
    """
    gpu = device == "cuda"
    trainable = [p for p in model.parameters() if p.requires_grad]
    # lr 0: the same work per step, but the weights stay put, so every variant's loss is the
    # same model's on the same pairs (rm: c1-c4 agree to rounding, a check on the device too;
    # dpo: ln 2 throughout, as LoRA B starts at 0 and the policy equals its reference).
    optimizer = torch.optim.AdamW(trainable, lr=0.0, weight_decay=0.001)
    real_pairs = make_pairs(ultrafeedback_lengths(a.pairs, a.max_length), vocab_size)
    fixed_pairs = make_pairs(fixed_lengths(a.pairs, a.max_length), vocab_size)
    model.train()
    began, rate, results = time.perf_counter(), None, []
    for v in variants:
        name = v.name
        pairs = fixed_pairs if v.layout == "fixed" else real_pairs
        batches = plan(v.layout, pairs, v.micro_pairs, a.token_budget)
        real, computed = step_tokens(v.layout, pairs, batches, a.max_length)
        row = {"variant": name, "layout": v.layout, "gc": v.gc, "micro_batches": len(batches), "note": v.note}
        row.update(pairs_per_micro_batch=a.pairs / len(batches), real_tokens=real, computed_tokens=computed)
        # seconds: warm-up (one micro-batch) + steps, at the last variant's rate; checkpointing
        # recomputes the forward, ≈ 1.5 × (6 N instead of 4 N a token)
        warm = len(batches[0]) / a.pairs
        estimate = (a.steps + warm) * computed / rate * (GC_FACTOR if v.gc else 1.0) if rate else 0.0
        if time.perf_counter() - began + estimate > a.budget:
            results.append({**row, "error": f"skipped (budget {a.budget:.0f} s; estimate {estimate:.0f} s)"})
            print(f"[{time.perf_counter() - began:.0f} s] {name}: {results[-1]['error']}", file=sys.stderr, flush=True)
            continue
        set_gc(v.gc)
        set_attention(model, v.attn)
        if gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        losses = []

        def warmup(v=v, pairs=pairs, batches=batches):
            step_loss(v, pairs, batches[:1])
            optimizer.zero_grad(set_to_none=True)

        def step(v=v, pairs=pairs, batches=batches, losses=losses):
            losses.append(step_loss(v, pairs, batches))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        try:
            seconds = median_seconds(step, a.steps, warmup, lambda: torch.cuda.synchronize() if gpu else None)
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            results.append({**row, "error": "OOM"})
            print(f"[{time.perf_counter() - began:.0f} s] {name}: OOM", file=sys.stderr, flush=True)
            continue
        except Exception as error:  # a variant the installed stack cannot run (e.g. flex attention)
            optimizer.zero_grad(set_to_none=True)
            message = f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
            results.append({**row, "error": message})
            print(f"[{time.perf_counter() - began:.0f} s] {name}: {message}", file=sys.stderr, flush=True)
            continue
        finally:
            set_attention(model, "sdpa")
        rate = computed / seconds * (GC_FACTOR if v.gc else 1.0)  # computed tokens/s without checkpointing
        flops = step_flops(pairs)
        row.update(seconds=seconds, loss=float(losses[-1]), tokens_per_s=real / seconds, tflops=flops / seconds / 1e12)
        row.update(mfu=flops / seconds / H200_BF16_PEAK if gpu else None)
        row.update(peak_gib=torch.cuda.max_memory_allocated() / 2**30 if gpu else None)
        results.append(row)
        print(f"[{time.perf_counter() - began:.0f} s] {name}: {seconds:.3f} s/step", file=sys.stderr, flush=True)
    set_gc(False)
    return results


def set_attention(model, implementation: str) -> None:
    """Switch the (PEFT-wrapped) model's attention implementation (transformers ≥ 4.56's
    ``set_attn_implementation``; a no-op when it is already ``implementation``)."""
    base = model.get_base_model()
    if base.config._attn_implementation != implementation:
        base.set_attn_implementation(implementation)


def print_variants(results: list[dict]) -> None:
    """The Markdown table of :func:`run_variants`' rows."""
    print(
        "| variant | layout | gc | pairs/micro-batch | real tokens (of computed) | s/step | real tokens/s "
        "| model TFLOP/s | MFU (of 989) | peak GiB | loss |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        head = (
            f"| {r['variant']} | {r['layout']} | {r['gc']} | {r['pairs_per_micro_batch']:.1f} "
            f"| {r['real_tokens']:,} ({r['real_tokens'] / r['computed_tokens']:.0%}) |"
        )
        if "error" in r:
            print(f"{head} {r['error']} | | | | | |")
            continue
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        print(
            f"{head} {r['seconds']:.3f} | {r['tokens_per_s']:,.0f} | {r['tflops']:.2f} | {mfu} | {peak} "
            f"| {r['loss']:.4f} |"
        )
