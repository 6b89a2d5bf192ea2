"""The ``ddpo`` task: DDPO with LoRA on a Stable-Diffusion-architecture pipeline (SPEC: ddpo).

Fixed start: a diffusers pipeline folder (:mod:`.pipeline`). Embedded default: built by the
``fixed_start_model`` rule (builder ``ddpo-digits``) from scikit-learn's digits; full scale:
a local Stable Diffusion v1.5 folder.

Assets (:func:`build_assets`):

* ``public/prompts.txt`` -- the training prompts, one per line (embedded: the 10 digit
  captions; local: ``prompts_file``, SPEC's 45 simple-animal prompts);
* ``public/proxy.jsonl`` and ``hidden/final.jsonl`` -- prompt/latent streams, rows
  ``{id, prompt, latent_seed}``: each row's prompt drawn uniformly from the prompt list and
  its initial latent the standard normal noise of ``latent_seed`` (a CPU generator), the
  public stream from ``public_seed`` and the final one from ``hidden_seed`` (independent
  ``random.Random`` streams; no latent seed is shared);
* ``scoring.json`` in both splits -- the reward and the diagnostics' embedder
  (:mod:`.rewards`), so the recipe and the frozen evaluator read the same spec. Local reward
  models are hashed into it (the aesthetic MLP file; every file of the CLIP folder).
"""

from __future__ import annotations

import random
from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import atomic_write_json, atomic_write_text
from .. import check_data_keys, deferred, write_splits

METRIC = {
    "final": "mean_{reward}_final{n}",
    "proxy": "mean_{reward}_public{n}",
    "direction": "maximize",
    "uncertainty": "se_of_mean",
}
REPORT_DIAGNOSTICS = ("text_image_alignment", "mean_pairwise_image_distance")
# Isolation: data keys whose local paths hold final-split items (the sandbox hides them),
# and whether the fixed start is raw data whose complement is the test set (then not shown).
FINAL_SOURCES: tuple[str, ...] = ()
FIXED_START_IS_DATA = False
# The audit searches for these fields of the final stream (its prompts are public; its latent seeds are not).
FINAL_ITEM_FIELDS = {"token": ("id", "latent_seed")}
# Files of installed packages that hold final-split items (hidden from the replay too).
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = ()
FIXED_START_BUILDERS = {"ddpo-digits": ".pipeline"}  # models.<name>.builder -> module with build()
TRAINING_CURVE = "reward_mean"  # the report plots the per-epoch mean reward of the samples
INFERENCE_STEPS = 20  # DDIM steps of the scoring (guidance 5, eta 0)
PROMPTS, PROXY_FILE, FINAL_FILE, SCORING = "prompts.txt", "proxy.jsonl", "final.jsonl", "scoring.json"
EMBEDDED_KEYS = ("public_seed", "n_proxy", "hidden_seed", "n_final")
LOCAL_KEYS = ("prompts_file", "clip_dir", "aesthetic_mlp", "public_seed", "n_proxy", "hidden_seed", "n_final")


# The plug-in interface's heavy parts (torch, diffusers) are imported when called, not when the
# workflow is parsed (every job re-parses it).
validate = deferred(__name__, ".loader", "validate")  # the frozen loader's verdict
evaluate = deferred(__name__, ".evaluator", "evaluate")  # the frozen evaluator
plot_diagnostics = deferred(__name__, ".report", "plot_diagnostics")  # the report's diagnostic figure


def check_data(data: dict) -> None:
    """Config check of ``tasks.ddpo.data`` (``KeyError``/``ValueError`` naming the key)."""
    check_data_keys(
        data,
        embedded=EMBEDDED_KEYS,
        local=LOCAL_KEYS,
        counts=("n_proxy", "n_final"),
        files=("prompts_file", "aesthetic_mlp"),
    )
    if data.get("source") == "local" and not Path(data["clip_dir"]).is_dir():
        raise ValueError(f"clip_dir: folder {data['clip_dir']!r} not found")


