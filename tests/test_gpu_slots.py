"""GPU slots and their lock (issue 32; the lock's robustness from issue 29).

The lock tests run real processes (``python -c`` holding a :class:`FileLock`); each process
writes its own clock next to its record, and overlaps are computed from those clocks, not
from the records under test. The pool tests give :meth:`DevicePool.find` an environment and a
fake ``/proc/driver/nvidia/gpus`` (the driver's own file format) and compare with the device
ids written by hand. The workflow tests (soup, a candidate patch that sleeps 6 s and writes the
``CUDA_VISIBLE_DEVICES`` it sees inside the sandbox) run ``snakemake --cores 2
--resources gpu=2`` with simulated devices.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, copy_workflow, snakemake, soup_task, write_config
from replaykit.harness import slots
from replaykit.harness.errors import InputError
from replaykit.harness.lock import FileLock, verify_holder
from replaykit.harness.slots import DevicePool, GpuSlot

HOLD = r"""
import json, sys, time
from replaykit.harness.lock import FileLock
path, name, hold_s, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
lock = FileLock(path, {"id": name})
lock.acquire(watch_s=None)  # checked at acquire and release only: those checks are under test
t0 = time.time()
open(out + ".started", "w").write(str(t0))
time.sleep(hold_s)
t1 = time.time()
json.dump({"record": lock.release(), "clock": [t0, t1]}, open(out, "w"))
"""


def hold(path: Path, name: str, hold_s: float, out: Path) -> subprocess.Popen:
    """A process that takes the lock at ``path``, holds it ``hold_s`` s and writes its record
    and its own clock (taken right after acquiring and before releasing) to ``out``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([sys.executable, "-c", HOLD, str(path), name, str(hold_s), str(out)], env=env)


def wait_for(path: Path, timeout: float = 60) -> None:
    end = time.time() + timeout
    while not path.exists():
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_a_lock_file_deleted_while_held_is_detected_by_both_holders(tmp_path):
    lock, a_out, b_out = tmp_path / "gpu.lock", tmp_path / "a.json", tmp_path / "b.json"
    a = hold(lock, "a", 4.0, a_out)
    wait_for(Path(f"{a_out}.started"))
    lock.unlink()  # the host deletes the lock file while a holds it
    b = hold(lock, "b", 0.5, b_out)
    assert b.wait(60) == 0 and a.wait(60) == 0
    ra, rb = json.loads(a_out.read_text()), json.loads(b_out.read_text())
    # their own clocks overlap: flock alone let both hold "the" lock
    (a0, a1), (b0, b1) = ra["clock"], rb["clock"]
    assert a0 < b0 < b1 < a1
    a_rec, b_rec = ra["record"], rb["record"]
    assert a_rec["lock_replaced"] and b_rec["lock_replaced"]
    assert a_rec["inode"] != b_rec["inode"] and b_rec["inode"] == lock.stat().st_ino
    # b saw a holding the deleted file; a saw the path name another inode at its release
    [rival] = [e for e in b_rec["lock_events"] if e["event"] == "rival"]
    assert rival["pid"] == a.pid and rival["inode"] == a_rec["inode"] and rival["deleted"] is True
    assert rival["holder"]["nonce"] == a_rec["holder"]["nonce"] and rival["holder"]["verified"] is True
    [replaced] = [e for e in a_rec["lock_events"] if e["event"] == "replaced"]
    assert replaced["inode"] == b_rec["inode"]
    assert a_rec["waited_s"] == 0.0 and b_rec["waited_s"] == 0.0  # nobody waited: that is the bypass


def test_a_watching_holder_notices_the_deletion_while_it_holds(tmp_path):
    lock = FileLock(tmp_path / "gpu.lock", {"id": "me"})
    lock.acquire(watch_s=None)  # the test drives the checks
    assert lock.check() and not lock.replaced
    (tmp_path / "gpu.lock").unlink()
    assert not lock.check()
    record = lock.release()
    assert [e["event"] for e in record["lock_events"]] == ["deleted"]
    assert record["lock_replaced"] is True and record["released_unix"] >= record["acquired_unix"]


def test_a_lock_file_replaced_while_held_is_recorded_with_the_new_inode(tmp_path):
    path = tmp_path / "gpu.lock"
    lock = FileLock(path, {"id": "me"})
    lock.acquire(watch_s=None)
    held = path.stat().st_ino
    (tmp_path / "new").write_text("")
    os.replace(tmp_path / "new", path)  # `mv new gpu.lock`: the path names another file
    new = path.stat().st_ino
    assert new != held and not lock.check()
    # a second process can now lock the path's new file at once: the lock no longer excludes it
    other = FileLock(path, {"id": "other"})
    assert other.try_acquire() and other.inode == new
    other.release()
    record = lock.release()
    [event] = record["lock_events"]
    assert event["event"] == "replaced" and event["inode"] == new and record["inode"] == held
    assert record["lock_replaced"] is True


