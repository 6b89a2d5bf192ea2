"""Each task's full-scale config through the whole DAG, on random weights (issue 17).

    python bench/full_dag.py TASK --size full|tiny --out DIR [--shared DIR] [--qm9 DIR]
    snakemake results/TASK/final --configfile DIR/TASK.yaml ...   # bench/device_full_dag.sh does both

TASK: dpo, rm, ddpo, soup or digress. ``--shared``: where dpo's and rm's model is built once
for both; ``--qm9``: digress's fixed start, the folder ``qm9-slim`` writes (below).

Writes, under ``DIR``, a stand-in for every local asset that ``config/full-scale/TASK.yaml``
names -- random weights at the full architecture (``--size full``) or at toy size
(``--size tiny``, the CPU check of this script), synthetic data in the real files' formats --
and ``DIR/TASK.yaml``: the full-scale task block with those paths and the changes of
:data:`DEVICE_CHANGES` (a short budget: a run publishes one checkpoint after a few steps, and
scoring is cut where a full evaluation would take most of a 10-minute device call). Scores
of random weights mean nothing; the point is that each job of the DAG runs at full size
(memory, loading, process start) and how long it takes.

Stand-ins (full size):

- dpo / rm: Mistral-7B's architecture (32 layers, hidden 4,096, vocabulary 32,000) with the
  toy byte-level BPE tokenizer of :mod:`replaykit.tiny_model` (ChatML), so prompts and
  answers of UltraFeedback-like lengths (``bench/pref_batches.py``'s length model, in
  tokens) are made of words. UltraFeedback-format pairs; IFEval ``input_data.jsonl`` (541
  prompts); RewardBench ``filtered.jsonl`` with the file's per-subset row counts (2,985 rows:
  :data:`REWARDBENCH_ROWS`).
- ddpo: Stable Diffusion v1.5's UNet, VAE and CLIP ViT-L/14 text encoder
  (``bench/ddpo_throughput.py``), CLIP's real BPE tokenizer, a transformers ``CLIPModel`` of
  ViT-L/14's architecture and LAION's aesthetic MLP on 768 inputs; 45 animal prompts.
- soup: 72 ViT-B/32 (quickgelu) ingredients around one random start (fp32, ≈ 350 MB each),
  10,000 JPEG files of ImageNetV2's size in its 1,000 class folders.
- digress: QM9 itself (the qm9pack wheel's three CSV parts reduced to the ``Index`` and
  ``SMILES`` columns the task reads: ``qm9-slim`` below; the wheel is 104 MB).

    python bench/full_dag.py qm9-slim --out .whl/qm9-slim   # here, from PyPI, before a device run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

TASKS = ("dpo", "rm", "ddpo", "soup", "digress")
BUDGET = {"outer_limit_s": 900, "internal_deadline_s": 600, "export_reserve_s": 60}
# What the device runs change in config/full-scale/TASK.yaml besides paths and budget (full size).
DEVICE_CHANGES = {
    "dpo": {
        "recipe.overrides": {"max_steps": 6, "save_steps": 6},  # full: 772 steps, saves every 100
        "evaluation.max_new_tokens": 128,  # full: 1,280 (random weights never stop early)
    },
    "rm": {"recipe.overrides": {"max_steps": 2, "save_steps": 2}},  # full: 252 steps, saves at 126 and 252
    "ddpo": {
        "recipe.overrides": {"num_epochs": 2, "save_freq": 2},  # full: 13 epochs, saves each
        "data.n_proxy": 32,  # full: 64
        "data.n_final": 64,  # full: 256
    },
    "soup": {},
    "digress": {
        "recipe.overrides": {"epochs": 4, "save_every": 4},  # full: 1,000 epochs, saves every 50
        "evaluation.n_samples_final": 2000,  # full: 10,000
    },
}


def words() -> list[str]:
    """The word list of the synthetic texts: the embedded instruction texts' words."""
    from replaykit.tasks.dpo import instructions

    text = " ".join(a + " " + q for _, q, a in instructions.TRAIN_TOPICS)
    return sorted({w.strip(".,;:!?()\"'").lower() for w in text.split()} - {""})


class Texts:
    """Texts of about ``n`` tokens of a tokenizer (words drawn at random)."""

    def __init__(self, tokenizer, seed: int = 0):
        self.vocab = words()
        self.rng = random.Random(seed)
        sample = " ".join(self.rng.choice(self.vocab) for _ in range(2000))
        self.tokens_per_word = len(tokenizer(sample)["input_ids"]) / 2000

    def __call__(self, n_tokens: int) -> str:
        n = max(1, round(n_tokens / self.tokens_per_word))
        return " ".join(self.rng.choice(self.vocab) for _ in range(n)).capitalize() + "."


