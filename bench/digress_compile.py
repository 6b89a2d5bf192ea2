"""digress's one-time compilation against its epochs: ``recipes/digress/train.py`` (profile
``full``, ``cuda_graph: true, compile: true`` as ``config/full-scale/digress.yaml``) with each
``compile_scope``, a few epochs each, on the real QM9 training split featurised here
(``bench/digress_tensors.py``; the device has no RDKit).

Epoch 1 holds the compilation (and the CUDA graph's capture); the compile cost is epoch 1 less
the median of the later epochs. The same code's 2026-12-01 run (``bench/results-2026-12-01-
digress.md``, run 3) compiled two batch shapes in its first epoch: 180.1 s, then 3.50 s epochs.

The recipe needs torch, numpy, PyYAML and safetensors (all on the device), and the public split
``<public>/{train_graphs.npz, stats.json}``; RDKit only makes that split, here; torch_geometric
only for ``loader: dataloader``. A scope whose recipe fails is reported with the recipe's own
error (its last stderr lines) and the next scope still runs; exit status 1 then.

    python bench/digress_tensors.py --out .whl/digress        # here, once (RDKit, qm9pack from PyPI)
    python bench/digress_compile.py --public .whl/digress --scopes layers,model --epochs 3 --json out.json
    # CPU check of the plumbing (no CUDA graph or compile there), 64 graphs, a 1-layer model:
    python bench/digress_compile.py --public .whl/digress --graphs 64 --epochs 2 \\
        --overrides '{"n_layers": 1, "batch_size": 16, "T": 10}'
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
sys.path.insert(0, str(ROOT / "src"))


def public_split(public: Path, graphs: int, scratch: Path) -> Path:
    """``public`` checked (SystemExit naming what is missing and how to make it), or with
    ``graphs > 0`` a copy holding its first ``graphs`` graphs and the same ``stats.json``."""
    missing = [n for n in ("train_graphs.npz", "stats.json") if not (public / n).is_file()]
    if missing:
        raise SystemExit(
            f"{public}: no {' or '.join(missing)}; make the split here (RDKit) with "
            f"`python bench/digress_tensors.py --out {public}` and carry it (.whl/digress travels with carry .whl)"
        )
    if not graphs:
        return public
    from replaykit.tasks.digress import data

    atoms, bonds = data.load_npz(public / "train_graphs.npz")
    subset = scratch / "public"
    subset.mkdir(parents=True)
    data.save_npz(subset / "train_graphs.npz", atoms[:graphs], bonds[:graphs])
    (subset / "stats.json").write_text((public / "stats.json").read_text())
    return subset


def measure(scope: str, r: dict) -> dict:
    """One row: the epochs' seconds and losses, compile cost = epoch 1 - median of the later ones."""
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
    return row


def main() -> int:
    from digress_recipe_smoke import RecipeFailed, run

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--public", required=True, help="train_graphs.npz + stats.json (bench/digress_tensors.py)")
    p.add_argument("--scopes", default="layers,model", help="compile_scope values, in order")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--profile", default="full")
    p.add_argument("--overrides", default="{}", help="JSON knobs over the profile (a CPU check's small model)")
    p.add_argument("--graphs", type=int, default=0, help="only the first N training graphs (0: all)")
    p.add_argument("--until", type=float, help="Unix time by which every recipe run stops itself (its deadline)")
    p.add_argument("--json")
    a = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="digress-compile-"))
    # absolute: the recipe runs in recipes/digress/, where a relative --public names nothing
    public = public_split(Path(a.public).resolve(), a.graphs, scratch)
    rows = []
    for scope in a.scopes.split(","):
        overrides = {"epochs": a.epochs, "save_every": a.epochs, "cuda_graph": True, "compile": True}
        overrides.update({**json.loads(a.overrides), "compile_scope": scope})
        try:
            row = measure(scope, run(public, scratch / scope, overrides, 900, profile=a.profile, until=a.until))
        except RecipeFailed as e:
            row = {"compile_scope": scope, "returncode": None, "error": str(e)}
            print(f"[digress] compile_scope {scope}: {e}", flush=True)
        else:
            epochs, later = row["epoch_s"], row["steady_epoch_s"]
            error = row.get("stderr_tail", "").strip().splitlines()[-1:] if row["returncode"] else []
            print(
                f"[digress] compile_scope {scope}: rc {row['returncode']}, epochs "
                + ", ".join(f"{e:.2f}" for e in epochs)
                + (f" s -> compiling ≈ {row['compile_s']:.0f} s, then {later:.2f} s/epoch" if later else " s")
                + (f"; recipe: {error[0]}" if error else ""),
                flush=True,
            )
        rows.append(row)
        if a.json:  # after each scope: a later one cut by the call's time limit keeps the earlier rows
            Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["returncode"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
