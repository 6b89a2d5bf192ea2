"""The sandbox that candidate code runs in: bubblewrap (``bwrap``, the sandbox Flatpak uses),
built from an allow-list.

An :class:`IsolationPlan` says what one run may see; :func:`replaykit.isolation.plan` is the
one place that decides it (for the formal replay, the exploration probe and the exploration's
proxy scoring alike), from the task plug-in, the config and the run's paths. This module turns
a plan into a ``bwrap`` command line (:meth:`IsolationPlan.argv`). Inside:

* a fresh, empty root: nothing of the filesystem is there unless it is bound, so unknown
  copies of hidden data (another checkout's ``results/``, a dataset folder on a shared
  filesystem, a library cache outside ``$HOME``) and host Unix sockets (``/run``, ``/var``,
  ``/tmp`` of the host) are out of reach by construction;
* read-only, for the system: ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` links or folders
  (:data:`SYSTEM_DIRS`), the few ``/etc`` entries programs read (:data:`ETC_ENTRIES`: the
  dynamic linker's cache, users and groups, the time zone, name-service switch, TLS
  configuration), ``/sys`` (CPU topology for torch, the GPU's PCI information for CUDA) but its
  mounted filesystems, debugging and firmware folders (:data:`SYS_MASKED`: the host's cgroup
  tree, BPF pins, pstore, debugfs/tracefs, ACPI tables, EFI variables); a fresh ``/proc`` of its
  own PID namespace; a minimal ``/dev`` plus the NVIDIA devices;
* read-only, for the run: the plan's :attr:`~IsolationPlan.read_only` paths (the Python
  environment, the frozen package, the workspace, the fixed start, the public split, ...),
  each bound at its real path, with the symbolic links on the way to it recreated
  (:attr:`~IsolationPlan.links`); :attr:`~IsolationPlan.masked` paths inside them (final-split
  data, the working directory) replaced by an empty read-only folder or ``/dev/null``;
* writable: the plan's :attr:`~IsolationPlan.writable` paths, and an empty ``/tmp``, ``$HOME``
  and ``/dev/shm`` thrown away at the end (RAM-backed, each capped at the memory limit);
  nothing else (the root itself is read-only);
* limits (:attr:`~IsolationPlan.limits`, :mod:`.limits`): memory per process, processes, the
  size of a file written; the caller starts bwrap with :meth:`IsolationPlan.confine`'s
  ``preexec``;
* no network (``--unshare-net``: only ``lo``), own PID and IPC namespaces (``/proc`` shows
  only the sandbox's processes), dies with its parent (``--die-with-parent``), no
  capabilities;
* only an allow-list of environment variables passes (:data:`ENV_ALLOWED`: locale, paths,
  thread counts, glibc malloc settings, CUDA/PyTorch/offline switches, the exploration probe's
  ``REPLAYKIT_RUN_DIR`` and ``REPLAYKIT_REQUEST``; nothing named like a key, token or
  secret; ``TMPDIR`` points at the empty ``/tmp``): callers start ``bwrap`` itself with
  :meth:`IsolationPlan.environment`, since its reaper (pid 1 inside) shows its environment in
  ``/proc/1/environ``. Tokens, credentials and cluster variables of the operator's shell never
  reach candidate code.

bubblewrap's own documentation: https://github.com/containers/bubblewrap (``bwrap(1)``).
The overhead per job is measured by ``bench/sandbox_overhead.py``.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .limits import Confinement, Limits
from .salt import ENV as SALT_ENV

MODES = ("bwrap", "none")
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user "
    "namespaces, or set `isolation: none` in the config (the final split is then "
    "reachable from candidate code, and every summary and report says so)"
)
NO_ISOLATION_ADVISORY = (
    "isolation: none -- the replay ran without the sandbox, so candidate "
    "code could read the final split, earlier results and the network; "
    "this result is not defensible"
)
# The system's read-only folders (a link such as /lib -> usr/lib is recreated as a link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
# What of /sys is not shown (an empty read-only folder): filesystems mounted there (the host's
# cgroup tree, BPF pins, pstore, fuse), kernel debugging (debugfs, tracefs, securityfs, configfs)
# and firmware tables. Neither torch nor CUDA reads them; root inside (without capabilities)
# could read root-owned files there.
SYS_MASKED = (
    "/sys/fs",
    "/sys/kernel/debug",
    "/sys/kernel/tracing",
    "/sys/kernel/security",
    "/sys/kernel/config",
    "/sys/firmware",
)
# What programs read of /etc (measured with strace on Python, torch, transformers, diffusers,
# open_clip, RDKit and matplotlib: the linker cache, users and groups, the time zone, the
# name-service switch, OpenSSL's configuration), plus the links of /usr/bin's alternatives.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "passwd",
    "group",
    "localtime",
    "hosts",
    "ssl",
    "alternatives",
)


# What every sandboxed process may see (fnmatch patterns), and all a frozen-only plan's may
# (the exploration's proxy scoring, which the exploring agent starts with its own
# environment): locale, paths, thread count, malloc settings, the GPU slot and the offline
# switches; no CUDA_*, TORCH_*, TRITON_*, NCCL_* or KMP_* switch, which could load a library
# or change how the frozen code computes.
FROZEN_ENV_ALLOWED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_MESSAGES",
    "TERM",
    "TZ",
    "TMPDIR",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",  # the operator's install (e.g. a cluster's CUDA module)
    "MALLOC_MMAP_MAX_",  # glibc malloc settings of the replay (replay.MALLOC_ENV)
    "MALLOC_TRIM_THRESHOLD_",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
)
# Environment variables a replay or a probe may see: those and the libraries' switches;
# everything else is cleared, and a name matching ENV_DENIED is cleared even when allowed
# (e.g. NVIDIA_API_KEY).
ENV_ALLOWED = FROZEN_ENV_ALLOWED + (
    "PYTHONWARNINGS",
    "VIRTUAL_ENV",
    "OMP_*",
    "MKL_*",
    "OPENBLAS_*",
    "KMP_*",
    "CUDA_*",
    "CUBLAS_*",
    "CUDNN_*",
    "NCCL_*",
    "TORCH_*",
    "PYTORCH_*",
    "TORCHINDUCTOR_*",
    "TRITON_*",
    "REPLAYKIT_RUN_DIR",
    "REPLAYKIT_REQUEST",
    "REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH",  # publish.FAULT_ENV: the recovery tests' fault injection
)
# Search paths of the allowed variables: inside the sandbox each keeps only the absolute entries
# in the system's folders and the plan's software (IsolationPlan.environment), so that no name
# of an unshown folder (an operator's PYTHONPATH, a copy of a hidden split) reaches candidate
# code, and no entry makes the frozen scorer load code from a shown data folder (an exploring
# agent's PYTHONPATH or LD_LIBRARY_PATH on its own checkpoint). Every other allowed variable
# that names a path (CUDA_INJECTION64_PATH, which CUDA loads as a library; TRITON_CACHE_DIR and
# TORCHINDUCTOR_CACHE_DIR, whose files are loaded as code) passes only when each path lies
# there or in a folder the plan lets the run write (HOME, TMPDIR, TZ and the harness's own
# REPLAYKIT_ variables aside).
SEARCH_PATHS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
# Variables named like a path (the allow-list's patterns include CUDA_*, TORCH_*, TRITON_*):
# their every entry must be absolute, as well as in the software or a folder the run writes.
PATH_NAMES = ("*_PATH", "*_DIR", "*_DIRS", "*_HOME", "*_FILE", "*_LIBRARIES", "*_CACHE*", "*INJECTION*")
ENV_DENIED = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*AUTH*")


def allowed_env(env) -> dict[str, str]:
    """The entries of ``env`` whose names match :data:`ENV_ALLOWED` and none of
    :data:`ENV_DENIED` (case-sensitive for the allow-list, case-insensitive for the deny-list)."""

    def ok(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pat) for pat in ENV_ALLOWED) and not any(
            fnmatch.fnmatchcase(name.upper(), pat) for pat in ENV_DENIED
        )

    return {k: v for k, v in env.items() if ok(k)}


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces on this machine."""


