"""The ``soup`` task: CLIP weight-space model soups (SPEC: soup).

Fixed start: a folder of soup ingredients (``config.json`` naming the open_clip
architecture and the ingredient files; :mod:`.model`). Embedded default: built by the
``fixed_start_model`` rule from scikit-learn's digits (:mod:`.ingredients`); full scale: a
local folder of 72 fine-tuned ViT-B/32 state dicts in the same layout.

Splits: embedded -- the images every ingredient was kept from (``heldout_indices`` of
``<fixed start>.private.json``, outside the fixed start a replay sees), 2 per class for the
proxy (``public/``) and the rest for the final split (``hidden/``); local -- an ImageNetV2
folder (``<class index>/<image>``), all images final and 2 per class of them also public proxy
images (a visible subset, as SPEC's proxy2000 / full10000), copied into the assets so the manifest hashes every image.
"""

from __future__ import annotations

import random
from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import atomic_write_jsonl
from .. import check_data_keys, deferred

METRIC = {
    "final": "{dataset}_top1_full{n}",
    "proxy": "{dataset}_top1_proxy{n}",
    "direction": "maximize",
    "uncertainty": "se_clustered_by_class",
}
REPORT_DIAGNOSTICS = ()
# Isolation: data keys whose local paths hold final-split items (the sandbox hides them),
# and whether the fixed start is raw data whose complement is the test set (then not shown).
FINAL_SOURCES: tuple[str, ...] = ("imagenetv2_dir",)
FIXED_START_IS_DATA = False
# The audit searches for the final images' ids, file hashes and (id, label) pairs.
FINAL_ITEM_FIELDS = {"token": ("id",), "file": ("file",), "label": "label"}
# Files of installed packages that hold final-split items (hidden from the replay too).
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = (
    ("sklearn", "datasets/data/digits.csv.gz"),
)  # the held-out digits are in it
FIXED_START_BUILDERS = {"soup-digits": ".ingredients"}  # models.<name>.builder -> module with build()
REFERENCE_USES_PUBLIC = True  # the fixed-start reference is the best ingredient on the proxy split
ROW_CLUSTER = "label"  # the SE is clustered by class: a matched ablation resamples whole classes
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
PROXY_FILE, FINAL_FILE = "proxy.jsonl", "final.jsonl"
EMBEDDED_KEYS = ("public_seed", "proxy_per_class")
LOCAL_KEYS = ("imagenetv2_dir", "public_seed", "proxy_per_class")


# The plug-in interface's heavy parts (torch, open_clip) are imported when called, not when the
# workflow is parsed (every job re-parses it).
validate = deferred(__name__, ".loader", "validate")  # the frozen loader's verdict
evaluate = deferred(__name__, ".evaluator", "evaluate")  # the frozen evaluator
plot_diagnostics = deferred(__name__, ".report", "plot_diagnostics")  # the report's diagnostic figure


def check_data(data: dict) -> None:
    """Config check of ``tasks.soup.data``."""
    check_data_keys(data, embedded=EMBEDDED_KEYS, local=LOCAL_KEYS, counts=("proxy_per_class",))
    if data.get("source") == "local" and not Path(data["imagenetv2_dir"]).is_dir():
        raise ValueError(f"imagenetv2_dir: folder {data['imagenetv2_dir']!r} not found")


def check_fixed_start(fixed_start: str | Path) -> None:
    """Workflow-start check of a local fixed start (before any rule replaces built assets):
    the ingredients' heads are aligned (:func:`.heads.check_heads`, heads only, without torch). Raises
    :class:`InputError` naming the ingredient file and ``head.weight``, or ``config.json``'s field."""
    from .heads import check_heads

    if (Path(fixed_start) / "config.json").is_file():
        check_heads(fixed_start)


def _write_split(folder: Path, name: str, images: list, prefix: str, dataset: str) -> list[dict]:
    """Save ``images`` (``(id, PIL image or source path, label, visible)``) under
    ``folder/<prefix>/`` and return their items."""
    import shutil

    (folder / prefix).mkdir(parents=True)
    items = []
    for image_id, image, label, visible in images:
        if isinstance(image, Path):
            rel = f"{prefix}/{image_id}{image.suffix.lower()}"
            shutil.copy2(image, folder / rel)
        else:
            rel = f"{prefix}/{image_id}.png"
            image.save(folder / rel)
        items.append(
            {"id": image_id, "file": rel, "label": label, "dataset": dataset, **({"visible": True} if visible else {})}
        )
    atomic_write_jsonl(folder / name, items)
    return items


