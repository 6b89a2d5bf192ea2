"""The ddpo task: the DDIM step's log-probability against a direct Gaussian density, the stat
tracker's fallback, the clipped PPO loss by hand, the JPEG reward against PIL, CLIP's BPE
tokenizer against open_clip, a LoRA round trip through the frozen pipeline, the validator's
invalid markers, the aesthetic reward's code path on tiny models, and NaN rewards."""

from __future__ import annotations

import importlib
import io
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, copy_workflow, snakemake, write_config, write_request
from replaykit.tasks import ddpo
from replaykit.tasks.ddpo import evaluator, loader, lora, pipeline, rewards

RECIPE = ROOT / "recipes" / "ddpo"


def recipe_module(name: str):
    if str(RECIPE) not in sys.path:
        sys.path.insert(0, str(RECIPE))
    return importlib.import_module(name)


def ddim(steps: int = 10):
    from diffusers import DDIMScheduler

    scheduler = DDIMScheduler(**pipeline.SCHEDULER)
    scheduler.set_timesteps(steps)
    return scheduler


@pytest.mark.parametrize("index", [0, 4, 9])  # first, middle and last step (the last uses final_alpha_cumprod)
def test_ddim_logprob_equals_gaussian_density(index):
    step = recipe_module("ddim_with_logprob").ddim_step_with_logprob
    scheduler = ddim()
    t = scheduler.timesteps[index]
    g = torch.Generator().manual_seed(index)
    x, eps, noise = (torch.randn(3, 4, 8, 8, generator=g) for _ in range(3))
    # the mean from diffusers' own DDIM step with zero noise, the std from its variance formula
    mean = scheduler.step(eps, t, x, eta=1.0, variance_noise=torch.zeros_like(x)).prev_sample
    prev_t = t - 1000 // 10
    std = scheduler._get_variance(t, prev_t).sqrt()
    expected_prev = scheduler.step(eps, t, x, eta=1.0, variance_noise=noise).prev_sample
    prev, log_prob = step(scheduler, eps, t, x, eta=1.0, noise=noise)
    torch.testing.assert_close(prev, expected_prev, rtol=1e-5, atol=1e-5)
    density = torch.distributions.Normal(mean, std).log_prob(prev).mean(dim=(1, 2, 3))
    torch.testing.assert_close(log_prob, density, rtol=1e-5, atol=1e-5)
    # scoring a given x_{t-1} (training) gives the same log-probability
    _, again = step(scheduler, eps, t, x, eta=1.0, prev_sample=prev)
    torch.testing.assert_close(again, density, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sampled_log_prob_scores_the_stored_16_bit_sample(dtype):
    """A 16-bit trajectory stores x_{t-1} in 16 bits, and training scores that stored value: the
    sampling step's log-probability is of the rounded sample, so with the same eps the training
    pass gives it exactly (PPO's ratio is 1 before an update) -- and it is the Gaussian density
    of the rounded sample. Scoring the unrounded sample instead put the first update's ratios of
    a bf16 toy pipeline off by more than the full profile's clip range (1e-4) on 92 % of its
    (sample, step) entries, up to 0.2 in log-probability (bench/results-2026-12-01-speed.md)."""
    step = recipe_module("ddim_with_logprob").ddim_step_with_logprob
    scheduler = ddim()
    t = scheduler.timesteps[8]  # a late step: small sigma, where the rounding of x_{t-1} weighs most
    g = torch.Generator().manual_seed(3)
    x, eps, noise = (torch.randn(4, 4, 8, 8, generator=g) for _ in range(3))
    x, eps = x.to(dtype), eps.to(dtype)
    prev, log_prob = step(scheduler, eps, t, x, eta=1.0, noise=noise)
    assert prev.dtype == dtype
    _, again = step(scheduler, eps, t, x, eta=1.0, prev_sample=prev)
    assert torch.equal(again, log_prob)
    mean = scheduler.step(eps.float(), t, x.float(), eta=1.0, variance_noise=torch.zeros_like(noise)).prev_sample
    std = scheduler._get_variance(t, t - 1000 // 10).sqrt()
    density = torch.distributions.Normal(mean, std).log_prob(prev.float()).mean(dim=(1, 2, 3))
    torch.testing.assert_close(log_prob, density, rtol=1e-5, atol=1e-5)
    unrounded = torch.distributions.Normal(mean, std).log_prob(mean + std * noise).mean(dim=(1, 2, 3))
    assert (unrounded - density).abs().max() > 1e-4  # what the old bookkeeping got wrong, at this step


def test_stat_tracker_falls_back_to_batch_statistics_below_min_count():
    tracker = recipe_module("stat_tracking").PerPromptStatTracker(buffer_size=4, min_count=3)
    prompts, rewards_1 = ["a", "a", "b"], [1.0, 3.0, 5.0]
    # 'a' has 2 < 3 rewards, 'b' 1: both use the batch (mean 3, population SD sqrt(8/3))
    sd = math.sqrt(((1 - 3) ** 2 + 0 + (5 - 3) ** 2) / 3)
    np.testing.assert_allclose(tracker.update(prompts, rewards_1), [(1 - 3) / (sd + 1e-6), 0.0, (5 - 3) / (sd + 1e-6)])
    # now 'a' holds 1, 3, 7 (3 rewards): its own buffer; 'b' holds 5, 9 (2): the batch 7, 9
    adv = tracker.update(["a", "b"], [7.0, 9.0])
    a_mean, a_sd = 11 / 3, math.sqrt(((1 - 11 / 3) ** 2 + (3 - 11 / 3) ** 2 + (7 - 11 / 3) ** 2) / 3)
    np.testing.assert_allclose(adv, [(7 - a_mean) / (a_sd + 1e-6), (9 - 8) / (1 + 1e-6)])
    # the buffer keeps the last 4 rewards only
    tracker.update(["a", "a"], [0.0, 0.0])
    assert list(tracker.stats["a"]) == [3.0, 7.0, 0.0, 0.0]


def test_ppo_clipped_loss_on_hand_values():
    train = recipe_module("train")
    advantages = torch.tensor([1.0, -2.0, 10.0])
    old = torch.zeros(3)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5]))  # ratios 1.5, 1.5, 0.5
    loss, kl, clipfrac = train.ppo_loss(advantages, new, old, clip_range=0.2, adv_clip_max=5.0)
    # row 1: A=1,  r=1.5: max(-1.5, -1.2) = -1.2
    # row 2: A=-2, r=1.5: max(3.0, 2.4)   = 3.0
    # row 3: A=10 clipped to 5, r=0.5: max(-2.5, -4.0) = -2.5
    assert loss.item() == pytest.approx((-1.2 + 3.0 - 2.5) / 3)
    assert kl.item() == pytest.approx(0.5 * (2 * math.log(1.5) ** 2 + math.log(0.5) ** 2) / 3)
    assert clipfrac.item() == pytest.approx(1.0)


