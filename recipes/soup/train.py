"""Shipped recipe of the ``soup`` task: the uniform model soup.

Model soups, Wortsman et al. (2022), arXiv:2203.05482, with mlfoundations/model-soups as the
reference: *uniform* averages all N ingredients' weights (coefficients 1/N; no labels, no
gradients). The source's other two recipes are options of ``method``:

* ``best_single`` -- the ingredient with the best proxy accuracy (coefficient 1);
* ``greedy`` -- Algorithm 1 of the paper: rank ingredients by proxy accuracy, then walk down
  the ranking and keep an ingredient only if the soup's proxy accuracy strictly improves.

Speed: the ingredients are stacked once per tensor on the accelerator, and the proxy images
preprocessed once, so a candidate soup costs one weighted sum (``tensordot`` over the stack)
plus one forward pass through ``torch.func.functional_call``.

A checkpoint is ``checkpoint-<progress>/{model.pt, coefficients.json}`` with progress = the
number of ingredients examined so far. This directory is the editable workspace.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from replaykit.runtime import Session, atomic_write_json, knob
from replaykit.tasks.soup.evaluator import load_images, read_items
from replaykit.tasks.soup.model import create_classifier, ingredient_paths, load_state, read_config

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class SoupConfig:
    """The recipe's knobs (``configs/<profile>.yaml``; a replay's ``overrides`` change them)."""

    method: Literal["uniform", "greedy", "best_single"] = knob(
        "uniform: coefficients 1/N (the shipped recipe); greedy: Algorithm 1 of Wortsman et al.; "
        "best_single: the ingredient with the best proxy accuracy"
    )
    batch_size: int = knob("proxy images per forward pass (greedy and best_single only)", minimum=1)
    device: Literal["auto", "cpu"] = knob("auto: CUDA when available, else CPU")


def stack_ingredients(paths: list[Path], device: str) -> dict[str, torch.Tensor]:
    """``key -> N × shape`` float tensors of all ingredients, on ``device``."""
    states = [load_state(p) for p in paths]
    return {k: torch.stack([s[k].float() for s in states]).to(device) for k in states[0]}


def soup(stacked: dict[str, torch.Tensor], coefficients: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state dict ``sum_i c_i theta_i`` (``coefficients``: N floats on the same device)."""
    return {k: torch.tensordot(coefficients, v, dims=1) for k, v in stacked.items()}


def greedy_soup(ranking: list[int], accuracy) -> tuple[list[int], list[float]]:
    """Strict greedy soup (Wortsman et al. 2022, Algorithm 1): start from the best-ranked
    ingredient; add each next one if ``accuracy(members)`` strictly improves. Returns the
    members and the accuracy after each step."""
    members = [ranking[0]]
    best = accuracy(members)
    history = [best]
    for i in ranking[1:]:
        score = accuracy(members + [i])
        if score > best:
            members, best = members + [i], score
        history.append(best)
    return members, history


def resumed_soup(session: Session, n: int) -> dict | None:
    """On a resume, the ``coefficients.json`` of the soup already published as
    ``checkpoint-<n>`` (the recipe's last and only publication), else None."""
    folder = session.request.publish_dir / f"checkpoint-{n}"
    if not session.request.resume or not folder.is_dir() or folder.is_symlink():  # renamed into place whole
        return None
    return json.loads((folder / "coefficients.json").read_text())


def proxy_accuracy(session: Session, model, preprocess, stacked: dict, n_classes: int, device: str):
    """``accuracy(members)``: the proxy accuracy of the uniform soup of ``members``."""
    proxy_file = session.request.public_dir / "proxy.jsonl"
    items = read_items(proxy_file, n_classes)
    threads = int(session.request.threads)  # decoding processes (10,000 images: 56.6 s in one, 9.4 s in 14)
    images = load_images(proxy_file, items, preprocess, workers=threads if threads > 1 else 0).to(device)
    labels = torch.tensor([it["label"] for it in items], device=device)
    size, n = session.knobs.batch_size, len(next(iter(stacked.values())))

    def accuracy(members: list[int]) -> float:
        c = torch.zeros(n, device=device)
        c[members] = 1.0 / len(members)
        params = soup(stacked, c)
        with torch.no_grad():
            hits = 0
            for s in range(0, len(images), size):
                logits = torch.func.functional_call(model, params, (images[s:s + size],))
                hits += int((logits.argmax(1) == labels[s:s + size]).sum())
        return hits / len(images)

    return accuracy


def search(session: Session, n: int, accuracy) -> tuple[list[float], dict, list[dict]] | None:
    """``best_single`` or ``greedy`` (the ingredients ranked by proxy accuracy first): the
    coefficients, what ``coefficients.json`` notes and the curve; None when the deadline
    comes before every ingredient is ranked."""
    singles = []
    for i in range(n):
        if session.should_stop():
            return None
        singles.append(accuracy([i]))
        print(f"[soup] ingredient {i}: proxy accuracy {singles[-1]:.4f}", flush=True)
    ranking = sorted(range(n), key=lambda i: (-singles[i], i))
    if session.knobs.method == "best_single":
        c = [0.0] * n
        c[ranking[0]] = 1.0
        return c, {"proxy_accuracy": singles[ranking[0]], "proxy_accuracies": singles}, []
    members, history = greedy_soup(ranking, accuracy)
    print(f"[soup] greedy soup of {len(members)}: proxy accuracy {history[-1]:.4f}", flush=True)
    note = {"proxy_accuracy": history[-1], "members": members, "ranking": ranking, "history": history}
    return [1.0 / len(members) if i in members else 0.0 for i in range(n)], note, curve(history)


def curve(history: list[float]) -> list[dict]:
    return [{"progress": k + 1, "proxy_accuracy": acc} for k, acc in enumerate(history)]


def main() -> int:
    session = Session.start(SoupConfig, HERE / "configs", __doc__)
    knobs, fixed_start = session.knobs, session.request.fixed_start
    device = session.device(knobs.device)
    config = read_config(fixed_start)
    paths = ingredient_paths(fixed_start, config)
    n = len(paths)
    started = time.time()
    stacked = stack_ingredients(paths, device)
    model, preprocess = create_classifier(fixed_start, config)
    model.to(device).eval()
    print(f"[soup] {n} ingredients stacked on {device} in {time.time() - started:.1f} s", flush=True)
    session.begin_training()
    done = resumed_soup(session, n)
    if done is not None:  # a kill came after the publication, before the record: nothing to redo
        print(f"[soup] resumed: checkpoint-{n} is already published; nothing to compute", flush=True)
        return session.finish(curve(done.get("history", [])), steps=n)
    found = ([1.0 / n] * n, {}, []) if knobs.method == "uniform" else search(
        session, n, proxy_accuracy(session, model, preprocess, stacked, int(config["n_classes"]), device))
    if found is None:
        return session.finish([], steps=0)
    coefficients, note, history = found

    def write(out: Path) -> None:
        """The soup with these coefficients as checkpoint-<n> (n ingredients examined)."""
        state = soup(stacked, torch.tensor(coefficients, device=device))
        torch.save({k: v.cpu().contiguous() for k, v in state.items()}, out / "model.pt")
        atomic_write_json(out / "coefficients.json", {"coefficients": coefficients, "ingredients": config["ingredients"],
                                                      "method": knobs.method, **note})

    session.checkpoint(n, write)
    return session.finish(history, steps=n)


if __name__ == "__main__":
    raise SystemExit(main())
