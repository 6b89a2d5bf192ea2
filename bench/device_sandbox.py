"""Does a process in the allow-list sandbox see the GPU? (issue 27; run by ``bench/device_sandbox.sh``)

In a fresh working directory (``--work``) laid out as a replay's (``results/dpo/assets/{public,
hidden}``, a run's workspace, publish and state folders), the dpo task's isolation plan
(:func:`replaykit.isolation.plan`, with the default ``sandbox_limits``) starts the same probe
twice, as the replay driver starts ``train.py`` (:func:`replaykit.harness.launch.start_group`
with the job's :class:`~replaykit.harness.limits.Confinement`): once directly, once in the
sandbox. The probe imports torch, reports ``torch.cuda.is_available()``, the device's name, a
256x256 float32 matmul on the GPU checked against the same product on the CPU, the bfloat16
matmul rate of 4096^3 products, whether it can read the hidden split, and its own timings. Then the
canary self-test (:func:`replaykit.harness.selftest.run_self_test`) runs in the same plan on
this machine. Writes ``--out`` (JSON) and prints one line per finding.

Usage: PYTHONPATH=src python bench/device_sandbox.py --work results/device-sandbox --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

PROBE = r"""
import json, os, sys, time
t0 = time.time()
import torch
out = {"import_torch_s": time.time() - t0, "cuda": torch.cuda.is_available(), "devices": torch.cuda.device_count()}
if out["cuda"]:
    out["device"] = torch.cuda.get_device_name(0)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    # TF32 off: the GPU product in full float32, comparable with the CPU's to rounding
    torch.backends.cuda.matmul.allow_tf32 = False
    out["matmul_max_abs_diff"] = (a.cuda() @ b.cuda()).cpu().sub(a @ b).abs().max().item()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x @ x
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(20):
        y = x @ x
    torch.cuda.synchronize()
    out["bf16_tflops"] = 20 * 2 * 4096**3 / (time.time() - t) / 1e12
try:
    out["hidden_read"] = open(sys.argv[1]).read()
except OSError as exc:
    out["hidden_read"] = None
    out["hidden_error"] = f"{type(exc).__name__}: {exc.strerror}"
out["probe_s"] = time.time() - t0
json.dump(out, open(sys.argv[2], "w"))
"""


def run_probe(sandbox, workspace: Path, hidden: Path, out: Path, isolated: bool) -> dict:
    """The probe started as a replay's train.py (in ``sandbox`` when ``isolated``); its findings
    with the wall time of the whole launch and the limits as the record would state them."""
    from replaykit.harness.launch import start_group

    command = [sys.executable, "-c", PROBE, str(hidden), str(out)]
    argv = sandbox.argv(command, chdir=workspace) if isolated else command
    env = sandbox.environment(dict(os.environ)) if isolated else dict(os.environ)
    t0 = time.time()
    with sandbox.confine() as confinement:
        proc = start_group(argv, cwd=workspace, env=env, preexec=confinement.preexec if isolated else None)
        text = proc.communicate()[0].decode(errors="replace")
        limits = confinement.describe(*confinement.verdict(proc.returncode, text.splitlines()[-40:]))
    found = json.loads(out.read_text()) if out.is_file() else {}
    return {
        **found,
        "returncode": proc.returncode,
        "wall_s": time.time() - t0,
        "limits": limits,
        "output": text[-2000:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="a folder to lay the working directory out in (emptied)")
    ap.add_argument("--out", required=True, help="the result (JSON)")
    a = ap.parse_args()
    out_path = Path(a.out).resolve()
    work = Path(a.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("results/dpo/assets/public", "results/dpo/assets/hidden", "fixed", "run/workspace", "run/state"):
        (work / sub).mkdir(parents=True)
    hidden = work / "results/dpo/assets/hidden/final_prompts.jsonl"
    hidden.write_text('{"prompt": "final"}\n')
    os.chdir(work)  # the plan masks the working directory: it must be this one

    from replaykit.harness.provenance import fingerprint
    from replaykit.harness.sandbox import check_available
    from replaykit.harness.selftest import run_self_test
    from replaykit.isolation import RunPaths, Settings, plan, self_test_targets

    check_available()
    settings = Settings.from_config({"isolation": "bwrap"})
    public, workspace, state = Path("results/dpo/assets/public"), work / "run/workspace", work / "run/state"
    sandbox = plan("dpo", {}, settings, RunPaths(work / "fixed", public, (workspace,), (state,)))
    doc = {"fingerprint": fingerprint(), "plan": sandbox.describe()}
    doc["direct"] = run_probe(sandbox, workspace, hidden, state / "direct.json", isolated=False)
    doc["sandboxed"] = run_probe(sandbox, workspace, hidden, state / "sandboxed.json", isolated=True)
    st_run = work / "self-test-run"
    st_paths = RunPaths(work / "fixed", public, (st_run / "workspace",), (st_run / "state",))
    st_plan = plan("dpo", {}, settings, st_paths)
    verdict = run_self_test(st_plan, self_test_targets("dpo", {}, settings, work / "fixed", public), st_run, "dpo")
    doc["self_test"] = {k: verdict[k] for k in ("passed", "escaped", "seconds")}
    doc["self_test"]["attempts"] = len(verdict["attempts"])
    doc["self_test"]["limits"] = verdict["sandbox"]["limits"]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=1) + "\n")

    f = doc["fingerprint"]
    print(f"machine: {f['gpu']} driver {f['driver']} cuda {f['cuda']} torch {f['torch']} bwrap {f['bwrap']}")
    for case in ("direct", "sandboxed"):
        r = doc[case]
        print(
            f"{case}: rc={r['returncode']} cuda={r.get('cuda')} device={r.get('device')} "
            f"matmul |gpu-cpu|max={r.get('matmul_max_abs_diff')} bf16 {r.get('bf16_tflops', 0):.0f} TFLOP/s "
            f"hidden read={r.get('hidden_read') is not None} wall {r['wall_s']:.2f} s (torch import "
            f"{r.get('import_torch_s', 0):.2f} s); limit hit {r['limits']['hit']}"
        )
        if r["returncode"] != 0:
            print(f"{case} output:\n{r['output']}")
    print(
        f"sandbox overhead on this GPU job: {doc['sandboxed']['wall_s'] - doc['direct']['wall_s']:+.2f} s "
        f"(one launch each; the torch import dominates)"
    )
    st = doc["self_test"]
    print(
        f"self-test: passed={st['passed']} escaped={st['escaped']} ({st['attempts']} attempts, {st['seconds']:.1f} s)"
    )
    ok = doc["sandboxed"]["returncode"] == 0 and doc["sandboxed"].get("cuda") and st["passed"]
    ok = ok and doc["sandboxed"].get("hidden_read") is None
    print("RESULT:", "the sandboxed process sees the GPU and nothing hidden" if ok else "FAILED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