class _LinearUNet(torch.nn.Module):
    """A UNet stand-in whose noise prediction depends on trainable weights and the prompt."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.mix = torch.nn.Parameter(torch.eye(channels) + 0.1 * torch.randn(channels, channels))
        self.text = torch.nn.Parameter(0.1 * torch.randn(width))

    def forward(self, x, t, encoder_hidden_states):
        out = (
            torch.einsum("bchw,cd->bdhw", x, self.mix)
            + (encoder_hidden_states @ self.text).mean(1)[:, None, None, None]
        )
        return type("Out", (), {"sample": out})()


def test_full_profile_minibatches_give_the_contract_updates():
    """``full`` trains in minibatches of 16 x accumulation 1 where the contract says 4 x 4: the
    same 2 optimizer updates of the same 16-sample mean gradient per epoch (the loss of each
    step is divided by accumulation x steps). Plain SGD without clipping, as Adam and clipping
    would hide a wrongly scaled gradient; 4 x 1 (4 updates) differs."""
    from types import SimpleNamespace

    train = recipe_module("train")
    torch.manual_seed(0)
    unet = _LinearUNet(channels=4, width=6)
    pipe = SimpleNamespace(
        unet=unet,
        latent_shape=(4, 3, 3),
        device="cpu",
        dtype=torch.float32,
        encode_prompts=lambda p: torch.randn(len(p), 5, 6, generator=torch.Generator().manual_seed(len(p))),
        decode=lambda x: x,
    )
    scheduler = ddim(4)
    knobs = dict(guidance_scale=5.0, eta=1.0, clip_range=0.2, adv_clip_max=5.0, max_grad_norm=1e6)  # no clipping
    with torch.no_grad():
        batch = train.sample_epoch(
            pipe,
            scheduler,
            ["a"] * 32,
            SimpleNamespace(sample_batch_size=32, **knobs),
            torch.Generator().manual_seed(1),
        )
    advantages = torch.randn(32, generator=torch.Generator().manual_seed(2))
    start = {k: v.detach().clone() for k, v in unet.state_dict().items()}

    def weights_after(batch_size: int, accumulation: int) -> list[torch.Tensor]:
        unet.load_state_dict(start)
        params = list(unet.parameters())
        optimizer = torch.optim.SGD(params, lr=0.5)  # Adam would hide a scaled gradient
        recipe = SimpleNamespace(train_batch_size=batch_size, gradient_accumulation_steps=accumulation, **knobs)
        train.train_epoch(
            pipe, scheduler, batch, advantages, params, optimizer, recipe, torch.Generator().manual_seed(3)
        )
        return [p.detach().clone() for p in params]

    contract = weights_after(4, 4)
    for got in (weights_after(16, 1), weights_after(8, 2)):
        for a, b in zip(got, contract):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a, b, rtol=1e-3) for a, b in zip(weights_after(4, 1), contract))


def test_jpeg_compressibility_is_minus_pil_size_in_kb():
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    images = torch.stack([torch.zeros(3, 32, 32), torch.rand(3, 32, 32, generator=g)])
    expected = []
    for image in images:
        buffer = io.BytesIO()
        array = (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        Image.fromarray(array).save(buffer, format="JPEG", quality=95)
        expected.append(-len(buffer.getvalue()) / 1000)
    got = rewards.jpeg_compressibility()(images, ["x", "y"])
    np.testing.assert_allclose(got, expected)
    assert got[0] > got[1]  # a flat image compresses better than noise


def test_tokenizer_matches_open_clip(tmp_path):
    import open_clip
    from transformers import CLIPTokenizer

    from replaykit.tasks.ddpo.tokenizer import write_clip_tokenizer

    tok = CLIPTokenizer.from_pretrained(write_clip_tokenizer(tmp_path / "tok", 16))
    texts = ["a photo of the digit seven", "a cat riding a bicycle!"]
    ours = tok(texts, padding="max_length", max_length=16).input_ids
    theirs = open_clip.get_tokenizer("ViT-B-32")(texts, context_length=16).tolist()
    for a, b in zip(ours, theirs):
        n = a.index(49407) + 1  # open_clip pads with 0, CLIPTokenizer with eos
        assert a[:n] == b[:n] and len(tok) == 49408


@pytest.fixture(scope="module")
def fixed_start(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddpo") / "pipeline"
    pipeline.build(
        {"seed": 0, "vae_epochs": 1, "unet_steps": 3, "clip_epochs": 1, "check_samples": 1, "max_images": 200},
        out,
        log=lambda m: None,
    )
    return out


@pytest.fixture(scope="module")
def assets(fixed_start, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddpo-assets")
    info = ddpo.build_assets(
        {"source": "embedded", "public_seed": 1, "n_proxy": 6, "hidden_seed": 2, "n_final": 8},
        fixed_start,
        root / "public",
        root / "hidden",
    )
    return root, info


def test_assets_streams(fixed_start, assets):
    root, info = assets
    proxy = [json.loads(line) for line in (root / "public/proxy.jsonl").read_text().splitlines()]
    final = [json.loads(line) for line in (root / "hidden/final.jsonl").read_text().splitlines()]
    assert (len(proxy), len(final)) == (6, 8) and info["reward"] == "jpeg_compressibility"
    assert not {r["latent_seed"] for r in proxy} & {r["latent_seed"] for r in final}
    assert set(r["prompt"] for r in proxy + final) <= set(pipeline.prompts())
    assert (root / "public/prompts.txt").read_text().splitlines() == pipeline.prompts()
    assert json.loads((root / "hidden/scoring.json").read_text())["inference_steps"] == 20
    assert (fixed_start / "model_index.json").is_file() and (fixed_start / "clip/open_clip.safetensors").is_file()


def make_lora(
    fixed_start: Path, out: Path, targets=("to_q", "to_k", "to_v", "to_out.0"), scale: float = 0.3, **config
) -> Path:
    from peft import LoraConfig

    pipe = pipeline.Pipeline(fixed_start)
    pipe.unet.add_adapter(
        LoraConfig(r=2, lora_alpha=2, init_lora_weights="gaussian", target_modules=list(targets), **config)
    )
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in pipe.unet.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * scale)  # PEFT starts B at 0: make the adapter change the UNet
    return lora.save_lora(pipe.unet, out)


def test_lora_round_trip_gives_identical_samples(fixed_start, tmp_path):
    from peft import LoraConfig, set_peft_model_state_dict
    from safetensors.torch import load_file

    checkpoint = make_lora(fixed_start, tmp_path / "ckpt")
    latents = torch.stack([pipeline.initial_latents(s, (4, 8, 8)) for s in (3, 4)])
    texts = ["a photo of the digit one", "a photo of the digit two"]
    # the trained UNet: base + adapter set directly with PEFT
    direct = pipeline.Pipeline(fixed_start)
    direct.unet.add_adapter(LoraConfig.from_pretrained(str(checkpoint)))
    set_peft_model_state_dict(direct.unet, load_file(str(checkpoint / "adapter_model.safetensors")))
    expected = pipeline.sample(direct, texts, latents, steps=4, guidance=5.0)
    frozen = pipeline.Pipeline(fixed_start)
    lora.load_lora(frozen.unet, checkpoint)
    got = pipeline.sample(frozen, texts, latents, steps=4, guidance=5.0)
    assert torch.equal(got, expected)
    base = pipeline.sample(pipeline.Pipeline(fixed_start), texts, latents, steps=4, guidance=5.0)
    assert not torch.allclose(got, base)  # the adapter is really applied


def test_validator_names_wrong_targets_and_shapes(fixed_start, tmp_path):
    from safetensors.torch import load_file, save_file

    good = make_lora(fixed_start, tmp_path / "good")
    verdict = loader.validate(good, fixed_start)
    assert verdict["valid"], verdict["reason"]
    assert verdict["checks"]["lora"]["target_modules"] == ["to_k", "to_out.0", "to_q", "to_v"]
    wrong = make_lora(fixed_start, tmp_path / "ff", targets=("to_q", "proj_in"))
    verdict = loader.validate(wrong, fixed_start)
    assert not verdict["valid"] and "target_modules ['proj_in'] are not UNet attention projections" in verdict["reason"]
    shapes = make_lora(fixed_start, tmp_path / "shapes")
    state = load_file(str(shapes / "adapter_model.safetensors"))
    key = next(k for k in state if k.endswith("to_q.lora_A.weight"))
    state[key] = torch.zeros(3, state[key].shape[1])
    save_file(state, str(shapes / "adapter_model.safetensors"))
    verdict = loader.validate(shapes, fixed_start)
    assert not verdict["valid"] and "wrong shapes" in verdict["reason"] and key in verdict["reason"]


def test_validator_resolves_rank_pattern_as_peft(fixed_start, tmp_path):
    """A UNet LoRA with ``rank_pattern`` / ``alpha_pattern`` keys that PEFT reads as regular
    expressions (issue 31): the validator expects, per module, the rank PEFT gives it on loading."""
    patterns = {"rank_pattern": {"to_q|to_v": 4, r"down_blocks\.0\..*\.to_k": 3}, "alpha_pattern": {"to_q|to_v": 8}}
    checkpoint = make_lora(fixed_start, tmp_path / "ckpt", **patterns)
    verdict = loader.validate(checkpoint, fixed_start)
    assert verdict["valid"], verdict["reason"]
    unet = pipeline.Pipeline(fixed_start).unet
    lora.load_lora(unet, checkpoint)  # PEFT's own loading
    loaded = {
        name: (module.r["default"], module.lora_alpha["default"])
        for name, module in unet.named_modules()
        if hasattr(module, "lora_A") and "default" in getattr(module, "r", {})
    }
    counts: dict = {}
    for pair in loaded.values():
        counts[pair] = counts.get(pair, 0) + 1
    assert verdict["checks"]["lora"]["rank_alpha"] == [
        {"r": r, "alpha": a, "modules": n} for (r, a), n in sorted(counts.items())
    ]
    assert {r for r, _ in loaded.values()} == {2, 3, 4}  # every key applies somewhere


def test_evaluator_mean_and_se_against_rows(fixed_start, assets):
    root, _ = assets
    summary, rows = evaluator.evaluate(
        None, fixed_start, root / "hidden/final.jsonl", ddpo.METRIC["final"], {"batch_size": 4}
    )
    scores = np.array([r["score"] for r in rows])
    assert summary["metric"] == "mean_jpeg_compressibility_final8" and summary["n"] == 8
    assert summary["value"] == pytest.approx(scores.mean())
    assert summary["uncertainty"]["value"] == pytest.approx(scores.std(ddof=1) / math.sqrt(8))
    assert 0 <= summary["diagnostics"]["mean_pairwise_image_distance"] <= 2
    # the image a row is scored on is the deterministic DDIM sample of its prompt and latent seed
    items = evaluator.read_items(root / "hidden/final.jsonl")
    pipe = pipeline.Pipeline(fixed_start)
    image = pipeline.sample(
        pipe,
        [items[0]["prompt"]],
        pipeline.initial_latents(items[0]["latent_seed"], (4, 8, 8))[None],
        steps=20,
        guidance=5.0,
    )
    assert rows[0]["score"] == pytest.approx(float(rewards.jpeg_compressibility()(image, [""])[0]))


def test_mean_pairwise_distance_by_hand():
    e = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # pairs: (1,2) cos 0 -> 1; (1,3) cos -1 -> 2; (2,3) cos 0 -> 1; mean 4/3
    assert evaluator.mean_pairwise_distance(e) == pytest.approx(4 / 3)


def tiny_clip_and_mlp(tmp_path: Path) -> tuple[Path, Path]:
    """A transformers CLIPModel of ViT-L/14's structure at toy size (projection 12) with CLIP's
    tokenizer, and an aesthetic MLP of LAION's layers on 12 inputs."""
    from transformers import CLIPConfig, CLIPModel

    from replaykit.tasks.ddpo.tokenizer import write_clip_tokenizer

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={
            "vocab_size": 49408,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=12,
    )
    clip_dir = tmp_path / "clip"
    CLIPModel(config).save_pretrained(clip_dir)
    write_clip_tokenizer(clip_dir, 77)
    torch.save(rewards.AestheticMLP(12).state_dict(), tmp_path / "mlp.pth")
    return clip_dir, tmp_path / "mlp.pth"


