"""Seconds per training epoch of the digress recipe: the fast path against a straightforward loop.

Variants (same model, same optimizer, same number of graphs per epoch):

* ``straightforward``: torch_geometric ``DataLoader`` of sparse ``Data`` graphs (collate per
  batch), densified with ``to_dense_batch``/``to_dense_adj`` and copied to the device,
  float32 (no TF32) -- the plain DiGress-style loop;
* ``straightforward+<N>workers`` (``--workers N``): the same with N DataLoader workers;
* ``device``: all training graphs on the device as dense int8 class tensors, a batch is
  an index (``recipes/digress/train.py``'s ``device_batches``), float32;
* ``device+tf32`` (CUDA only): as ``device`` with TF32 matmuls -- the full profile's step
  with ``cuda_graph: false``;
* ``device+tf32+graph`` (CUDA only): the optimised step (``GraphedStep``: forward, masked loss,
  backward, clipping and capturable AdamW captured as one CUDA graph after 3 eager warm-up
  steps; noise and extra features eager), losses summed on the device, one host sync per epoch;
* ``device+tf32+graph+prefetch`` (CUDA only): as ``device+tf32+graph`` with noise and
  features of the next batch prepared on a side stream (``prefetch``) -- what the recipe runs
  with ``cuda_graph: true`` (``config/full-scale/digress.yaml``);
* ``device+fused`` (CPU only): ``GraphedStep`` run eagerly;
* ``device+bf16`` (CUDA only, ``--bf16``): as ``device`` with TF32 matmuls and bf16 autocast;
* ``--variants a,b,...``: any combination of ``device``, ``tf32``/``bf16``, ``compile``
  (``torch.compile`` of the denoiser; warm-up is then one whole epoch), ``graph``, ``prefetch``;
* ``device+bf16+compile`` (CUDA only, ``--compile``): as ``device+bf16`` with the denoiser
  wrapped in ``torch.compile`` (not used by the recipe; reported to see what it would buy;
  a failure is reported, not raised).

Each variant: 5 warm-up steps, then ``--epochs`` timed epochs. ``--data-only`` also times
producing one epoch's batches alone, and with noise + extra features, per data path.

Also reported: the time of DiGress's extra features (cycles + Laplacian eigendecomposition)
for one batch, and (``--eval``) the frozen evaluator's two costs with an untrained model of
the profile's shape: the NLL of ``--eval-graphs`` graphs and ancestral sampling of
``--eval-samples`` graphs over all T steps (no RDKit needed: molecules are not checked).

Usage:
    python bench/digress_throughput.py --data results/digress/assets/public/train_graphs.npz \
        --stats results/digress/assets/public/stats.json --profile embedded --epochs 2
    python bench/digress_throughput.py --tiny ...    # a few hundred graphs, 1 epoch, quick check
    python bench/digress_throughput.py --synthetic 100000 --stats <stats.json> --profile full ...
Writes the table to ``$OUT/digress_throughput.{md,json}`` when ``$OUT`` is set (or ``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]


def load_recipe_module():
    spec = importlib.util.spec_from_file_location("digress_train", ROOT / "recipes/digress/train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def synthetic_graphs(stats: dict, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``k`` random connected graphs: node counts from ``stats["node_counts"]``, atom classes
    from ``atom_marginals``, a random spanning tree plus one ring-closing bond in 30 % of the
    graphs, bond classes drawn from ``bond_marginals`` without "no bond". Int8 ``k × 9`` atoms
    (-1 padding) and ``k × 9 × 9`` bonds, as ``train_graphs.npz`` holds them."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(stats["node_counts"], dtype=float)
    n_nodes = rng.choice(len(counts), size=k, p=counts / counts.sum())
    bond_p = np.asarray(stats["bond_marginals"][1:], dtype=float)
    atoms = np.full((k, 9), -1, dtype=np.int8)
    bonds = np.zeros((k, 9, 9), dtype=np.int8)
    for g, n in enumerate(np.maximum(n_nodes, 1)):
        atoms[g, :n] = rng.choice(4, size=n, p=stats["atom_marginals"])
        edges = [(i, int(rng.integers(0, i))) for i in range(1, n)]
        if n >= 4 and rng.random() < 0.3:
            edges.append((n - 1, 0))
        for i, j in edges:
            bonds[g, i, j] = bonds[g, j, i] = 1 + rng.choice(4, p=bond_p / bond_p.sum())
    return atoms, bonds


def main() -> int:
    from replaykit.tasks.digress import checkpoint as ckpt
    from replaykit.tasks.digress.data import load_npz, to_pyg
    from replaykit.tasks.digress.diffusion import apply_noise, dense_batch
    from replaykit.tasks.digress.features import extra_features
    from replaykit.tasks.digress.model import count_parameters

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="", help="train_graphs.npz (atoms, bonds)")
    p.add_argument(
        "--synthetic",
        type=int,
        default=0,
        help="instead of --data: N random molecule-like graphs with the node-count histogram and "
        "marginals of --stats (same padded 9-node shapes; for a machine the data cannot reach)",
    )
    p.add_argument("--stats", required=True, help="stats.json of the training split (marginals)")
    p.add_argument("--profile", default="embedded", help="recipes/digress/configs/<profile>.yaml")
    p.add_argument("--device", default="auto")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per variant (after a warm-up of 3 steps)")
    p.add_argument("--max-graphs", type=int, default=0, help="use only the first N graphs (0: all)")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="> 0: also time the straightforward loop with this many DataLoader workers",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the denoiser (CUDA)")
    p.add_argument("--bf16", action="store_true", help="also time bf16 autocast + TF32 (CUDA)")
    p.add_argument(
        "--variants",
        default="",
        help="comma-separated variants to run instead of the default set, e.g. "
        "device+tf32+graph+prefetch,device+bf16+graph+prefetch,device+tf32+compile+graph+prefetch",
    )
    p.add_argument(
        "--data-only",
        action="store_true",
        help="also time producing the batches alone, and with noise + extra features, per path",
    )
    p.add_argument("--eval", action="store_true", help="also time the evaluator's NLL and sampling")
    p.add_argument("--eval-graphs", type=int, default=4096)
    p.add_argument("--eval-samples", type=int, default=512)
    p.add_argument("--tiny", action="store_true", help="quick check: 256 graphs, 1 epoch, 2 layers")
    p.add_argument("--out", default=os.environ.get("OUT", ""))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    device = "cuda" if a.device == "auto" and torch.cuda.is_available() else ("cpu" if a.device == "auto" else a.device)
    recipe = yaml.safe_load((ROOT / f"recipes/digress/configs/{a.profile}.yaml").read_text())
    if a.synthetic:
        atoms_np, bonds_np = synthetic_graphs(json.loads(Path(a.stats).read_text()), a.synthetic)
    else:
        atoms_np, bonds_np = load_npz(a.data)
    if a.tiny:
        a.max_graphs, a.epochs = a.max_graphs or 256, 1
        recipe["n_layers"] = min(recipe["n_layers"], 2)
    if a.max_graphs:
        atoms_np, bonds_np = atoms_np[: a.max_graphs], bonds_np[: a.max_graphs]
    stats = json.loads(Path(a.stats).read_text())
    train = load_recipe_module()
    config = train.DigressConfig(**recipe)  # the recipe's typed knobs, as train.py's main() builds them
    model_cfg = {
        "n_layers": recipe["n_layers"],
        "hidden_mlp_dims": recipe["hidden_mlp_dims"],
        "hidden_dims": recipe["hidden_dims"],
        "dropout": recipe["dropout"],
    }
    diff_cfg = {
        "T": recipe["T"],
        "transition": recipe["transition"],
        "x_marginals": stats["atom_marginals"],
        "e_marginals": stats["bond_marginals"],
        "extra_features": recipe["extra_features"],
    }
    cuda = device == "cuda"
    variants = (
        ["straightforward"]
        + ([f"straightforward+{a.workers}workers"] if a.workers > 0 else [])
        + ["device"]
        + (["device+tf32", "device+tf32+graph", "device+tf32+graph+prefetch"] if cuda else ["device+fused"])
        + (["device+bf16"] if cuda and a.bf16 else [])
    )
    if a.compile:
        variants.append("device+bf16+compile" if cuda else "device+compile")
    if a.variants:  # an explicit list, e.g. the graph step with bf16 autocast or a compiled model inside
        variants = a.variants.split(",")
    rows = []
    n_params = count_parameters(ckpt.build_model(model_cfg))
    noise = ckpt.build_noise(diff_cfg).to(device)

    def run_variant(variant: str) -> dict:
        torch.manual_seed(0)
        fast = "bf16" in variant
        graphed = "graph" in variant or variant == "device+fused"  # device+fused: GraphedStep run eagerly (CPU)
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = fast or "tf32" in variant
        model = ckpt.build_model(model_cfg).to(device).train()
        opt = torch.optim.AdamW(
            model.parameters(),
            lr=float(recipe["lr"]),
            weight_decay=float(recipe["weight_decay"]),
            amsgrad=True,
            capturable=graphed and cuda,
        )
        if "compile" in variant:
            model = torch.compile(model)

        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16, enabled=fast and cuda)

        gen = torch.Generator().manual_seed(0)
        setup = time.time()
        if variant.startswith("straightforward"):
            graphs = [to_pyg(x, y) for x, y in zip(atoms_np, bonds_np)]
            workers = a.workers if variant != "straightforward" else 0

            def batches():
                return train.dataloader_batches(graphs, int(recipe["batch_size"]), gen, device, workers)
        else:
            atoms, bonds = torch.as_tensor(atoms_np, device=device), torch.as_tensor(bonds_np, device=device)

            def batches():
                return train.device_batches(atoms, bonds, int(recipe["batch_size"]), gen)

        setup_s = time.time() - setup
        use_extra = bool(recipe["extra_features"])
        stepper = train.GraphedStep(model, opt, config, autocast, int(recipe["batch_size"])) if graphed else None

        def prepare(X, E, m):
            return train.prepare_batch(noise, X, E, m, use_extra)

        def epoch(limit: int = 0) -> int:
            """One epoch (or ``limit`` steps) as the recipe runs it; returns the steps."""
            steps = 0
            if stepper is None:
                for X, E, m in batches():
                    train.train_step(model, noise, opt, X, E, m, config, autocast)
                    steps += 1
                    if steps == limit:
                        break
                return steps
            sums = torch.zeros(3, device=device)
            if variant.endswith("prefetch"):
                source = train.prefetch(batches(), prepare)
            else:
                source = (prepare(*b) for b in batches())
            for inputs in source:
                sums += torch.stack(stepper(inputs))
                steps += 1
                if steps == limit:
                    break
            sums.tolist()  # the recipe's one host sync per epoch
            return steps

        t0 = time.time()
        # warm-up: 3 eager steps + capture for the graph variants; a compiled model: one whole
        # epoch, so that the last (smaller) batch's recompilation is not timed
        epoch(limit=0 if "compile" in variant else 5)
        sync(device)
        warmup_s = time.time() - t0
        times, steps = [], 0
        for _ in range(a.epochs):
            t0 = time.time()
            steps += epoch()
            sync(device)
            times.append(time.time() - t0)
        return {
            "variant": variant,
            "s_per_epoch": float(np.mean(times)),
            "epochs_timed": len(times),
            "graphs_per_s": len(atoms_np) / float(np.mean(times)),
            "steps_per_epoch": steps // len(times),
            "setup_s": setup_s,
            "warmup_s": warmup_s,
        }

    def data_only(path: str) -> dict:
        """Seconds per epoch of producing the batches alone (no step), and with noise + features."""
        gen = torch.Generator().manual_seed(0)
        out = {}
        if path == "dataloader":
            graphs = [to_pyg(x, y) for x, y in zip(atoms_np, bonds_np)]
            make = lambda: train.dataloader_batches(graphs, int(recipe["batch_size"]), gen, device, 0)  # noqa: E731
        else:
            atoms, bonds = torch.as_tensor(atoms_np, device=device), torch.as_tensor(bonds_np, device=device)
            make = lambda: train.device_batches(atoms, bonds, int(recipe["batch_size"]), gen)  # noqa: E731
        use_extra = bool(recipe["extra_features"])
        for key, fn in (
            ("batches_s", lambda b: b),
            ("batches_noise_features_s", lambda b: train.prepare_batch(noise, *b, use_extra)),
        ):
            sync(device)
            t0 = time.time()
            for b in make():
                fn(b)
            sync(device)
            out[key] = time.time() - t0
        return {"path": path, **out}

    for variant in variants:
        try:
            rows.append(run_variant(variant))
        except Exception as exc:  # a variant that fails (e.g. torch.compile) is reported, not fatal
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            print(f"[bench] {variant}: failed: {message}", flush=True)
            rows.append({"variant": variant, "error": message})
        else:
            print(f"[bench] {variant}: {rows[-1]['s_per_epoch']:.2f} s/epoch ({len(atoms_np)} graphs)", flush=True)
        if a.out:  # kept if a later variant (torch.compile) runs past the machine's time limit
            Path(a.out).mkdir(parents=True, exist_ok=True)
            (Path(a.out) / "digress_throughput.partial.json").write_text(json.dumps(rows, indent=2))
    data_rows = []
    if a.data_only:
        for path in ("dataloader", "device"):
            data_rows.append(data_only(path))
            print(f"[bench] data only, {path}: {data_rows[-1]}", flush=True)
    # share of the extra features in one step (device path)
    idx = torch.arange(min(int(recipe["batch_size"]), len(atoms_np)))
    X, E, m = dense_batch(torch.as_tensor(atoms_np, device=device)[idx], torch.as_tensor(bonds_np, device=device)[idx])
    Xt, Et = apply_noise(noise, X, E, m, torch.full((len(idx),), noise.T // 2, device=device))
    sync(device)
    t0 = time.time()
    for _ in range(10):
        extra_features(Xt, Et, m)
    sync(device)
    feat_ms = (time.time() - t0) / 10 * 1000
    evaluation = {}
    if a.eval:
        from replaykit.tasks.digress.diffusion import sample_graphs, sample_n_nodes
        from replaykit.tasks.digress.evaluator import nll_rows

        model = ckpt.build_model(model_cfg).to(device).eval()
        k = min(a.eval_graphs, len(atoms_np))
        t0 = time.time()
        terms = nll_rows(
            model,
            noise,
            atoms_np[:k],
            bonds_np[:k],
            stats["node_counts"],
            batch_size=512,
            repeats=1,
            seed=0,
            device=device,
            use_extra=bool(recipe["extra_features"]),
        )
        sync(device)
        evaluation["nll_s"], evaluation["nll_graphs"] = time.time() - t0, k
        evaluation["nll_mean_untrained"] = float(terms["nll"].mean())
        t0 = time.time()
        sizes = sample_n_nodes(stats["node_counts"], a.eval_samples, device=device)
        with torch.no_grad():
            sampled, _ = sample_graphs(model, noise, sizes, use_extra=bool(recipe["extra_features"]))
        sync(device)
        evaluation["sampling_s"], evaluation["samples"] = time.time() - t0, a.eval_samples
        evaluation["sampled_atoms_ok"] = bool(((sampled >= 0).sum(1).cpu() == sizes.cpu()).all())
        print(
            f"[bench] evaluator: NLL of {k} graphs {evaluation['nll_s']:.1f} s; sampling {a.eval_samples} graphs "
            f"over T={noise.T} steps {evaluation['sampling_s']:.1f} s",
            flush=True,
        )
    base = rows[0].get("s_per_epoch")
    for r in rows:
        if "s_per_epoch" in r and base:
            r["speedup_vs_straightforward"] = base / r["s_per_epoch"]
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or platform.machine()
    header = (
        f"digress training throughput: profile {a.profile}, {len(atoms_np)} graphs, batch {recipe['batch_size']}, "
        f"{recipe['n_layers']} layers ({n_params:,} parameters), T={recipe['T']}, device {device} ({gpu}), "
        f"torch {torch.__version__}, threads {a.threads}"
    )
    lines = [header, "", "| variant | s / epoch | graphs / s | steps / epoch | speed-up |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | failed: {r['error'][:80]} | - | - | - |")
            continue
        speed = f"{r['speedup_vs_straightforward']:.2f}x" if "speedup_vs_straightforward" in r else "-"
        lines.append(
            f"| {r['variant']} | {r['s_per_epoch']:.2f} | {r['graphs_per_s']:.0f} | {r['steps_per_epoch']} | {speed} |"
        )
    if evaluation:
        lines += [
            "",
            f"evaluator (untrained model of this shape): NLL of {evaluation['nll_graphs']} graphs "
            f"{evaluation['nll_s']:.1f} s; sampling {evaluation['samples']} graphs over T = {noise.T} steps "
            f"{evaluation['sampling_s']:.1f} s",
        ]
    for d in data_rows:
        lines.append(
            f"data path {d['path']}: batches alone {d['batches_s']:.2f} s/epoch; with noise + extra features "
            f"{d['batches_noise_features_s']:.2f} s/epoch"
        )
    lines += [
        "",
        f"extra features (cycles + eigh) of one batch: {feat_ms:.1f} ms",
        "reference system: 26.6 s/epoch tuned, 100.6 s/epoch before tuning (full scale, 100k graphs)",
    ]
    table = "\n".join(lines)
    print(table, flush=True)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "digress_throughput.md").write_text(table + "\n")
        (out / "digress_throughput.json").write_text(
            json.dumps(
                {
                    "header": header,
                    "rows": rows,
                    "extra_features_ms": feat_ms,
                    "data_only": data_rows,
                    "evaluation": evaluation,
                    "args": vars(a),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
