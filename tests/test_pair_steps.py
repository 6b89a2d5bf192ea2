"""Length-grouped micro-batches of an optimizer step (``replaykit.tasks.common.pair_steps``, the
``micro_batch_tokens`` knob of the rm and dpo recipes): the groups and the cut by hand, then
the recipes' own trainers in float64, where the grouped step's loss and LoRA gradients must
equal the plain step's (the Trainer's micro-batches) to float64 rounding -- other pairs in a
step, or another weighting of them, would show at 1e-2 -- and the rm recipe end to end in
float32 against its plain run."""

from __future__ import annotations

import contextlib
import json
import random
import sys
from pathlib import Path

import pytest
import torch

from conftest import make_tiny_model, recipe_train, write_request
from replaykit.tasks.common.pair_steps import length_groups, take, use_cudnn_attention


def test_length_groups_by_hand():
    # longest first (ties by index): 1 (9), 3 (9), 0 (5), 2 (3), 4 (2); budget 2 x pairs x longest <= 36
    assert length_groups([5, 9, 3, 9, 2], 36) == [[1, 3], [0, 2, 4]]
    assert length_groups([5, 9, 3, 9, 2], 35) == [[1], [3], [0, 2, 4]]
    assert length_groups([5, 9], 4) == [[1], [0]]  # longer than the budget: alone
    groups = length_groups([random.Random(0).randint(1, 50) for _ in range(64)], 200)
    assert sorted(i for g in groups for i in g) == list(range(64))
    with pytest.raises(ValueError, match="token_budget"):
        length_groups([3], 0)


def test_take_cuts_rows_and_width_by_hand():
    # 3 pairs; rows 0-2 chosen, 3-5 rejected, right-padded to width 5
    lengths = [2, 5, 3, 1, 4, 2]
    mask = torch.tensor([[1] * n + [0] * (5 - n) for n in lengths])
    ids = torch.arange(30).reshape(6, 5) * mask
    margin = torch.tensor([0.1, 0.2, 0.3])
    out = take({"input_ids": ids, "attention_mask": mask, "margin": margin, "note": "kept"}, [2, 0], 3)
    # rows 2, 0 (chosen) then 5, 3 (rejected); width 3 = the longest of those rows
    assert out["input_ids"].tolist() == [[10, 11, 12], [0, 1, 0], [25, 26, 0], [15, 0, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]]
    assert out["margin"].tolist() == pytest.approx([0.3, 0.1])
    assert out["note"] == "kept"


def test_use_cudnn_attention_switches_only_cudnn_off():
    before = [torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled()]
    assert torch.backends.cuda.cudnn_sdp_enabled()  # PyTorch's default
    try:
        use_cudnn_attention(True)
        assert torch.backends.cuda.cudnn_sdp_enabled()
        use_cudnn_attention(False)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert [torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled()] == before
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)


