"""GPU slots: the one device a GPU job is given, held by a lock for the job's life and recorded
(SPEC, vocabulary: GPU slot).

Snakemake counts ``--resources gpu=N`` but assigns no device: on a node with several GPUs every
job would start with the same ``CUDA_VISIBLE_DEVICES`` (or none) and train on device 0. So each
job that declares ``gpu=1`` (replay, validate, score, the fixed-start reference) and each
exploration probe or proxy score takes a slot here:

* the pool (:meth:`DevicePool.find`): on SLURM (``SLURM_JOB_ID`` set) the devices the scheduler
  assigned (``CUDA_VISIBLE_DEVICES`` as SLURM set it; ``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS``
  name them on the node); else the parent's ``CUDA_VISIBLE_DEVICES``; else the config's
  ``gpus.devices``; else every GPU the driver shows (``/proc/driver/nvidia/gpus``, or
  ``nvidia-smi``); else none (a CPU-only machine);
* the slot (:meth:`GpuSlot.take`): the first device of the pool whose lock
  (``<gpus.lock_dir>/gpu-<device>.lock``, a :class:`~.lock.FileLock`: a file the sandbox
  cannot see, robust to being deleted) is free, waiting while all are held;
* inside the job: ``CUDA_VISIBLE_DEVICES`` names that device alone (by UUID when the driver
  gives it, so that the index the job sees cannot point at another device), and the sandbox
  binds only its ``/dev/nvidia<minor>`` plus the driver's control nodes (:meth:`GpuSlot.device_files`);
* the record (:meth:`GpuSlot.record`, the ``gpu_slot`` of every replay attempt, validation
  marker, score summary and exploration receipt): which device, from which source, its lock
  and inode, when it was taken and let go, how long the job waited and for whom, and whether
  the lock file was deleted or replaced while held.

Device ids are as CUDA and ``nvidia-smi`` number them in PCI bus order
(``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is set inside the job too), or GPU UUIDs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .lock import POLL_S, WATCH_S, FileLock, describe_holder

SETTINGS_ENV = "REPLAYKIT_GPUS"  # the config's `gpus` block as JSON (rules/common.smk sets it for its jobs)
LOCK_DIR = "/tmp/replaykit-gpu-slots"  # per host; the sandbox's /tmp is its own, so it is not seen there
SOURCES = ("CUDA_VISIBLE_DEVICES", "config", "driver", "slurm", "none")
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_JOB_NODELIST", "CUDA_VISIBLE_DEVICES")


def driver_gpus() -> list[dict]:
    """The GPUs the NVIDIA driver shows, in PCI bus order (= ``nvidia-smi`` index):
    ``{"index", "uuid", "bus", "minor"}``, from ``/proc/driver/nvidia/gpus/<bus>/information``,
    else from ``nvidia-smi --query-gpu`` (minor then unknown: None); [] without a driver."""
    found = []
    for info in sorted(PROC_GPUS.glob("*/information")) if PROC_GPUS.is_dir() else []:
        fields = dict(
            (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in info.read_text().splitlines())
        )
        minor = fields.get("Device Minor", "")
        found.append(
            {"uuid": fields.get("GPU UUID"), "bus": info.parent.name, "minor": int(minor) if minor.isdigit() else None}
        )
    if not found and shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"]
        try:
            out = subprocess.run(query, capture_output=True, text=True, timeout=60, check=True).stdout
        except (subprocess.SubprocessError, OSError):
            out = ""
        rows = [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.count(",") == 1]
        found = [
            {"uuid": uuid, "bus": bus.lower(), "minor": None} for uuid, bus in sorted(rows, key=lambda r: r[1].lower())
        ]
    return [{"index": str(i), **gpu} for i, gpu in enumerate(found)]


@dataclass(frozen=True)
class Device:
    """One device of a pool.

    Attributes:
        id: as the pool names it (an index or a UUID); what records list in ``devices``.
        key: what its lock is named after: the physical device (the UUID when the driver
            gives it, else SLURM's index on the node, else ``id``).
        visible: the job's ``CUDA_VISIBLE_DEVICES`` (the UUID when known, else ``id``).
        uuid: the GPU's UUID, None when the driver does not say (a simulated device).
        minor: its ``/dev/nvidia<minor>``; None when unknown.
    """

    id: str
    key: str
    visible: str
    uuid: str | None = None
    minor: int | None = None


def _canonical(dev: str) -> str:
    """An index as CUDA reads it (``01`` and ``1`` name one device); a UUID as given."""
    return (dev.lstrip("0") or "0") if dev.isascii() and dev.isdigit() else dev


def _devices(ids: list[str], physical: list[str] | None = None, source: str = "slurm") -> tuple[Device, ...]:
    """The :class:`Device` of each id, matched with the driver's GPUs (by index or UUID
    prefix); ``physical``: the same devices' indices on the node (SLURM's), for the lock.
    Indices are read as numbers (``01`` is ``1``: one device, one lock), and a device named
    twice (``0,0``, or an index and its UUID) is in the pool once. Where the driver shows GPUs,
    an id from the config or ``CUDA_VISIBLE_DEVICES`` must name exactly one of them, or be a
    MIG id (``MIG-...``): CUDA reads ``+1``, ``1.0`` or ``1gpu`` as device 1, which would
    otherwise be locked under another name. Without a driver (a CPU-only machine) the ids name
    simulated devices.

    Raises:
        InputError: with ``source`` ``config`` or ``CUDA_VISIBLE_DEVICES``, an id that names
            none, or more than one, of the GPUs the driver shows.
    """
    gpus = driver_gpus()
    ids = [_canonical(str(dev).strip()) for dev in ids]
    aligned = bool(physical) and len(physical) == len(ids)
    out = []
    for n, dev in enumerate(ids):
        # on SLURM the job's indices are renumbered from 0 (its cgroup's devices): the driver's
        # node-wide index of the same device is SLURM's own (physical), else not known
        index = dev if source != "slurm" else _canonical(physical[n]) if aligned else None
        matches = [
            g
            for g in gpus
            if index == g["index"] or (g["uuid"] and dev.startswith("GPU-") and g["uuid"].startswith(dev))
        ]
        node = physical[n] if aligned else dev
        if gpus and source != "slurm" and len(matches) != 1 and not dev.startswith("MIG-"):
            shown = ", ".join(f"{g['index']} ({g['uuid']})" for g in gpus)
            what = "names more than one GPU" if matches else "names no GPU"
            where = ("config", "gpus.devices") if source == "config" else ("environment", "CUDA_VISIBLE_DEVICES")
            raise InputError(*where, f"{dev!r} {what}; the driver shows {shown}: give an index, a GPU UUID or a MIG id")
        gpu = matches[0] if len(matches) == 1 else None
        if gpu is None:  # simulated, MIG, or a driver that does not tell
            minor = int(dev) if dev.isascii() and dev.isdigit() else None
            out.append(Device(id=dev, key=node, visible=dev, minor=minor))
        else:
            out.append(
                Device(
                    id=dev,
                    key=gpu["uuid"] or node,
                    visible=gpu["uuid"] or dev,
                    uuid=gpu["uuid"],
                    minor=gpu["minor"] if gpu["minor"] is not None else int(gpu["index"]),
                )
            )
    unique = {}
    for device in out:
        unique.setdefault(device.key, device)
    return tuple(unique.values())


def _split(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


@dataclass(frozen=True)
class DevicePool:
    """The devices a workflow's GPU jobs share.

    Attributes:
        devices: in the order jobs try them.
        source: where they came from (one of :data:`SOURCES`).
        lock_dir: where their locks live (None: no devices, nothing to lock).
        slurm: on SLURM, what the scheduler set (``SLURM_JOB_ID``, ``SLURM_JOB_GPUS``,
            ``SLURM_STEP_GPUS``, ``SLURM_JOB_NODELIST``, ``CUDA_VISIBLE_DEVICES``); else None.
    """

    devices: tuple[Device, ...]
    source: str
    lock_dir: Path | None
    slurm: dict | None = None

    @classmethod
    def find(cls, settings: dict | None = None, env=None) -> DevicePool:
        """The pool of this job: see the module docstring for the order of the sources.

        Args:
            settings: the config's ``gpus`` block (``devices``, ``lock_dir``); default the JSON
                in ``$REPLAYKIT_GPUS`` (set by the workflow), else none.
            env: the environment to read (default ``os.environ``).

        Raises:
            InputError: ``$REPLAYKIT_GPUS`` is not JSON, ``gpus.devices`` is not a list, or a
                device it (or ``CUDA_VISIBLE_DEVICES``) names is not among the driver's GPUs.
        """
        env = os.environ if env is None else env
        if settings is None:
            try:
                settings = json.loads(env.get(SETTINGS_ENV) or "{}")
            except ValueError as exc:
                raise InputError(f"${SETTINGS_ENV}", "gpus", f"not JSON: {exc}") from None
        lock_dir = Path(settings.get("lock_dir") or LOCK_DIR)
        listed = settings.get("devices")
        if listed is not None and not isinstance(listed, list):
            raise InputError("config", "gpus.devices", f"must be a list of device ids or null, got {listed!r}")
        if env.get("SLURM_JOB_ID"):
            slurm = {k: env.get(k) for k in SLURM_KEYS}
            physical = _split(env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS"))
            ids, source = _split(env.get("CUDA_VISIBLE_DEVICES")), "slurm"
            return cls(_devices(ids, physical), source, lock_dir if ids else None, slurm)
        if "CUDA_VISIBLE_DEVICES" in env:
            ids, source = _split(env["CUDA_VISIBLE_DEVICES"]), "CUDA_VISIBLE_DEVICES"
        elif listed is not None:
            ids, source = [str(d) for d in listed], "config"
        else:
            ids, source = [g["index"] for g in driver_gpus()], "driver"
        if not ids and source == "driver":
            source = "none"
        return cls(_devices(ids, source=source), source, lock_dir if ids else None)


class GpuSlot:
    """The device one job holds (:meth:`take`); release it with :meth:`release` (or use it as a
    context manager). With an empty pool the slot is *none*: no device, no lock."""

    def __init__(self, pool: DevicePool, who: dict):
        self.pool, self.who = pool, dict(who)
        self.device: Device | None = None
        self.lock: FileLock | None = None
        self.acquired_unix: float | None = None
        self.released_unix: float | None = None
        self.waited_s = 0.0

    @classmethod
    def take(cls, pool: DevicePool, who: dict, *, say=None, watch_s: float = WATCH_S) -> GpuSlot:
        """The first free device of ``pool`` (its lock taken), waiting (polling every
        :data:`~.lock.POLL_S`) while all are held; ``say(line)`` (default: print to stderr)
        hears once that it waits and for whom. ``who`` names the job in the holder record.

        Raises:
            InputError: the lock folder cannot be made, or a lock file keeps changing.
        """
        slot = cls(pool, who)
        t0 = time.time()
        if not pool.devices:
            slot.acquired_unix = t0
            return slot
        say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        try:
            pool.lock_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(pool.lock_dir, "gpus.lock_dir", f"cannot make the GPU lock folder: {exc}") from None
        locks = [FileLock(pool.lock_dir / f"gpu-{_safe(d.key)}.lock", {**who, "device": d.id}) for d in pool.devices]
        told = False
        while True:
            for device, lock in zip(pool.devices, locks):
                if lock.try_acquire():
                    slot.device, slot.lock, slot.acquired_unix = device, lock, lock.acquired_unix
                    slot.waited_s = lock.waited_s = 0.0 if not told else lock.acquired_unix - t0
                    lock.watch(watch_s)
                    return slot
            if not told:
                held = "; ".join(f"{d.id}: {describe_holder(lk.waited_for)}" for d, lk in zip(pool.devices, locks))
                say(f"[gpu] every device of the pool is held ({held}): waiting")
                told = True
            time.sleep(POLL_S)

    def environ(self) -> dict[str, str]:
        """The job's CUDA environment: ``CUDA_VISIBLE_DEVICES`` naming the slot's device ('':
        none) and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (indices as ``nvidia-smi`` numbers them)."""
        return {"CUDA_VISIBLE_DEVICES": self.device.visible if self.device else "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def export(self) -> None:
        """Put :meth:`environ` into this process's environment (a step that uses the GPU in
        process: validation, scoring; CUDA reads it when it initialises)."""
        os.environ.update(self.environ())

    def device_files(self) -> tuple[str, ...] | None:
        """The device nodes the sandbox binds: the slot's ``/dev/nvidia<minor>`` and the
        driver's control nodes that exist (none without a device). On SLURM, or for a device
        whose minor is unknown (MIG), None: every ``/dev/nvidia*`` (SLURM's cgroup, or CUDA's
        ``CUDA_VISIBLE_DEVICES``, keeps the job to its own)."""
        if self.device is None:
            return ()
        if self.pool.source == "slurm" or self.device.minor is None:
            return None
        nodes = [
            f"/dev/nvidia{self.device.minor}",
            *CONTROL_NODES,
            *sorted(map(str, Path("/dev/nvidia-caps").glob("*"))),
        ]
        return tuple(n for n in nodes if os.path.exists(n))

    def release(self) -> dict:
        """Let go of the device (its lock's last check included); :meth:`record`. Calling it
        again changes nothing."""
        if self.released_unix is None:
            if self.lock is not None:
                self.lock.release()
            self.released_unix = time.time()
        return self.record()

    def record(self) -> dict:
        """The ``gpu_slot`` field (docs/files.md): ``devices``, ``source``, ``lock``, ``inode``,
        ``acquired_unix``, ``released_unix`` (None while held), ``waited_s``, ``waited_for``,
        ``lock_replaced``, and ``cuda_visible_devices``, ``uuid``, ``device_files``,
        ``lock_events``, ``holder`` (with its nonce), ``slurm`` (what SLURM set)."""
        lock = self.lock.record() if self.lock is not None else {}
        files = self.device_files()
        return {
            "devices": [self.device.id] if self.device else [],
            "source": self.pool.source,
            "lock": lock.get("lock"),
            "inode": lock.get("inode"),
            "acquired_unix": self.acquired_unix,
            "released_unix": self.released_unix,
            "waited_s": self.waited_s,
            "waited_for": lock.get("waited_for"),
            "lock_replaced": bool(lock.get("lock_replaced")),
            "cuda_visible_devices": self.environ()["CUDA_VISIBLE_DEVICES"],
            "uuid": self.device.uuid if self.device else None,
            "device_files": None if files is None else list(files),  # None: every /dev/nvidia*
            "lock_events": lock.get("lock_events", []),
            "holder": lock.get("holder"),
            "slurm": self.pool.slurm,
        }

    def __enter__(self) -> GpuSlot:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def take_slot(who: dict, settings: dict | None = None, **kwargs) -> GpuSlot:
    """:meth:`GpuSlot.take` from :meth:`DevicePool.find` (``settings``: the config's ``gpus``
    block; default ``$REPLAYKIT_GPUS``)."""
    return GpuSlot.take(DevicePool.find(settings), who, **kwargs)


def _safe(key: str) -> str:
    """A device key as a file name (UUIDs and indices are; anything else loses other characters)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