def test_full_scale_assets_and_evaluator_on_tiny_models(fixed_start, tmp_path):
    clip_dir, mlp = tiny_clip_and_mlp(tmp_path)
    prompts = tmp_path / "animals.txt"
    prompts.write_text("cat\ndog\n\nhorse\n")
    cfg = {
        "source": "local",
        "prompts_file": str(prompts),
        "clip_dir": str(clip_dir),
        "aesthetic_mlp": str(mlp),
        "public_seed": 1,
        "n_proxy": 2,
        "hidden_seed": 2,
        "n_final": 3,
    }
    ddpo.check_data(cfg)
    # SD v1.5's folder layout: model_index.json and the component folders, no config.json
    import shutil

    from replaykit.cli import main as cli

    sd = tmp_path / "sd"
    shutil.copytree(fixed_start, sd)
    (sd / "config.json").unlink()
    shutil.rmtree(sd / "clip")
    assert (sd / "unet/config.json").is_file() and not (sd / "config.json").exists()
    assert (
        cli(
            [
                "assets",
                "--task",
                "ddpo",
                "--cfg",
                json.dumps({"data": cfg}),
                "--fixed-start",
                str(sd),
                "--public",
                str(tmp_path / "public"),
                "--hidden",
                str(tmp_path / "hidden"),
                "--manifest",
                str(tmp_path / "manifest.json"),
            ]
        )
        == 0
    )
    info = json.loads((tmp_path / "manifest.json").read_text())["data"]
    assert info["reward"] == "aesthetic" and info["n_prompts"] == 3
    scoring = json.loads((tmp_path / "hidden/scoring.json").read_text())
    assert scoring["embedder"]["kind"] == "hf_clip" and "model.safetensors" in scoring["clip_files"]
    summary, rows = evaluator.evaluate(None, sd, tmp_path / "hidden/final.jsonl", ddpo.METRIC["final"], {})
    assert summary["metric"] == "mean_aesthetic_score_final3" and len(rows) == 3
    assert all(math.isfinite(r["score"]) for r in rows)
    with pytest.raises(ValueError, match="aesthetic_mlp"):
        ddpo.check_data({**cfg, "aesthetic_mlp": str(tmp_path / "missing.pth")})