def holds_working_directory(path: str | Path) -> bool:
    """Whether folder ``path`` is the working directory or one of its parents (showing it would
    show the hidden split under ``results/``)."""
    cwd, path = Path.cwd().resolve(), Path(path).resolve()
    return path.is_dir() and (path == cwd or path in cwd.parents)


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (both real paths)."""
    return path == folder or folder in path.parents


def python_paths() -> list[Path]:
    """The Python environment this interpreter runs in, as real paths: its prefix (a venv, a
    conda environment); of the base interpreter a venv is made from, only the interpreter itself,
    its ``lib`` folders (the standard library and shared libraries, not its ``bin``, its other
    environments or package caches) and its C headers (``sysconfig``'s ``include``: a pyenv or
    python.org build keeps ``Python.h`` outside ``/usr``, and torch.compile could not build its
    kernels in the sandbox without it); and every ``sys.path`` entry that exists (folders and
    zip files) -- but no entry that is, holds or lies inside the working directory (``''``, a
    ``PYTHONPATH`` of the checkout: what the sandbox needs from there is shown by name) except
    the prefix (a ``.venv`` inside the checkout), and no ``PYTHONPATH`` entry at all
    (:func:`environment_path_entries`): whoever starts a run or an exploration command sets
    that variable, and a folder on it would be shown unchecked (the private config's folder, a
    copy of a hidden split); a registered plug-in's code is shown by name instead
    (:func:`replaykit.tasks.code_roots`). :func:`python_masks` lists what is not shown inside
    them."""
    prefix, base = Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()
    out = [prefix]
    if base != prefix:
        out += [(base / d).resolve() for d in ("lib", "lib64") if (base / d).is_dir()]
    # the C headers (Python.h): torch.compile's C++ kernels and Triton's launcher build against them
    out += [Path(h).resolve() for h in {sysconfig.get_paths().get(k) for k in ("include", "platinclude")} if h]
    out.append(Path(sys.executable).resolve())
    cwd = Path.cwd().resolve()
    for path in environment_path_entries():
        if not inside(path, cwd) and not inside(cwd, path):
            out.append(path)
    kept = [p for p in dict.fromkeys(out) if p.exists()]
    return [p for p in kept if not any(inside(p, q) and p != q for q in kept)]


def environment_path_entries() -> list[Path]:
    """The existing ``sys.path`` entries (real paths) that the Python environment itself puts
    there -- the standard library, ``site-packages``, folders of ``.pth`` files (an editable
    install) -- and not the ``PYTHONPATH`` variable, whose entries come first in ``sys.path``
    (``''``, the script's folder, is dropped too)."""
    from_variable = {Path(e).resolve() for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e}
    entries = [Path(e).resolve() for e in sys.path if e]
    return [p for p in dict.fromkeys(entries) if p.exists() and p not in from_variable]


def python_masks() -> list[Path]:
    """What lies inside :func:`python_paths` but is not the environment that runs: a conda
    installation's package cache and other environments (``pkgs`` and ``envs`` beside its
    ``conda-meta``: extracted copies of every package it ever installed, package data
    included), and the base interpreter's ``site-packages`` where a venv does not use them."""
    prefix, base = Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()
    out = [root / d for root in {prefix, base} if (root / "conda-meta").is_dir() for d in ("pkgs", "envs")]
    if base != prefix:
        used = {Path(e).resolve() for e in sys.path if e}
        out += [p for p in base.glob("lib*/python3*/*-packages") if p.resolve() not in used]
    return [p.resolve() for p in out if p.is_dir()]


def python_links() -> list[tuple[str, Path]]:
    """The symbolic links on the way to the Python environment as spelled (its prefixes, the
    interpreter, the ``sys.path`` entries :func:`python_paths` shows): :func:`links_to` each,
    and the interpreter's chain of links (:func:`link_chain`)."""
    cwd = Path.cwd().resolve()
    spelled = [sys.prefix, sys.base_prefix, sys.executable]
    shown = set(environment_path_entries())
    spelled += [e for e in sys.path if e and Path(e).resolve() in shown and not inside(Path(e).resolve(), cwd)]
    return [link for path in spelled for link in links_to(Path(path))] + link_chain(Path(sys.executable))


def link_chain(path: Path) -> list[tuple[str, Path]]:
    """Each symbolic link from ``path`` to the file it finally names (a venv's ``bin/python`` ->
    ``python3`` -> the base interpreter's ``python3`` -> ``python3.11``), ``(target, link)``, with
    the links on the way to each (:func:`links_to`), so that every hop resolves inside too."""
    out, current = [], Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on links followed
        out += links_to(current.parent)
        if not current.is_symlink():
            break
        target = os.readlink(current)
        out.append((target, current))
        current = Path(os.path.abspath(current.parent.resolve() / target))
    return out


def links_to(path: Path) -> list[tuple[str, Path]]:
    """The symbolic links on the way to ``path`` as spelled, ``(target as stored, link)``,
    outermost first, so that the spelled path resolves inside the sandbox too."""
    out, current = [], Path("/")
    for part in Path(os.path.abspath(path)).parts[1:]:
        current = current / part
        if current.is_symlink():
            out.append((os.readlink(current), current))
            current = current.resolve()
    return out


@dataclass(frozen=True)
class IsolationPlan:
    """What one sandboxed run may see (:func:`replaykit.isolation.plan` computes it).

    Attributes:
        mode: ``bwrap`` (the sandbox) or ``none`` (no sandbox: every path is reachable).
        read_only: real paths shown read-only (besides the system's, see the module docstring).
        writable: real paths shown read-write.
        masked: real paths inside a shown one that stay hidden (an empty folder or
            ``/dev/null``): final-split data, the working directory.
        links: ``(target, link)`` symbolic links recreated so that paths as spelled (a prefix
            reached through a link) resolve.
        devices: device files passed through; None: every ``/dev/nvidia*`` (the GPU slots of
            a job are a later refinement of this field).
        limits: the job's resource limits (:mod:`.limits`); None: none.
        software: the shown paths that hold programs and libraries (the Python environment,
            the frozen package and plug-ins' code, what ``sandbox_show`` names), the only ones
            besides the system's that a search path (:data:`SEARCH_PATHS`) may name inside.
        frozen_only: only frozen code runs (the exploration's proxy scoring), started by whoever
            explores: its environment is :data:`FROZEN_ENV_ALLOWED` only, and no variable may
            name a folder it writes (the agent can write there too).
    """

    mode: str
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    masked: tuple[Path, ...] = ()
    links: tuple[tuple[str, Path], ...] = ()
    devices: tuple[str, ...] | None = None
    limits: Limits | None = None
    software: tuple[Path, ...] = ()
    frozen_only: bool = False

    def confine(self) -> Confinement:
        """The enforcement of :attr:`limits` for one job started under this plan (its
        ``preexec`` runs in the child before ``bwrap``; close it after the job)."""
        return Confinement(self.limits)

    def describe(self) -> dict:
        """The plan as the record and the receipts list it (every path shown; ``limits`` as
        stated: the job's record replaces it by :meth:`Confinement.describe`)."""
        return {
            "mode": self.mode,
            "system": [d for d in SYSTEM_DIRS if os.path.lexists(d)] + [f"/etc/{e}" for e in _etc()],
            "read_only": [str(p) for p in self.read_only],
            "writable": [str(p) for p in self.writable],
            "masked": [str(p) for p in self.masked],
            "links": [[target, str(link)] for target, link in self.links],
            "devices": list(self._devices()),
            "scratch": [str(p) for p in _scratch()] + ["/dev/shm"],
            "limits": (self.limits or Limits()).as_dict(),
        }

    def _devices(self) -> tuple[str, ...]:
        return tuple(sorted(glob.glob("/dev/nvidia*"))) if self.devices is None else self.devices

    def unshown_library_folders(self, env) -> list[str]:
        """The folders of ``env``'s ``LD_LIBRARY_PATH`` the sandbox does not show (an operator's
        install outside the Python environment: shown only when ``sandbox_show`` names it)."""
        if self.mode != "bwrap":
            return []
        shown = [*self.read_only, *self.writable, *(Path(d) for d in SYSTEM_DIRS)]
        folders = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d and os.path.isdir(d)]
        return [d for d in dict.fromkeys(folders) if not any(inside(Path(d).resolve(), p) for p in shown)]

    def environment(self, env) -> dict[str, str]:
        """The environment to start the sandboxed command with (``bwrap``: :func:`allowed_env` of
        ``env``, ``TMPDIR`` pointed at the empty ``/tmp`` and ``HOME`` at the empty home (or
        ``/tmp``), each of :data:`SEARCH_PATHS` cut to its entries in the system's folders and
        :attr:`software`, a variable named like a path (:data:`PATH_NAMES`) or naming an
        absolute path elsewhere than those and :attr:`writable` dropped, ``PYTHONWARNINGS``
        cut to filters of built-in categories; ``none``: ``env`` as is, but the final-split
        salt). bwrap's own processes are visible inside the sandbox (``/proc/1/environ`` is
        bwrap's reaper), so the filter applies to bwrap itself: pass this to ``Popen(env=...)``."""
        if self.mode != "bwrap":  # no sandbox: all but the final-split salt (never to candidates)
            return {name: value for name, value in env.items() if name != SALT_ENV}
        out = allowed_env(env)
        if self.frozen_only:  # no switch of torch, CUDA or the compilers: only what scoring needs
            out = {k: v for k, v in out.items() if any(fnmatch.fnmatchcase(k, p) for p in FROZEN_ENV_ALLOWED)}
        if "TMPDIR" in out:
            out["TMPDIR"] = "/tmp"
        if "HOME" in out:  # an empty scratch folder inside, never a shown one (user site-packages)
            home = Path(os.path.realpath(out["HOME"]))
            shown = [Path(p) for p in (*self.read_only, *self.writable)]
            empty = home in _scratch()[1:] and not any(inside(home, p) for p in shown)
            out["HOME"] = str(home) if empty else "/tmp"
        for name in SEARCH_PATHS:
            if name in out:
                kept = [e for e in out[name].split(os.pathsep) if os.path.isabs(e) and self._software(Path(e))]
                if kept:
                    out[name] = os.pathsep.join(dict.fromkeys(kept))
                else:
                    del out[name]
        if "PYTHONWARNINGS" in out:  # a category `module.Class` is imported at start-up
            kept = [f for f in out["PYTHONWARNINGS"].split(",") if "." not in (f.split(":") + ["", "", ""])[2]]
            if kept:
                out["PYTHONWARNINGS"] = ",".join(kept)
            else:
                del out["PYTHONWARNINGS"]
        for name, value in list(out.items()):
            if name in SEARCH_PATHS or name in ("HOME", "TMPDIR", "PYTHONWARNINGS") or name.startswith("REPLAYKIT_"):
                continue
            pieces = [e for e in value.split(os.pathsep) if e]
            path_like = any(fnmatch.fnmatchcase(name, pattern) for pattern in PATH_NAMES)
            places = [Path(e) for e in pieces if os.path.isabs(e)]
            relative = path_like and len(places) < len(pieces)
            writable = (lambda e: False) if self.frozen_only else self._writable
            if relative or not all(self._software(e) or writable(e) for e in places):
                del out[name]  # CUDA_INJECTION64_PATH, TRITON_CACHE_DIR on a shown data folder
            elif self.frozen_only and "/" in value and not places:
                del out[name]  # a relative path (LC_ALL=x/locale) resolves in the agent's folder
        return out

    def _software(self, path: Path) -> bool:
        """Whether ``path`` (absolute) lies inside the system's folders or one of
        :attr:`software`, or is the folder of a package of :attr:`software` (``src/`` of
        ``src/replaykit``, where the package is not installed), and is not masked: what a
        search path (:data:`SEARCH_PATHS`) inside the sandbox may name. A shown data folder (a
        checkpoint, the workspace, a run's folder) is no such place: on ``PYTHONPATH`` or
        ``LD_LIBRARY_PATH`` its files would be loaded as code by the frozen scorer; nor is a
        folder that merely holds software (``/``, ``/work``), from which every shown folder
        below it is importable as a namespace package."""
        real = Path(os.path.realpath(path))
        software = [*self.software, *(Path(os.path.realpath(d)) for d in SYSTEM_DIRS)]
        software += [Path(os.path.realpath(f"/etc/{e}")) for e in _etc()]  # TZ=:/etc/localtime
        covering = [len(s.parts) for s in software if inside(real, s)]
        if covering:  # unless a mask deeper than that software hides it (a conda package cache)
            return not any(inside(real, Path(m)) and len(Path(m).parts) > max(covering) for m in self.masked)
        # a package's folder, shown by name (inside the masked working directory, say)
        return any(s.parent == real and (s / "__init__.py").is_file() for s in self.software)

    def _writable(self, path: Path) -> bool:
        real = Path(os.path.realpath(path))
        return any(inside(real, Path(w)) for w in self.writable)

    def argv(self, command: list[str], chdir: str | Path) -> list[str]:
        """``command`` run under this plan, started in ``chdir`` (which must be visible).

        Raises:
            InputError: an unknown mode.
            SandboxUnavailable: ``bwrap`` cannot run here.
        """
        if self.mode == "none":
            return list(command)
        if self.mode != "bwrap":
            raise InputError("config", "isolation", f"{self.mode!r} is not one of {', '.join(MODES)}")
        return [check_available(), *self.mounts(), *NAMESPACES, "--chdir", str(Path(chdir).absolute()), "--", *command]

    def mounts(self) -> list[str]:
        """bwrap's mount options (:class:`InputError` for a shown data folder that has become a
        symbolic link since the plan was made): the system, then every shown, masked and scratch path in
        order of depth (parents first; at one path scratch, masked, read-only, writable), so a
        mask inside a shown folder lands on top of it and a shown folder inside a scratch one
        (the Python environment under ``$HOME``) reappears; then links; then masked folders and the
        root made read-only."""
        software = set(self.software)
        for path in (*(p for p in self.read_only if p not in software), *self.writable):
            # bwrap follows a source that is a link when it starts: a data folder swapped for a
            # link after the plan was made (to a hidden split) would be shown in its place
            if os.path.lexists(path) and os.path.realpath(path) != str(path):
                raise InputError(path, None, "became a symbolic link after the sandbox's plan was made: not shown")
        size = ["--size", str(self.limits.memory_bytes)] if self.limits and self.limits.memory_bytes else []
        argv = _system_mounts() + [*size, "--tmpfs", "/dev/shm"]
        argv += [arg for dev in self._devices() for arg in ("--dev-bind", dev, dev)]
        order = {"scratch": 0, "mask": 1, "ro": 2, "rw": 3}
        mounts = {p: "scratch" for p in _scratch()}
        for kind, paths in (("mask", self.masked), ("ro", self.read_only), ("rw", self.writable)):
            for path in paths:
                if os.path.lexists(path):  # a run's folder the plan names before it is made
                    mounts[Path(path)] = kind
        for path, kind in sorted(mounts.items(), key=lambda m: (len(m[0].parts), order[m[1]])):
            if kind == "scratch":
                argv += [*size, "--tmpfs", str(path)]
            elif kind == "mask":
                argv += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
            else:
                argv += ["--ro-bind" if kind == "ro" else "--bind", str(path), str(path)]
        for target, link in self.links:  # before the root is read-only: a link may lie on it
            if not any(inside(Path(link), Path(p)) for p in (*self.read_only, *self.writable)):
                argv += ["--symlink", target, str(link)]
        argv += [arg for path in self.masked if Path(path).is_dir() for arg in ("--remount-ro", str(path))]
        argv += ["--remount-ro", "/"]  # the root's own folders (mount points) cannot be written either
        return argv


