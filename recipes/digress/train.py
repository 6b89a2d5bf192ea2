"""Shipped recipe of the ``digress`` task: DiGress on QM9 without hydrogens.

Vignac et al. (2023), "DiGress: Discrete Denoising diffusion for graph generation"
(reference implementation cvignac/DiGress, ``src/diffusion_model_discrete.py``):
marginal-transition discrete noise over atom and bond classes with a cosine schedule over
``T`` steps; a graph Transformer with DiGress's extra structural and molecular features
predicts the clean classes from ``z_t`` at a step ``t`` drawn uniformly from ``0..T``; loss =
node cross-entropy + ``lambda_E`` × edge cross-entropy; AdamW (amsgrad, as the reference)
with gradient clipping; optional EMA of the weights.

Speed: the whole training split lives on the device as dense class tensors (``N × 9``
atoms, ``N × 9 × 9`` bonds, int8); a batch is an index into them (``loader: device``) --
no collate, no host-to-device copy. ``loader: dataloader`` is the straightforward path
(torch_geometric ``DataLoader`` of sparse graphs, densified per batch and copied to the
device), kept for comparison (``bench/digress_throughput.py``).

``cuda_graph: true`` (CUDA only; the full-scale config turns it on): at 8 M parameters and
9 nodes per graph the step is a few thousand small kernels, so it is bound by launching them
and by the host syncs of the plain step (``float(loss)``, boolean-mask indexing). The model's
forward, a sync-free masked loss, backward, clipping and the AdamW step are then captured once
as a CUDA graph (:class:`GraphedStep`, static shapes: full batches of ``batch_size`` graphs
padded to 9 nodes) and replayed per batch; noise and extra features (``torch.linalg.eigh``)
stay eager and are prepared for the next batch on a side stream while the graph runs
(:func:`prefetch`). The loss is the plain path's to float rounding (``tests/test_digress.py``).
``compile: true`` (with ``cuda_graph``) also runs the denoiser through ``torch.compile`` inside
the graph, which fuses its elementwise kernels (one-time compilation: ~3 min on an H200 for
the whole denoiser, ``compile_scope: model``; the epoch's last, smaller batch runs the
uncompiled module, so only the full batch's shape is compiled; ``compile_scope: layers``
compiles one Transformer layer's graph, shared by all of them).
Measured on an H200 at full size: 23.9 s/epoch plain, 6.6 s graphed, 3.5 s graphed + compiled
(``bench/results-2026-12-01-digress.md``).

Progress is the epoch. A checkpoint (``checkpoint-<epoch>/{config.json,
model.safetensors[, ema.safetensors]}``, :mod:`replaykit.tasks.digress.checkpoint`) is
published every ``save_every`` epochs and at the end; the training state (weights,
optimizer, EMA, epoch, RNG, history) is kept in ``state_dir`` so a resumed replay continues.
This directory is the editable workspace.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch.nn import functional as F

from replaykit.runtime import Session, knob
from replaykit.tasks.digress import checkpoint as ckpt
from replaykit.tasks.digress.data import load_npz, to_pyg
from replaykit.tasks.digress.diffusion import apply_noise, dense_batch, model_input
from replaykit.tasks.digress.model import count_parameters, cross_entropy

HERE = Path(__file__).resolve().parent
STATE = "train_state.pt"


@dataclass(frozen=True)
class DigressConfig:
    """The recipe's knobs (``configs/<profile>.yaml``; a replay's ``overrides`` change them).
    Units: epochs, graphs, diffusion steps."""

    T: int = knob("diffusion steps (DiGress: 500)", minimum=1)
    transition: Literal["marginal", "uniform"] = knob("noise transition: marginal (DiGress) or uniform")
    extra_features: bool = knob("DiGress's cycle, spectral and molecular features of z_t as extra inputs")
    n_layers: int = knob("graph Transformer layers", minimum=1)
    hidden_mlp_dims: dict = knob("input/output MLP widths {X, E, y}")
    hidden_dims: dict = knob("Transformer widths {dx, de, dy, n_head, dim_ffX, dim_ffE, dim_ffy}")
    dropout: float = knob("dropout probability in the Transformer layers", minimum=0, maximum=1)
    lambda_E: float = knob("weight of the edge cross-entropy in the loss (DiGress lambda_train)", minimum=0)
    lr: float = knob("AdamW learning rate", minimum=0)
    weight_decay: float = knob("AdamW weight decay", minimum=0)
    grad_clip: float = knob("gradient-norm clipping threshold", minimum=0)
    ema_decay: float = knob("EMA decay of the weights; 0: no EMA (else ema.safetensors is published too)", minimum=0, maximum=1)
    batch_size: int = knob("graphs per optimizer step", minimum=1)
    epochs: int = knob("training epochs (progress = epoch)", minimum=1)
    save_every: int = knob("publish every N epochs, and at the end (3 retained)", minimum=1)
    loader: Literal["device", "dataloader"] = knob(
        "device: the split on the device, batches by indexing; dataloader: torch_geometric DataLoader"
    )
    num_workers: int = knob("DataLoader worker processes (loader: dataloader only)", minimum=0)
    cuda_graph: bool = knob("on CUDA: the training step captured as one CUDA graph (GraphedStep)")
    compile: bool = knob("with cuda_graph: torch.compile of the denoiser inside the graph")
    dtype: Literal["bfloat16", "float32"] = knob("on CUDA: bfloat16 autocast (+ TF32) or float32; the CPU runs float32")
    device: Literal["auto", "cpu"] = knob("auto: CUDA when available, else CPU")
    compile_scope: Literal["model", "layers"] = knob(
        "with compile: model (the denoiser as one graph) or layers (each Transformer layer; the n_layers layers "
        "share one compiled graph, so compiling takes about 1/n_layers of the time; the input/output MLPs run "
        "eagerly inside the CUDA graph)", default="model")


def device_batches(atoms: torch.Tensor, bonds: torch.Tensor, batch_size: int, generator: torch.Generator):
    """Fast path: shuffled index batches of device-resident class tensors -> ``(X, E, node_mask)``."""
    order = torch.randperm(len(atoms), generator=generator, device="cpu").to(atoms.device)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        yield dense_batch(atoms[idx], bonds[idx])


def dataloader_batches(graphs: list, batch_size: int, generator: torch.Generator, device: str, workers: int = 0):
    """Straightforward path: a torch_geometric ``DataLoader`` of sparse graphs, densified per
    batch with ``to_dense_batch`` / ``to_dense_adj`` and copied to ``device``."""
    from torch_geometric.loader import DataLoader
    from torch_geometric.utils import to_dense_adj, to_dense_batch

    loader = DataLoader(graphs, batch_size=batch_size, shuffle=True, generator=generator, num_workers=workers)
    for batch in loader:
        batch = batch.to(device)
        X, node_mask = to_dense_batch(batch.x, batch.batch, max_num_nodes=9)
        E = to_dense_adj(batch.edge_index, batch.batch, batch.edge_attr, max_num_nodes=9)
        pair = node_mask.unsqueeze(1) & node_mask.unsqueeze(2) & ~torch.eye(9, dtype=torch.bool, device=device)
        E[..., 0] = torch.where(pair & (E.sum(-1) == 0), 1.0, E[..., 0])  # no bond between real atoms
        yield X, E, node_mask


def prepare_batch(noise, X, E, node_mask, use_extra: bool) -> tuple:
    """Denoiser inputs and targets of one dense batch: ``t`` uniform in ``0..T``, ``z_t ~ q(z_t | x)``,
    extra features -> ``(Xi, Ei, yi, X, E, node_mask)``."""
    B = X.shape[0]
    t = torch.randint(0, noise.T + 1, (B,), device=X.device)
    X_t, E_t = apply_noise(noise, X, E, node_mask, t)
    Xi, Ei, yi = model_input(X_t, E_t, node_mask, t, noise.T, use_extra)
    return Xi, Ei, yi, X, E, node_mask


def train_step(model, noise, optimizer, X, E, node_mask, recipe: DigressConfig, autocast) -> tuple[float, dict]:
    """One optimizer step on a dense batch; returns the loss and its parts."""
    Xi, Ei, yi, X, E, node_mask = prepare_batch(noise, X, E, node_mask, recipe.extra_features)
    with autocast():
        pred_X, pred_E = model(Xi, Ei, yi, node_mask)
    loss, parts = cross_entropy(pred_X, pred_E, X, E, node_mask, recipe.lambda_E)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
    optimizer.step()
    return float(loss.detach()), parts


def masked_cross_entropy(pred_X, pred_E, X, E, node_mask, lambda_E: float) -> tuple[torch.Tensor, ...]:
    """:func:`cross_entropy` without boolean indexing (no host sync, fixed shapes): per-entry
    cross-entropy summed over real nodes / real ordered pairs and divided by their counts.
    Returns tensors ``(loss, loss_X, loss_E)``."""
    B, n = node_mask.shape
    pair = node_mask.unsqueeze(1) & node_mask.unsqueeze(2) & ~torch.eye(n, dtype=torch.bool, device=X.device)
    xm, pm = node_mask.reshape(-1).float(), pair.reshape(-1).float()
    ce_x = F.cross_entropy(pred_X.float().reshape(B * n, -1), X.argmax(-1).reshape(-1), reduction="none")
    ce_e = F.cross_entropy(pred_E.float().reshape(B * n * n, -1), E.argmax(-1).reshape(-1), reduction="none")
    lx, le = (ce_x * xm).sum() / xm.sum(), (ce_e * pm).sum() / pm.sum()
    return lx + lambda_E * le, lx, le


class GraphedStep:
    """The optimizer step on prepared inputs (:func:`prepare_batch`), as one CUDA graph.

    Call with ``(Xi, Ei, yi, X, E, node_mask)``; returns device tensors ``(loss, loss_X,
    loss_E)`` (on CUDA the graph's static outputs: read them before the next call). The first
    ``warmup`` full batches run eagerly on a side stream (optimizer state, cuBLAS workspaces),
    the next full batch is captured and every later full batch replays the graph after copying
    its inputs into the static buffers. A batch of another size (an epoch's last) and every
    batch on the CPU run the same code eagerly. The optimizer must be built with
    ``capturable=True`` on CUDA. Dropout inside the graph draws fresh numbers per replay
    (PyTorch registers the default CUDA generator with the graph). ``eager``: the module for
    the batches that are not captured (default ``model``): the uncompiled denoiser, so that a
    compiled ``model`` is compiled for the full batch's shape only, not again for the last one's.
    """

    def __init__(self, model, optimizer, recipe: DigressConfig, autocast, batch_size: int, warmup: int = 3,
                 eager=None):
        self.model, self.optimizer, self.autocast = model, optimizer, autocast
        self.eager = model if eager is None else eager
        self.lambda_E, self.clip = recipe.lambda_E, recipe.grad_clip
        self.batch_size, self.warmup, self.eager_full = batch_size, warmup, 0
        self.graph, self.static_in, self.static_out = None, None, None

    def step(self, inputs, model=None) -> tuple[torch.Tensor, ...]:
        Xi, Ei, yi, X, E, node_mask = inputs
        with self.autocast():
            pred_X, pred_E = (model or self.model)(Xi, Ei, yi, node_mask)
        out = masked_cross_entropy(pred_X, pred_E, X, E, node_mask, self.lambda_E)
        self.optimizer.zero_grad(set_to_none=True)
        out[0].backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        return tuple(o.detach() for o in out)

    def __call__(self, inputs) -> tuple[torch.Tensor, ...]:
        cuda, full = inputs[0].is_cuda, inputs[0].shape[0] == self.batch_size
        if not full:
            return self.step(inputs, self.eager)
        if not cuda:
            return self.step(inputs)
        if self.graph is None and self.eager_full < self.warmup:
            self.eager_full += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.step(inputs)
            torch.cuda.current_stream().wait_stream(side)
            return out
        if self.graph is None:
            self.static_in = tuple(x.clone() for x in inputs)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = self.step(self.static_in)
        else:
            for dst, src in zip(self.static_in, inputs):
                dst.copy_(src)
        self.graph.replay()
        return self.static_out


def compile_denoiser(model, scope: str):
    """``torch.compile`` of the denoiser: the whole module (``scope="model"``) or each of its
    Transformer layers (``"layers"``), in a shallow copy whose ``layers`` are the compiled
    wrappers of the same layer modules (parameters shared; ``model`` itself, which checkpoints
    save, is unchanged). The layers are one class of one shape, so dynamo compiles one graph
    for all of them (parameters are graph inputs)."""
    if scope == "model":
        return torch.compile(model)
    fast = copy.copy(model)
    fast._modules = dict(model._modules)  # copy.copy shares the submodule dict
    fast.layers = torch.nn.ModuleList(torch.compile(layer) for layer in model.layers)
    return fast


def prefetch(batches, prepare):
    """``prepare(X, E, node_mask)`` of each batch, made on a side CUDA stream one batch ahead:
    the host syncs inside (``eigh``) then wait for the side stream only, while the caller's
    graph of the previous batch runs on the current stream."""
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    it = iter(batches)

    def produce():
        with torch.cuda.stream(side):
            batch = next(it, None)
            return None if batch is None else prepare(*batch)

    ready = produce()
    while ready is not None:
        main.wait_stream(side)
        for x in ready:
            x.record_stream(main)  # made on the side stream, used (and freed) on the main one
        current, ready = ready, None
        yield current
        ready = produce()


def build(session: Session, stats: dict, device: str):
    """The checkpoint config, denoiser, noise model, AdamW (capturable for the CUDA graph) and EMA copy."""
    knobs = session.knobs
    config = {"model": {"n_layers": knobs.n_layers, "hidden_mlp_dims": knobs.hidden_mlp_dims,
                        "hidden_dims": knobs.hidden_dims, "dropout": knobs.dropout},
              "diffusion": {"T": knobs.T, "transition": knobs.transition, "x_marginals": stats["atom_marginals"],
                            "e_marginals": stats["bond_marginals"], "extra_features": knobs.extra_features}}
    model = ckpt.build_model(config["model"]).to(device)
    noise = ckpt.build_noise(config["diffusion"]).to(device)
    graphed = knobs.cuda_graph and device == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=knobs.lr, weight_decay=knobs.weight_decay,
                                  amsgrad=True, capturable=graphed)
    ema = copy.deepcopy(model).eval() if knobs.ema_decay > 0 else None
    return config, model, noise, optimizer, ema, graphed


def resume(session: Session, model, optimizer, ema, gen: torch.Generator, device: str) -> tuple[int, list[dict]]:
    """The epoch and history of the state an earlier attempt saved (weights, optimizer, EMA, RNGs
    restored), or ``(0, [])``."""
    state = session.load_state(STATE, map_location=device)
    if state is None:
        return 0, []
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if ema is not None and state.get("ema") is not None:
        ema.load_state_dict(state["ema"])
    torch.set_rng_state(state["rng_cpu"].cpu())
    gen.set_state(state["rng_data"].cpu())
    if device == "cuda" and state.get("rng_cuda") is not None:
        torch.cuda.set_rng_state(state["rng_cuda"].cpu())
    print(f"[train] resuming after epoch {int(state['epoch'])}", flush=True)
    return int(state["epoch"]), list(state["history"])


def train_one_epoch(session: Session, model, noise, optimizer, ema, batches, stepper, autocast):
    """One pass over ``batches`` (through the CUDA graph ``stepper`` when given, losses summed
    on the device and checked once; else eagerly, each step checked), the EMA updated after each
    step. Returns ``(loss sum, {loss_X, loss_E} sums, steps, nan)`` -- ``nan`` says where a
    non-finite loss appeared, else None --, or None when the deadline cut the epoch."""
    knobs, decay = session.knobs, session.knobs.ema_decay
    losses, parts_sum, steps, cut = 0.0, {"loss_X": 0.0, "loss_E": 0.0}, 0, False
    if stepper is not None:
        sums = torch.zeros(3, device=next(model.parameters()).device)
        for inputs in prefetch(batches, lambda X, E, m: prepare_batch(noise, X, E, m, knobs.extra_features)):
            sums += torch.stack(stepper(inputs))
            if ema is not None:
                with torch.no_grad():
                    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - decay)
            steps += 1
            if session.should_stop():
                cut = True
                break
        losses, parts_sum["loss_X"], parts_sum["loss_E"] = sums.tolist()
        if not math.isfinite(losses):
            return losses, parts_sum, steps, ""
        batches = ()
    for X, E, node_mask in batches:
        loss, parts = train_step(model, noise, optimizer, X, E, node_mask, knobs, autocast)
        if not math.isfinite(loss):
            return losses, parts_sum, steps, f" (step {steps + 1})"
        if ema is not None:
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters()):
                    pe.lerp_(pm, 1 - decay)
        losses += loss
        for k in parts_sum:
            parts_sum[k] += parts[k]
        steps += 1
        if session.should_stop():
            cut = True
            break
    return None if cut else (losses, parts_sum, steps, None)  # an unfinished epoch is not progress


def main() -> int:
    session = Session.start(DigressConfig, HERE / "configs", __doc__)
    knobs, device = session.knobs, session.device(session.knobs.device)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    use_bf16 = device == "cuda" and knobs.dtype == "bfloat16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16)

    stats = json.loads((session.request.public_dir / "stats.json").read_text())
    atoms_np, bonds_np = load_npz(session.request.public_dir / "train_graphs.npz")
    config, model, noise, optimizer, ema, graphed = build(session, stats, device)
    gen = torch.Generator().manual_seed(session.request.seed)
    epoch, history = resume(session, model, optimizer, ema, gen, device)
    print(f"[train] {len(atoms_np)} training graphs on {device}; {count_parameters(model):,} parameters; "
          f"T={knobs.T} loader={knobs.loader} cuda_graph={graphed} "
          f"compile={graphed and knobs.compile}", flush=True)
    if knobs.loader == "device":
        atoms, bonds = torch.as_tensor(atoms_np, device=device), torch.as_tensor(bonds_np, device=device)
    else:
        graphs = [to_pyg(a, b) for a, b in zip(atoms_np, bonds_np)]

    def write(out: Path) -> None:
        """Save the training state after this epoch, then write its model as checkpoint-<epoch>."""
        session.save_state({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "ema": ema.state_dict() if ema is not None else None, "epoch": epoch,
                            "history": history, "rng_cpu": torch.get_rng_state(), "rng_data": gen.get_state(),
                            "rng_cuda": torch.cuda.get_rng_state() if device == "cuda" else None}, STATE)
        ckpt.save(out, {**config, "epoch": epoch}, model, ema)

    stepper = None
    if graphed:  # the compiled module shares the parameters; checkpoints save the plain one (no prefixes)
        step_model = compile_denoiser(model, knobs.compile_scope) if knobs.compile else model
        stepper = GraphedStep(step_model, optimizer, knobs, autocast, knobs.batch_size, eager=model)
    session.begin_training()
    while epoch < knobs.epochs and not session.should_stop():
        model.train()
        started = time.time()
        batches = (device_batches(atoms, bonds, knobs.batch_size, gen) if knobs.loader == "device"
                   else dataloader_batches(graphs, knobs.batch_size, gen, device, knobs.num_workers))
        done = train_one_epoch(session, model, noise, optimizer, ema, batches, stepper, autocast)
        if done is None:
            break
        losses, parts_sum, steps, nan = done
        if nan is not None:
            session.nan_loss(f"NaN loss in epoch {epoch + 1}{nan}; earlier checkpoints kept")
            return session.finish(history, steps=epoch)
        epoch += 1
        entry = {"progress": epoch, "loss": losses / steps, **{k: v / steps for k, v in parts_sum.items()},
                 "epoch_s": time.time() - started, "elapsed_s": time.time() - session.train_start}
        history.append(entry)
        print(f"[train] epoch {epoch}/{knobs.epochs} loss {entry['loss']:.4f} loss_X {entry['loss_X']:.4f} "
              f"loss_E {entry['loss_E']:.4f} epoch_s {entry['epoch_s']:.1f} elapsed {entry['elapsed_s']:.0f} s",
              flush=True)
        if epoch % knobs.save_every == 0 or epoch == knobs.epochs:
            session.checkpoint(epoch, write)
    # at the deadline (or a resume at the end), the last whole epoch is published if nothing later is
    session.checkpoint_if_missing(epoch, write)
    return session.finish(history, steps=epoch)


if __name__ == "__main__":
    raise SystemExit(main())
