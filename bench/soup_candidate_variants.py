"""Issue 35: can one greedy-soup candidate (weighted sum over 72 stacked ingredients + forward
of 2,000 cached proxy images + argmax) run in <= 0.05 s on the H200 without changing the
proxy predictions? All variants in one process, same weights, same images, same coefficients.

Model: the recipe's own ``ImageClassifier`` over open_clip's ``ViT-B-32-quickgelu`` image
tower (random weights; the head set like a zero-shot head: 100 x unit rows), 1,000 classes.
Ingredients: 72 perturbed copies (+1e-3 N(0,1)) of its float32 state dict on the GPU (25 GB).
Proxy: random tensors of the preprocessed shape. Reference: the recipe's path as it is now
(``soup()`` = per-tensor tensordot, ``functional_call``, batch 500, float32, TF32 off, since
the recipe sets no TF32 flag).

Each variant: seconds per candidate (median over the candidates after a warm-up one; the
warm-up's time is reported as first-call time, which holds compile/autotune), predictions that
differ from the reference's, max |logit difference|. Rows are written to OUT/gpu_soup.json
after every variant, so a run stopped at its limit still returns what it measured.

Usage: python bench/soup_candidate_variants.py --out DIR [--budget S] [--only v1,v2] [--tiny]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = ["/tmp/site", str(ROOT / "src")]


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="ViT-B-32-quickgelu")
    p.add_argument("--n-ingredients", type=int, default=72)
    p.add_argument("--n-proxy", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--candidates", type=int, default=7, help="timed candidates after one warm-up")
    p.add_argument("--budget", type=float, default=540)
    p.add_argument("--only", default="")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default="/tmp/gpu_soup")
    a = p.parse_args()
    started = time.time()
    deadline = started + a.budget
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    import open_clip

    from replaykit.tasks.soup.model import ImageClassifier

    spec = importlib.util.spec_from_file_location("soup_recipe_train", ROOT / "recipes" / "soup" / "train.py")
    recipe = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = recipe
    spec.loader.exec_module(recipe)

    n_classes = 1000
    if a.tiny:
        from replaykit.tasks.common.clip import MODEL_CONFIG

        cfgdir = Path("/tmp/gpu_soup_cfg")
        cfgdir.mkdir(exist_ok=True)
        (cfgdir / "tiny-vit.json").write_text(json.dumps(MODEL_CONFIG))
        open_clip.add_model_config(cfgdir)
        a.arch, a.n_ingredients, a.n_proxy, a.batch_size, a.candidates, n_classes = "tiny-vit", 4, 40, 20, 2, 10
    torch.manual_seed(0)
    clip = open_clip.create_model(a.arch)
    model = ImageClassifier(clip.visual, clip.visual.output_dim, n_classes)
    del clip
    with torch.no_grad():
        model.head.weight.copy_(100 * F.normalize(torch.randn_like(model.head.weight), dim=-1))
        model.head.bias.zero_()
    model.to(device).eval()
    size = model.visual.image_size if hasattr(model.visual, "image_size") else (224, 224)
    size = size if isinstance(size, (tuple, list)) else (size, size)
    base = {k: v.detach().float() for k, v in model.state_dict().items()}
    n = a.n_ingredients
    gen = torch.Generator(device=device).manual_seed(0)
    stacked = {
        k: v.unsqueeze(0) + 1e-3 * torch.randn((n, *v.shape), device=device, generator=gen) for k, v in base.items()
    }
    proxy = torch.randn(a.n_proxy, 3, *size, device=device, generator=gen)
    B = a.batch_size
    targets = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert set(targets) == set(stacked), set(targets) ^ set(stacked)
    for t in targets.values():
        t.requires_grad_(False)

    # greedy's candidates are uniform soups of member sets: warm-up (3 members), then sizes below
    rng = torch.Generator().manual_seed(1)
    sizes_ = [3, 1, 2, 4, 8, 16, 32, 5, 12, 24][: a.candidates + 1]
    members_list = [sorted(torch.randperm(n, generator=rng)[: min(s, n)].tolist()) for s in sizes_]
    coefficients = []
    for m in members_list:
        c = torch.zeros(n, device=device)
        c[m] = 1.0 / len(m)
        coefficients.append(c)

    info = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "torch": torch.__version__,
        "open_clip": open_clip.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "cuda": torch.version.cuda,
        "arch": a.arch,
        "n_ingredients": n,
        "n_proxy": a.n_proxy,
        "batch_size": B,
        "timed_candidates": a.candidates,
        "members_per_candidate": [len(m) for m in members_list],
        "stack_GB": sum(v.numel() * 4 for v in stacked.values()) / 1e9,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        pass
    print(json.dumps(info), flush=True)
    rows: list[dict] = []

    def save():
        (out / "gpu_soup.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))

    # ---- forward functions -------------------------------------------------------------
    def recipe_forward(params, x):  # the recipe's call
        return torch.func.functional_call(model, params, (x,))

    def tower_autocast(dtype):
        def fwd(x):
            with torch.autocast(device, dtype=dtype):
                f = model.visual(x)
            return model.head(F.normalize(f.float(), dim=-1))

        return fwd

    def all_autocast(dtype):
        def fwd(x):
            with torch.autocast(device, dtype=dtype):
                return model(x).float()

        return fwd

    def plain(x):
        return model(x)

    def weights_inplace(c):
        for k, t in targets.items():
            torch.tensordot(c, stacked[k], dims=1, out=t)

    ref_logits: list[torch.Tensor] = []

    def candidate(c, *, mode, fwd, cudagraph=False, recheck=None):
        """One candidate; returns logits [n_proxy, classes] float32 (and flagged count)."""
        flagged = 0
        with torch.no_grad():
            if mode == "recipe":
                params = recipe.soup(stacked, c)
                logits = torch.cat([recipe_forward(params, proxy[s : s + B]) for s in range(0, len(proxy), B)])
            else:
                weights_inplace(c)
                parts = []
                for s in range(0, len(proxy), B):
                    if cudagraph:
                        torch.compiler.cudagraph_mark_step_begin()
                    parts.append(fwd(proxy[s : s + B]).float().clone())
                logits = torch.cat(parts)
                if recheck is not None:  # float32 re-run of images whose top-2 margin < tau
                    top = logits.topk(2, dim=1).values
                    idx = torch.nonzero(top[:, 0] - top[:, 1] < recheck).flatten()
                    flagged = int(idx.numel())
                    if flagged:
                        tf = torch.backends.cuda.matmul.allow_tf32
                        torch.backends.cuda.matmul.allow_tf32 = False
                        for s in range(0, flagged, B):
                            j = idx[s : s + B]
                            logits[j] = model(proxy[j]).float()
                        torch.backends.cuda.matmul.allow_tf32 = tf
            preds = logits.argmax(1)
        return logits, preds, flagged

    def run(name, *, tf32=False, mode="inplace", fwd=None, cudagraph=False, recheck=None, est=10, note=""):
        if a.only and name not in a.only.split(","):
            return None
        left = deadline - time.time()
        if left < est:
            print(f"[skip] {name}: needs ~{est:.0f} s, {left:.0f} s left", flush=True)
            rows.append({"variant": name, "skipped": f"needs ~{est:.0f} s, {left:.0f} s left"})
            save()
            return None
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        row = {"variant": name, "tf32": tf32, "note": note}
        try:
            times, flips, maxdiff, flagged = [], 0, 0.0, []
            for i, c in enumerate(coefficients):
                sync()
                t0 = time.perf_counter()
                logits, preds, fl = candidate(c, mode=mode, fwd=fwd, cudagraph=cudagraph, recheck=recheck)
                sync()
                dt = time.perf_counter() - t0
                if name == "fp32-recipe":
                    ref_logits.append(logits)
                if i == 0:
                    row["first_call_s"] = round(dt, 3)
                    continue
                times.append(dt)
                flagged.append(fl)
                ref = ref_logits[i]
                flips += int((preds != ref.argmax(1)).sum())
                maxdiff = max(maxdiff, float((logits - ref).abs().max()))
            row.update(
                {
                    "s_per_candidate": round(statistics.median(times), 4),
                    "min_s": round(min(times), 4),
                    "max_s": round(max(times), 4),
                    "predictions_changed": flips,
                    "predictions": len(times) * a.n_proxy,
                    "max_abs_logit_diff": maxdiff,
                }
            )
            if recheck is not None:
                row["recheck_tau"] = recheck
                row["rechecked_images_per_candidate"] = flagged
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {e}"[:500]
            traceback.print_exc()
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        rows.append(row)
        save()
        print("[row]", json.dumps(row), flush=True)
        return row

    def compiled(fn, mode):
        torch._dynamo.reset()
        return torch.compile(fn, mode=mode)

    # ---- (a) the recipe as now, and the plain knobs --------------------------------------
    run("fp32-recipe", mode="recipe", est=0, note="the recipe now: soup() + functional_call, float32, TF32 off")
    # the in-place weights: same bytes as soup()?
    with torch.no_grad():
        weights_inplace(coefficients[1])
        plain_soup = recipe.soup(stacked, coefficients[1])
        info["inplace_same_bytes_as_soup"] = all(torch.equal(targets[k], plain_soup[k]) for k in targets)
        # weighted sum over the members only (greedy's candidates are sparse): time and bytes
        t_all, t_mem, same = [], [], True
        for m, c in zip(members_list[1:], coefficients[1:]):
            sync()
            t0 = time.perf_counter()
            s1 = recipe.soup(stacked, c)
            sync()
            t_all.append(time.perf_counter() - t0)
            mi = torch.tensor(m, device=device)
            sync()
            t0 = time.perf_counter()
            s2 = {k: torch.tensordot(c[mi], v.index_select(0, mi), dims=1) for k, v in stacked.items()}
            sync()
            t_mem.append(time.perf_counter() - t0)
            same &= all(torch.equal(s1[k], s2[k]) for k in s1)
        info["weighted_sum_s_all72"] = round(statistics.median(t_all), 5)
        info["weighted_sum_s_members_only"] = round(statistics.median(t_mem), 5)
        info["members_only_same_bytes"] = bool(same)
        del plain_soup, s1, s2
        # margin statistics of the reference (how tie-prone the random model is)
        top = torch.cat(ref_logits[1:]).topk(2, dim=1).values
        mg = top[:, 0] - top[:, 1]
        info["ref_logit_absmax"] = float(torch.cat(ref_logits[1:]).abs().max())
        info["ref_margin_quantiles"] = {q: float(mg.quantile(q)) for q in (0.001, 0.01, 0.1, 0.5)}
        # is the float32 path itself reproducible, and batch-invariant (one batch of 37 images)?
        logits2, _, _ = candidate(coefficients[1], mode="recipe", fwd=None)
        info["fp32_rerun_identical"] = bool(torch.equal(logits2, ref_logits[1]))
        weights_inplace(coefficients[1])
        small = model(proxy[:37])
        info["fp32_batch37_vs_batch500_maxdiff"] = float((small - ref_logits[1][:37]).abs().max())
        info["fp32_inplace_model_vs_recipe_maxdiff"] = float((model(proxy[:B]) - ref_logits[1][:B]).abs().max())
    save()
    print(json.dumps(info), flush=True)

    run("fp32-inplace", fwd=plain, note="weights tensordot'ed in place into the module, plain forward")
    run("tf32-recipe", tf32=True, mode="recipe", note="the recipe with TF32 on (2026-12-01/02's 0.106-0.110 s)")
    run("bf16-autocast-all", tf32=True, fwd=all_autocast(torch.bfloat16), note="autocast whole model (bf16 logits)")
    run("bf16-autocast-tower", tf32=True, fwd=tower_autocast(torch.bfloat16), note="tower in bf16, normalize+head fp32")
    run("fp16-autocast-tower", tf32=True, fwd=tower_autocast(torch.float16), note="tower in fp16, normalize+head fp32")

    # calibrate the re-check threshold on the warm-up candidate: 4 x max |fp16 - fp32|
    def calibrate(fwd):
        with torch.no_grad():
            logits, _, _ = candidate(coefficients[0], mode="inplace", fwd=fwd)
        return 4 * float((logits - ref_logits[0]).abs().max())

    tau16 = calibrate(tower_autocast(torch.float16))
    info["tau_fp16_eager"] = tau16
    run(
        "fp16-tower+fp32-recheck",
        tf32=True,
        fwd=tower_autocast(torch.float16),
        recheck=tau16,
        note="fp16 eager; images with top-2 margin < tau re-run in float32",
    )

    # ---- (b)-(c) compiled towers ----------------------------------------------------------
    f = compiled(tower_autocast(torch.float16), "max-autotune-no-cudagraphs")
    r = run(
        "fp16-tower-compile-max-autotune-no-cudagraphs",
        tf32=True,
        fwd=f,
        est=240,
        note="torch.compile mode=max-autotune-no-cudagraphs",
    )
    if r and "s_per_candidate" in r:
        torch.backends.cuda.matmul.allow_tf32 = True
        info["tau_fp16_compiled"] = tau = calibrate(f)
        run(
            "fp16-tower-compiled+fp32-recheck",
            tf32=True,
            fwd=f,
            recheck=tau,
            est=20,
            note="compiled fp16 tower; images with top-2 margin < tau re-run in float32 (eager)",
        )
    f = compiled(tower_autocast(torch.float16), "reduce-overhead")
    run(
        "fp16-tower-compile-reduce-overhead",
        tf32=True,
        fwd=f,
        cudagraph=True,
        est=100,
        note="torch.compile CUDA graphs",
    )
    f = compiled(plain, "reduce-overhead")
    run(
        "tf32-compile-reduce-overhead",
        tf32=True,
        fwd=f,
        cudagraph=True,
        est=100,
        note="float32 weights, TF32, CUDA graphs",
    )
    f = compiled(tower_autocast(torch.bfloat16), "max-autotune-no-cudagraphs")
    run(
        "bf16-tower-compile-max-autotune-no-cudagraphs",
        tf32=True,
        fwd=f,
        est=240,
        note="torch.compile mode=max-autotune-no-cudagraphs",
    )
    f = compiled(plain, "max-autotune-no-cudagraphs")
    run("tf32-compile-max-autotune-no-cudagraphs", tf32=True, fwd=f, est=240, note="float32 weights, TF32")
    f = compiled(plain, "default")
    run(
        "fp32-compile-default",
        tf32=False,
        fwd=f,
        est=90,
        note="float32, TF32 off: does compiling alone keep predictions?",
    )
    info["wall_s"] = round(time.time() - started, 1)
    save()
    print("[done]", info["wall_s"], "s", flush=True)


if __name__ == "__main__":
    main()
