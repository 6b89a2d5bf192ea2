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

import argparse
import json
import time
from pathlib import Path

import torch

from replaykit.harness.fileio import atomic_write_json
from replaykit.harness.publish import publish_checkpoint
from replaykit.harness.trainer import load_recipe
from replaykit.tasks.soup.evaluator import load_images, read_items
from replaykit.tasks.soup.model import create_classifier, ingredient_paths, load_state, read_config

HERE = Path(__file__).resolve().parent


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


def resumed_soup(request: dict, n: int) -> dict | None:
    """On a resume, the ``coefficients.json`` of the soup already published as
    ``checkpoint-<n>`` (the recipe's last and only publication), else None."""
    from replaykit.harness.publish import published

    root = Path(request["publish_dir"])
    if not request["resume"] or n not in published(root):  # renamed into place whole
        return None
    return json.loads((root / f"checkpoint-{n}" / "coefficients.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", required=True)
    request = json.loads(Path(parser.parse_args().request).read_text())
    recipe = load_recipe(HERE / "configs", request["profile"], request["overrides"])
    torch.set_num_threads(int(request["threads"]))
    torch.manual_seed(int(request["seed"]))
    device = "cuda" if recipe["device"] == "auto" and torch.cuda.is_available() else "cpu"
    fixed = Path(request["fixed_start"])
    config = read_config(fixed)
    paths = ingredient_paths(fixed, config)
    n = len(paths)
    started = time.time()
    stacked = stack_ingredients(paths, device)
    model, preprocess = create_classifier(fixed, config)
    model.to(device).eval()
    print(f"[soup] {n} ingredients stacked on {device} in {time.time() - started:.1f} s", flush=True)
    publish_s, published_at = 0.0, []

    def publish(progress: int, coefficients: list[float], note: dict) -> None:
        nonlocal publish_s
        t0 = time.time()
        export = Path(request["state_dir"]) / f".export-{progress}"
        export.mkdir(parents=True, exist_ok=True)
        state = soup(stacked, torch.tensor(coefficients, device=device))
        torch.save({k: v.cpu().contiguous() for k, v in state.items()}, export / "model.pt")
        atomic_write_json(export / "coefficients.json", {"coefficients": coefficients, "ingredients": config["ingredients"],
                                                         "method": recipe["method"], **note})
        entry = publish_checkpoint(export, request["publish_dir"], progress, keep=request["keep"])
        for f in export.iterdir():
            f.unlink()
        export.rmdir()
        published_at.append(progress)
        publish_s += time.time() - t0
        print(f"[publish] checkpoint-{progress} (publication {entry['count']}, retained {entry['retained']})", flush=True)

    train_start, stop, curve = time.time(), "max_steps", []
    done = resumed_soup(request, n)
    if done is not None:  # a kill came after the publication, before the record: nothing to redo
        published_at.append(n)
        curve = [{"progress": k + 1, "proxy_accuracy": acc}
                 for k, acc in enumerate(done.get("history", []))]
        print(f"[soup] resumed: checkpoint-{n} is already published; nothing to compute",
              flush=True)
    elif recipe["method"] == "uniform":
        publish(n, [1.0 / n] * n, {})
    else:
        proxy_file = Path(request["public_dir"]) / "proxy.jsonl"
        items = read_items(proxy_file, int(config["n_classes"]))
        images = load_images(proxy_file, items, preprocess).to(device)
        labels = torch.tensor([it["label"] for it in items], device=device)

        def accuracy(members: list[int]) -> float:
            c = torch.zeros(n, device=device)
            c[members] = 1.0 / len(members)
            params = soup(stacked, c)
            with torch.no_grad():
                hits = 0
                for s in range(0, len(images), int(recipe["batch_size"])):
                    logits = torch.func.functional_call(model, params, (images[s:s + int(recipe["batch_size"])],))
                    hits += int((logits.argmax(1) == labels[s:s + int(recipe["batch_size"])]).sum())
            return hits / len(images)

        singles = []
        for i in range(n):
            if time.time() >= request["deadline_unix"]:
                stop = "deadline"
                break
            singles.append(accuracy([i]))
            print(f"[soup] ingredient {i}: proxy accuracy {singles[-1]:.4f}", flush=True)
        if stop == "max_steps":
            ranking = sorted(range(n), key=lambda i: (-singles[i], i))
            if recipe["method"] == "best_single":
                c = [0.0] * n
                c[ranking[0]] = 1.0
                publish(n, c, {"proxy_accuracy": singles[ranking[0]], "proxy_accuracies": singles})
            else:
                members, history = greedy_soup(ranking, accuracy)
                c = [1.0 / len(members) if i in members else 0.0 for i in range(n)]
                print(f"[soup] greedy soup of {len(members)}: proxy accuracy {history[-1]:.4f}", flush=True)
                publish(n, c, {"proxy_accuracy": history[-1], "members": members, "ranking": ranking, "history": history})
                curve = [{"progress": k + 1, "proxy_accuracy": acc} for k, acc in enumerate(history)]
    train_end = time.time()
    atomic_write_json(Path(request["state_dir"]) / "train_result.json",
                      {"stop_reason": stop, "steps": max(published_at, default=0), "train_start_unix": train_start,
                       "train_end_unix": train_end, "publish_s": publish_s, "history": curve})
    if not published_at:
        print("error: the deadline came before any soup was published", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
