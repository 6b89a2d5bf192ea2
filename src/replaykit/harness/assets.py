"""A task's fixed assets: build the public and hidden splits from the fixed start and
write the asset manifest (SHA-256 of the fixed start and of every asset file) that every
later step verifies them against (:func:`verify_assets`)."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .fileio import atomic_write_json, read_json
from .fixed_start import source_of
from .hashing import sha256_file, sha256_tree, tree_files
from .provenance import git_commit, library_versions, utc_now
from .salt import from_environment, note, salted_seed


def build_assets(
    *,
    task: str,
    plugin,
    cfg: dict,
    fixed_start: str | Path,
    public: str | Path,
    hidden: str | Path,
    manifest: str | Path,
) -> dict:
    """Build ``task``'s public and hidden splits and write their manifest to ``manifest``.

    ``plugin`` is the task's plug-in (:class:`replaykit.tasks.contract.TaskPlugin`: its
    ``build_assets``). ``public`` and ``hidden`` lie inside the manifest's folder (the manifest lists files
    relative to it). ``cfg`` is the task's config block: its ``data`` goes to the task's
    builder (the hidden split's ``hidden_seed`` salted with the operator's ``final_salt``,
    which comes in the environment and must match ``final_salt_fingerprint``:
    :func:`.salt.from_environment`); a ``fixed_start_sha256`` pins the fixed start's tree hash.
    Returns the manifest.

    Raises :class:`InputError` when the fixed start is not a model directory, its tree hash
    differs from the pinned one or the salt did not come, and what the task's builder raises.
    """
    out = Path(manifest).parent
    fixed_start = Path(fixed_start)
    if not any(
        (fixed_start / name).is_file() for name in ("config.json", "model_index.json")
    ):  # HF model / diffusers pipeline
        raise InputError(
            fixed_start, "config.json", "fixed start is not a model directory (no config.json or model_index.json)"
        )
    pin = cfg.get("fixed_start_sha256")
    files = tree_files(fixed_start)
    tree = sha256_tree(fixed_start)
    if pin and pin != tree:
        raise InputError(fixed_start, "sha256", f"tree hash {tree} differs from the pinned {pin}")
    salt = from_environment(cfg.get("final_salt_fingerprint", ""), "--cfg's final_salt_fingerprint")
    data = dict(cfg["data"])
    if "hidden_seed" in data:  # the final split's draw: unknowable without the salt
        data["hidden_seed"] = salted_seed(data["hidden_seed"], salt)
    info = plugin.build_assets(data, fixed_start, public, hidden)
    produced = {}
    for split, root in (("public", Path(public)), ("hidden", Path(hidden))):
        for rel, digest in tree_files(root).items():
            produced[f"{root.relative_to(out).as_posix()}/{rel}"] = {"sha256": digest, "split": split}
    doc = {
        "task": task,
        "created": utc_now(),
        "data": info,
        "config": cfg["data"],
        "final_salt": "operator" if salt else "public",
        "final_split_note": note(salt),
        "fixed_start": {"path": str(fixed_start), "sha256": tree, "files": files, "source": source_of(fixed_start)},
        "files": produced,
        "builder": {"project": git_commit(Path(__file__).parent.parent), "libraries": library_versions()},
    }
    atomic_write_json(manifest, doc)
    return doc


def verify_assets(
    manifest_path: str | Path, fixed_start: str | Path, split: str = "public", fixed_start_too: bool = True
) -> dict:
    """Re-hash the fixed start and every asset file of ``split`` against the manifest.

    The replay verifies the public split (it never opens hidden files); scoring verifies the
    hidden one, so a replay that tampered with it is caught. Raises :class:`InputError`
    naming the file that is missing or whose SHA-256 differs.
    """
    manifest_path = Path(manifest_path)
    manifest = read_json(manifest_path, required=("fixed_start", "files"))
    fixed_start = Path(fixed_start)
    expected = manifest["fixed_start"]["files"] if fixed_start_too else {}
    for rel, digest in expected.items():
        path = fixed_start / rel
        if not path.is_file():
            raise InputError(path, None, f"fixed-start file missing (listed in {manifest_path})")
        if sha256_file(path) != digest:
            raise InputError(path, "sha256", f"does not match the asset manifest {manifest_path}")
    base = manifest_path.parent
    for rel, entry in manifest["files"].items():
        if entry.get("split") != split:
            continue
        path = base / rel
        if not path.is_file():
            raise InputError(path, None, f"asset missing (listed in {manifest_path})")
        if sha256_file(path) != entry["sha256"]:
            raise InputError(path, "sha256", f"does not match the asset manifest {manifest_path}")
    return manifest