def check_fixed_start(fixed_start: str | Path) -> None:
    """Workflow-start check of a local pipeline folder: its scheduler config
    (:func:`.pipeline.check_scheduler`); the rest is checked when assets are built."""
    from .pipeline import check_scheduler

    if (Path(fixed_start) / "scheduler").is_dir():
        check_scheduler(Path(fixed_start) / "scheduler", INFERENCE_STEPS)


def read_prompts(path: str | Path) -> list[str]:
    """Prompts of a text file, one per line (blank lines skipped); InputError when empty."""
    prompts = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if not prompts:
        raise InputError(path, None, "no prompts")
    return prompts


def stream(prompts: list[str], n: int, seed: int, prefix: str) -> list[dict]:
    """``n`` rows ``{id, prompt, latent_seed}`` drawn with ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [
        {"id": f"{prefix}-{i:04d}", "prompt": rng.choice(prompts), "latent_seed": rng.randrange(2**31)}
        for i in range(n)
    ]


def build_assets(cfg: dict, fixed_start: str | Path, public_dir: str | Path, hidden_dir: str | Path) -> dict:
    """Write the prompt list, the public-64 / final-256 streams and ``scoring.json`` (see the
    module docstring). Raises :class:`InputError` for a fixed start that is not a
    diffusers pipeline folder, a scheduler config the DDIM-with-log-prob step does not support
    (:func:`.pipeline.check_scheduler`), an empty prompt file, or streams that share a latent
    seed."""
    from ...harness.hashing import sha256_file, tree_files
    from .pipeline import CONFIG, check_scheduler
    from .pipeline import prompts as digit_prompts

    fixed_start = Path(fixed_start)
    for sub in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        if not (fixed_start / sub).is_dir():
            raise InputError(fixed_start, sub, "missing: not a Stable Diffusion pipeline folder (diffusers layout)")
    check_scheduler(fixed_start / "scheduler", INFERENCE_STEPS)
    if cfg.get("source") == "local":
        prompts = read_prompts(cfg["prompts_file"])
        scoring = {
            "reward": "aesthetic",
            "clip_dir": str(Path(cfg["clip_dir"]).resolve()),
            "clip_files": tree_files(cfg["clip_dir"]),
            "aesthetic_mlp": str(Path(cfg["aesthetic_mlp"]).resolve()),
            "aesthetic_mlp_sha256": sha256_file(cfg["aesthetic_mlp"]),
            "embedder": {"kind": "hf_clip", "path": str(Path(cfg["clip_dir"]).resolve())},
        }
    else:
        import json

        config = json.loads((fixed_start / CONFIG).read_text()) if (fixed_start / CONFIG).is_file() else {}
        if "embedder" not in config:
            raise InputError(fixed_start / CONFIG, "embedder", "the embedded pipeline needs its digit CLIP (clip/)")
        prompts = config.get("prompts") or digit_prompts()
        scoring = {"reward": "jpeg_compressibility", "jpeg_quality": 95, "embedder": config["embedder"]}
    scoring.update(inference_steps=INFERENCE_STEPS, guidance_scale=5.0, eta=0.0)
    proxy = stream(prompts, int(cfg["n_proxy"]), int(cfg["public_seed"]), "public")
    final = stream(prompts, int(cfg["n_final"]), int(cfg["hidden_seed"]), "final")
    shared = {r["latent_seed"] for r in proxy} & {r["latent_seed"] for r in final}
    if shared:
        raise InputError("config", "data.hidden_seed", f"the streams share latent seeds {sorted(shared)[:3]}")
    write_splits(public_dir, hidden_dir, {PROXY_FILE: proxy}, {FINAL_FILE: final})
    atomic_write_text(Path(public_dir) / PROMPTS, "".join(p + "\n" for p in prompts))
    for folder in (public_dir, hidden_dir):
        atomic_write_json(Path(folder) / SCORING, scoring)
    return {
        "source": cfg.get("source", "embedded"),
        "reward": scoring["reward"],
        "n_prompts": len(prompts),
        "n_proxy": len(proxy),
        "n_final": len(final),
    }


def split_file(split: str) -> str:
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]
