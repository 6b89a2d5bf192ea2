"""An optimizer step's preference pairs as length-grouped micro-batches, for TRL's trainers.

The Hugging Face ``Trainer`` runs an optimizer step as ``gradient_accumulation_steps``
micro-batches of ``per_device_train_batch_size`` pairs, each padded to its longest row, and
sums their losses divided by the number of micro-batches: the step's loss is the mean over its
pairs. :class:`PairStepMixin` keeps that step -- the same pairs, drawn by the same sampler in
the same order, and the same loss -- but runs it as few micro-batches as a token budget
allows: the Trainer's batch becomes the whole step (``per_device × accumulation`` pairs,
accumulation 1; the sampler's permutation does not depend on the batch size), and
:meth:`PairStepMixin.training_step` sorts the step's pairs by length, cuts them into groups of
at most ``micro_batch_tokens`` padded tokens (:func:`length_groups`) and runs the trainer's
own forward + backward on each group, its loss (the group's mean) weighted by the group's
share of the step's pairs. The gradient is the plain path's up to float rounding (summation
order, padding widths); dropout draws its masks per micro-batch, so with dropout > 0 the masks
are other draws of the same distribution.

Why (``bench/results-2026-12-01-speed.md``): at one pair per micro-batch, the rm full
profile's step is bound by launching kernels, not by the GPU -- a forward, recompute and
backward of Mistral-7B with a LoRA on its 7 projections dispatches ≈ 22,000 operators whatever
the pair's length (``bench/rm_ops.py``), and a step of 64 pairs is 64 of them.

TRL's collators put the chosen rows first, then the rejected ones, right-padded
(``DataCollatorForPreference`` of both ``RewardTrainer`` and ``DPOTrainer``); :func:`take`
relies on that.

Also :func:`drop_padding_mask` (the ``causal_padding`` knob of the rm and dpo recipes) and
:func:`use_cudnn_attention` (their ``cudnn_attention`` knob).
"""

from __future__ import annotations

import torch

# The rm and dpo recipes' ``micro_batch_tokens`` knob (its help text, one wording for both).
MICRO_BATCH_TOKENS_HELP = (
    "null: the Trainer's micro-batches of per_device_train_batch_size pairs. A number: each optimizer step's "
    "per_device_train_batch_size x gradient_accumulation_steps pairs (the same pairs, the same loss: their mean) "
    "run as length-grouped micro-batches of at most this many padded tokens (2 x pairs x longest sequence)"
)

# The rm and dpo recipes' ``cudnn_attention`` knob.
CUDNN_ATTENTION_HELP = (
    "false: PyTorch's sdpa without its cuDNN backend (flash or memory-efficient kernels instead: the same attention up "
    "to float rounding). cuDNN builds a plan for each new input shape (about 0.2 s on an H200), and length-grouped "
    "micro-batches are mostly new shapes. true: PyTorch's own choice"
)