# ---------------------------------------------------------------- models


def causal_lm(out: Path, size: str) -> Path:
    """Mistral-7B's architecture (random, bf16 safetensors) or the tests' tiny Mistral, with
    the toy BPE tokenizer either way."""
    from replaykit.tiny_model import make_tiny_model

    make_tiny_model(out, "mistral")
    if size == "full":
        import torch
        from rm_throughput import MISTRAL_7B
        from transformers import AutoConfig, AutoModelForCausalLM

        tiny = json.loads((out / "config.json").read_text())
        for f in out.glob("model*.safetensors"):
            f.unlink()
        config = AutoConfig.for_model(
            **{**MISTRAL_7B, **{k: tiny[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}}
        )
        torch.manual_seed(0)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(out, max_shard_size="5GB")
        print(f"[full_dag] {out}: Mistral-7B architecture, {sum(p.numel() for p in model.parameters()):,} parameters")
        del model
    return out


def sd_pipeline(out: Path, size: str) -> Path:
    """A diffusers Stable Diffusion folder: SD v1.5's architecture (or toy size), random."""
    import torch
    from ddpo_throughput import SD15_TEXT, SD15_UNET, SD15_VAE, TINY_TEXT, TINY_UNET, TINY_VAE
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from replaykit.tasks.ddpo.pipeline import SCHEDULER
    from replaykit.tasks.ddpo.tokenizer import write_clip_tokenizer

    full = size == "full"
    torch.manual_seed(0)
    write_clip_tokenizer(out / "tokenizer", 77)
    UNet2DConditionModel(**(SD15_UNET if full else TINY_UNET)).save_pretrained(out / "unet")
    AutoencoderKL(**(SD15_VAE if full else TINY_VAE)).save_pretrained(out / "vae")
    CLIPTextModel(CLIPTextConfig(**(SD15_TEXT if full else TINY_TEXT))).save_pretrained(out / "text_encoder")
    DDIMScheduler(**SCHEDULER).save_pretrained(out / "scheduler")
    components = {
        "vae": ["diffusers", "AutoencoderKL"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "scheduler": ["diffusers", "DDIMScheduler"],
    }
    (out / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline", **components}))
    return out


def aesthetic_scorer(out: Path, size: str) -> tuple[Path, Path]:
    """A transformers CLIPModel of ViT-L/14's architecture (or toy size) with CLIP's tokenizer,
    and LAION's aesthetic MLP on its projection width."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    from replaykit.tasks.ddpo.rewards import AestheticMLP
    from replaykit.tasks.ddpo.tokenizer import write_clip_tokenizer

    torch.manual_seed(0)
    if size == "full":  # openai/clip-vit-large-patch14
        text = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12}
        vision = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16}
        vision.update(image_size=224, patch_size=14)
        projection = 768
    else:
        text = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
        vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
        vision.update(image_size=32, patch_size=8)
        projection = 12
    text.update(vocab_size=49408, max_position_embeddings=77)
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection)
    CLIPModel(config).save_pretrained(out / "clip")
    write_clip_tokenizer(out / "clip", 77)
    torch.save(AestheticMLP(projection).state_dict(), out / "aesthetic_mlp.pth")
    return out / "clip", out / "aesthetic_mlp.pth"


def soup_ingredients(out: Path, size: str) -> Path:
    """72 ViT-B/32-quickgelu ingredients (1,000 classes) around one random start, or the
    tests' 3 toy ones."""
    if size == "full":
        import torch
        from soup_throughput import random_start

        if torch.cuda.is_available():
            torch.set_default_device("cuda")  # random init on the GPU; random_start saves contiguous copies
        try:
            return random_start(out, "ViT-B-32-quickgelu", 72, 1000)
        finally:
            torch.set_default_device(None)
    sys.path.insert(0, str(ROOT / "tests"))
    from test_soup import make_vit_b32_start

    return make_vit_b32_start(out, n_ingredients=3, n_classes=10)


def _jpegs(job) -> None:
    import numpy as np
    from PIL import Image

    out, classes, per_class, size = job
    for c in classes:
        rng = np.random.default_rng(c)
        folder = out / str(c)
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(per_class):
            # a smooth random picture with a little noise: compresses like a photograph
            small = rng.integers(0, 256, (size[1] // 25 + 1, size[0] // 25 + 1, 3), dtype=np.uint8)
            image = Image.fromarray(small).resize(size, Image.BILINEAR)
            noisy = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, (size[1], size[0], 3))
            Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(folder / f"{c:04d}{k:04x}.jpeg", quality=90)


def imagenetv2(out: Path, n_classes: int, per_class: int, size=(500, 375), processes: int = 16) -> Path:
    """ImageNetV2's layout: folders ``0`` … ``n_classes - 1`` of ``per_class`` JPEG files each."""
    jobs = [(out, range(k, n_classes, processes), per_class, size) for k in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_jpegs, jobs))
    return out


def qm9_slim(out: Path) -> Path:
    """The qm9pack fixed asset with its CSV parts reduced to ``Index`` and ``SMILES``."""
    import csv
    import io
    import tempfile
    import zipfile

    from replaykit.harness.fixed_start import fetch_wheel
    from replaykit.harness.hashing import sha256_file
    from replaykit.tasks.digress.qm9 import PARTS

    spec = yaml.safe_load((ROOT / "config/config.yaml").read_text())["models"]["qm9pack"]
    (out / "data").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        wheel = fetch_wheel(spec["wheel"], spec["version"], spec["sha256"], scratch)
        with zipfile.ZipFile(wheel) as zf:
            for member in PARTS:
                rows = csv.DictReader(io.TextIOWrapper(zf.open(member), encoding="utf-8"))
                with open(out / "data" / Path(member).name, "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(["Index", "SMILES"])
                    w.writerows((r["Index"], r["SMILES"]) for r in rows)
    files = [f"data/{Path(m).name}" for m in PARTS]
    info = {
        "kind": "qm9pack",
        "name": spec["wheel"],
        "version": spec["version"],
        "files": files,
        "files_sha256": {f: sha256_file(out / f) for f in files},
        "note": "bench/full_dag.py qm9-slim: the wheel's CSV parts reduced to Index and SMILES",
    }
    (out / "config.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return out


# ---------------------------------------------------------------- data


def ultrafeedback(path: Path, n: int, texts: Texts, max_length: int) -> Path:
    """``n`` UltraFeedback-binarized rows, lengths from ``pref_batches.ultrafeedback_lengths``."""
    from pref_batches import ultrafeedback_lengths

    with open(path, "w") as f:
        for i, (p, rc, rr) in enumerate(ultrafeedback_lengths(n, max_length, seed=1)):
            prompt = texts(p)
            row = {
                "prompt": prompt,
                "prompt_id": str(i),
                "chosen": [{"role": "user", "content": prompt}, {"role": "assistant", "content": texts(rc)}],
                "rejected": [{"role": "user", "content": prompt}, {"role": "assistant", "content": texts(rr)}],
                "score_chosen": 8.0,
                "score_rejected": 3.0,
            }
            f.write(json.dumps(row) + "\n")
    return path


def ifeval_prompts(path: Path, n: int, texts: Texts) -> Path:
    """IFEval ``input_data.jsonl`` rows (``key``, ``prompt``, instruction ids, kwargs)."""
    checks = [
        ("change_case:english_lowercase", {}),
        ("punctuation:no_comma", {}),
        ("detectable_format:title", {}),
        ("startend:quotation", {}),
    ]
    rng = random.Random(2)
    with open(path, "w") as f:
        for i in range(n):
            check, kwargs = checks[i % len(checks)]
            prompt = texts(int(math.exp(rng.gauss(math.log(40), 0.6))))
            f.write(json.dumps({"key": 1000 + i, "prompt": prompt, "instruction_id_list": [check], "kwargs": [kwargs]}))
            f.write("\n")
    return path


def rewardbench_rows(path: Path, texts: Texts, per_subset: int | None) -> Path:
    """RewardBench v1 ``filtered`` rows: the file's count of each subset (or ``per_subset``)."""
    rng = random.Random(3)
    with open(path, "w") as f:
        i = 0
        for subset, count in REWARDBENCH_ROWS.items():
            for _ in range(per_subset or count):
                p = int(math.exp(rng.gauss(math.log(60), 0.8)))
                row = {"id": str(i), "subset": subset, "prompt": texts(p)}
                row.update(chosen=texts(int(math.exp(rng.gauss(math.log(120), 0.7)))))
                row.update(rejected=texts(int(math.exp(rng.gauss(math.log(120), 0.7)))))
                f.write(json.dumps(row) + "\n")
                i += 1
    return path


def _rewardbench_rows() -> dict[str, int]:
    """Rows per subset of RewardBench v1's ``filtered`` file: the scorer's example counts but
    for math-prm (447 rows, counted as 984) and the two XSTest subsets (each counted as the
    other's size); see :mod:`replaykit.tasks.rm.rewardbench`."""
    from replaykit.tasks.rm.rewardbench import EXAMPLE_COUNTS

    rows = dict(EXAMPLE_COUNTS, **{"math-prm": 447})
    rows["xstest-should-refuse"], rows["xstest-should-respond"] = (
        EXAMPLE_COUNTS["xstest-should-respond"],
        EXAMPLE_COUNTS["xstest-should-refuse"],
    )
    return rows


REWARDBENCH_ROWS = _rewardbench_rows()
ANIMALS = (
    "cat dog horse monkey rabbit zebra spider bird sheep deer cow goat lion tiger bear raccoon fox wolf lizard"
    " beetle ant butterfly fish shark whale dolphin squirrel mouse rat snake turtle frog chicken duck goose bee"
    " pig turkey fly llama camel bat gorilla hedgehog kangaroo"
).split()  # 45, as DDPO's simple_animals


# ---------------------------------------------------------------- configs


def set_path(block: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        block = block.setdefault(key, {})
    block[last] = value


def stand_ins(task: str, size: str, out: Path, qm9: Path | None, shared: Path | None = None) -> dict:
    """Build the stand-ins of ``task`` under ``out`` (dpo's and rm's model under ``shared``
    when given, built once for both); return ``{"fixed_start": path, "data": {key: path}}``."""
    out.mkdir(parents=True, exist_ok=True)
    full = size == "full"
    if task in ("dpo", "rm"):
        from transformers import AutoTokenizer

        model = (shared or out) / f"mistral-{size}"
        if not (model / ".complete").exists():
            causal_lm(model, size)
            (model / ".complete").write_text("")
        texts = Texts(AutoTokenizer.from_pretrained(model))
        if task == "dpo":
            data = {
                "train_prefs": ultrafeedback(out / "train_prefs.jsonl", 2048 if full else 16, texts, 1024),
                "ifeval_prompts": ifeval_prompts(out / "input_data.jsonl", 541 if full else 10, texts),
            }
        else:
            data = {
                "train_prefs": ultrafeedback(out / "train_prefs.jsonl", 8192 if full else 8, texts, 1024),
                "rewardbench": rewardbench_rows(out / "filtered.jsonl", texts, None if full else 2),
            }
    elif task == "ddpo":
        model = sd_pipeline(out / "sd", size)
        clip, mlp = aesthetic_scorer(out, size)
        (out / "simple_animals.txt").write_text("\n".join(ANIMALS if full else ANIMALS[:3]) + "\n")
        data = {"prompts_file": out / "simple_animals.txt", "clip_dir": clip, "aesthetic_mlp": mlp}
    elif task == "soup":
        model = soup_ingredients(out / "ingredients", size)
        n_classes, per_class = (1000, 10) if full else (10, 2)
        processes = os.cpu_count() or 1
        data = {"imagenetv2_dir": imagenetv2(out / "imagenetv2", n_classes, per_class, processes=processes)}
    else:
        if qm9 is None or not (qm9 / "config.json").is_file():
            raise SystemExit(f"digress needs --qm9: a folder made by `bench/full_dag.py qm9-slim --out DIR` ({qm9})")
        model, data = qm9.resolve(), {}
    return {"fixed_start": str(model), "data": {k: str(v) for k, v in data.items()}}


def task_block(task: str, size: str, paths: dict) -> dict:
    """``config/full-scale/<task>.yaml``'s task block on the stand-ins ``paths`` (see
    :func:`stand_ins`) with :data:`BUDGET` and, at full size, :data:`DEVICE_CHANGES`; at toy
    size, :data:`TINY_DATA`, :data:`TINY_OVERRIDES` and :data:`TINY_EVALUATION`, and
    validation in float32 within 5 s."""
    block = yaml.safe_load((ROOT / f"config/full-scale/{task}.yaml").read_text())["tasks"][task]
    block.update(fixed_start=paths["fixed_start"], threads=8 if size == "full" else 1, budget=dict(BUDGET))
    block["data"].update(paths["data"])
    if size == "full":
        for dotted, value in DEVICE_CHANGES[task].items():
            if dotted == "recipe.overrides":
                block["recipe"]["overrides"] = {**block["recipe"]["overrides"], **value}
            else:
                set_path(block, dotted, value)
    else:  # toy sizes: a few steps on the CPU
        block["data"].update(TINY_DATA.get(task, {}))
        block["recipe"]["overrides"] = TINY_OVERRIDES[task]
        block["evaluation"] = {**block["evaluation"], **TINY_EVALUATION[task]}
        block["validation"] = {**block["validation"], "runtime": 5}
        if "dtype" in block["validation"]:
            block["validation"]["dtype"] = "float32"
    return block


def apply_settings(block: dict, settings: list[str]) -> dict:
    """``block`` with each ``DOTTED=YAML`` of ``settings`` set in turn (``--set``; the value
    read as YAML: ``null``, ``16``, ``full-nogc``). The last key may be new (a recipe override
    the block does not set yet); the keys above it must be mappings of the block, so that a
    misspelt one (``recipe.override.max_steps``) is refused instead of adding a subtree. Raises
    SystemExit for a setting without ``=`` or a key, or with such a parent."""
    for setting in settings:
        dotted, sep, value = setting.partition("=")
        if not sep or not dotted:
            raise SystemExit(f"--set {setting!r}: expected DOTTED.KEY=YAML_VALUE")
        *parents, last = dotted.split(".")
        node = block
        for depth, key in enumerate(parents, start=1):
            node = node.get(key)
            if not isinstance(node, dict):
                raise SystemExit(f"--set {setting!r}: {'.'.join(parents[:depth])} is not a mapping of the task block")
        node[last] = yaml.safe_load(value)
    return block


def prepare(
    task: str, size: str, out: Path, qm9: Path | None, shared: Path | None = None, settings: list[str] = ()
) -> Path:
    """:func:`stand_ins` and :func:`task_block`, then each ``DOTTED=YAML`` of ``settings`` (for
    example ``recipe.overrides.max_steps=16``), written to ``out/<task>.yaml`` (returned)."""
    block = apply_settings(task_block(task, size, stand_ins(task, size, out, qm9, shared)), settings)
    config = out / f"{task}.yaml"
    config.write_text(yaml.safe_dump({"tasks": {task: block}}, sort_keys=False))
    return config


TINY_DATA = {
    "dpo": {"n_proxy": 3},
    "rm": {"n_proxy": 23},
    "ddpo": {"n_proxy": 2, "n_final": 3},
    "digress": {"n_train": 200, "n_val": 50, "n_test": 50},
}
TINY_OVERRIDES = {
    "dpo": {
        "quantization": None,
        "optim": "adamw_torch",
        "dtype": "float32",
        "max_steps": 2,
        "save_steps": 2,
        "max_length": 64,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "lora": {"r": 4, "alpha": 4},
    },
    "rm": {
        "dtype": "float32",
        "optim": "adamw_torch",
        "max_steps": 2,
        "save_steps": 2,
        "max_length": 48,
        "gradient_accumulation_steps": 2,
        "lora": {"r": 4, "alpha": 8},
    },
    "ddpo": {
        "num_epochs": 1,
        "save_freq": 1,
        "sample_batch_size": 2,
        "train_batch_size": 1,
        "gradient_accumulation_steps": 2,
        "num_steps": 2,
        "stat_min_count": 1,
        "stat_buffer_size": 2,
        "dtype": "float32",
    },
    "soup": {"batch_size": 8},
    "digress": {
        "T": 10,
        "n_layers": 1,
        "hidden_mlp_dims": {"X": 8, "E": 8, "y": 8},
        "hidden_dims": {"dx": 8, "de": 8, "dy": 8, "n_head": 2, "dim_ffX": 8, "dim_ffE": 8, "dim_ffy": 8},
        "batch_size": 50,
        "epochs": 1,
        "save_every": 1,
    },
}
TINY_EVALUATION = {
    "dpo": {"max_new_tokens": 4, "batch_size": 8, "dtype": "float32", "runtime": 5},
    "rm": {"max_length": 48, "batch_size": 8, "dtype": "float32", "runtime": 5},
    "ddpo": {"batch_size": 2, "runtime": 5},
    "soup": {"batch_size": 5, "workers": 2, "runtime": 5},
    "digress": {"batch_size": 50, "nll_repeats": 1, "n_samples_final": 20, "n_samples_proxy": 10, "runtime": 5},
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("task", choices=[*TASKS, "qm9-slim"])
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--qm9", type=Path, help="digress: the folder `qm9-slim` wrote")
    p.add_argument("--shared", type=Path, help="dpo, rm: where their model is built once for both")
    p.add_argument(
        "--set", action="append", default=[], metavar="DOTTED=YAML", help="one more change to the task block, last"
    )
    a = p.parse_args()
    if a.task == "qm9-slim":
        print(qm9_slim(a.out))
    else:
        print(prepare(a.task, a.size, a.out, a.qm9, a.shared, a.set))


if __name__ == "__main__":
    main()
