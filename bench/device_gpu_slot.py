"""Does a process launched through the GPU-slot + sandbox path see exactly the device it was given?

Run by ``bench/device_gpu_slot.sh`` (which finds bubblewrap and the Python that has torch).
Everything goes through the functions the replay uses (``harness/replay.py: replay_job`` and
``launch``): :func:`replaykit.harness.slots.take_slot` from the real pool (the driver's GPUs,
or ``CUDA_VISIBLE_DEVICES``), the rm task's isolation plan (:func:`replaykit.isolation.plan`)
with the slot's device nodes, and :func:`replaykit.harness.launch.start_group` with
``training_env(..., **slot.environ())``. Probes, each a fresh ``python`` inside the sandbox:

1. ``given``: the slot's environment and device nodes. Expected: one CUDA device, whose UUID is
   the slot's (as the driver names it), only the slot's ``/dev/nvidia<minor>`` among the
   numbered nodes, a bf16 matmul that runs.
2. ``waiter``: a second process taking a slot while probe 1 holds the only device; expected to
   wait (``waited_s`` > 0) and to name probe 1 as its holder, verified by the kernel.
3. ``no-node``: the slot's environment but no device node bound; expected: no CUDA device
   (the node is what gives access, not the variable alone).
4. ``none``: ``CUDA_VISIBLE_DEVICES=''`` with the nodes; expected: no CUDA device.

Writes ``device_gpu_slot.json`` (every probe's report and slot record, the checks) under
``$OUT``; prints one ``check ...: PASS|FAIL`` line per check and exits 1 when any fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from replaykit.harness.launch import start_group, training_env
from replaykit.harness.slots import DevicePool, GpuSlot, driver_gpus
from replaykit.isolation import RunPaths, Settings, plan

PROBE = r"""
import glob, json, os, sys, time
t0 = time.time()
import torch
report = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
          "nvidia_nodes": sorted(glob.glob("/dev/nvidia*")), "available": torch.cuda.is_available()}
report["device_count"] = torch.cuda.device_count() if report["available"] else 0
report["devices"] = []
for i in range(report["device_count"]):
    p = torch.cuda.get_device_properties(i)
    report["devices"].append({"index": i, "name": p.name, "uuid": str(getattr(p, "uuid", "")),
                              "pci_bus_id": getattr(p, "pci_bus_id", None), "memory_gib": p.total_memory / 2**30})
if report["device_count"]:
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    report["matmul_finite"] = bool(torch.isfinite(a @ a).all())
time.sleep(float(sys.argv[2]))  # hold the device a while (the waiter's probe runs meanwhile)
report["probe_s"] = time.time() - t0
open(sys.argv[1], "w").write(json.dumps(report))
"""


def sandbox_for(run: Path):
    """The rm task's isolation plan for a run folder ``run`` (its own writable folder)."""
    (run / "out").mkdir(parents=True, exist_ok=True)
    (run / "fixed").mkdir(exist_ok=True)
    (run / "public").mkdir(exist_ok=True)
    paths = RunPaths(run / "fixed", run / "public", read_only=(), writable=(run / "out",))
    return plan("rm", {"source": "embedded"}, Settings("bwrap"), paths)


def probe(slot: GpuSlot, run: Path, name: str, hold_s: float, *, devices="slot", env_extra=None) -> dict:
    """Launch the probe as the replay launches training; its report, exit code and wall time."""
    sandbox = sandbox_for(run)
    files = slot.device_files() if devices == "slot" else devices
    sandbox = replace(sandbox, devices=files)
    env = training_env(1, **{**slot.environ(), **(env_extra or {})})
    out = run / "out" / f"{name}.json"
    t0 = time.time()
    proc = start_group(
        sandbox.argv([sys.executable, "-c", PROBE, str(out), str(hold_s)], chdir=run / "out"),
        cwd=run / "out",
        env=sandbox.environment(env),
    )
    text = proc.stdout.read().decode(errors="replace")
    code = proc.wait()
    report = json.loads(out.read_text()) if out.exists() else None
    return {
        "name": name,
        "exit": code,
        "wall_s": time.time() - t0,
        "report": report,
        "output": text[-2000:],
        "sandbox_devices": sandbox.describe().get("devices"),
    }


def norm_uuid(u: str | None) -> str | None:
    return None if not u else u.lower().removeprefix("gpu-")