NAMESPACES = ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--cap-drop", "ALL")


def _etc() -> list[str]:
    return [e for e in ETC_ENTRIES if os.path.lexists(f"/etc/{e}")]


def system_shown() -> list[tuple[Path, Path]]:
    """The system's part of the sandbox (:func:`_system_mounts`) as ``(path inside, real path
    shown there)``: the :data:`SYSTEM_DIRS` folders that are no link (a link such as ``/lib ->
    usr/lib`` is recreated as a link: what it names is shown by ``/usr``) and the
    :data:`ETC_ENTRIES` there are (``/etc/ssl`` may be a link to another folder, bound at
    ``/etc/ssl``). A secret lying in one is masked where it appears inside
    (:func:`replaykit.isolation.plan`)."""
    dirs = [Path(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    return [(d, Path(os.path.realpath(d))) for d in dirs + [Path(f"/etc/{e}") for e in _etc()]]


def _scratch() -> list[Path]:
    """The empty, writable folders: ``/tmp`` and ``$HOME`` (unless it is ``/``)."""
    home = os.environ.get("HOME")
    return [Path("/tmp")] + ([Path(home).resolve()] if home and Path(home).resolve() != Path("/") else [])


def _system_mounts() -> list[str]:
    """The system's read-only part of the sandbox (links such as ``/lib -> usr/lib`` as links)."""
    argv = ["--proc", "/proc", "--dev", "/dev"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in SYS_MASKED:
        if os.path.isdir(path) and os.path.isdir("/sys"):
            argv += ["--tmpfs", path, "--remount-ro", path]
    for entry in _etc():
        argv += ["--ro-bind", f"/etc/{entry}", f"/etc/{entry}"]
    return argv


def version(bwrap: str = "bwrap") -> str | None:
    """``bwrap --version`` (e.g. ``bubblewrap 0.8.0``), None when it is not installed."""
    path = shutil.which(bwrap)
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or None


def check_available(bwrap: str = "bwrap") -> str:
    """Run ``true`` in a sandbox of the system's part alone; return the path of ``bwrap``.

    Raises:
        SandboxUnavailable: with one line saying what failed and how to install it.
    """
    path = shutil.which(bwrap)
    if path is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) not found on PATH; {INSTALL_HINT}")
    probe = [path, *_system_mounts(), *NAMESPACES, "true"]
    result = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise SandboxUnavailable(f"bubblewrap cannot create a sandbox here ({reason}); {INSTALL_HINT}")
    return path
