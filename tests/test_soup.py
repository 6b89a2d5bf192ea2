"""The soup task: clustered SE and greedy soup by hand, the affine-hull validator, the
ingredient builder on tiny settings, and the whole DAG."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from conftest import ROOT, copy_workflow, recipe_train, snakemake, write_config
from replaykit.harness.errors import InputError
from replaykit.tasks import soup
from replaykit.tasks.soup import evaluator, ingredients, loader
from replaykit.tasks.soup.model import load_state


def test_clustered_se_by_hand():
    # classes A: 1,1,0 ; B: 0,0 ; C: 1 -> n = 6, p = 1/2
    # cluster sums of (y - p): A = 0.5+0.5-0.5 = 0.5, B = -1.0, C = 0.5 -> squares 0.25 + 1 + 0.25 = 1.5
    # SE = sqrt(3/2 * 1.5) / 6 = sqrt(2.25) / 6 = 0.25
    assert evaluator.clustered_se([1, 1, 0, 0, 0, 1], ["A", "A", "A", "B", "B", "C"]) == pytest.approx(0.25)
    # one item per cluster: sqrt(G/(G-1) * n p (1-p)) / n; n = 4, p = 1/2 -> sqrt(4/3 * 1) / 4
    assert evaluator.clustered_se([1, 0, 1, 0], [0, 1, 2, 3]) == pytest.approx(math.sqrt(4 / 3) / 4)
    assert evaluator.clustered_se([1, 0], ["A", "A"]) == 0.0


def _scaled(image):
    """A small deterministic preprocess (module level: decoding workers may pickle it)."""
    import numpy as np

    return torch.from_numpy(np.asarray(image.resize((6, 5)), dtype=np.float32)).permute(2, 0, 1) / 255


def decoding_items(tmp_path, n: int) -> list[dict]:
    """``n`` random images of different sizes and contents, PNG and JPEG, under ``tmp_path``."""
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    items = []
    for i in range(n):
        size = (9 + i % 7, 7 + 2 * (i % 7))
        pixels = (torch.rand(size[1], size[0], 3, generator=gen) * 255).to(torch.uint8).numpy()
        name = f"{i}.{'png' if i % 2 else 'jpeg'}"
        Image.fromarray(pixels).save(tmp_path / name)
        items.append({"id": str(i), "file": name, "label": i % 3})
    return items


def test_decoding_workers_give_the_same_tensors_in_order(tmp_path):
    items = decoding_items(tmp_path, 70)  # 3 batches of 32, the last partial
    one = evaluator.load_images(tmp_path / "items.jsonl", items, _scaled)
    two = evaluator.load_images(tmp_path / "items.jsonl", items, _scaled, workers=2)
    assert one.shape == (70, 3, 5, 6) and torch.equal(one, two)


def test_decoding_without_shared_memory_falls_back_to_one_process(tmp_path, monkeypatch, capsys):
    items = decoding_items(tmp_path, 5)
    expected = evaluator.load_images(tmp_path / "items.jsonl", items, _scaled)

    class NoSharedMemory:  # what a worker's batch raises in a container with a full /dev/shm
        def __init__(self, *args, **kwargs):
            pass

        def __iter__(self):
            raise RuntimeError(
                "unable to allocate shared memory(shm) for file </torch_1_2>: No space left on device (28)"
            )

    monkeypatch.setattr(torch.utils.data, "DataLoader", NoSharedMemory)
    got = evaluator.load_images(tmp_path / "items.jsonl", items, _scaled, workers=4)
    assert torch.equal(got, expected)
    assert "[images] 4 decoding workers: unable to allocate shared memory" in capsys.readouterr().out


def test_greedy_soup_is_strict():
    train = recipe_train("soup")
    table = {(0,): 0.50, (0, 1): 0.55, (0, 1, 2): 0.55, (0, 1, 3): 0.60}  # adding 2 ties: not strict, refused
    members, history = train.greedy_soup([0, 1, 2, 3], lambda m: table[tuple(m)])
    assert members == [0, 1, 3] and history == [0.50, 0.55, 0.55, 0.60]


@pytest.fixture(scope="module")  # the module-scoped assets below build on it
def fixed_start(soup_start):
    """conftest's ``soup_start`` (``build_start``'s spec, built once per session; read only)."""
    return soup_start


def build_start(out: Path, **spec) -> Path:
    """The soup-digits builder through the fixed_start_model path (writes the private file)."""
    from replaykit.models import build_from_builder

    spec = {
        "builder": "soup-digits",
        "seed": 0,
        "n_ingredients": 3,
        "pretrain_epochs": 1,
        "heldout_per_class": 4,
        **spec,
    }
    build_from_builder(spec, out, out.parent / f"{out.name}.manifest.json")
    return out


@pytest.fixture(scope="module")
def assets(fixed_start, tmp_path_factory):
    root = tmp_path_factory.mktemp("soup-assets")
    info = soup.build_assets(
        {"source": "embedded", "public_seed": 1, "proxy_per_class": 2}, fixed_start, root / "public", root / "hidden"
    )
    return root, info


def test_builder_and_splits(fixed_start, assets):
    from replaykit.harness.fixed_start import private_path

    config = json.loads((fixed_start / "config.json").read_text())
    heldout = json.loads(private_path(fixed_start).read_text())["heldout_indices"]
    assert len(config["ingredients"]) == 3 and len(heldout) == 40 and config["n_train_images"] == 1797 - 40
    # the fixed start a replay reads names no held-out (or training) image: no index lists at all
    assert not {"heldout_indices", "train_indices"} & set(config)
    manifest = json.loads((fixed_start.parent / "ingredients.manifest.json").read_text())
    assert "heldout_indices" not in json.dumps(manifest)
    root, info = assets
    proxy = [json.loads(l) for l in (root / "public/proxy.jsonl").read_text().splitlines()]
    final = [json.loads(l) for l in (root / "hidden/final.jsonl").read_text().splitlines()]
    assert (len(proxy), len(final)) == (20, 20) and info["n_proxy"] == 20
    assert not {p["id"] for p in proxy} & {f["id"] for f in final}
    held = {f"digit-{i:04d}" for i in heldout}
    assert {p["id"] for p in proxy} | {f["id"] for f in final} == held  # images no ingredient saw


def write_soup(dest: Path, fixed_start: Path, coefficients: list[float], perturb: float = 0.0) -> Path:
    dest.mkdir(parents=True)
    states = [load_state(p) for p in sorted((fixed_start / "ingredients").glob("*.safetensors"))]
    mixed = {k: sum(c * s[k] for c, s in zip(coefficients, states)) for k in states[0]}
    mixed["head.bias"] = mixed["head.bias"] + perturb
    torch.save(mixed, dest / "model.pt")
    (dest / "coefficients.json").write_text(json.dumps({"coefficients": coefficients}))
    return dest


def test_validator_affine_hull(fixed_start, tmp_path):
    good = write_soup(tmp_path / "uniform", fixed_start, [1 / 3] * 3)
    verdict = loader.validate(good, fixed_start)
    assert verdict["valid"], verdict["reason"]
    extrapolated = write_soup(tmp_path / "affine", fixed_start, [1.5, -0.25, -0.25])  # affine, not convex: allowed
    assert loader.validate(extrapolated, fixed_start)["valid"]
    bad_sum = write_soup(tmp_path / "sum", fixed_start, [0.5, 0.5, 0.5])
    verdict = loader.validate(bad_sum, fixed_start)
    assert not verdict["valid"] and "sum to 1.5" in verdict["reason"]
    outside = write_soup(tmp_path / "outside", fixed_start, [1 / 3] * 3, perturb=1e-2)
    verdict = loader.validate(outside, fixed_start)
    assert not verdict["valid"] and "head.bias is not the coefficient-weighted sum" in verdict["reason"]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: {**s, "head.weight": torch.zeros(11, s["head.weight"].shape[1])}, "head.weight has shape (11,"),
        (
            lambda s: {**s, "extra.buffer": torch.zeros(2)},
            "keys differ from ingredient_00.safetensors (extra ['extra.buffer']",
        ),
    ],
)
def test_ingredient_with_other_keys_or_shapes_is_refused_by_name(fixed_start, tmp_path, change, message):
    from safetensors.torch import save_file

    broken = tmp_path / "broken"
    shutil.copytree(fixed_start, broken)
    state = change(load_state(broken / "ingredients/ingredient_01.safetensors"))
    save_file(state, str(broken / "ingredients/ingredient_01.safetensors"))
    with pytest.raises(InputError) as err:
        soup.build_assets({"public_seed": 1, "proxy_per_class": 2}, broken, tmp_path / "p", tmp_path / "h")
    assert "ingredient_01.safetensors" in str(err.value) and message in str(err.value)
    assert not (tmp_path / "p").exists()


def test_evaluator_matches_a_direct_forward(fixed_start, assets, tmp_path):
    root, _ = assets
    ckpt = write_soup(tmp_path / "ckpt", fixed_start, [1 / 3] * 3)
    summary, rows = evaluator.evaluate(
        ckpt, fixed_start, root / "hidden/final.jsonl", "{dataset}_top1_full{n}", {"batch_size": 7}
    )
    assert summary["metric"] == "digits_top1_full20" and summary["n"] == 20
    model, preprocess = soup.model.create_classifier(fixed_start)
    model.load_state_dict(torch.load(ckpt / "model.pt", weights_only=True))
    items = evaluator.read_items(root / "hidden/final.jsonl")
    with torch.no_grad():
        direct = model.eval()(evaluator.load_images(root / "hidden/final.jsonl", items, preprocess)).argmax(1)
    correct = [int(p == it["label"]) for p, it in zip(direct.tolist(), items)]
    assert summary["value"] == pytest.approx(sum(correct) / 20)
    assert summary["uncertainty"]["value"] == pytest.approx(
        evaluator.clustered_se(correct, [it["label"] for it in items])
    )


def test_reference_selects_on_the_proxy_split(fixed_start, assets, tmp_path):
    """Relabel a copy of the proxy so that ingredient 2 is right on every proxy image: the
    reference must pick it, whatever the final split says."""
    root, _ = assets
    public = tmp_path / "public"
    shutil.copytree(root / "public", public)
    items = evaluator.read_items(public / "proxy.jsonl")
    model, preprocess = soup.model.create_classifier(fixed_start)
    model.load_state_dict(load_state(fixed_start / "ingredients/ingredient_02.safetensors"))
    with torch.no_grad():
        predicted = model.eval()(evaluator.load_images(public / "proxy.jsonl", items, preprocess)).argmax(1).tolist()
    (public / "proxy.jsonl").write_text(
        "".join(json.dumps({**it, "label": p}) + "\n" for it, p in zip(items, predicted))
    )
    reference, _ = evaluator.evaluate(
        None,
        fixed_start,
        root / "hidden/final.jsonl",
        "{dataset}_top1_full{n}",
        {"batch_size": 7, "public_dir": str(public)},
    )
    chosen = reference["diagnostics"]["reference"]
    assert chosen["proxy_accuracies"][2] == 1.0  # true by construction of the relabelled proxy
    first_perfect = chosen["proxy_accuracies"].index(1.0)  # ties go to the lower index
    assert chosen["ingredient"] == f"ingredients/ingredient_{first_perfect:02d}.safetensors"
    with pytest.raises(ValueError, match="public split"):
        evaluator.evaluate(None, fixed_start, root / "hidden/final.jsonl", "m", {"batch_size": 7})


def test_held_out_draw_depends_on_the_salt():
    import hashlib

    from replaykit.harness.salt import salted_seed

    assert salted_seed(7919, "") == 7919  # the public, reproducible draw
    expected = int.from_bytes(hashlib.sha256(b"0:s3cret").digest()[:8], "big") >> 1
    assert salted_seed(0, "s3cret") == expected and 0 <= expected < 2**63
    _, labels = ingredients.digits()
    public, salted = ingredients.heldout_indices(labels, 4, 0), ingredients.heldout_indices(labels, 4, expected)
    assert len(salted) == 40 and set(public) != set(salted)


def test_builder_refuses_a_held_out_count_larger_than_a_class(tmp_path):
    with pytest.raises(InputError, match="heldout_per_class: must be between 3 and"):
        ingredients.build(
            {"seed": 0, "n_ingredients": 2, "pretrain_epochs": 1, "heldout_per_class": 500}, tmp_path / "x"
        )


def test_local_imagenetv2_folder_checks(tmp_path):
    good = make_imagenetv2(tmp_path / "good", n_classes=3, per_class=2)
    (good / "1" / ".DS_Store").write_bytes(b"junk")  # skipped
    (good / "1" / "notes.txt").write_text("skipped")
    assert [len(v) for v in soup._local_images(good, 3).values()] == [2, 2, 2]
    with pytest.raises(InputError, match="needs class folders 0..3: missing 3; unexpected none"):
        soup._local_images(good, 4)
    (good / "2" / "broken.jpeg").write_bytes(b"not a jpeg")
    with pytest.raises(InputError, match="broken.jpeg: not a readable image"):
        soup._local_images(good, 3)


@pytest.mark.slow
def test_soup_dag(fixed_start, tmp_path):
    work = copy_workflow(tmp_path)
    task = {
        "fixed_start": str(fixed_start),
        "data": {"source": "embedded", "public_seed": 1, "proxy_per_class": 2},
        "recipe": {"profile": "embedded", "overrides": {"method": "greedy"}},
        "seeds": [42],
        "threads": 2,  # the greedy replay decodes its proxy images in 2 processes, inside the sandbox
        "budget": {"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
        "validation": {"runtime": 5},
        "evaluation": {"batch_size": 64, "runtime": 5},
        "final": {"n_boot": 500},
    }
    write_config(work, {"models": {}, "tasks": {"soup": task}})
    snakemake(work, "results/soup/report.html", "--cores", "2", "--resources", "gpu=1", check=True)
    summary = json.loads((work / "results/soup/final/summary.json").read_text())
    assert summary["metric"] == "digits_top1_full20"
    # the report's training curve is the greedy soup's proxy accuracy after each round
    curve = json.loads((work / "results/soup/shipped-seed42/replay/record.json").read_text())["train_history"]
    assert [h["progress"] for h in curve] == [1, 2, 3] and all(0 <= h["proxy_accuracy"] <= 1 for h in curve)
    assert 'data-run="shipped-seed42" data-progress="3"' in (work / "results/soup/report.html").read_text()
    record = json.loads((work / "results/soup/shipped-seed42/replay/record.json").read_text())
    assert record["retained"] == [3]
    coefficients = json.loads((work / "results/soup/shipped-seed42/replay/checkpoint-3/coefficients.json").read_text())
    assert abs(sum(coefficients["coefficients"]) - 1) < 1e-9 and coefficients["method"] == "greedy"
    assert summary["references"]["fixed_start"]["value"] is not None
    assert "vs_fixed_start" in summary["comparisons"]
    # a candidate whose coefficients do not sum to 1: invalid, not scored, no official result
    train_py = (ROOT / "recipes/soup/train.py").read_text()
    assert "([1.0 / n] * n, {}, [])" in train_py  # the uniform soup's coefficients
    import difflib

    patch = tmp_path / "badsum.diff"
    patched = train_py.replace("([1.0 / n] * n, {}, [])", "([0.5] * n, {}, [])")
    patch.write_text(
        "".join(difflib.unified_diff(train_py.splitlines(True), patched.splitlines(True), "a/train.py", "b/train.py"))
    )
    task.update(candidates={"badsum": str(patch)}, recipe={"profile": "embedded", "overrides": {}})
    write_config(work, {"models": {}, "tasks": {"soup": task}})
    snakemake(work, "results/soup/badsum-seed42/official.json", "--cores", "2", "--resources", "gpu=1", check=True)
    marker = json.loads((work / "results/soup/badsum-seed42/validation/checkpoint-3.json").read_text())
    assert not marker["valid"] and "sum to 1.5" in marker["reason"]
    scores = json.loads((work / "results/soup/badsum-seed42/final-scores/checkpoint-3/summary.json").read_text())
    assert scores["value"] is None and scores["metric"] == "unscored_top1_full0"
    assert json.loads((work / "results/soup/badsum-seed42/official.json").read_text())["official"] is None


def make_vit_b32_start(out: Path, n_ingredients: int = 3, n_classes: int = 3) -> Path:
    """A full-scale-layout fixed start: ViT-B/32's architecture shrunk (patch 32, width 32,
    1 layer, 64 px), random ingredients around one start, as model-soups' folder would be."""
    import open_clip

    (out / "model_configs").mkdir(parents=True)
    (out / "ingredients").mkdir()
    cfg = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 64, "layers": 1, "width": 32, "patch_size": 32, "head_width": 16},
        "text_cfg": {"context_length": 8, "vocab_size": 49408, "width": 16, "heads": 1, "layers": 1},
    }
    (out / "model_configs" / "tiny-ViT-B-32.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(out / "model_configs")
    torch.manual_seed(0)
    clip = open_clip.create_model("tiny-ViT-B-32")
    base = soup.model.ImageClassifier(clip.visual, 16, n_classes).state_dict()
    names = []
    for i in range(n_ingredients):
        state = {
            k: (v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v).contiguous() for k, v in base.items()
        }
        names.append(f"ingredients/model_{i}.pt")
        torch.save(state, out / names[-1])
    (out / "config.json").write_text(
        json.dumps({"model_name": "tiny-ViT-B-32", "n_classes": n_classes, "ingredients": names})
    )
    return out


def make_imagenetv2(out: Path, n_classes: int = 3, per_class: int = 4) -> Path:
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    for c in range(n_classes):
        (out / str(c)).mkdir(parents=True)
        for k in range(per_class):
            pixels = (torch.rand(40, 48, 3, generator=gen) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(out / str(c) / f"{k:08x}.jpeg")
    return out


@pytest.mark.slow
def test_full_scale_config_on_tiny_vit_b32(tmp_path):
    import yaml

    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    start = make_vit_b32_start(tmp_path / "ingredients")
    images = make_imagenetv2(tmp_path / "imagenetv2")
    task = yaml.safe_load((ROOT / "config/full-scale/soup.yaml").read_text())["tasks"]["soup"]
    task.update(
        fixed_start=str(start),
        threads=1,
        budget={"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
        validation={"runtime": 5},
        evaluation={"batch_size": 5, "runtime": 5, "workers": 2},  # 2 decoders
        final={"n_boot": 200},
    )
    task["data"] = {**task["data"], "imagenetv2_dir": str(images)}
    write_config(work, {"models": {}, "tasks": {"soup": task}})
    snakemake(work, "results/soup/final", "--cores", "1", "--resources", "gpu=1", check=True)
    manifest = json.loads((work / "results/soup/assets/manifest.json").read_text())
    assert (manifest["data"]["n_proxy"], manifest["data"]["n_final"]) == (6, 12)  # proxy: a visible subset of final
    assert sum(1 for k in manifest["files"] if k.endswith(".jpeg")) == 18
    assert len(manifest["fixed_start"]["files"]) == 5  # config, model config, 3 ingredients: each hashed
    summary = json.loads((work / "results/soup/final/summary.json").read_text())
    assert summary["metric"] == "imagenetv2_top1_full12" and summary["n"] == 12
    assert summary["references"]["published"] == {"uniform": 0.6859, "best_ingredient": 0.6874}
