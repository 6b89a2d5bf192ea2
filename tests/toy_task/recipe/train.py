"""Shipped recipe of the ``toy`` task: full-batch gradient descent on y ≈ w·x.

Loss ``L(w) = mean_i (w·x_i - y_i)²`` over the public training points; each step
``w <- w - η · dL/dw`` with ``dL/dw = 2 · mean_i (w·x_i - y_i)·x_i``. On points with
``y = a·x`` that is ``w_k - a = (w_0 - a)·(1 - 2η·mean(x²))^k``.

Run by the replay driver as ``python train.py --request request.json`` (see
``replaykit.harness.replay``): publishes ``checkpoint-<step>/model.json`` every
``save_steps`` steps, stops at ``max_steps`` or at the internal deadline less the export
reserve, and writes ``train_result.json`` (the bookkeeping is :class:`ReplaySession`'s). It
imports its plug-in (``replaykit_toy``), which the sandbox must show although it lives
outside the replaykit package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from replaykit.harness.session import ReplaySession, knob
from replaykit_toy import read_points, read_w

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ToyKnobs:
    """The recipe's knobs (``configs/<profile>.yaml``). Units: steps."""

    learning_rate: float = knob("η, the gradient-descent step size", minimum=0)
    max_steps: int = knob("gradient steps (progress = step)", minimum=1)
    save_steps: int = knob("publish every N steps, and at the last step", minimum=1)


def main() -> int:
    session = ReplaySession.start(ToyKnobs, HERE / "configs", __doc__)
    recipe = session.recipe
    rows = read_points(session.public_dir / "train.jsonl")
    step = max(session.published_before(), default=0) if session.resume else 0  # a resume continues from there
    w = read_w(session.publish_dir / f"checkpoint-{step}" if step else None, session.request["fixed_start"])
    session.begin_training()
    stop, history = "max_steps", []
    while step < recipe.max_steps:
        if session.past_deadline(ahead_s=session.request["export_reserve_s"]):
            stop = "deadline"
            break
        grad = 2 * sum((w * r["x"] - r["y"]) * r["x"] for r in rows) / len(rows)
        w -= recipe.learning_rate * grad
        step += 1
        loss = sum((w * r["x"] - r["y"]) ** 2 for r in rows) / len(rows)
        history.append({"progress": step, "loss": loss, "w": w})
        print(f"[train] step {step}/{recipe.max_steps} loss {loss:.6g} w {w:.6g}", flush=True)
        if step % recipe.save_steps == 0 or step == recipe.max_steps:
            session.publish(step, lambda out, w=w: (out / "model.json").write_text(json.dumps({"w": w})))
    return session.finish(stop, history, steps=step)


if __name__ == "__main__":
    raise SystemExit(main())