def test_a_waiter_records_its_holder_and_a_forged_holder_record_is_not_verified(tmp_path):
    lock, a_out = tmp_path / "gpu.lock", tmp_path / "a.json"
    a = hold(lock, "a", 2.0, a_out)
    wait_for(Path(f"{a_out}.started"))
    b = FileLock(lock, {"id": "b"})
    t0 = time.time()
    b.acquire()
    waited = time.time() - t0
    record = b.release()
    assert a.wait(60) == 0
    a_rec = json.loads(a_out.read_text())["record"]
    assert record["waited_for"]["nonce"] == a_rec["holder"]["nonce"] and record["waited_for"]["verified"] is True
    assert record["waited_for"]["id"] == "a" and 0.5 < record["waited_s"] <= waited
    # a record written into the lock file by someone else: its pid holds no flock on the file
    c_out = tmp_path / "c.json"
    c = hold(lock, "c", 2.0, c_out)
    wait_for(Path(f"{c_out}.started"))
    forged = {"id": "a", "pid": os.getpid(), "start_unix": 0, "nonce": a_rec["holder"]["nonce"]}
    lock.write_text(json.dumps(forged))
    assert verify_holder(forged, lock.stat().st_ino)["verified"] is False
    d = FileLock(lock, {"id": "d"})
    with pytest.raises(InputError, match="unverified"):
        d.acquire(wait=False)
    assert d.waited_for["nonce"] == forged["nonce"] and d.waited_for["verified"] is False
    assert c.wait(60) == 0


# ---------------------------------------------------------------- the pool


def fake_driver(root: Path, gpus: list[tuple[str, str, int]]) -> Path:
    """``/proc/driver/nvidia/gpus`` as the driver writes it: one folder per PCI bus id with an
    ``information`` file (``GPU UUID``, ``Device Minor``)."""
    for bus, uuid, minor in gpus:
        (root / bus).mkdir(parents=True)
        (root / bus / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n"
        )
    return root


def test_the_pool_comes_from_slurm_then_the_environment_then_the_config_then_the_driver(tmp_path, monkeypatch):
    monkeypatch.setattr(slots, "PROC_GPUS", tmp_path / "none")
    monkeypatch.setattr(slots.shutil, "which", lambda name: None)  # no nvidia-smi either
    settings = {"devices": [2, "3"], "lock_dir": str(tmp_path / "locks")}
    pool = DevicePool.find(settings, env={"CUDA_VISIBLE_DEVICES": "1,0"})
    assert [d.id for d in pool.devices] == ["1", "0"] and pool.source == "CUDA_VISIBLE_DEVICES"
    assert pool.lock_dir == tmp_path / "locks"
    pool = DevicePool.find(settings, env={})
    assert [d.id for d in pool.devices] == ["2", "3"] and pool.source == "config"
    pool = DevicePool.find({}, env={})
    assert pool.devices == () and pool.source == "none" and pool.lock_dir is None
    assert DevicePool.find({}, env={"CUDA_VISIBLE_DEVICES": ""}).devices == ()  # given none
    # SLURM: what it assigned; the lock is named after the node's index (SLURM_STEP_GPUS)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "3", "SLURM_STEP_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}
    pool = DevicePool.find(settings, env=env)
    assert pool.source == "slurm" and [(d.id, d.key) for d in pool.devices] == [("0", "3")]
    assert pool.slurm["SLURM_JOB_GPUS"] == "3" and pool.slurm["CUDA_VISIBLE_DEVICES"] == "0"
    with pytest.raises(InputError, match="gpus.devices"):
        DevicePool.find({"devices": "0,1"}, env={})
    with pytest.raises(InputError, match="REPLAYKIT_GPUS"):
        DevicePool.find(None, env={"REPLAYKIT_GPUS": "{not json"})