def main() -> int:
    out_dir = Path(os.environ.get("OUT") or "results/device-gpu-slot")
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-slot-bench-", dir=os.environ.get("WORK_DIR")))
    lock_dir = work / "locks"
    settings = {"lock_dir": str(lock_dir)}
    pool = DevicePool.find(settings)
    print(f"pool: source={pool.source} devices={[d.__dict__ for d in pool.devices]}", flush=True)
    print(f"driver: {driver_gpus()}", flush=True)
    doc = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host_cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "pool": {"source": pool.source, "devices": [d.__dict__ for d in pool.devices]},
        "driver": driver_gpus(),
        "probes": {},
        "checks": {},
    }
    slot = GpuSlot.take(pool, {"bench": "given"})
    waiter: dict = {}

    def take_second():  # a second job on the same pool while the first holds its only device
        t0 = time.time()
        second = GpuSlot.take(DevicePool.find(settings), {"bench": "waiter"}, say=lambda line: print(line, flush=True))
        waiter["slot"] = second.release()
        waiter["took_s"] = time.time() - t0

    thread = threading.Thread(target=take_second)
    thread.start()
    given = probe(slot, work / "given", "given", hold_s=3.0)
    doc["probes"]["given"] = {**given, "slot": slot.release()}
    thread.join(timeout=120)
    doc["probes"]["waiter"] = waiter
    for name, kwargs in (("no-node", {"devices": ()}), ("none", {"env_extra": {"CUDA_VISIBLE_DEVICES": ""}})):
        other = GpuSlot.take(pool, {"bench": name})
        doc["probes"][name] = {**probe(other, work / name, name, 0.0, **kwargs), "slot": other.release()}

    rep, rec = given["report"] or {}, doc["probes"]["given"]["slot"]
    numbered = [n for n in rep.get("nvidia_nodes", []) if n[len("/dev/nvidia") :].isdigit()]
    expected_nodes = [n for n in (rec["device_files"] or []) if n[len("/dev/nvidia") :].isdigit()]
    checks = {
        "the pool has a device": bool(pool.devices),
        "given: exit 0": given["exit"] == 0,
        "given: exactly one CUDA device": rep.get("device_count") == 1,
        "given: CUDA_VISIBLE_DEVICES is the slot's": rep.get("cuda_visible_devices") == rec["cuda_visible_devices"],
        "given: its UUID is the slot's (when the driver names one)": rec["uuid"] is None
        or [norm_uuid(d["uuid"]) for d in rep.get("devices", [])] == [norm_uuid(rec["uuid"])],
        "given: only the slot's numbered device node (every node when its minor is unknown)": rec["device_files"]
        is None
        or numbered == expected_nodes,
        "given: a bf16 matmul ran": rep.get("matmul_finite") is True,
        "waiter: waited and named the holder (kernel-verified)": bool(waiter.get("slot"))
        and waiter["slot"]["waited_s"] > 0
        and (waiter["slot"]["waited_for"] or {}).get("bench") == "given"
        and (waiter["slot"]["waited_for"] or {}).get("verified") is True,
        "waiter: same device, after the holder let go": bool(waiter.get("slot"))
        and waiter["slot"]["devices"] == rec["devices"]
        and waiter["slot"]["acquired_unix"] >= rec["released_unix"],
        "no-node: no CUDA device without the device node": (doc["probes"]["no-node"]["report"] or {}).get(
            "device_count"
        )
        == 0,
        "none: no CUDA device with CUDA_VISIBLE_DEVICES=''": (doc["probes"]["none"]["report"] or {}).get("device_count")
        == 0,
    }
    doc["checks"] = checks
    (out_dir / "device_gpu_slot.json").write_text(json.dumps(doc, indent=1, default=str))
    for name in ("given", "no-node", "none"):
        p = doc["probes"][name]
        print(
            f"probe {name}: exit {p['exit']} in {p['wall_s']:.1f} s; sandbox devices {p['sandbox_devices']}; "
            f"inside {json.dumps(p['report'])}",
            flush=True,
        )
        if p["exit"] != 0:
            print(p["output"], flush=True)
    print(f"waiter: {json.dumps(waiter, default=str)[:1500]}", flush=True)
    for name, ok in checks.items():
        print(f"check {name}: {'PASS' if ok else 'FAIL'}", flush=True)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