@pytest.fixture(scope="module")
def tiny_mistral(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-mistral", "mistral")


def varied_pairs(n: int, seed: int = 0) -> list[dict]:
    """Plain-text pairs of 1-40 words, so that micro-batches pad very differently."""
    rng = random.Random(seed)
    words = "blue red green the a colour sky name one two three four five yes no".split()

    def text(k):
        return " ".join(rng.choice(words) for _ in range(k))

    return [
        {"prompt": text(rng.randint(1, 12)), "chosen": text(rng.randint(1, 40)), "rejected": text(rng.randint(1, 40))}
        for _ in range(n)
    ]


class Grads:
    """Trainer callback: the LoRA and head gradients before each optimizer step (float64 copies)."""

    def __init__(self):
        from transformers import TrainerCallback

        outer = self
        self.steps: list[dict[str, torch.Tensor]] = []

        class Callback(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
                outer.steps.append(
                    {n: p.grad.detach().double().clone() for n, p in model.named_parameters() if p.grad is not None}
                )

        self.callback = Callback()


def run_trainer(task: str, fixed_start, rows: list[dict], tmp_path, micro_batch_tokens, steps: int = 2):
    """The recipe's trainer class (``RecipeRewardTrainer`` / ``RecipeDPOTrainer``) in float64,
    learning rate 0 and no clipping (every step sees the start's weights), 2 pairs x 4
    micro-batches per step; returns (logged losses, gradients per step)."""
    from peft import LoraConfig
    from transformers import AutoTokenizer

    recipe = recipe_train(task)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(fixed_start)
    common = dict(
        output_dir=str(tmp_path / f"out-{micro_batch_tokens}"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        learning_rate=0.0,
        max_grad_norm=0.0,
        max_steps=steps,
        seed=42,
        data_seed=42,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
    )
    lora = dict(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        init_lora_weights=False,
        target_modules=["q_proj", "v_proj", "down_proj"],
        bias="none",
    )
    from datasets import Dataset

    if task == "rm":
        from transformers import AutoModelForSequenceClassification
        from trl import RewardConfig

        model = AutoModelForSequenceClassification.from_pretrained(fixed_start, num_labels=1, dtype=torch.float64)
        model.config.pad_token_id = tokenizer.pad_token_id
        pairs = [{**recipe.tokenize_pair(tokenizer, r, 64), "margin": 0.25} for r in rows]
        args = RewardConfig(max_length=None, center_rewards_coefficient=0.5, **common)
        peft = LoraConfig(**lora, modules_to_save=["score"], task_type="SEQ_CLS")
        trainer_class = recipe.RecipeRewardTrainer
    else:
        from transformers import AutoModelForCausalLM
        from trl import DPOConfig

        model = AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch.float64)
        pairs = rows
        args = DPOConfig(beta=0.1, loss_type=["sigmoid"], max_length=64, **common)
        peft = LoraConfig(**lora, task_type="CAUSAL_LM")
        trainer_class = recipe.RecipeDPOTrainer
    grads = Grads()
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(pairs),
        processing_class=tokenizer,
        peft_config=peft,
        callbacks=[grads.callback],
        micro_batch_tokens=micro_batch_tokens,
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    metrics = [h for h in trainer.state.log_history if "loss" in h]
    return losses, grads.steps, metrics


# rm: float64 throughout, so 1e-9 of a tensor's largest entry (sums taken in another order).
# dpo: TRL's fused LM head returns float32 log-probabilities whatever the model's dtype
# (trl/kernels/chunked_logprob.py): a sequence's log-prob (~30 terms, about -170) carries
# ~1e-5 of rounding that depends on the rows computed with it, ~1e-6 relative in the
# gradients after β = 0.1 and the sigmoid (2.3e-6 measured in this test's second step), so
# 1e-5; a pair moved to another step would change gradients by 1e-2 or more.
GRADIENT_TOLERANCE = {"rm": 1e-9, "dpo": 1e-5}


@pytest.mark.parametrize("task", ["rm", "dpo"])
def test_grouped_step_gives_the_plain_loss_and_gradients_in_float64(task, tiny_mistral, tmp_path):
    """Steps of 8 pairs (2 x 4 micro-batches) against the same steps cut by a 96-token budget
    (groups of 1-4 pairs of other sizes): every LoRA (and head) gradient agrees to
    :data:`GRADIENT_TOLERANCE` of its largest entry and the logged loss to float32's (the
    Trainer sums it in float32)."""
    rows = varied_pairs(24)
    plain_losses, plain_grads, plain_logs = run_trainer(task, tiny_mistral, rows, tmp_path, None)
    grouped_losses, grouped_grads, grouped_logs = run_trainer(task, tiny_mistral, rows, tmp_path, 96)
    assert len(plain_grads) == len(grouped_grads) == 2
    assert grouped_losses == pytest.approx(plain_losses, rel=1e-6)  # the Trainer logs its loss sum in float32
    for plain, grouped in zip(plain_grads, grouped_grads):
        assert plain.keys() == grouped.keys() and len(plain) > 4
        for name in plain:
            scale = plain[name].abs().max().item()
            assert scale > 0, name
            assert (grouped[name] - plain[name]).abs().max().item() <= GRADIENT_TOLERANCE[task] * scale, name
    # the logged metrics are the plain path's means over the step's pairs (rm's accuracy exactly;
    # dpo's margins, β x differences of float32 log-probs, to β x 2 x 1e-5)
    key = "accuracy" if task == "rm" else "rewards/margins"
    for a, b in zip(plain_logs, grouped_logs):
        assert b[key] == pytest.approx(a[key], rel=1e-9, abs=0 if task == "rm" else 2e-6)


@contextlib.contextmanager
def count_checkpointed_calls():
    """Each call of ``torch.utils.checkpoint.checkpoint`` through transformers' gradient
    checkpointing (one per checkpointed decoder layer per forward), as a list of ``None``s."""
    import transformers.modeling_utils as modeling_utils

    calls, real = [], modeling_utils.checkpoint

    def counted(*args, **kwargs):
        calls.append(None)
        return real(*args, **kwargs)

    modeling_utils.checkpoint = counted
    try:
        yield calls
    finally:
        modeling_utils.checkpoint = real


def run_recipe(task: str, request) -> Path:
    """Run ``recipes/<task>/train.py --request <request>`` in this process; its publish folder."""
    train = recipe_train(task)
    argv = sys.argv
    sys.argv = ["train.py", "--request", str(request)]
    try:
        assert train.main() == 0
    finally:
        sys.argv = argv
    return Path(json.loads(open(request).read())["publish_dir"])


def run_rm_recipe(request) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(run_recipe("rm", request) / "checkpoint-2/adapter_model.safetensors")


def test_rm_recipe_grouped_in_float32_matches_its_plain_run(tiny_mistral, tmp_path):
    """The rm recipe (embedded profile: 4 x 2 pairs a step, float32, AdamW) for 2 steps, plain
    twice and with ``micro_batch_tokens``, without and with gradient checkpointing: the two
    plain runs publish the same bytes (the plain path's spread is 0), the grouped runs' adapters
    differ from them and from each other by float32 rounding only -- at most 1e-4 of the
    largest weight change, where the Adam update of a weight is lr = 2e-4 a step, so a
    different gradient would move weights by ~1e-4 abs."""
    public = tmp_path / "public"
    public.mkdir()
    rows = varied_pairs(16, seed=3)
    (public / "train_prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = {
        "max_steps": 2,
        "save_steps": 2,
        "lora": {
            "r": 4,
            "alpha": 8,
            "dropout": 0.0,
            "target_modules": ["q_proj", "v_proj", "down_proj"],
            "modules_to_save": ["score"],
        },
    }
    a = run_rm_recipe(write_request(tmp_path / "plain-a", tiny_mistral, public, common))
    b = run_rm_recipe(write_request(tmp_path / "plain-b", tiny_mistral, public, common))
    grouped = {**common, "micro_batch_tokens": 64, "causal_padding": True}
    c = run_rm_recipe(write_request(tmp_path / "grouped", tiny_mistral, public, grouped))
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    start = {k: v for k, v in a.items() if "lora_B" in k}  # lora_B starts at 0: its value is its change
    change = max(v.abs().max().item() for v in start.values())
    assert change > 1e-4
    worst = max((c[k] - a[k]).abs().max().item() for k in a)
    assert worst <= 1e-4 * change, worst
    # gradient checkpointing (on in ``full``, off in ``full-nogc``) recomputes the same forward
    checkpointed = {**grouped, "gradient_checkpointing": True}
    with count_checkpointed_calls() as calls_every_layer:
        d = run_rm_recipe(write_request(tmp_path / "grouped-gc", tiny_mistral, public, checkpointed))
    worst = max((d[k] - c[k]).abs().max().item() for k in c)
    assert worst <= 1e-4 * change, worst
    # ... and so does checkpointing every 2nd layer (`gradient_checkpointing_every_n_layers`):
    # of the tiny model's 2 decoder layers only layer 0 is recomputed, half the calls
    every_2nd = {**checkpointed, "gradient_checkpointing_every_n_layers": 2}
    with count_checkpointed_calls() as calls_every_2nd:
        f = run_rm_recipe(write_request(tmp_path / "grouped-gc2", tiny_mistral, public, every_2nd))
    assert len(calls_every_layer) == 2 * len(calls_every_2nd) > 0
    worst = max((f[k] - c[k]).abs().max().item() for k in c)
    assert worst <= 1e-4 * change, worst
    # cudnn_attention: false (the full profiles) reaches torch and changes nothing else: the CPU's
    # sdpa has no cuDNN backend, so the plain run's bytes (on the GPU: bench/results-2026-12-02-speed2.md)
    assert torch.backends.cuda.cudnn_sdp_enabled()
    try:
        e = run_rm_recipe(
            write_request(tmp_path / "plain-no-cudnn", tiny_mistral, public, {**common, "cudnn_attention": False})
        )
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)
    assert all(torch.equal(a[k], e[k]) for k in a)


def test_dpo_recipe_trains_past_its_first_step_with_gradient_checkpointing(tiny_mistral, tmp_path):
    """``full`` checkpoints; TRL's DPOTrainer turns checkpointing off for the reference pass
    and on again with the Trainer's ``gradient_checkpointing_kwargs`` at every step, so any key
    there that torch.utils.checkpoint does not take (transformers' ``every_n_layers``) failed
    the second step (hostile test, 2026-12-05): two steps publish checkpoint-2."""
    public = tmp_path / "public"
    public.mkdir()
    (public / "train_prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in varied_pairs(16, seed=3)))
    request = write_request(
        tmp_path / "run", tiny_mistral, public, {"max_steps": 2, "save_steps": 2, "gradient_checkpointing": True}
    )
    assert (run_recipe("dpo", request) / "checkpoint-2" / "adapter_model.safetensors").is_file()


def test_bfloat16_lora_weights_round_the_full_profile_updates_away(tiny_mistral, tmp_path):
    """``lora_dtype: bfloat16`` (dpo) is a recipe change, not a speed-up: one AdamW step at the
    full profile's learning rate (5e-6; Adam's first step moves each weight by the learning
    rate) on LoRA A weights as PEFT draws them (uniform in ±1/sqrt(fan_in), fan_in 4,096:
    ±1/64) moves every float32 weight and leaves the bfloat16 ones with |w| > 2^-9 (7/8 of
    them) where they were: there bfloat16's half-step (>= 2^-17 = 7.6e-6) exceeds the update."""
    from replaykit.runtime import load_config

    dpo = recipe_train("dpo")
    lr = load_config(dpo.DPOKnobs, dpo.HERE / "configs", "full", {}).learning_rate
    assert lr == 5e-6
    g = torch.Generator().manual_seed(0)
    start = (torch.rand(64, 4096, generator=g) * 2 - 1) / 64
    grad = torch.randn(64, 4096, generator=g)
    moved = {}
    for dtype in (torch.float32, torch.bfloat16):
        w = torch.nn.Parameter(start.to(dtype, copy=True))
        w.grad = grad.to(dtype)
        torch.optim.AdamW([w], lr=lr, weight_decay=0.0).step()
        moved[dtype] = w.detach() != start.to(dtype)
    assert moved[torch.float32].all()
    large = start.to(torch.bfloat16).float().abs() > 2**-9  # above the binade edge: steps of 2^-16
    assert not moved[torch.bfloat16][large].any()
    assert 0.85 < large.float().mean() < 0.9
    # the knob casts the trainable weights only
    rows = varied_pairs(4)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig

    trainer = dpo.RecipeDPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_mistral, dtype=torch.float32),
        args=DPOConfig(output_dir=str(tmp_path), max_steps=1, report_to="none", use_cpu=True),
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(tiny_mistral),
        peft_config=LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM"),
        lora_dtype="bfloat16",
    )
    dtypes = {(p.requires_grad, p.dtype) for p in trainer.model.parameters()}
    assert dtypes == {(True, torch.bfloat16), (False, torch.float32)}
