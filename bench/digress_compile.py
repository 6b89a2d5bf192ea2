"""digress's one-time compilation against its epochs: ``recipes/digress/train.py`` (profile
``full``, ``cuda_graph: true, compile: true`` as ``config/full-scale/digress.yaml``) with each
``compile_scope``, a few epochs each, on the real QM9 training split featurised here
(``bench/digress_tensors.py``; the device has no RDKit).

Epoch 1 holds the compilation (and the CUDA graph's capture); the compile cost is epoch 1 less
the median of the later epochs. The same code's 2026-12-01 run (``bench/results-2026-12-01-
digress.md``, run 3) compiled two batch shapes in its first epoch: 180.1 s, then 3.50 s epochs.

    python bench/digress_tensors.py --out .whl/digress        # here, once (RDKit, qm9pack from PyPI)
    python bench/digress_compile.py --public .whl/digress --scopes layers,model --epochs 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def main() -> int:
    from digress_recipe_smoke import run

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--public", required=True, help="train_graphs.npz + stats.json (bench/digress_tensors.py)")
    p.add_argument("--scopes", default="layers,model", help="compile_scope values, in order")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="digress-compile-"))
    rows = []
    for scope in a.scopes.split(","):
        overrides = {"epochs": a.epochs, "save_every": a.epochs, "cuda_graph": True, "compile": True}
        r = run(Path(a.public), scratch / scope, {**overrides, "compile_scope": scope}, 900)
        epochs = [h["epoch_s"] for h in r["history"]]
        later = statistics.median(epochs[1:]) if len(epochs) > 1 else None
        row = {
            "compile_scope": scope,
            "returncode": r["returncode"],
            "wall_s": r["wall_s"],
            "epoch_s": epochs,
            "losses": [h["loss"] for h in r["history"]],
            "compile_s": epochs[0] - later if later else None,
            "steady_epoch_s": later,
        }
        if r["returncode"]:
            row["stderr_tail"] = r["stderr_tail"]
        rows.append(row)
        print(
            f"[digress] compile_scope {scope}: rc {r['returncode']}, epochs "
            + ", ".join(f"{e:.2f}" for e in epochs)
            + (f" s -> compiling ≈ {row['compile_s']:.0f} s, then {later:.2f} s/epoch" if later else " s"),
            flush=True,
        )
        if a.json:  # after each scope: a later one cut by the call's time limit keeps the earlier rows
            Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["returncode"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
