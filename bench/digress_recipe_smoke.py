"""The digress recipe end to end on a GPU, plain step against ``cuda_graph`` + ``compile``.

Runs ``recipes/digress/train.py`` (profile ``full``) twice on the same public split: the
plain step for ``--plain-epochs`` epochs, then ``cuda_graph: true, compile: true`` (the
full-scale config's setting) for ``--epochs`` epochs, publishing every epoch; prints each
run's per-epoch seconds and losses and loads the last checkpoint with the frozen loader's
:func:`replaykit.tasks.digress.checkpoint.load` (strict: no ``torch.compile`` key prefixes).
Without ``--public`` the public split is ``--synthetic`` random molecule-like graphs with the
histograms of ``--stats`` (``bench/digress_throughput.py``'s ``synthetic_graphs``).

Usage: python bench/digress_recipe_smoke.py --stats shared-carry/digress/stats.json --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class RecipeFailed(RuntimeError):
    """The recipe exited without ``state/train_result.json``; the message ends with its own error."""


def write_request(public: Path, work: Path, deadline_unix: float, profile: str, overrides: dict) -> dict:
    """``<work>/state/request.json`` as the replay driver writes it for the digress recipe: seed
    42, 30 s export reserve, 8 threads, keep 3, a fresh start; publications in ``<work>/pub``."""
    (work / "state").mkdir(parents=True)
    request = {
        "fixed_start": "",
        "public_dir": str(public),
        "publish_dir": str(work / "pub"),
        "state_dir": str(work / "state"),
        "seed": 42,
        "deadline_unix": deadline_unix,
        "export_reserve_s": 30,
        "profile": profile,
        "overrides": overrides,
        "threads": 8,
        "keep": 3,
        "resume": False,
    }
    (work / "state/request.json").write_text(json.dumps(request))
    return request


def run(
    public: Path, work: Path, overrides: dict, seconds: float, profile: str = "full", until: float | None = None
) -> dict:
    """``recipes/digress/train.py --request`` in a subprocess, as the replay driver asks it (seed
    42, deadline in ``seconds`` or at ``until`` (Unix time) if earlier, 30 s export reserve).

    Returns ``{overrides, returncode, wall_s, history, stdout_tail, stderr_tail}``
    (``history`` from ``train_result.json``). Raises :class:`RecipeFailed` naming the exit
    status and the recipe's last stderr lines when it wrote no ``train_result.json`` (it
    failed before training: a missing public file, an import, a bad knob)."""
    deadline = time.time() + seconds if until is None else min(until, time.time() + seconds)
    write_request(public, work, deadline, profile, overrides)
    started = time.time()
    # the recipe imports replaykit from src/; carried wheels (PYTHONPATH, e.g. /tmp/site) stay visible
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    out = subprocess.run(
        [sys.executable, "train.py", "--request", str(work / "state/request.json")],
        cwd=ROOT / "recipes/digress",
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=path),
    )
    result_file = work / "state/train_result.json"
    if not result_file.exists():
        tail = [line for line in out.stderr.splitlines() if line.strip()][-3:] or ["(no stderr)"]
        raise RecipeFailed(
            f"recipes/digress/train.py exited {out.returncode} without {result_file}: " + " | ".join(tail)
        )
    result = json.loads(result_file.read_text())
    return {
        "overrides": overrides,
        "returncode": out.returncode,
        "wall_s": time.time() - started,
        "history": result["history"],
        "stdout_tail": out.stdout[-1500:],
        "stderr_tail": out.stderr[-1500:],
    }


def main() -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from digress_throughput import synthetic_graphs

    from replaykit.tasks.digress import checkpoint as ckpt
    from replaykit.tasks.digress import data

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--public", default="", help="a public split (train_graphs.npz + stats.json)")
    p.add_argument("--stats", default="", help="stats.json for --synthetic")
    p.add_argument("--synthetic", type=int, default=100000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--plain-epochs", type=int, default=1)
    p.add_argument("--out", default=os.environ.get("OUT", ""))
    a = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="digress-smoke-"))
    public = Path(a.public) if a.public else scratch / "public"
    if not a.public:
        public.mkdir()
        atoms, bonds = synthetic_graphs(json.loads(Path(a.stats).read_text()), a.synthetic)
        data.save_npz(public / "train_graphs.npz", atoms, bonds)
        (public / "stats.json").write_text(json.dumps(data.statistics(atoms, bonds)))
    runs = [
        run(public, scratch / "plain", {"epochs": a.plain_epochs, "save_every": 1}, 600),
        run(public, scratch / "graph", {"epochs": a.epochs, "save_every": 1, "cuda_graph": True, "compile": True}, 900),
    ]
    last = sorted((scratch / "graph/pub").glob("checkpoint-*"), key=lambda q: int(q.name.split("-")[1]))[-1]
    model, _, config = ckpt.load(last)
    report = {"runs": runs, "loaded": last.name, "loaded_epoch": config["epoch"]}
    for r in runs:
        print(
            f"[smoke] {r['overrides']}: rc {r['returncode']}, wall {r['wall_s']:.0f} s, epochs "
            + ", ".join(f"{h['progress']}: {h['epoch_s']:.2f} s loss {h['loss']:.4f}" for h in r["history"]),
            flush=True,
        )
    print(f"[smoke] {last.name} loads strictly with the frozen loader (epoch {config['epoch']})", flush=True)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "digress_recipe_smoke.json").write_text(json.dumps(report, indent=2))
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