def test_aesthetic_reward_code_path_with_tiny_models(tmp_path):
    from transformers import CLIPModel, CLIPTokenizer

    clip_dir, mlp_path = tiny_clip_and_mlp(tmp_path)
    mlp = rewards.AestheticMLP(12)
    mlp.load_state_dict(torch.load(mlp_path, weights_only=True))
    images = torch.rand(3, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    got = rewards.aesthetic(clip_dir, mlp_path)(images, ["a", "b", "c"])
    # independently: resize + normalise, CLIP image features, L2-normalise, the MLP's linear layers
    model = CLIPModel.from_pretrained(clip_dir).eval()
    x = torch.nn.functional.interpolate(images, size=(32, 32), mode="bicubic", antialias=True).clamp(0, 1)
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073])[:, None, None]
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711])[:, None, None]
    with torch.no_grad():
        emb = model.visual_projection(model.vision_model(pixel_values=(x - mean) / std).pooler_output)
        emb = emb / emb.norm(dim=-1, keepdim=True)
        expected = emb
        for layer in (0, 2, 4, 6, 7):
            expected = mlp.layers[layer](expected)
    np.testing.assert_allclose(got, expected.squeeze(-1).numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(CLIPTokenizer.from_pretrained(clip_dir), CLIPTokenizer)


TINY_RECIPE = {
    "num_epochs": 3,
    "sample_batch_size": 2,
    "num_batches_per_epoch": 2,
    "num_steps": 3,
    "train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "save_freq": 1,
    "stat_min_count": 2,
    "learning_rate": 3e-3,
    "clip_range": 1e-2,
}


def run_recipe(fixed_start, assets, state: Path, overrides: dict, resume: bool = False, reward=None) -> int:
    """``train.main()`` in this process on a request like the replay driver's."""
    train = recipe_module("train")
    root, _ = assets
    request = write_request(state, fixed_start, root / "public", {**TINY_RECIPE, **overrides}, resume=resume)
    argv, original = sys.argv, train.reward_fn
    sys.argv = ["train.py", "--request", str(request)]
    if reward is not None:
        train.reward_fn = lambda scoring, device: reward
    try:
        return train.main()
    finally:
        sys.argv, train.reward_fn = argv, original


def test_resume_continues_the_same_replay(fixed_start, assets, tmp_path):
    from safetensors.torch import load_file

    assert run_recipe(fixed_start, assets, tmp_path / "straight", {}) == 0
    assert run_recipe(fixed_start, assets, tmp_path / "cut", {"num_epochs": 2}) == 0
    assert run_recipe(fixed_start, assets, tmp_path / "cut", {}, resume=True) == 0
    a = load_file(str(tmp_path / "straight/publish/checkpoint-3/adapter_model.safetensors"))
    b = load_file(str(tmp_path / "cut/publish/checkpoint-3/adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    history = json.loads((tmp_path / "cut/state/train_result.json").read_text())["history"]
    assert [h["progress"] for h in history] == [1, 2, 3]  # the first attempt's epochs are kept
    assert {"reward_mean", "reward_std", "approx_kl", "clipfrac", "loss"} <= history[0].keys()


def test_compile_knob_compiles_the_unet_and_saves_the_same_lora(fixed_start, assets, tmp_path, monkeypatch):
    """``compile: true`` (the full profile's) does two things: the UNet in channels-last layout,
    then compiled in place. The published LoRA keeps the plain run's keys, and compiling adds
    nothing of its own: through dynamo with the eager backend (the same aten ops, the same
    autograd; Inductor's compilation is measured on the GPU by bench/ddpo_throughput.py) the LoRA
    is bit-identical to the run that takes the layout but skips the compilation.

    No elementwise tolerance is asserted between layouts: channels-last convolutions sum their
    products in another order (float32 reassociation, relative ~1e-7 per sum), and AdamW's
    update ``lr * m / (sqrt(v) + eps)`` divides each gradient element by its own size, so an
    element whose gradient nearly cancels can move by up to ``2 * lr`` per update whatever the
    rounding (measured here: 1 of 256 elements 3.7e-5 apart after 2 updates at lr 3e-3). The
    layout's own effect is checked where a bound holds: one forward pass of the fixed start's
    UNet (:func:`test_channels_last_unet_matches_within_float32_reassociation`)."""
    from safetensors.torch import load_file

    compiled, original = [], torch.nn.Module.compile

    def eager_compile(module, *args, **kwargs):
        compiled.append(module)
        return original(module, backend="eager")

    def layout_only(module, *args, **kwargs):
        compiled.append(None)  # the layout is set before compile() is called; nothing compiled

    monkeypatch.setattr(torch.nn.Module, "compile", layout_only)
    assert run_recipe(fixed_start, assets, tmp_path / "layout", {"num_epochs": 1, "compile": True}) == 0
    monkeypatch.setattr(torch.nn.Module, "compile", eager_compile)
    assert run_recipe(fixed_start, assets, tmp_path / "compiled", {"num_epochs": 1, "compile": True}) == 0
    assert compiled[0] is None and [type(m).__name__ for m in compiled[1:]] == ["UNet2DConditionModel"]
    conv = next(m for m in compiled[1].modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    monkeypatch.setattr(torch.nn.Module, "compile", original)
    assert run_recipe(fixed_start, assets, tmp_path / "plain", {"num_epochs": 1}) == 0
    [plain, layout, eager] = [
        load_file(str(tmp_path / name / "publish/checkpoint-1/adapter_model.safetensors"))
        for name in ("plain", "layout", "compiled")
    ]
    assert plain.keys() == layout.keys() == eager.keys()
    for key in plain:
        assert torch.equal(eager[key], layout[key]), key
        assert eager[key].dtype == plain[key].dtype and eager[key].shape == plain[key].shape


def test_channels_last_unet_matches_within_float32_reassociation(fixed_start):
    """The fixed start's UNet gives the same noise prediction in channels-last layout as in the
    default layout, to float32 reassociation. A sum of K products computed in another order
    differs by at most ``2 * gamma_K * sum|w x|`` (Higham, Accuracy and Stability of Numerical
    Algorithms, 2nd ed., eq. 3.5: ``gamma_K = K u / (1 - K u)``, u = 2^-24). The tolerance is a
    first-order estimate for the network, not a proof: that per-layer bound (K the largest
    reduction of any convolution or linear map, ``sum|w x|`` taken as the output's largest
    magnitude) times the number of such layers, whose errors add to first order (group norms
    between them keep the scale). A layout fault (a weight read transposed) moves the output
    by its own size, far beyond it.
    """
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(str(fixed_start / "unet")).eval()
    gen = torch.Generator().manual_seed(0)
    size = unet.config.sample_size
    x = torch.randn(2, unet.config.in_channels, size, size, generator=gen)
    context = torch.randn(2, 4, unet.config.cross_attention_dim, generator=gen)
    t = torch.tensor([500, 20])
    with torch.no_grad():
        plain = unet(x, t, encoder_hidden_states=context).sample
        unet.to(memory_format=torch.channels_last)
        last = unet(x.to(memory_format=torch.channels_last), t, encoder_hidden_states=context).sample
    layers = [m for m in unet.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    k = max(m.weight[0].numel() for m in layers)  # products summed per output element
    u = 2.0**-24
    gamma = k * u / (1 - k * u)
    bound = 2 * gamma * len(layers) * plain.abs().max().item()
    assert (last - plain).abs().max().item() <= bound


def test_nan_reward_stops_training_and_keeps_earlier_checkpoints(fixed_start, assets, tmp_path, capsys):
    from replaykit.runtime import NAN_EXIT

    calls = []

    def reward(images, prompts):
        calls.append(1)
        values = -rewards.jpeg_size_kb(images)
        return values if len(calls) < 2 else values * np.nan

    assert run_recipe(fixed_start, assets, tmp_path, {}, reward=reward) == NAN_EXIT
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["stop_reason"] == "nan_loss" and "epoch 2: 4 of 4 rewards are NaN/inf" in result["error"]
    assert sorted(p.name for p in (tmp_path / "publish").glob("checkpoint-*")) == ["checkpoint-1"]
    assert "error: epoch 2" in capsys.readouterr().out


@pytest.mark.slow
def test_ddpo_dag_with_the_builder_and_a_wrong_target_candidate(tmp_path):
    import difflib

    work = copy_workflow(tmp_path)
    spec = {
        "builder": "ddpo-digits",
        "seed": 0,
        "vae_epochs": 1,
        "unet_steps": 3,
        "clip_epochs": 1,
        "check_samples": 1,
        "max_images": 200,
    }
    task = {
        "fixed_start": "ddpo-tiny",
        "data": {"source": "embedded", "public_seed": 1, "n_proxy": 4, "hidden_seed": 2, "n_final": 6},
        "recipe": {"profile": "embedded", "overrides": {**TINY_RECIPE, "num_epochs": 2}},
        "seeds": [42],
        "threads": 1,
        "budget": {"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
        "validation": {"runtime": 5},
        "evaluation": {"batch_size": 8, "runtime": 5},
        "final": {"n_boot": 500},
    }
    write_config(work, {"models": {"ddpo-tiny": spec}, "tasks": {"ddpo": task}})
    snakemake(work, "results/ddpo/report.html", "--cores", "2", "--resources", "gpu=1", check=True)
    summary = json.loads((work / "results/ddpo/final/summary.json").read_text())
    assert summary["metric"] == "mean_jpeg_compressibility_final6" and summary["n"] == 6
    assert (work / "results/ddpo/final/.complete").exists()
    assert {"text_image_alignment", "mean_pairwise_image_distance"} <= summary["diagnostics"].keys()
    assert "vs_fixed_start" in summary["comparisons"]
    record = json.loads((work / "results/ddpo/shipped-seed42/replay/record.json").read_text())
    assert record["retained"] == [1, 2] and record["stop_reason"] == "max_steps"
    # the HTML report: every checkpoint, and the training curve is the per-epoch reward
    html = (work / "results/ddpo/report.html").read_text()
    assert all(f'data-run="shipped-seed42" data-progress="{p}"' in html for p in (1, 2))
    assert [h["progress"] for h in record["train_history"]] == [1, 2]
    assert all("reward_mean" in h for h in record["train_history"])
    manifest = json.loads((work / "results/models/ddpo-tiny.manifest.json").read_text())
    assert "unet/diffusion_pytorch_model.safetensors" in manifest["files"]
    # a candidate that puts LoRA on the UNet's proj_in too: an invalid marker naming it
    config = (work / "recipes/ddpo/configs/embedded.yaml").read_text()
    patched = config.replace(
        "target_modules: [to_q, to_k, to_v, to_out.0]", "target_modules: [to_q, to_k, to_v, to_out.0, proj_in]"
    )
    assert patched != config
    patch = tmp_path / "proj_in.diff"
    patch.write_text(
        "".join(
            difflib.unified_diff(
                config.splitlines(True), patched.splitlines(True), "a/configs/embedded.yaml", "b/configs/embedded.yaml"
            )
        )
    )
    # one epoch is enough to be refused (the shipped run above is not in this target's DAG)
    task.update(
        candidates={"projin": str(patch)}, recipe={"profile": "embedded", "overrides": {**TINY_RECIPE, "num_epochs": 1}}
    )
    write_config(work, {"models": {"ddpo-tiny": spec}, "tasks": {"ddpo": task}})
    snakemake(work, "results/ddpo/projin-seed42/official.json", "--cores", "2", "--resources", "gpu=1", check=True)
    marker = json.loads((work / "results/ddpo/projin-seed42/validation/checkpoint-1.json").read_text())
    assert not marker["valid"] and "target_modules ['proj_in'] are not UNet attention projections" in marker["reason"]


def test_deadline_stop_publishes_the_last_epoch(fixed_start, assets, tmp_path, monkeypatch):
    import time as real_time
    from types import SimpleNamespace

    from replaykit.runtime import session

    train = recipe_module("train")
    offset = [0.0]
    original = train.train_epoch

    def train_then_jump(*args, **kwargs):  # the clock passes the deadline once epoch 1 has trained
        out = original(*args, **kwargs)
        offset[0] = 10_000.0
        return out

    monkeypatch.setattr(train, "train_epoch", train_then_jump)
    clock = SimpleNamespace(time=lambda: real_time.time() + offset[0])
    monkeypatch.setattr(train, "time", clock)
    monkeypatch.setattr(session, "time", clock)  # the deadline is the runtime Session's
    assert run_recipe(fixed_start, assets, tmp_path, {"save_freq": 5}) == 0  # deadline: exit 0
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["stop_reason"] == "deadline" and result["steps"] == 1
    assert sorted(p.name for p in (tmp_path / "publish").glob("checkpoint-*")) == ["checkpoint-1"]


def test_config_accepts_a_diffusers_pipeline_folder_as_fixed_start(tmp_path):
    import yaml

    from replaykit.config import check_config
    from replaykit.harness.errors import InputError

    task = yaml.safe_load((ROOT / "config/config.yaml").read_text())["tasks"]["ddpo"]
    sd = tmp_path / "sd15"
    sd.mkdir()
    config = {"models": {}, "tasks": {"ddpo": {**task, "fixed_start": str(sd)}}}
    with pytest.raises(InputError, match="model_index.json"):
        check_config(config, ROOT / "config/schema.yaml", "test.yaml")
    (sd / "model_index.json").write_text("{}")  # SD v1.5's layout has no config.json at its root
    check_config(config, ROOT / "config/schema.yaml", "test.yaml")


def run_recipe_process(fixed_start, assets, state: Path, env: dict | None = None):
    """``train.py`` as the replay driver starts it (own process, so a fault may end it)."""
    import os
    import subprocess

    root, _ = assets
    request = write_request(state, fixed_start, root / "public", TINY_RECIPE, resume=(state / "state").exists())
    full = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **(env or {}))
    cmd = [sys.executable, "train.py", "--request", str(request)]
    return subprocess.run(cmd, cwd=RECIPE, env=full, capture_output=True, text=True, timeout=600)


def _ledger(publish: Path) -> list[int]:
    lines = (publish / "publications.jsonl").read_text().splitlines()
    return [json.loads(line)["progress"] for line in lines]


@pytest.mark.slow
def test_resume_never_trains_past_the_last_epoch(fixed_start, assets, tmp_path):
    """A kill right after the last epoch's publication, one epoch before it, and between the
    last state's save and its publication: the resume ends at the recipe's last epoch."""
    fault = "REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH"
    last, before = tmp_path / "last", tmp_path / "before"
    assert run_recipe_process(fixed_start, assets, last, {fault: "3"}).returncode == 137
    assert run_recipe_process(fixed_start, assets, before, {fault: "2"}).returncode == 137
    out = run_recipe_process(fixed_start, assets, last)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resuming after epoch 3" in out.stdout
    assert "[train] epoch" not in out.stdout and "[publish]" not in out.stdout
    result = json.loads((last / "state/train_result.json").read_text())
    assert result["steps"] == 3 and [h["progress"] for h in result["history"]] == [1, 2, 3]
    assert _ledger(last / "publish") == [1, 2, 3]
    out = run_recipe_process(fixed_start, assets, before)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[train] epoch 3/3" in out.stdout
    assert "epoch 2/3" not in out.stdout and "epoch 4" not in out.stdout
    assert json.loads((before / "state/train_result.json").read_text())["steps"] == 3
    assert _ledger(before / "publish") == [1, 2, 3]
    # the state after epoch 3 was saved but its publication never happened: published on resume
    shutil.rmtree(last / "publish/checkpoint-3")
    ledger = (last / "publish/publications.jsonl").read_text().splitlines()
    (last / "publish/publications.jsonl").write_text("\n".join(ledger[:2]) + "\n")
    out = run_recipe_process(fixed_start, assets, last)
    assert out.returncode == 0 and "[train] epoch" not in out.stdout
    assert "[publish] checkpoint-3" in out.stdout
    assert _ledger(last / "publish") == [1, 2, 3]
    assert (last / "publish/checkpoint-3/adapter_model.safetensors").read_bytes() == (
        last / "state/state/lora/adapter_model.safetensors"
    ).read_bytes()


def _former_sample_epoch(train, pipe, scheduler, prompts, recipe, generator):
    """The recipe's sampling loop before 2026-12-02 (a host copy per step), verbatim."""
    uncond = pipe.encode_prompts([""])
    out = {"latents": [], "log_probs": [], "prompt_embeds": [], "images": []}
    bs = recipe.sample_batch_size
    with torch.no_grad():
        for start in range(0, len(prompts), bs):
            cond = pipe.encode_prompts(prompts[start : start + bs])
            context = torch.cat([uncond.expand(len(cond), -1, -1), cond])
            x = torch.randn((len(cond), *pipe.latent_shape), generator=generator).to(pipe.device, pipe.dtype)
            trajectory, log_probs = [x], []
            for t in scheduler.timesteps:
                eps = train.guided_eps(pipe.unet, x, t, context, recipe.guidance_scale)
                noise = torch.randn(x.shape, generator=generator)
                x, log_prob = train.ddim_step_with_logprob(scheduler, eps, t, x, recipe.eta, noise=noise)
                trajectory.append(x)
                log_probs.append(log_prob)
            out["latents"].append(torch.stack(trajectory, 1))
            out["log_probs"].append(torch.stack(log_probs, 1))
            out["prompt_embeds"].append(cond)
            out["images"].append(pipe.decode(x).cpu())
    return {k: torch.cat(v) for k, v in out.items()}


def _former_train_epoch(train, pipe, scheduler, batch, advantages, params, optimizer, recipe, generator):
    """The recipe's PPO loop before 2026-12-02 (four host syncs per step), verbatim."""
    n, steps = len(advantages), len(scheduler.timesteps)
    order = torch.randperm(n, generator=generator)
    uncond = pipe.encode_prompts([""])
    bs, accum = recipe.train_batch_size, recipe.gradient_accumulation_steps
    info = {"loss": [], "approx_kl": [], "clipfrac": []}
    pipe.unet.train()
    optimizer.zero_grad()
    minibatches = [order[i : i + bs] for i in range(0, n, bs)]
    for k, idx in enumerate(minibatches):
        context = torch.cat([uncond.expand(len(idx), -1, -1), batch["prompt_embeds"][idx]])
        for j, t in enumerate(scheduler.timesteps):
            eps = train.guided_eps(pipe.unet, batch["latents"][idx, j], t, context, recipe.guidance_scale)
            _, log_prob = train.ddim_step_with_logprob(
                scheduler, eps, t, batch["latents"][idx, j], recipe.eta, prev_sample=batch["latents"][idx, j + 1]
            )
            loss, approx_kl, clipfrac = train.ppo_loss(
                advantages[idx].to(log_prob.device),
                log_prob,
                batch["log_probs"][idx, j].float(),
                recipe.clip_range,
                recipe.adv_clip_max,
            )
            if not torch.isfinite(loss):
                raise train.NonFiniteError(f"loss is {loss.item()} (minibatch {k}, step {j})")
            (loss / (accum * steps)).backward()
            for key, value in (("loss", loss), ("approx_kl", approx_kl), ("clipfrac", clipfrac)):
                info[key].append(value.item())
        if (k + 1) % accum == 0 or k + 1 == len(minibatches):
            torch.nn.utils.clip_grad_norm_(params, recipe.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
    pipe.unet.eval()
    return {key: float(np.mean(values)) for key, values in info.items()}


def test_sync_free_loops_give_the_former_loops_bytes(fixed_start):
    """The sampling and PPO loops without host syncs (noise and step constants put on the device
    first, statistics kept there, one finiteness check per update) give the trajectories, the
    trained LoRA and the statistics of the former loops byte for byte, over an epoch of 2
    sampling batches and 2 updates of 2 accumulated minibatches; a NaN loss still stops before
    the update, naming its minibatch and step (issue 35: a speed change never changes the
    algorithm; bench/results-2026-12-02-ddpo-speed.md has the same comparison on an H200)."""
    import dataclasses

    from diffusers import DDIMScheduler

    from replaykit.runtime import load_config

    train = recipe_module("train")
    recipe = load_config(train.DDPOConfig, RECIPE / "configs", "embedded", {})
    recipe = dataclasses.replace(recipe, num_steps=3, sample_batch_size=4, train_batch_size=2)
    pipe = pipeline.Pipeline(str(fixed_start))
    params = train.add_lora(pipe, recipe)
    start = [p.detach().clone() for p in params]
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(recipe.num_steps)
    prompts = [pipeline.prompts()[i % 10] for i in range(8)]
    advantages = torch.randn(8, generator=torch.Generator().manual_seed(1))
    runs = []
    for sample, training in (
        (lambda *a: _former_sample_epoch(train, *a), lambda *a: _former_train_epoch(train, *a)),
        (train.sample_epoch, train.train_epoch),
    ):
        for p, p0 in zip(params, start):
            p.data.copy_(p0)
        optimizer = torch.optim.AdamW(params, lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
        generator = torch.Generator().manual_seed(0)
        batch = sample(pipe, scheduler, prompts, recipe, generator)
        info = training(pipe, scheduler, batch, advantages, params, optimizer, recipe, generator)
        runs.append((batch, info, [p.detach().clone() for p in params]))
    (old_batch, old_info, old_w), (new_batch, new_info, new_w) = runs
    assert all(torch.equal(old_batch[k], new_batch[k]) for k in old_batch)
    assert old_info == new_info
    assert all(torch.equal(a, b) for a, b in zip(old_w, new_w)) and not torch.equal(old_w[-1], start[-1])
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(params, lr=recipe.learning_rate)
    nan = advantages.clone()
    nan[:] = float("nan")
    with pytest.raises(train.NonFiniteError, match=r"loss is nan \(minibatch 0, step 0\)"):
        train.train_epoch(pipe, scheduler, new_batch, nan, params, optimizer, recipe, torch.Generator())
    assert all(torch.equal(a, b) for a, b in zip(before, params))


class _HalfBaseLoRA(torch.nn.Module):
    """A UNet stand-in built as PEFT's LoRA over a 16-bit base: the frozen base (here the
    identity, so the base's output is exact in any dtype) in the pipeline's dtype, a float32
    adapter ``B A`` on the channels (B starts at zero, as PEFT's) added in float32 and the sum
    cast back to the base's dtype. Its noise prediction is the input latent itself, exactly,
    in float16 as in float32, so the two pipelines compute the same forward and the same loss;
    only the backward's dtype differs. ``record`` (a list) collects, per call, the float64
    ``sum_rows |g| |a|`` (g: the gradient at the adapter's output, a = A x: the adapter's
    inner activation) and ``sum_rows |a|``, from which the error bound of ``dL/dB`` is made."""

    def __init__(self, channels: int = 4, rank: int = 2):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.lora_A = torch.nn.Parameter(torch.randn(rank, channels, generator=gen) / math.sqrt(channels))
        self.lora_B = torch.nn.Parameter(torch.zeros(channels, rank))
        self.record: list | None = None

    def forward(self, x, t, encoder_hidden_states):
        h = x.float().movedim(1, -1)
        a = h @ self.lora_A.T
        lora = a @ self.lora_B.T
        if self.record is not None:
            rec, a_abs = self.record, a.detach().abs().double().flatten(0, 2)
            lora.register_hook(
                lambda g: rec.append(
                    (g.detach().abs().double().flatten(0, 2).T @ a_abs, a_abs.sum(0), g.detach().abs().max().item())
                )
            )
        return type("Out", (), {"sample": (h + lora).movedim(-1, 1).to(x.dtype)})()


def _toy_pipe(unet, dtype):
    from types import SimpleNamespace

    return SimpleNamespace(
        unet=unet,
        latent_shape=(4, 8, 8),
        device="cpu",
        dtype=dtype,
        decode=lambda x: x,
        encode_prompts=lambda p: torch.zeros(len(p), 3, 5, dtype=dtype),
    )


def _toy_epoch(dtype, advantages, adv_clip_max=5.0, lr=1.0):
    """A float16 trajectory of 8 samples over the first 2 of 10 DDIM steps (where the steps'
    sigma are alike, so the gradients' magnitudes span little), and what one PPO update of
    train_epoch (SGD, no clipping) needs on a fresh :class:`_HalfBaseLoRA` in ``dtype``."""
    from types import SimpleNamespace

    train = recipe_module("train")
    scheduler = ddim(10)
    scheduler.timesteps = scheduler.timesteps[:2]
    knobs = dict(guidance_scale=5.0, eta=1.0, clip_range=1e-4, adv_clip_max=adv_clip_max, max_grad_norm=1e9)
    with torch.no_grad():
        batch = train.sample_epoch(
            _toy_pipe(_HalfBaseLoRA(), torch.float16),
            scheduler,
            ["a"] * 8,
            SimpleNamespace(sample_batch_size=8, **knobs),
            torch.Generator().manual_seed(1),
        )
    batch = {k: v if k == "log_probs" else v.to(dtype) for k, v in batch.items()}  # 16-bit values, exactly
    unet = _HalfBaseLoRA()
    params = list(unet.parameters())
    recipe = SimpleNamespace(train_batch_size=4, gradient_accumulation_steps=2, **knobs)  # 8 samples: one update
    args = (
        _toy_pipe(unet, dtype),
        scheduler,
        batch,
        advantages,
        params,
        torch.optim.SGD(params, lr=lr),
        recipe,
        torch.Generator().manual_seed(3),
    )
    return train, unet, args


def test_loss_scaling_recovers_float16_gradients_that_underflow():
    """Over a float16 base the gradient reaching the float32 LoRA passes through the base's
    float16 backward; where it is below 2^-25 it rounds to 0 and the LoRA does not move (the
    ``full`` profile's first update on an H200: 74 % of lora_B's gradient elements exactly 0,
    gradient cosine 0.01 to a float32 base's; bench/results-2026-12-02-ddpo-fp16.md). With the
    recipe's ``grad_scaler`` (GradScaler, scale 2^16) the same update equals the float32
    pipeline's to within the float16 backward's rounding.

    The bound, per element of ``dL/dB = sum_i g_i a_i``: both pipelines compute the same
    forward and the same float32 gradient ``G`` at the guided noise prediction (scaling by a
    power of 2 commutes with float32 rounding). The float16 backward then rounds three times:
    the cast of ``S G``, ``5 x`` (guidance) and the unconditional half's ``x - 5 x``, so the
    gradient at the adapter's output is off by at most ``3.25 u |S g_i|`` to first order (u =
    2^-11; the 3 roundings of ``-4 G`` weigh 1 + 5/4 + 1) plus ``6 * 2^-25`` absolute (half
    float16's subnormal spacing, per rounding and product); 4u leaves room for second-order
    terms. Unscaling by 1/S is exact; the float32 sums over the n = 2048 products of each
    element add at most ``gamma_n`` relative to ``sum |g a|`` in each pipeline (Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5)."""
    advantages = 2e-6 * torch.randn(8, generator=torch.Generator().manual_seed(2))
    train, unet, args = _toy_epoch(torch.float32, advantages)
    unet.record = record = []
    train.train_epoch(*args)
    want = -unet.lora_B.detach().double()  # SGD with lr 1 from B = 0: the gradient, negated
    assert max(r[2] for r in record) < 5 * 2.0**-25  # |G| = |g| / 5 at most: every float16 cast of G gives 0
    assert want.abs().min() > 0

    train, unet, args = _toy_epoch(torch.float16, advantages)
    info = train.train_epoch(*args)
    assert torch.equal(unet.lora_B.detach(), torch.zeros_like(unet.lora_B)) and "loss_scale" not in info

    train, unet, args = _toy_epoch(torch.float16, advantages)
    scaler = train.grad_scaler(torch.float16, "cpu")
    info = train.train_epoch(*args, scaler)
    assert info["loss_scale"] == 2.0**16 and info["skipped_updates"] == 0
    got = -unet.lora_B.detach().double()
    u, n = 2.0**-11, 2048
    assert len(record) == 4 and n == 2 * 4 * 64 * len(record)  # 2 halves x 4 samples x 8 x 8, 2 steps x 2 minibatches
    gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
    sum_ga = sum(r[0] for r in record)
    sum_a = sum(r[1] for r in record)[None, :]
    bound = (4 * u + 2 * gamma) * sum_ga + 6 * 2.0**-25 / 2.0**16 * sum_a
    assert ((got - want).abs() <= bound).all()
    assert torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.9999


def test_loss_scaler_skips_an_update_whose_gradient_overflows():
    """A scaled gradient past float16's largest value (65504) becomes inf: the scaler skips
    that update (the weights stay), halves its scale, and the epoch's statistics say so; the
    loss itself is finite, so training goes on (GradScaler's dynamic scaling, as the
    reference's accelerate fp16 run)."""
    advantages = 1e4 * torch.randn(8, generator=torch.Generator().manual_seed(2))
    train, unet, args = _toy_epoch(torch.float16, advantages, adv_clip_max=1e9)
    before = [p.detach().clone() for p in unet.parameters()]
    info = train.train_epoch(*args, train.grad_scaler(torch.float16, "cpu"))
    assert info["skipped_updates"] == 1 and info["loss_scale"] == 2.0**15 and math.isfinite(info["loss"])
    assert all(torch.equal(a, b) for a, b in zip(before, unet.parameters()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float32_and_bfloat16_train_without_a_scaler_byte_for_byte(dtype):
    """Loss scaling is for a float16 base only: for float32 and bfloat16 ``grad_scaler`` gives
    None and ``train_epoch`` gives the former loop's weights and statistics byte for byte
    (:func:`_former_train_epoch`, verbatim; its statistics carry no loss scale)."""
    advantages = torch.randn(8, generator=torch.Generator().manual_seed(2))
    runs = []
    for former in (True, False):
        train, unet, args = _toy_epoch(dtype, advantages, lr=1e-2)
        with torch.no_grad():
            unet.lora_B.normal_(generator=torch.Generator().manual_seed(4))  # both adapter matrices get a gradient
        if former:
            info = _former_train_epoch(train, *args)
        else:
            scaler = train.grad_scaler(dtype, "cpu")
            assert scaler is None
            info = train.train_epoch(*args, scaler)
        runs.append((info, [p.detach().clone() for p in unet.parameters()]))
    (old_info, old_w), (new_info, new_w) = runs
    assert old_info == new_info
    assert all(torch.equal(a, b) for a, b in zip(old_w, new_w))
    assert isinstance(recipe_module("train").grad_scaler(torch.float16, "cpu"), torch.amp.GradScaler)


def test_float16_replay_records_the_loss_scale_and_resumes_it(fixed_start, assets, tmp_path):
    """A float16 replay (the tiny pipeline on the CPU) scales its loss: every epoch of the
    history has the scale and the skipped updates, the saved state carries the scaler's, and a
    replay cut after 2 epochs and resumed publishes the straight run's LoRA byte for byte."""
    from safetensors.torch import load_file

    assert run_recipe(fixed_start, assets, tmp_path / "straight", {"dtype": "float16"}) == 0
    assert run_recipe(fixed_start, assets, tmp_path / "cut", {"dtype": "float16", "num_epochs": 2}) == 0
    saved = torch.load(tmp_path / "cut/state/state/train_state.pt", weights_only=False)
    history = json.loads((tmp_path / "cut/state/state/history.json").read_text())
    assert [(h["loss_scale"], h["skipped_updates"]) for h in history] == [(2.0**16, 0)] * 2
    assert saved["scaler"]["scale"] == 2.0**16
    assert saved["scaler"]["_growth_tracker"] == 2 * 2  # clean updates since the last change of scale: 2 per epoch
    assert run_recipe(fixed_start, assets, tmp_path / "cut", {"dtype": "float16"}, resume=True) == 0
    a = load_file(str(tmp_path / "straight/publish/checkpoint-3/adapter_model.safetensors"))
    b = load_file(str(tmp_path / "cut/publish/checkpoint-3/adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    history = json.loads((tmp_path / "cut/state/train_result.json").read_text())["history"]
    assert [h["progress"] for h in history] == [1, 2, 3]
    assert all({"loss_scale", "skipped_updates"} <= h.keys() for h in history)
    resumed = torch.load(tmp_path / "cut/state/state/train_state.pt", weights_only=False)["scaler"]
    assert resumed["_growth_tracker"] == 3 * 2  # counted on from the saved state (a fresh scaler would say 2)
