"""The sandbox that candidate code runs in: bubblewrap (``bwrap``, the sandbox Flatpak uses).

Inside the sandbox (:func:`bwrap_argv`):

* the whole root filesystem is read-only (``--ro-bind / /``); nothing outside the run's
  own publish and state directories can be changed;
* hidden (an empty read-only tmpfs, or ``/dev/null`` over a file): the working directory
  (``results/``, ``logs/``, ``benchmarks/``, ``.snakemake/``, the config) and its source
  tree, ``/run`` (sockets of system daemons), and every path the caller
  names (the final split's local sources, see ``FINAL_SOURCES`` of each task); ``/tmp``,
  ``/run`` and ``$HOME`` are empty, writable and thrown away at the end;
* shown again, read-only: the Python environment, the frozen package (``src/replaykit``),
  the code of a task plug-in registered from outside it (an entry point), the workspace,
  the fixed start (unless it is raw data, digress), the public split and the task's other
  local assets (e.g. ddpo's reward models);
* writable: the run's publish directory and state directory;
* no network (``--unshare-net``: only ``lo``), own PID and IPC namespaces (``/proc`` shows
  only the sandbox's processes, so ``/proc/<parent>/root`` is out of reach), dies with its
  parent (``--die-with-parent``), no capabilities, a minimal ``/dev`` plus the NVIDIA
  devices (``/dev/nvidia*``) so CUDA works;
* only an allow-list of environment variables passes (:data:`ENV_ALLOWED`: locale, paths,
  thread counts, glibc malloc settings, CUDA/PyTorch/offline switches, the exploration probe's
  ``REPLAYKIT_RUN_DIR`` and ``REPLAYKIT_REQUEST``; nothing named like a key, token or
  secret): callers start ``bwrap`` itself with :func:`process_env`, since its reaper (pid 1
  inside) shows its environment in ``/proc/1/environ``. Tokens, credentials and cluster
  variables of the operator's shell never reach candidate code.

bubblewrap's own documentation: https://github.com/containers/bubblewrap (``bwrap(1)``).
The overhead is a few milliseconds per job (``bench/sandbox_overhead.py``).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import InputError

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


# Environment variables a replay may see (fnmatch patterns); everything else is cleared,
# and a name matching ENV_DENIED is cleared even when allowed (e.g. NVIDIA_API_KEY).
ENV_ALLOWED = (
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
    "PYTHONWARNINGS",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",  # the operator's install (e.g. a cluster's CUDA module)
    "MALLOC_MMAP_MAX_",  # glibc malloc settings of the replay (replay.MALLOC_ENV)
    "MALLOC_TRIM_THRESHOLD_",
    "VIRTUAL_ENV",
    "OMP_*",
    "MKL_*",
    "OPENBLAS_*",
    "KMP_*",
    "CUDA_*",
    "CUBLAS_*",
    "CUDNN_*",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NCCL_*",
    "TORCH_*",
    "PYTORCH_*",
    "TORCHINDUCTOR_*",
    "TRITON_*",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "REPLAYKIT_RUN_DIR",
    "REPLAYKIT_REQUEST",
    "REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH",  # publish.FAULT_ENV: the recovery tests' fault injection
)
ENV_DENIED = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*AUTH*")


def allowed_env(env) -> dict[str, str]:
    """The entries of ``env`` whose names match :data:`ENV_ALLOWED` and none of
    :data:`ENV_DENIED` (case-sensitive for the allow-list, case-insensitive for the deny-list)."""

    def ok(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pat) for pat in ENV_ALLOWED) and not any(
            fnmatch.fnmatchcase(name.upper(), pat) for pat in ENV_DENIED
        )

    return {k: v for k, v in env.items() if ok(k)}


def process_env(env, mode: str) -> dict[str, str]:
    """The environment to start a sandboxed command with (``bwrap``: :func:`allowed_env` of
    ``env``; ``none``: ``env`` as is). bwrap's own processes are visible inside the sandbox
    (``/proc/1/environ`` is bwrap's reaper), so the filter applies to bwrap itself, not only to
    the command: pass this to ``Popen(env=...)``."""
    return allowed_env(env) if mode == "bwrap" else dict(env)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces on this machine."""


def check_available(bwrap: str = "bwrap") -> str:
    """Run ``true`` in a minimal sandbox; return the path of ``bwrap``.

    Raises:
        SandboxUnavailable: with one line saying what failed and how to install it.
    """
    path = shutil.which(bwrap)
    if path is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) not found on PATH; {INSTALL_HINT}")
    probe = [
        path,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "true",
    ]
    result = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise SandboxUnavailable(f"bubblewrap cannot create a sandbox here ({reason}); {INSTALL_HINT}")
    return path


