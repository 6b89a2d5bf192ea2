"""digress ``compile_scope: model``: compile-time-only knobs of torch.compile / inductor against
the plain setting (issue 35: compile <= 60 s with epoch <= 3.5 s), each variant in its own process.

Runs ``recipes/digress/train.py`` (profile ``full``, ``cuda_graph: true, compile: true,
compile_scope: model`` as ``config/full-scale/digress.yaml``) as ``bench/digress_compile.py``
does, but through a thin wrapper in the recipe's process that first sets the variant's
``torch._inductor.config`` / ``torch._dynamo.config`` values (the recipe itself is unchanged),
and at exit writes what torch says about the compile: the effective config values, dynamo's
``compile_times`` per phase and the cache hit/miss counters. Each variant gets its own
``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` (fresh: a cold compile), except a
``warm`` variant, which runs on a *copy* (at another path) of an earlier variant's cache
directory: what a later attempt of a replay would see if the cache were kept with its state.

Compiling ~= epoch 1 - median of the later epochs (epoch 1 holds compile, autotuning and the
CUDA graph's capture). Variants (``--variants``, in order; each skipped when less than its
estimate is left before ``--budget``):

    base      plain torch.compile (the full-scale setting), fresh cache
    warm      the same, on a copy of base's cache (fresh process)
    threads   TORCHINDUCTOR_COMPILE_THREADS=<cores> (skipped when that is already the default)
    pw1       torch._inductor.config.triton.autotune_pointwise = False (one launch config per
              pointwise kernel, nothing benchmarked for them; reductions unchanged)
    dedup     torch._dynamo.config.use_graph_deduplication = True (identical layer regions
              compiled once as invoke_subgraph inside the one graph)

    python bench/digress_compile_knobs.py --public .whl/digress --variants base,warm,pw1 --out $OUT
    # CPU check of the plumbing (no CUDA graph or compile on the CPU):
    python bench/digress_compile_knobs.py --public .whl/digress --graphs 64 --epochs 2 \\
        --variants base,warm,pw1 --overrides '{"n_layers": 1, "batch_size": 16, "T": 10}'
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {  # name: (inductor/dynamo config values, extra environment, estimate s on the H200)
    "base": ({}, {}, 110),
    "warm": ({}, {}, 60),
    "threads": ({}, {"TORCHINDUCTOR_COMPILE_THREADS": "{cores}"}, 110),
    "pw1": ({"inductor:triton.autotune_pointwise": False}, {}, 100),
    "dedup": ({"dynamo:use_graph_deduplication": True}, {}, 100),
}
REPORTED = [
    "inductor:compile_threads",
    "inductor:worker_start_method",
    "inductor:fx_graph_cache",
    "inductor:bundle_triton_into_fx_graph_cache",
    "inductor:autotune_local_cache",
    "inductor:use_static_cuda_launcher",
    "inductor:triton.autotune_pointwise",
    "inductor:max_autotune",
    "inductor:coordinate_descent_tuning",
    "functorch:enable_autograd_cache",
    "dynamo:use_graph_deduplication",
]


def _module(kind: str):
    import torch._dynamo.config
    import torch._functorch.config
    import torch._inductor.config

    return {"inductor": torch._inductor.config, "dynamo": torch._dynamo.config, "functorch": torch._functorch.config}[
        kind
    ]


def _get(key: str):
    kind, name = key.split(":")
    obj = _module(kind)
    *parents, leaf = name.split(".")
    for p in parents:
        obj = getattr(obj, p)
    return getattr(obj, leaf, "<absent>")


def _set(key: str, value) -> None:
    kind, name = key.split(":")
    obj = _module(kind)
    *parents, leaf = name.split(".")
    for p in parents:
        obj = getattr(obj, p)
    if not hasattr(obj, leaf):
        raise SystemExit(f"{key}: no such config in torch {__import__('torch').__version__}")
    setattr(obj, leaf, value)


def child(spec_path: str, argv: list[str]) -> None:
    """In the recipe's process: set the variant's config, run train.py as __main__, report at exit."""
    import runpy

    import torch

    spec = json.loads(Path(spec_path).read_text())
    defaults = {k: repr(_get(k)) for k in REPORTED + list(spec["config"])}
    for k, v in spec["config"].items():
        _set(k, v)
    started = time.time()

    def report() -> None:
        from torch._dynamo import utils

        out = {
            "torch": torch.__version__,
            "defaults": defaults,
            "effective": {k: repr(_get(k)) for k in REPORTED + list(spec["config"])},
            "cpu_count": torch._utils.cpu_count() if hasattr(torch._utils, "cpu_count") else None,
            "os_cpu_count": os.cpu_count(),
            "process_s": time.time() - started,
            "counters": {k: dict(v) for k, v in utils.counters.items() if v},
        }
        try:
            out["compile_times"] = utils.compile_times(repr="str", aggregate=True)
        except Exception as e:  # the signature moves between versions
            out["compile_times"] = f"unavailable: {e!r}"
        try:
            import triton

            out["triton"] = triton.__version__
        except ImportError:
            out["triton"] = None
        Path(spec["report"]).write_text(json.dumps(out, indent=1, default=repr))

    atexit.register(report)
    sys.argv = argv
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    runpy.run_path(argv[0], run_name="__main__")


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def run_variant(
    name: str, public: Path, work: Path, overrides: dict, cache: Path, config: dict, env: dict, until: float
) -> dict:
    """The recipe (as bench/digress_recipe_smoke.run asks it: seed 42, 30 s export reserve; training
    stops itself at ``until``) through :func:`child`; its history, wall and the child's report."""
    from digress_recipe_smoke import write_request

    write_request(public, work, until + 30, "full", overrides)
    spec = {"config": config, "report": str(work / "report.json")}
    (work / "spec.json").write_text(json.dumps(spec))
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    environ = dict(
        os.environ, PYTHONPATH=path, TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"), **env
    )
    started = time.time()
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(work / "spec.json"),
            "--",
            "train.py",
            "--request",
            str(work / "state/request.json"),
        ],
        cwd=ROOT / "recipes/digress",
        capture_output=True,
        text=True,
        env=environ,
        timeout=max(1.0, until + 30 - time.time() + 20),
    )
    wall = time.time() - started
    (work / "stdout.log").write_text(out.stdout)
    (work / "stderr.log").write_text(out.stderr)
    row = {
        "variant": name,
        "config": config,
        "env": env,
        "returncode": out.returncode,
        "wall_s": wall,
        "cache_dir_bytes": du(cache),
        "stdout_tail": out.stdout[-1500:],
    }
    result = work / "state/train_result.json"
    if result.exists():
        history = json.loads(result.read_text())["history"]
        epochs = [h["epoch_s"] for h in history]
        later = statistics.median(epochs[1:]) if len(epochs) > 1 else None
        row.update(
            epoch_s=epochs,
            losses=[h["loss"] for h in history],
            loss_X=[h.get("loss_X") for h in history],
            loss_E=[h.get("loss_E") for h in history],
            steady_epoch_s=later,
            compile_s=epochs[0] - later if later else None,
        )
    if (work / "report.json").exists():
        row["report"] = json.loads((work / "report.json").read_text())
    if out.returncode or not result.exists():
        row["stderr_tail"] = "\n".join(out.stderr.strip().splitlines()[-8:])
    return row


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[4:])
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "src"))
    from digress_compile import public_split

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--public", required=True)
    p.add_argument("--variants", default="base,warm,threads,pw1,dedup")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--overrides", default="{}", help="JSON knobs over the profile (a CPU check's small model)")
    p.add_argument("--graphs", type=int, default=0)
    p.add_argument("--budget", type=float, default=360, help="seconds from start for all variants")
    p.add_argument("--scratch", default="", help="work and cache dirs (default: a temp dir)")
    p.add_argument("--out", default=os.environ.get("OUT", ""))
    a = p.parse_args()
    t0 = time.time()
    end = t0 + a.budget
    scratch = Path(a.scratch or tempfile.mkdtemp(prefix="digress-knobs-"))
    scratch.mkdir(parents=True, exist_ok=True)
    public = public_split(Path(a.public).resolve(), a.graphs, scratch)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"[knobs] python {sys.version.split()[0]}, sched_getaffinity {cores}, os.cpu_count {os.cpu_count()}", flush=True
    )
    overrides = {
        "epochs": a.epochs,
        "save_every": a.epochs,
        "cuda_graph": True,
        "compile": True,
        **json.loads(a.overrides),
        "compile_scope": "model",
    }
    rows = []
    out = Path(a.out) if a.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    for name in a.variants.split(","):
        config, env, estimate = VARIANTS[name]
        env = {k: v.format(cores=cores) for k, v in env.items()}
        cache = scratch / f"cache-{name}"
        note = ""
        if name == "warm":
            source = scratch / "cache-base"
            if not source.exists():
                print("[knobs] warm: skipped (no base cache)", flush=True)
                continue
            shutil.copytree(source, cache)  # another path: a kept cache need not sit where it was made
            note = f"copy of base's cache ({du(cache)} bytes)"
        if (
            name == "threads"
            and min(32, cores) == int(env["TORCHINDUCTOR_COMPILE_THREADS"])
            and rows
            and rows[0].get("report", {}).get("effective", {}).get("inductor:compile_threads") == str(cores)
        ):
            print(f"[knobs] threads: skipped (compile_threads is already {cores} by default)", flush=True)
            continue
        left = end - time.time()
        if left < estimate:
            print(f"[knobs] {name}: skipped ({left:.0f} s left, estimate {estimate} s)", flush=True)
            rows.append({"variant": name, "skipped": f"{left:.0f} s left, estimate {estimate} s"})
            continue
        print(f"[knobs] {name} ({time.time() - t0:.0f} s into the call) config {config} env {env} {note}", flush=True)
        try:
            row = run_variant(name, public, scratch / name, overrides, cache, config, env, end)
        except subprocess.TimeoutExpired:
            row = {"variant": name, "returncode": None, "error": "timed out"}
        row["note"] = note
        rows.append(row)
        rep = row.get("report", {})
        eff = rep.get("effective", {})
        print(
            f"[knobs] {name}: rc {row.get('returncode')}, wall {row.get('wall_s', 0):.1f} s, epochs "
            + ", ".join(f"{e:.3f}" for e in row.get("epoch_s", []))
            + (
                f" -> compiling ~= {row['compile_s']:.1f} s, then {row['steady_epoch_s']:.3f} s/epoch"
                if row.get("compile_s") is not None
                else ""
            )
            + f"; losses {row.get('losses')}; cache {row.get('cache_dir_bytes', 0) / 1e6:.1f} MB; "
            + f"compile_threads {eff.get('inductor:compile_threads')}; counters {rep.get('counters', {})}",
            flush=True,
        )
        if row.get("stderr_tail"):
            print(f"[knobs] {name} stderr tail:\n{row['stderr_tail']}", flush=True)
        if out:
            (out / "knobs.json").write_text(json.dumps(rows, indent=1))
    print("\n| variant | rc | epoch 1 s | later epochs s | compiling ~= s | epoch s | loss per epoch | cache MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "epoch_s" not in r:
            print(
                f"| {r['variant']} | {r.get('returncode')} | {r.get('skipped') or r.get('error') or 'no history'} "
                "| | | | | |"
            )
            continue
        cs = r["compile_s"]
        print(
            f"| {r['variant']} | {r['returncode']} | {r['epoch_s'][0]:.2f} | "
            + ", ".join(f"{e:.3f}" for e in r["epoch_s"][1:])
            + (f" | {cs:.1f} | {r['steady_epoch_s']:.3f} | " if cs is not None else " | | | ")
            + ", ".join(f"{x:.6f}" for x in r["losses"])
            + f" | {r['cache_dir_bytes'] / 1e6:.1f} |"
        )
    for r in rows:
        ct = r.get("report", {}).get("compile_times")
        if ct:
            print(f"\n[knobs] {r['variant']} compile_times:\n{ct}")
    return 0 if all(r.get("returncode") == 0 for r in rows if "skipped" not in r) else 1


if __name__ == "__main__":
    raise SystemExit(main())