def length_groups(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Pairs cut into micro-batches of at most ``token_budget`` padded tokens.

    ``lengths[i]``: tokens of pair ``i``'s longer sequence. Pairs are sorted longest first
    (ties by index) and a group is filled while ``2 × pairs × longest ≤ token_budget`` (two rows
    per pair, each padded to the group's longest); a pair longer than the budget gets a group
    of its own. Returns lists of pair indices that cover every pair once.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and 2 * (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= token_budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def take(inputs: dict, group: list[int], n_pairs: int) -> dict:
    """The collated inputs of ``group`` (pair indices) out of a batch of ``n_pairs`` pairs.

    Tensors of ``2 n_pairs`` rows (chosen rows, then rejected rows) keep the group's rows in
    that order, and 2-D ones are cut to the group's longest row (``attention_mask``'s row
    sums: right padding); tensors of ``n_pairs`` rows (margins, reference log-probs) keep the
    group's; anything else is passed on as it is.
    """
    index = torch.tensor(group + [i + n_pairs for i in group])
    mask = inputs["attention_mask"]
    rows = index.to(mask.device)
    width = int(mask[rows].sum(1).max())
    out = {}
    for key, value in inputs.items():
        if torch.is_tensor(value) and value.ndim and value.shape[0] == 2 * n_pairs:
            value = value[rows.to(value.device)]
            if value.ndim == 2 and value.shape[1] == mask.shape[1]:
                value = value[:, :width]
        elif torch.is_tensor(value) and value.ndim and value.shape[0] == n_pairs:
            value = value[index[: len(group)].to(value.device)]
        out[key] = value
    return out


class PairStepMixin:
    """Mixin for a TRL preference trainer (``class T(PairStepMixin, RewardTrainer)``): with
    ``micro_batch_tokens`` set, each optimizer step's pairs run as length-grouped micro-batches
    (module docstring); ``None`` leaves the trainer as it is.

    The ``args`` given to the constructor are changed in place: ``per_device_train_batch_size``
    becomes the step's pairs (× ``gradient_accumulation_steps``), accumulation 1. Logged
    metrics: the values TRL appends per micro-batch are merged into one per step, weighted by
    the groups' pairs (so a mean over pairs, as with equal micro-batches), or their minimum /
    maximum for keys naming ``min`` / ``max``.
    """

    def __init__(self, *args, micro_batch_tokens: int | None = None, **kwargs):
        self.micro_batch_tokens = micro_batch_tokens
        self._pair_share = 1.0
        training_args = kwargs["args"]
        if micro_batch_tokens is not None:
            training_args.per_device_train_batch_size *= training_args.gradient_accumulation_steps
            training_args.gradient_accumulation_steps = 1
        super().__init__(*args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self.micro_batch_tokens is None:
            return super().training_step(model, inputs, num_items_in_batch)
        rows = inputs["attention_mask"].sum(1).tolist()
        n = len(rows) // 2
        groups = length_groups([max(rows[i], rows[i + n]) for i in range(n)], self.micro_batch_tokens)
        metrics = self._metrics["train"]
        before = {key: len(values) for key, values in metrics.items()}
        total = None
        try:
            for group in groups:
                self._pair_share = len(group) / n
                loss = super().training_step(model, take(inputs, group, n), num_items_in_batch)
                total = loss if total is None else total + loss
        finally:
            self._pair_share = 1.0
        weights = [len(group) / n for group in groups]
        for key, values in metrics.items():
            new = values[before.get(key, 0) :]
            if len(new) != len(groups):  # running totals (num_tokens) are replaced, not appended
                continue
            if "min" in key:
                merged = min(new)
            elif "max" in key:
                merged = max(new)
            else:
                merged = sum(w * v for w, v in zip(weights, new, strict=True))
            values[before.get(key, 0) :] = [merged]
        return total

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        if self._pair_share == 1.0:
            return out
        return (out[0] * self._pair_share, out[1]) if return_outputs else out * self._pair_share


def drop_padding_mask(model) -> None:
    """Run the backbone of ``model`` without the attention mask of right-padded rows.

    Under causal attention no real token attends to a pad that follows it, so the real tokens'
    hidden states are the masked ones; a sequence classifier's head reads the last non-pad
    token, which the model finds from ``input_ids``, and a causal LM's log-probabilities are
    read at real positions only (labels -100 elsewhere). Without a mask PyTorch's sdpa runs
    its fused causal (flash) kernel instead of the masked one: on an H200, Mistral-7B, 64
    pairs of UltraFeedback-like lengths, micro-batch 1 with checkpointing, 26.8 s per step
    against 37.2 s (``bench/results-2026-12-01-pref.md``). TRL's collators pad on the right; a
    batch with padding before a real token raises ``ValueError``.
    """

    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is not None and bool((mask[:, 1:] > mask[:, :-1]).any()):
            raise ValueError("causal_padding: a row is padded on the left; it needs right-padded rows")
        return args, {**kwargs, "attention_mask": None}

    model.base_model.register_forward_pre_hook(hook, with_kwargs=True)


def use_cudnn_attention(enabled: bool) -> None:
    """``enabled`` false: PyTorch's ``scaled_dot_product_attention`` no longer picks its cuDNN
    backend in this process (``torch.backends.cuda.enable_cudnn_sdp``); true leaves PyTorch's
    choice as it is.

    Why: cuDNN's fused attention builds an execution plan for each new (rows, heads, length)
    shape. On an H200 (torch 2.11, cuDNN by default for causal bf16 attention) forward +
    backward at 24 lengths never seen before took 4.68 s against 0.016 s at one seen length
    (``bench/sdpa_probe.py``), and a length-grouped micro-batch is mostly a new shape: the dpo
    ``full`` step took 3.33 s without cuDNN against 4.05 s with it, rm's 9.81 s against 11.88 s
    (``bench/results-2026-12-02-speed2.md``). Flash attention (FlashAttention-2, Dao 2023)
    computes the same softmax attention; the two differ by float rounding only.
    """
    if not enabled:
        torch.backends.cuda.enable_cudnn_sdp(False)