def _local_images(root: Path, n_classes: int) -> dict[int, list[Path]]:
    """ImageNetV2 layout: folders ``0 .. n_classes - 1``, each with image files (dot-files and
    other suffixes skipped). Every image is opened once here. Raises :class:`InputError`
    naming a missing or unexpected class folder, an empty one, or an image that does not open."""
    from PIL import Image

    folders = {p.name: p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    expected = {str(c) for c in range(n_classes)}
    missing, extra = sorted(expected - folders.keys(), key=int), sorted(folders.keys() - expected)
    if missing or extra:
        raise InputError(
            root,
            None,
            f"needs class folders 0..{n_classes - 1}: missing {', '.join(missing[:5]) or 'none'}; "
            f"unexpected {', '.join(extra[:5]) or 'none'}",
        )
    by_class = {}
    for c in range(n_classes):
        files = sorted(
            p
            for p in folders[str(c)].iterdir()
            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES
        )
        if not files:
            raise InputError(folders[str(c)], None, f"no images ({', '.join(IMAGE_SUFFIXES)})")
        for f in files:
            try:
                with Image.open(f) as image:
                    image.verify()
            except Exception as exc:  # PIL raises several types for a bad file
                raise InputError(f, None, f"not a readable image ({type(exc).__name__})") from None
        by_class[c] = files
    return by_class


def build_assets(cfg: dict, fixed_start: str | Path, public_dir: str | Path, hidden_dir: str | Path) -> dict:
    """Write ``public/proxy.jsonl`` + images and ``hidden/final.jsonl`` + images.

    Raises :class:`InputError` naming an ingredient whose keys or shapes differ from the
    first one's, whose classification head is not aligned with the zero-shot head
    (:func:`.heads.check_heads`), or a split that cannot hold ``proxy_per_class`` images of
    every class.
    """
    import shutil

    from .heads import check_heads
    from .model import check_ingredients, read_config

    try:
        info = check_ingredients(fixed_start)
        info["head_alignment"] = check_heads(fixed_start)
    except ValueError as exc:
        path, _, message = str(exc).partition(": ")
        field = "state_dict"
        if message.startswith("head.weight: "):
            field, _, message = message.partition(": ")
        raise InputError(path, field, message) from None
    config = read_config(fixed_start)
    rng = random.Random(int(cfg["public_seed"]))
    per_class = int(cfg["proxy_per_class"])
    by_class: dict[int, list] = {}
    if cfg.get("source") == "local":
        by_class = _local_images(Path(cfg["imagenetv2_dir"]), int(config["n_classes"]))
        dataset = "imagenetv2"
    else:
        from ...harness.fileio import read_json
        from ...harness.fixed_start import private_path
        from .ingredients import digits

        images, labels = digits()
        private = private_path(fixed_start)
        if not private.is_file():
            raise InputError(
                private,
                "heldout_indices",
                "file not found: the digits fixed start's held-out indices are written beside "
                "it by the fixed_start_model rule (models: in the config); a fixed start built "
                "elsewhere must come with this file",
            )
        heldout = read_json(private, required=("heldout_indices",))["heldout_indices"]
        for i in heldout:
            by_class.setdefault(labels[i], []).append(("digit", i, images[i]))
        dataset = "digits"
    if len(by_class) != int(config["n_classes"]):
        raise InputError(
            "config", "data", f"{len(by_class)} classes of images, the ingredients have {config['n_classes']}"
        )
    proxy, final = [], []
    for label, members in sorted(by_class.items()):
        if len(members) < per_class + (0 if cfg.get("source") == "local" else 1):
            raise InputError("config", "data.proxy_per_class", f"class {label} has only {len(members)} images")
        chosen = set(rng.sample(range(len(members)), per_class))
        for k, member in enumerate(members):
            if dataset == "digits":
                image_id, image = f"digit-{member[1]:04d}", member[2]
            else:
                image_id, image = f"{label:04d}-{member.name.replace('.', '_')}", member
            if k in chosen:
                proxy.append((image_id, image, label, False))
            if k not in chosen or dataset != "digits":
                final.append((image_id, image, label, k in chosen))
    for d in (Path(public_dir), Path(hidden_dir)):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    _write_split(Path(public_dir), PROXY_FILE, proxy, "proxy", dataset)
    _write_split(Path(hidden_dir), FINAL_FILE, final, "final", dataset)
    return {
        "source": cfg.get("source", "embedded"),
        "dataset": dataset,
        "n_proxy": len(proxy),
        "n_final": len(final),
        "proxy_in_final": dataset != "digits",
        "ingredients": info,
    }


def split_file(split: str) -> str:
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]
