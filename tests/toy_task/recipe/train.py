"""Shipped recipe of the ``toy`` task: full-batch gradient descent on y ≈ w·x.

Loss ``L(w) = mean_i (w·x_i - y_i)²`` over the public training points; each step
``w <- w - η · dL/dw`` with ``dL/dw = 2 · mean_i (w·x_i - y_i)·x_i``. On points with
``y = a·x`` that is ``w_k - a = (w_0 - a)·(1 - 2η·mean(x²))^k``.

Run by the replay driver as ``python train.py --request request.json`` (see
``replaykit.harness.replay``): publishes ``checkpoint-<step>/model.json`` every
``save_steps`` steps, stops at ``max_steps`` or at the internal deadline less the export
reserve, and writes ``train_result.json`` (the bookkeeping is ``replaykit.runtime.Session``'s). It
imports its plug-in (``replaykit_toy``), which the sandbox must show although it lives
outside the replaykit package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from replaykit.runtime import Session, knob
from replaykit_toy import read_points, read_w

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ToyKnobs:
    """The recipe's knobs (``configs/<profile>.yaml``). Units: steps."""

    learning_rate: float = knob("η, the gradient-descent step size", minimum=0)
    max_steps: int = knob("gradient steps (progress = step)", minimum=1)
    save_steps: int = knob("publish every N steps, and at the last step", minimum=1)


def main() -> int:
    session = Session.start(ToyKnobs, HERE / "configs", __doc__)
    knobs, request = session.knobs, session.request
    rows = read_points(request.public_dir / "train.jsonl")
    step = session.last_published() if request.resume else 0  # a resume continues from there
    w = read_w(request.publish_dir / f"checkpoint-{step}" if step else None, request.fixed_start)
    session.begin_training()
    history = []
    while step < knobs.max_steps and not session.should_stop(next_step_s=request.export_reserve_s):
        grad = 2 * sum((w * r["x"] - r["y"]) * r["x"] for r in rows) / len(rows)
        w -= knobs.learning_rate * grad
        step += 1
        loss = sum((w * r["x"] - r["y"]) ** 2 for r in rows) / len(rows)
        history.append({"progress": step, "loss": loss, "w": w})
        print(f"[train] step {step}/{knobs.max_steps} loss {loss:.6g} w {w:.6g}", flush=True)
        if step % knobs.save_steps == 0 or step == knobs.max_steps:
            session.checkpoint(step, lambda out, w=w: (out / "model.json").write_text(json.dumps({"w": w})))
    return session.finish(history, steps=step)


if __name__ == "__main__":
    raise SystemExit(main())
