"""Featurise the full QM9 training split once (here, with RDKit) for the H200 benchmark,
which has no RDKit: ``<out>/train_graphs.npz`` (100k graphs, dense int8 class arrays, a few
MB) and ``<out>/stats.json`` (marginals, node counts), made by the task's own code
(:mod:`replaykit.tasks.digress.data`, DiGress's split with seed 42).

Usage:
    python bench/digress_tensors.py --fixed-start results/models/qm9pack --out shared/digress
    python bench/digress_tensors.py --out shared/digress      # fetches the qm9pack wheel first
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from replaykit.harness.hashing import sha256_file
    from replaykit.tasks.digress import data, qm9

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixed-start", default="", help="a qm9pack folder made by the fixed_start_model rule")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = None
    fixed = Path(a.fixed_start) if a.fixed_start else None
    if fixed is None:
        spec = yaml.safe_load((ROOT / "config/config.yaml").read_text())["models"]["qm9pack"]
        scratch = Path(tempfile.mkdtemp(prefix="qm9pack-"))
        fixed = scratch / "qm9pack"
        qm9.build(spec, fixed)
    try:
        config = json.loads((fixed / "config.json").read_text())
        rows, skipped = data.read_qm9([fixed / f for f in config["files"]])
        split = data.split_digress(rows, 42)
        atoms, bonds = data.dense(split["train"])
        data.save_npz(out / "train_graphs.npz", atoms, bonds)
        stats = data.statistics(atoms, bonds)
        stats.update(
            source={k: config.get(k) for k in ("name", "version", "sha256")},
            skipped_rows=skipped,
            split_sizes={k: len(v) for k, v in split.items()},
            train_graphs_sha256=sha256_file(out / "train_graphs.npz"),
        )
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
        print(
            f"[tensors] {len(atoms)} training graphs -> {out}/train_graphs.npz "
            f"({(out / 'train_graphs.npz').stat().st_size / 1e6:.1f} MB)"
        )
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