def test_driver_devices_are_named_by_uuid_and_bound_by_their_minor(tmp_path, monkeypatch):
    # bus order gives the index (nvidia-smi's); the minor numbers need not follow it
    uuids = ["GPU-aaaa-0001", "GPU-bbbb-0002"]
    driver = fake_driver(tmp_path / "gpus", [("0000:3b:00.0", uuids[1], 0), ("0000:18:00.0", uuids[0], 5)])
    monkeypatch.setattr(slots, "PROC_GPUS", driver)
    pool = DevicePool.find({"lock_dir": str(tmp_path / "locks")}, env={})
    assert pool.source == "driver"
    assert [(d.id, d.uuid, d.minor, d.visible, d.key) for d in pool.devices] == [
        ("0", uuids[0], 5, uuids[0], uuids[0]),
        ("1", uuids[1], 0, uuids[1], uuids[1]),
    ]
    # a UUID prefix names the same device, as CUDA accepts it
    assert DevicePool.find({}, env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}).devices[0].minor == 0
    slot = GpuSlot.take(pool, {"id": "t"})
    assert slot.environ() == {"CUDA_VISIBLE_DEVICES": uuids[0], "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    present = [n for n in ("/dev/nvidia5", *slots.CONTROL_NODES) if os.path.exists(n)]
    assert slot.device_files() == tuple(present)  # this machine has no /dev/nvidia*: ()
    record = slot.release()
    assert record["devices"] == ["0"] and record["uuid"] == uuids[0] and record["source"] == "driver"
    assert record["lock"] == str(tmp_path / "locks" / f"gpu-{uuids[0]}.lock")


def test_one_device_named_two_ways_is_one_device_with_one_lock(tmp_path, monkeypatch):
    # CUDA reads the index 01 as 1: two jobs given "01" and "1" must wait for each other
    monkeypatch.setattr(slots, "PROC_GPUS", tmp_path / "none")
    monkeypatch.setattr(slots.shutil, "which", lambda name: None)  # simulated devices: no driver
    pool = DevicePool.find({"devices": ["01", 1, "1", "002"], "lock_dir": str(tmp_path / "locks")}, env={})
    assert [(d.id, d.key, d.minor) for d in pool.devices] == [("1", "1", 1), ("2", "2", 2)]
    assert [d.minor for d in DevicePool.find({"devices": ["²", "１"]}, env={}).devices] == [None, None]  # not ASCII
    first = GpuSlot.take(DevicePool.find({"devices": ["01"], "lock_dir": str(tmp_path / "locks")}, env={}), {"id": "a"})
    second = GpuSlot.take(pool, {"id": "b"})
    assert (first.device.id, second.device.id) == ("1", "2")  # device 1 was held
    first.release(), second.release()
    # with a driver: an index and the same GPU's UUID are one device; a GPU it lacks is refused
    uuids = ["GPU-aaaa-0001", "GPU-bbbb-0002"]
    monkeypatch.setattr(
        slots,
        "PROC_GPUS",
        fake_driver(tmp_path / "gpus", [("0000:18:00.0", uuids[0], 0), ("0000:3b:00.0", uuids[1], 1)]),
    )
    pool = DevicePool.find({}, env={"CUDA_VISIBLE_DEVICES": "01,GPU-bbbb,0"})
    assert [(d.id, d.key) for d in pool.devices] == [("1", uuids[1]), ("0", uuids[0])]
    shown = f"the driver shows 0 ({uuids[0]}), 1 ({uuids[1]}): give an index, a GPU UUID or a MIG id"
    with pytest.raises(InputError) as exc:
        DevicePool.find({"devices": [0, 2]}, env={})
    assert str(exc.value) == f"config: gpus.devices: '2' names no GPU; {shown}"
    # what CUDA reads as device 1 (strtoul: a sign, a fraction, a suffix) would be locked under
    # another name, as would a UUID prefix of both GPUs: refused (hostile test, 2026-12-05)
    for spelling in ["+1", "1.0", "1e0", "1gpu", "0x1", "١", "GPU-", "GPU-cccc"]:
        with pytest.raises(InputError) as exc:
            DevicePool.find({}, env={"CUDA_VISIBLE_DEVICES": spelling})
        what = "names more than one GPU" if spelling == "GPU-" else "names no GPU"
        assert str(exc.value) == f"environment: CUDA_VISIBLE_DEVICES: {spelling!r} {what}; {shown}"
    assert [d.key for d in DevicePool.find({"devices": [" 1 "]}, env={}).devices] == [uuids[1]]
    # SLURM renumbers a job's devices from 0: its device 0 is the node's GPU 1 (SLURM_STEP_GPUS),
    # not the driver's GPU 0 (second hostile test, 2026-12-05)
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0"}
    assert [(d.id, d.key, d.visible) for d in DevicePool.find({}, env=env).devices] == [("0", uuids[1], uuids[1])]
    env = {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0"}  # no node index given: not matched by index
    assert [(d.key, d.uuid) for d in DevicePool.find({}, env=env).devices] == [("0", None)]
    with pytest.raises(InputError, match="names no GPU"):  # not int()'s digit limit
        DevicePool.find({}, env={"CUDA_VISIBLE_DEVICES": "9" * 5000})
    assert [d.minor for d in DevicePool.find({}, env={"CUDA_VISIBLE_DEVICES": "MIG-1"}).devices] == [
        None
    ]  # MIG: as given


def test_a_cpu_only_slot_is_recorded_as_none():
    slot = GpuSlot.take(DevicePool((), "none", None), {"id": "t"})
    record = slot.release()
    assert record["devices"] == [] and record["source"] == "none" and record["lock"] is None
    assert record["inode"] is None and record["waited_s"] == 0.0 and record["lock_replaced"] is False
    assert slot.environ()["CUDA_VISIBLE_DEVICES"] == "" and slot.device_files() == ()


# ---------------------------------------------------------------- in the workflow


SLOW = "    session.begin_training()\n"
SEEN = (
    "    import os; (session.request.state_dir / 'seen.json').write_text(json.dumps("
    "{'cuda': os.environ.get('CUDA_VISIBLE_DEVICES'), 'start': time.time()})); time.sleep(6)\n"
)


@pytest.fixture(scope="module")
def slot_work(soup_start, tmp_path_factory):
    """A workflow copy with the tiny soup's assets built and candidates ``slowa`` and
    ``slowb``: a patch that records the ``CUDA_VISIBLE_DEVICES`` seen in the sandbox and
    sleeps 6 s (so two replays started together overlap)."""
    work = copy_workflow(tmp_path_factory.mktemp("slots"))
    train = (work / "recipes/soup/train.py").read_text().splitlines(keepends=True)
    changed = [out for line in train for out in ([line, SEEN] if line == SLOW else [line])]
    assert changed != train
    patch = work / "slow.diff"
    patch.write_text("".join(difflib.unified_diff(train, changed, "a/train.py", "b/train.py")))
    candidates = {"slowa": str(patch), "slowb": str(patch)}
    task = soup_task(soup_start, candidate="slowa", candidates=candidates, seeds=[42, 43])
    config = {"models": {}, "tasks": {"soup": task}, "gpus": {"lock_dir": str(work / "gpu-locks")}}
    write_config(work, config)
    snakemake(work, "results/soup/assets/manifest.json", "--cores", "1", check=True)
    return work


def replays(work: Path, candidate: str, devices: str) -> list[dict]:
    """Replay both seeds of ``candidate`` with ``CUDA_VISIBLE_DEVICES=devices``, two cores and
    two GPU slots; the current attempt of each record with what the sandbox saw."""
    targets = [f"results/soup/{candidate}-seed{s}/replay/record.json" for s in (42, 43)]
    env = {"CUDA_VISIBLE_DEVICES": devices}
    snakemake(work, *targets, "--cores", "2", "--resources", "gpu=2", env=env, check=True)
    out = []
    for seed in (42, 43):
        run = work / f"results/soup/{candidate}-seed{seed}"
        attempt = json.loads((run / "replay/record.json").read_text())["attempts"][-1]
        seen = json.loads((run / "replay-state/seen.json").read_text())
        out.append({**attempt, "run": run.name, "seen": seen})
    return out


@pytest.mark.slow
def test_two_replays_at_once_hold_different_devices(slot_work):
    a, b = replays(slot_work, "slowa", "0,1")
    sa, sb = a["gpu_slot"], b["gpu_slot"]
    # the two sandboxes' own clocks (each slept 6 s after writing its start) overlap
    assert abs(a["seen"]["start"] - b["seen"]["start"]) < 6
    assert sa["acquired_unix"] < sb["released_unix"] and sb["acquired_unix"] < sa["released_unix"]
    assert sorted(sa["devices"] + sb["devices"]) == ["0", "1"]
    assert [a["seen"]["cuda"], b["seen"]["cuda"]] == [sa["devices"][0], sb["devices"][0]]
    for s in (sa, sb):
        assert s["source"] == "CUDA_VISIBLE_DEVICES" and s["waited_s"] == 0.0 and not s["lock_replaced"]
        assert s["lock"] == str(slot_work / f"gpu-locks/gpu-{s['devices'][0]}.lock")


@pytest.mark.slow
def test_with_one_device_the_second_replay_waits_and_says_for_whom(slot_work):
    a, b = sorted(replays(slot_work, "slowb", "0"), key=lambda r: r["gpu_slot"]["acquired_unix"])
    first, second = a["gpu_slot"], b["gpu_slot"]
    assert first["devices"] == second["devices"] == ["0"] and a["seen"]["cuda"] == b["seen"]["cuda"] == "0"
    assert first["released_unix"] <= second["acquired_unix"]  # never together on the device
    assert b["seen"]["start"] >= a["seen"]["start"] + 6  # the sandboxes' own clocks agree
    assert first["waited_s"] == 0.0 and second["waited_s"] > 3
    holder = second["waited_for"]
    assert holder["verified"] is True and holder["nonce"] == first["holder"]["nonce"]
    assert holder["rule"] == "replay" and holder["run"] == a["run"] != b["run"]
