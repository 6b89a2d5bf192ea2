"""The ddpo task's fixed start: a Stable-Diffusion-architecture pipeline.

Embedded default (builder ``ddpo-digits``): the components of Stable Diffusion v1.5 at toy
size -- ``AutoencoderKL`` (32 × 32 RGB images -> 4 × 8 × 8 latents), ``UNet2DConditionModel``
with cross-attention, a ``CLIPTextModel`` with CLIP's own BPE tokenizer (:mod:`.tokenizer`)
and SD's ``DDIMScheduler`` settings -- trained on scikit-learn's 1,797 handwritten digits
(8 × 8, upscaled bilinearly to 32 × 32) with captions ("a photo of the digit seven"):

1. the VAE: reconstruction (MSE) + a small KL term, then latents scaled to unit variance
   (``scaling_factor``, as SD's 0.18215);
2. the text encoder: a short prompt-classification pre-training, so that the 10 captions and
   the empty prompt have distinct hidden states (then frozen, as SD's CLIP text tower is);
3. the UNet: epsilon-prediction loss on SD's scaled-linear schedule, the caption dropped to
   the empty prompt 10 % of the time (classifier-free guidance, Ho & Salimans 2022);
4. a digit CLIP (open_clip ``digits-vit-tiny``, the architecture the soup task's ingredients
   share) pre-trained contrastively by :func:`replaykit.tasks.common.clip.pretrain`: the
   embedding model of the evaluator's diagnostics (text-image alignment, pairwise image distance);
5. a check that samples are digits: a logistic-regression digits classifier (trained on the
   real 8 × 8 digits) labels samples drawn at guidance 5 (20 DDIM steps); the agreement with
   the prompted digit is recorded in ``config.json``.

Layout: diffusers' ``save_pretrained`` folders (``unet/``, ``vae/``, ``text_encoder/``,
``tokenizer/``, ``scheduler/``, ``model_index.json``), ``clip/`` (the digit CLIP) and
``config.json`` (format, prompts, sizes, build summary). Full scale: a local Stable Diffusion
v1.5 folder in the same diffusers layout (no ``clip/``: CLIP ViT-L/14 is a data asset).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

CONFIG = "config.json"
FORMAT = "replaykit-ddpo-pipeline"
CLASS_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
PROMPT_TEMPLATE = "a photo of the digit {}"
IMAGE_SIZE = 32
MAX_LENGTH = 16  # tokens per prompt incl. start/end (SD v1.5: 77)
SCHEDULER = dict(
    num_train_timesteps=1000,
    beta_start=0.00085,
    beta_end=0.012,
    beta_schedule="scaled_linear",
    clip_sample=False,
    set_alpha_to_one=False,
    steps_offset=1,
    prediction_type="epsilon",
)
VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 3,
    up_block_types=("UpDecoderBlock2D",) * 3,
    block_out_channels=(16, 32, 32),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=8,
    sample_size=IMAGE_SIZE,
)
UNET = dict(
    sample_size=IMAGE_SIZE // 4,
    in_channels=4,
    out_channels=4,
    block_out_channels=(32, 64),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    layers_per_block=1,
    cross_attention_dim=32,
    attention_head_dim=8,
    norm_num_groups=8,
)
TEXT = dict(
    vocab_size=49408,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=MAX_LENGTH,
    bos_token_id=49406,
    eos_token_id=49407,
    pad_token_id=49407,
)


# What ``recipes/ddpo/ddim_with_logprob.py`` assumes of the effective DDIMScheduler config:
# a fixed stride ``T // steps`` between timesteps ("leading" spacing; "linspace" has another
# stride, so the per-step log-probabilities would use wrong previous timesteps), a non-zero
# variance after the last step (set_alpha_to_one=True gives sigma = 0: log 0), an epsilon
# prediction, no clipping or thresholding of x0 and no zero-terminal-SNR rescaling (a_T = 0
# divides by zero). Keys absent from the file take DDIMScheduler's defaults, which are not
# SD's (clip_sample and set_alpha_to_one default to True), so the effective values are judged.
SCHEDULER_SUPPORTED = {
    "timestep_spacing": ("leading",),
    "set_alpha_to_one": (False,),
    "prediction_type": ("epsilon",),
    "clip_sample": (False,),
    "thresholding": (False,),
    "rescale_betas_zero_snr": (False,),
}
SCHEDULER_FOREIGN_KEYS = ("skip_prk_steps",)  # PNDMScheduler's (SD v1.5 ships PNDM's config)


def check_scheduler(folder: str | Path, inference_steps: int) -> dict:
    """Refuse a scheduler config the DDIM-with-log-prob step cannot use.

    Args:
        folder: the pipeline's ``scheduler/`` folder (``scheduler_config.json``).
        inference_steps: DDIM steps of the scoring (``steps_offset`` must stay below the
            stride ``num_train_timesteps // inference_steps``).
    Returns the effective config (DDIMScheduler's defaults filled in).
    Raises:
        InputError: ``<folder>/scheduler_config.json: <key>: <message>`` for an unknown key,
            an unsupported value (see ``SCHEDULER_SUPPORTED``) or a ``steps_offset`` outside
            ``[0, stride)``.
    """
    import inspect

    from diffusers import DDIMScheduler

    from ...harness.errors import InputError

    path = Path(folder) / "scheduler_config.json"
    if not path.is_file():
        raise InputError(path, None, "missing: the pipeline needs a DDIM scheduler config")
    raw = json.loads(path.read_text())
    known = set(inspect.signature(DDIMScheduler.__init__).parameters) - {"self"}
    for key in raw:
        if not key.startswith("_") and key not in known and key not in SCHEDULER_FOREIGN_KEYS:
            raise InputError(path, key, f"not a DDIMScheduler setting (known: {', '.join(sorted(known))})")
    effective = dict(DDIMScheduler.from_config(raw).config)
    for key, allowed in SCHEDULER_SUPPORTED.items():
        if effective[key] not in allowed:
            given = "" if key in raw else " (absent from the file: DDIMScheduler's default)"
            raise InputError(
                path,
                key,
                f"{effective[key]!r}{given} is not supported by the "
                "DDIM-with-log-prob step of DDPO; use "
                f"{' or '.join(map(repr, allowed))}",
            )
    stride = int(effective["num_train_timesteps"]) // int(inference_steps)
    offset = effective["steps_offset"]
    if not (isinstance(offset, int) and 0 <= offset < stride):
        raise InputError(
            path,
            "steps_offset",
            f"{offset!r} must be an integer in [0, {stride}) "
            f"(the stride num_train_timesteps // "
            f"{inference_steps} steps)",
        )
    return effective


def prompts() -> list[str]:
    """The embedded task's prompt list: one caption per digit."""
    return [PROMPT_TEMPLATE.format(name) for name in CLASS_NAMES]


def digit_images() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as ``N × 3 × 32 × 32`` floats in [0, 1] (grey level / 16, bilinear
    upscaling, white digit on black) and labels ``N``."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False).clamp(0, 1)
    return x.expand(-1, 3, -1, -1).contiguous(), torch.tensor(data.target)


class Pipeline:
    """The frozen components of a fixed start (``eval()``, no gradients), with SD's
    conventions: images in [0, 1], latents = ``vae.encode(2x - 1) * scaling_factor``."""

    def __init__(self, root: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
        from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
        from transformers import CLIPTextModel, CLIPTokenizer

        root = Path(root)
        self.root, self.device, self.dtype = root, device, dtype
        self.tokenizer = CLIPTokenizer.from_pretrained(root / "tokenizer")
        self.text_encoder = CLIPTextModel.from_pretrained(root / "text_encoder", dtype=dtype).to(device).eval()
        self.vae = AutoencoderKL.from_pretrained(root / "vae", torch_dtype=dtype).to(device).eval()
        self.unet = UNet2DConditionModel.from_pretrained(root / "unet", torch_dtype=dtype).to(device).eval()
        self.scheduler = DDIMScheduler.from_pretrained(root / "scheduler")
        for module in (self.text_encoder, self.vae, self.unet):
            module.requires_grad_(False)
        factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
        self.latent_shape = (
            self.unet.config.in_channels,
            self.vae.config.sample_size // factor,
            self.vae.config.sample_size // factor,
        )

    @torch.no_grad()
    def encode_prompts(self, texts: list[str]) -> torch.Tensor:
        """``B × L × D`` last hidden states of the text encoder (SD's conditioning)."""
        ids = self.tokenizer(
            texts,
            padding="max_length",
            max_length=self.tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        ).input_ids.to(self.device)
        return self.text_encoder(ids)[0]

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents -> images ``B × 3 × H × W`` in [0, 1] (float32)."""
        images = self.vae.decode(latents / self.vae.config.scaling_factor).sample
        return ((images.float() + 1) / 2).clamp(0, 1)


def initial_latents(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """The starting noise of one stream row: standard normal ``shape`` from a CPU generator
    seeded with ``seed`` (so a latent stream is a list of seeds, identical on every device)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(int(seed)))


@torch.no_grad()
def sample(
    pipe: Pipeline, texts: list[str], latents: torch.Tensor, steps: int, guidance: float, batch_size: int = 64
) -> torch.Tensor:
    """Deterministic DDIM sampling (eta 0) with classifier-free guidance:
    ``eps = eps_uncond + guidance (eps_cond - eps_uncond)``, the empty prompt as unconditional.

    Args:
        texts: B prompts; latents: ``B × C × h × w`` initial noise (unit variance).
        steps: DDIM inference steps; guidance: guidance scale (SPEC: 5).
    Returns images ``B × 3 × H × W`` in [0, 1]. eta 0 makes every sample a function of its
    prompt and initial latent only (the evaluation streams fix both).
    """
    from diffusers import DDIMScheduler

    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(steps)
    uncond = pipe.encode_prompts([""])
    out = []
    for start in range(0, len(texts), batch_size):
        cond = pipe.encode_prompts(texts[start : start + batch_size])
        x = latents[start : start + batch_size].to(pipe.device, pipe.dtype) * scheduler.init_noise_sigma
        context = torch.cat([uncond.expand(len(cond), -1, -1), cond])
        for t in scheduler.timesteps:
            eps_u, eps_c = pipe.unet(torch.cat([x, x]), t, encoder_hidden_states=context).sample.chunk(2)
            x = scheduler.step(eps_u + guidance * (eps_c - eps_u), t, x, eta=0.0).prev_sample
        out.append(pipe.decode(x).cpu())
    return torch.cat(out)


def _train_vae(vae, images: torch.Tensor, epochs: int, generator: torch.Generator, log) -> None:
    optimizer = torch.optim.AdamW(vae.parameters(), lr=2e-3)
    for epoch in range(epochs):
        order = torch.randperm(len(images), generator=generator)
        for start in range(0, len(order), 64):
            x = images[order[start : start + 64]] * 2 - 1
            posterior = vae.encode(x).latent_dist
            recon = vae.decode(posterior.sample(generator=generator)).sample
            loss = F.mse_loss(recon, x) + 1e-6 * posterior.kl().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        log(f"[vae] epoch {epoch + 1}/{epochs} loss {loss.item():.4f}")


def _train_text_encoder(text_encoder, ids: torch.Tensor, steps: int, log) -> None:
    """Make the prompts' hidden states tell the digits apart before the UNet learns from them:
    a linear probe on the mean of the last hidden states classifies each of the 11 prompts
    (10 digits and the empty prompt), cross-entropy, trained with the text encoder. (A random
    text encoder maps prompts that differ in one word to nearly the same states, and the UNet
    then learns to ignore them; SD v1.5 uses CLIP's pre-trained text tower instead.)"""
    probe = torch.nn.Linear(text_encoder.config.hidden_size, len(ids))
    optimizer = torch.optim.AdamW(list(text_encoder.parameters()) + list(probe.parameters()), lr=1e-3)
    target = torch.arange(len(ids))
    for _ in range(steps):
        loss = F.cross_entropy(probe(text_encoder(ids)[0].mean(1)), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    log(f"[text encoder] {steps} steps, prompt-classification loss {loss.item():.4f}")


def _train_unet(unet, context: torch.Tensor, latents, labels, scheduler, steps: int, generator, log) -> None:
    """Epsilon-prediction training of the UNet on the frozen text encoder's states
    (``context``: ``11 × L × D``, the 10 captions then the empty prompt), the caption replaced
    by the empty prompt 10 % of the time."""
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-3, weight_decay=0.01)
    lr = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=steps, pct_start=0.05)
    started = time.time()
    for step in range(steps):
        idx = torch.randint(0, len(latents), (64,), generator=generator)
        x0 = latents[idx]
        which = labels[idx].clone()
        which[torch.rand(len(idx), generator=generator) < 0.1] = len(context) - 1
        noise = torch.randn(x0.shape, generator=generator)
        t = torch.randint(0, scheduler.config.num_train_timesteps, (len(idx),), generator=generator)
        eps = unet(scheduler.add_noise(x0, noise, t), t, encoder_hidden_states=context[which]).sample
        loss = F.mse_loss(eps, noise)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        optimizer.step()
        lr.step()
        if (step + 1) % 100 == 0 or step + 1 == steps:
            log(f"[unet] step {step + 1}/{steps} loss {loss.item():.4f} ({time.time() - started:.0f} s)")


def digit_agreement(images: torch.Tensor, labels: list[int]) -> float:
    """Share of images (``B × 3 × 32 × 32`` in [0, 1]) that a logistic-regression classifier
    trained on all real 8 × 8 digits labels as ``labels`` (the images are average-pooled to
    8 × 8 and scaled back to grey levels 0-16)."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    data = load_digits()
    classifier = LogisticRegression(max_iter=2000).fit(data.data, data.target)
    small = F.adaptive_avg_pool2d(images.mean(1, keepdim=True), 8).reshape(len(images), -1).numpy() * 16.0
    return float((classifier.predict(small) == torch.tensor(labels).numpy()).mean())


def _train_clip(out: Path, images: torch.Tensor, labels: torch.Tensor, epochs: int, seed: int, log) -> dict:
    """The digit CLIP of the diagnostics, pre-trained by the contrastive code it shares with
    the soup task (:func:`replaykit.tasks.common.clip.pretrain`)."""
    import open_clip
    from safetensors.torch import save_file

    from ..common import clip as digit_clip

    (out / "model_configs").mkdir(parents=True)
    (out / "model_configs" / f"{digit_clip.MODEL_NAME}.json").write_text(json.dumps(digit_clip.MODEL_CONFIG))
    config = {"model_name": digit_clip.MODEL_NAME, "weights": "open_clip.safetensors"}
    (out / CONFIG).write_text(json.dumps(config, indent=1))
    torch.manual_seed(seed)
    clip, _ = digit_clip.create_clip(out, config)
    size = digit_clip.MODEL_CONFIG["vision_cfg"]["image_size"]
    x = clip_preprocess(images, size)
    digit_clip.pretrain(clip, open_clip.get_tokenizer(digit_clip.MODEL_NAME), x, labels, epochs, seed, log)
    save_file({k: v.detach().contiguous() for k, v in clip.state_dict().items()}, str(out / config["weights"]))
    return config


def clip_preprocess(images: torch.Tensor, size: int) -> torch.Tensor:
    """Images in [0, 1] -> the digit CLIP's input: resized to ``size`` (bilinear, antialiased)
    and normalised with OpenAI CLIP's mean/std (open_clip's default transform)."""
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073])[:, None, None]
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711])[:, None, None]
    x = F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return (x - mean) / std


def _model_index() -> dict:
    """diffusers' ``model_index.json`` of the embedded Stable-Diffusion-architecture pipeline."""
    return {
        "_class_name": "StableDiffusionPipeline",
        "_diffusers_version": __import__("diffusers").__version__,
        "vae": ["diffusers", "AutoencoderKL"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "scheduler": ["diffusers", "DDIMScheduler"],
        "safety_checker": [None, None],
        "feature_extractor": [None, None],
        "requires_safety_checker": False,
    }


def build(spec: dict, out: str | Path, log=print) -> dict:
    """Build the embedded pipeline into directory ``out`` (which must not exist yet).

    spec keys: ``seed``, ``vae_epochs``, ``unet_steps``, ``clip_epochs``, ``check_samples``
    (samples per digit of the check), optional ``threads`` and ``max_images`` (a seeded
    subset of the digits, for tests). Returns the build summary.
    """
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    from .tokenizer import write_clip_tokenizer

    out = Path(out)
    out.mkdir(parents=True)
    seed = int(spec["seed"])
    torch.set_num_threads(int(spec.get("threads", 1)))
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    started = time.time()
    images, labels = digit_images()
    if spec.get("max_images"):  # tests: a seeded subset
        keep = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[: int(spec["max_images"])]
        images, labels = images[keep], labels[keep]
    tokenizer = CLIPTokenizer.from_pretrained(write_clip_tokenizer(out / "tokenizer", MAX_LENGTH))
    vae = AutoencoderKL(**VAE)
    _train_vae(vae, images, int(spec["vae_epochs"]), generator, log)
    vae.eval().requires_grad_(False)
    with torch.no_grad():
        means = torch.cat(
            [vae.encode(images[i : i + 256] * 2 - 1).latent_dist.mean for i in range(0, len(images), 256)]
        )
    vae.register_to_config(scaling_factor=float(1.0 / means.std()))
    latents = means * vae.config.scaling_factor
    scheduler = DDIMScheduler(**SCHEDULER)
    unet = UNet2DConditionModel(**UNET)
    text_encoder = CLIPTextModel(CLIPTextConfig(**TEXT))
    texts = prompts()
    all_ids = tokenizer(texts + [""], padding="max_length", max_length=MAX_LENGTH, return_tensors="pt").input_ids
    _train_text_encoder(text_encoder, all_ids, 200, log)
    text_encoder.eval().requires_grad_(False)
    with torch.no_grad():
        context = text_encoder(all_ids)[0]
    _train_unet(unet, context, latents, labels, scheduler, int(spec["unet_steps"]), generator, log)
    models = {"unet": unet, "vae": vae, "text_encoder": text_encoder}
    for name, module in (("vae", vae), ("unet", unet), ("text_encoder", text_encoder), ("scheduler", scheduler)):
        module.save_pretrained(out / name)
    (out / "model_index.json").write_text(json.dumps(_model_index(), indent=1))
    log(f"[pipeline] VAE + UNet + text encoder trained ({time.time() - started:.0f} s)")
    clip_config = _train_clip(out / "clip", images, labels, int(spec["clip_epochs"]), seed, log)
    per_digit = int(spec["check_samples"])
    check_labels = [d for d in range(10) for _ in range(per_digit)]
    pipe = Pipeline(out)
    noise = torch.stack([initial_latents(seed * 100_003 + i, pipe.latent_shape) for i in range(len(check_labels))])
    samples = sample(pipe, [texts[d] for d in check_labels], noise, steps=20, guidance=5.0)
    agreement = digit_agreement(samples, check_labels)
    log(
        f"[check] digits classifier agrees with the prompted digit on {agreement:.3f} of {len(check_labels)} samples "
        f"({time.time() - started:.0f} s)"
    )
    summary = {
        "builder": "ddpo-digits",
        "images": len(images),
        "latent_shape": list(pipe.latent_shape),
        "scaling_factor": vae.config.scaling_factor,
        "check": {
            "samples": len(check_labels),
            "steps": 20,
            "guidance": 5.0,
            "eta": 0.0,
            "digit_agreement": agreement,
            "classifier": "sklearn LogisticRegression on the 1,797 real 8 x 8 digits",
        },
        "parameters": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()},
        "seconds": time.time() - started,
    }
    config = {"format": FORMAT, "prompts": texts, "image_size": IMAGE_SIZE}
    config.update(embedder={"kind": "open_clip", "path": "clip", **clip_config}, build={"spec": spec, **summary})
    (out / CONFIG).write_text(json.dumps(config, indent=1))
    return summary