def _existing(paths) -> list[Path]:
    out = []
    for p in paths:
        if p is None or p == "":
            continue
        p = Path(p).resolve()  # bwrap mounts real paths: order and compare them as such
        if p.exists() and p not in out:
            out.append(p)
    return out


def python_roots(task: str | None = None) -> list[Path]:
    """What the sandboxed Python needs to see: the environment, the frozen package and, for a
    ``task`` whose plug-in is registered from outside the package (an entry point), that
    plug-in's code (:func:`replaykit.tasks.code_roots`: its package folder, not the rest of
    the ``PYTHONPATH`` entry holding it, which may be the hidden working directory).

    Raises:
        InputError: ``task``'s plug-in does not load (:func:`replaykit.tasks.get_task`).
    """
    import replaykit

    package_parent = Path(replaykit.__file__).resolve().parent.parent  # src/ of an editable install
    plugin = []
    if task is not None:
        from ..tasks import code_roots

        plugin = code_roots(task)
    return _existing(
        [sys.prefix, sys.base_prefix, Path(sys.executable).resolve().parent.parent, package_parent, *plugin]
    )


def bwrap_argv(
    command: list[str], *, chdir: str | Path, read_only: list, writable: list, hide: list, bwrap: str = "bwrap"
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` in the sandbox described above.

    Args:
        command: the program and its arguments.
        chdir: working directory inside the sandbox (must be visible).
        read_only: paths shown read-only (re-exposed even when under a hidden path).
        writable: paths shown read-write.
        hide: paths replaced by an empty tmpfs (directories) or ``/dev/null`` (files).

    Paths that do not exist are skipped. bwrap applies mounts in order, a later one over an
    earlier one, so they are sorted by depth (parents first; at equal paths hide, then
    read-only, then writable): a view inside a hidden directory reappears, and a hidden file
    inside a shown directory stays hidden. Returns the argv list.
    """
    home = os.environ.get("HOME")
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for dev in sorted(glob.glob("/dev/nvidia*")):  # CUDA: nvidiactl, nvidia-uvm, nvidia0..
        argv += ["--dev-bind", dev, dev]
    mounts, scratch = {}, _existing([home if home and home != "/" else None])
    for kind, paths in (("hide", [*scratch, *hide]), ("ro", read_only), ("rw", writable)):
        for path in _existing(paths):
            mounts[path] = kind  # a path named twice takes the later (more permissive) kind
    order = {"hide": 0, "ro": 1, "rw": 2}
    for path, kind in sorted(mounts.items(), key=lambda item: (len(item[0].parts), order[item[1]])):
        if kind == "hide":
            argv += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        else:
            argv += ["--ro-bind" if kind == "ro" else "--bind", str(path), str(path)]
    for path, kind in mounts.items():  # last, once the views inside them are mounted
        if kind == "hide" and path.is_dir() and path not in scratch:
            argv += ["--remount-ro", str(path)]
    argv += [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--chdir",
        str(Path(chdir).absolute()),
        "--",
        *command,
    ]
    return argv


def wrap(command: list[str], mode: str, **kwargs) -> list[str]:
    """``command`` run under isolation ``mode`` (``bwrap``: :func:`bwrap_argv`; ``none``: as is).

    Raises:
        InputError: an unknown mode.
        SandboxUnavailable: ``bwrap`` was asked for and cannot run here.
    """
    if mode == "none":
        return list(command)
    if mode != "bwrap":
        raise InputError("config", "isolation", f"{mode!r} is not one of {', '.join(MODES)}")
    return bwrap_argv(command, bwrap=check_available(), **kwargs)
