"""Shipped recipe of the ``toy`` task: full-batch gradient descent on y ≈ w·x.

Loss ``L(w) = mean_i (w·x_i - y_i)²`` over the public training points; each step
``w <- w - η · dL/dw`` with ``dL/dw = 2 · mean_i (w·x_i - y_i)·x_i``. On points with
``y = a·x`` that is ``w_k - a = (w_0 - a)·(1 - 2η·mean(x²))^k``.

Run by the replay driver as ``python train.py --request request.json`` (see
``replaykit.harness.replay``): publishes ``checkpoint-<step>/model.json`` every
``save_steps`` steps, stops at ``max_steps`` or at the internal deadline less the export
reserve, and writes ``train_result.json``. It imports its plug-in (``replaykit_toy``), which
the sandbox must show although it lives outside the replaykit package.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from replaykit.harness.fileio import atomic_write_json
from replaykit.harness.publish import publish_checkpoint, published
from replaykit.harness.trainer import load_recipe
from replaykit_toy import read_points, read_w

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", required=True, help="request.json written by the replay driver")
    request = json.loads(Path(parser.parse_args().request).read_text())
    recipe = load_recipe(HERE / "configs", request["profile"], request["overrides"])
    lr, max_steps, save_steps = float(recipe["learning_rate"]), int(recipe["max_steps"]), int(recipe["save_steps"])
    rows = read_points(Path(request["public_dir"]) / "train.jsonl")
    done = published(request["publish_dir"]) if request["resume"] else []
    step = max(done, default=0)  # a resume continues from the last published checkpoint
    w = read_w(Path(request["publish_dir"]) / f"checkpoint-{step}" if step else None, request["fixed_start"])
    train_start, publish_s, stop, history = time.time(), 0.0, "max_steps", []
    while step < max_steps:
        if time.time() >= request["deadline_unix"] - request["export_reserve_s"]:
            stop = "deadline"
            break
        grad = 2 * sum((w * r["x"] - r["y"]) * r["x"] for r in rows) / len(rows)
        w -= lr * grad
        step += 1
        loss = sum((w * r["x"] - r["y"]) ** 2 for r in rows) / len(rows)
        history.append({"progress": step, "loss": loss, "w": w})
        print(f"[train] step {step}/{max_steps} loss {loss:.6g} w {w:.6g}", flush=True)
        if step % save_steps == 0 or step == max_steps:
            t0 = time.time()
            with tempfile.TemporaryDirectory(dir=request["state_dir"]) as export:
                atomic_write_json(Path(export) / "model.json", {"w": w})
                entry = publish_checkpoint(export, request["publish_dir"], step, keep=request["keep"])
            publish_s += time.time() - t0
            print(f"[publish] checkpoint-{step} (retained {entry['retained']})", flush=True)
    atomic_write_json(
        Path(request["state_dir"]) / "train_result.json",
        {
            "stop_reason": stop,
            "steps": step,
            "train_start_unix": train_start,
            "train_end_unix": time.time(),
            "publish_s": publish_s,
            "history": history,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
