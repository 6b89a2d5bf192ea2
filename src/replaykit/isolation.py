"""What candidate code may see: the one place that decides it (SPEC, isolation rules).

:func:`plan` computes the :class:`~replaykit.harness.sandbox.IsolationPlan` of every process
that runs workspace code or reads a candidate's files -- the formal replay (the ``replay``
rule), the exploration probe and the exploration's proxy scoring -- from the task plug-in,
the config (:class:`Settings`) and the run's own paths (:class:`RunPaths`). Nothing else lists
shown or hidden paths; ``tests/test_isolation.py`` holds the replay's and the exploration's
plans against each other for every task.

It is an allow-list. A run sees the system's part of the sandbox
(:mod:`replaykit.harness.sandbox`), and read-only:

* the Python environment it runs in (:func:`~replaykit.harness.sandbox.python_paths`), the
  frozen package (``replaykit``'s folder) and, for a task registered by an entry point, its
  plug-in's code (:func:`replaykit.tasks.code_roots`);
* the run's read-only paths (the workspace; earlier probes; a checkpoint to score), the fixed
  start (not when it is raw data whose complement is the test split, ``FIXED_START_IS_DATA``,
  unless frozen code alone runs), the public split, the task's local data paths that are not
  final-split sources, and the operator's ``sandbox_show`` paths (e.g. a CUDA install under
  ``/opt``, the folders of ``LD_LIBRARY_PATH``);

and writable the run's own folders. A shown path the config names (``sandbox_show``, a data
path, a local fixed start) is refused when it holds the working directory, lies in the
workflow's own folders or the host's, or is or holds a config file in use (:func:`declared`).
Never shown, and masked wherever they lie inside a shown path -- the Python environment, a
shown folder, a run's folder, or the system's part (``/usr``, the ``/etc`` entries) -- every
secret the plan knows (:func:`secret_masks`): every final-split path (the installed package
data of ``FINAL_PACKAGE_DATA``, the local ``FINAL_SOURCES``, the task's
``results/<task>/assets/hidden``, builders' ``*.private.json``), every task's hidden split, the
operator's ``sandbox_hide`` paths and the config files in use (which may hold ``final_salt``; a
config file that is itself a run's path is refused); the working directory is masked (an
empty, read-only folder: what a run needs from it is shown by name inside it, and nothing can
be created there).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .harness.errors import InputError, unexpanded_path
from .harness.frozen import package_dir
from .harness.limits import LimitSettings
from .harness.provenance import workflow_config_paths
from .harness.sandbox import (
    IsolationPlan,
    inside,
    links_to,
    python_links,
    python_masks,
    python_paths,
    system_shown,
)
from .harness.selftest import Targets


@dataclass(frozen=True)
class Settings:
    """The config's isolation keys, the same for every run of a workflow.

    Attributes:
        mode: ``isolation`` (``bwrap`` or ``none``).
        show: ``sandbox_show``: extra paths shown read-only.
        hide: ``sandbox_hide``: paths never shown (masked inside shown ones).
        limits: ``sandbox_limits``: memory, processes and file size of each job.
        results: the workflow's ``results/`` folder from where the sandbox is planned: a job
            runs in the config's ``workdir`` (``results``); an exploration command runs where
            snakemake starts (``<workdir>/results``, e.g. ``tiny/results``). Its hidden splits
            and built models' private files are masked (:func:`final_paths`).
        config_files: the config files in use (absolute paths), which may hold ``final_salt``:
            never shown. An exploration records them when it starts; a workflow job reads them
            from ``REPLAYKIT_WORKFLOW`` (:func:`~replaykit.harness.provenance.workflow_config_paths`)
            when this is empty, so that they are no rule parameter.
    """

    mode: str = "bwrap"
    show: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    limits: LimitSettings = LimitSettings()
    results: str = "results"
    config_files: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: dict) -> Settings:
        """From a workflow config (``results``: ``<workdir>/results``) or an :meth:`as_dict`."""
        results = config.get("results_dir") or str(Path(config.get("workdir") or ".") / "results")
        return cls(
            str(config.get("isolation", "bwrap")),
            tuple(config.get("sandbox_show", ())),
            tuple(config.get("sandbox_hide", ())),
            LimitSettings.from_config(config.get("sandbox_limits")),
            str(results),
            tuple(map(str, config.get("config_files_in_use", ()))),
        )

    def as_dict(self) -> dict:
        return {
            "isolation": self.mode,
            "sandbox_show": list(self.show),
            "sandbox_hide": list(self.hide),
            "sandbox_limits": self.limits.as_dict(),
            "results_dir": self.results,
            **({"config_files_in_use": list(self.config_files)} if self.config_files else {}),
        }


@dataclass(frozen=True)
class RunPaths:
    """One run's own paths.

    Attributes:
        fixed_start: the task's fixed start.
        public_dir: the task's public split.
        read_only: further paths shown read-only (the workspace, earlier probes, a checkpoint).
        writable: the run's own folders.
        frozen_only: True when only frozen code runs (the exploration's proxy scoring): the
            fixed start is shown even when it is raw data (the frozen scorer reads it).
    """

    fixed_start: Path
    public_dir: Path
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    frozen_only: bool = False


def final_paths(task: str, data: dict, settings: Settings) -> list[Path]:
    """Every path holding final-split items of ``task`` (real paths, existing ones): the
    package data of ``FINAL_PACKAGE_DATA`` (every installed copy :func:`package_data_copies`
    finds), the local ``FINAL_SOURCES`` of its ``data`` block, ``<results>/<task>/assets/hidden``,
    what the builders of ``<results>/models/`` know of final splits (``*.private.json``, e.g.
    soup's held-out digit indices) and the ``sandbox_hide`` paths (``<results>``:
    ``settings.results``)."""
    from .tasks import get_task

    plugin = get_task(task)
    results = Path(settings.results)
    found = [Path(p) for p in settings.hide] + [results / task / "assets" / "hidden"]
    found += [p for p in sorted((results / "models").glob("*.private.json")) if _knows_something(p)]
    for package, rel in plugin.FINAL_PACKAGE_DATA:
        found += package_data_copies(package, rel, [Path(p) for p in settings.show])
    found += [Path(v) for k, v in data.items() if k in plugin.FINAL_SOURCES and isinstance(v, str) and v]
    return _real(found)


def _knows_something(private: Path) -> bool:
    """Whether a builder's private file holds anything (``{}``: its builder draws no final split;
    such a file is no final-split path, and the self-test's search for copies of final files
    would match every other two-byte ``{}`` on the machine). Unreadable: counted as holding."""
    try:
        return bool(json.loads(private.read_text()))
    except (OSError, ValueError):
        return True


# Where a Python package lies below a folder: a sys.path entry itself, an installation prefix
# (venv, pyenv, /usr/local: lib/python3.X/site-packages; Debian's /usr: lib/python3/dist-packages)
# and a conda installation's package cache (pkgs/<name>-<version>/lib/python3.X/site-packages).
PACKAGE_PLACES = ("", "lib*/python3*/*-packages/", "local/lib/python3*/*-packages/", "pkgs/*/lib/python3*/*-packages/")


def package_data_copies(package: str, rel: str, extra: list[Path] = ()) -> list[Path]:
    """Every installed copy of file ``rel`` of ``package`` that a sandbox could show: the one
    this interpreter imports, and any other under this interpreter's ``sys.path`` entries and
    prefixes, the system's ``/usr`` and ``/usr/local``, and the folders ``extra`` (an operator's
    ``sandbox_show``), in the places of :data:`PACKAGE_PLACES`. Existing files only."""
    spec = importlib.util.find_spec(package)
    found = [Path(spec.origin).parent / rel] if spec is not None and spec.origin else []
    roots = [Path(e) for e in sys.path if e] + [Path(sys.prefix), Path(sys.base_prefix), Path("/usr"), *extra]
    for root in dict.fromkeys(roots):
        for place in PACKAGE_PLACES:
            found += map(Path, glob.glob(f"{glob.escape(str(root))}/{place}{package}/{rel}"))
    return [p for p in dict.fromkeys(found) if p.exists()]


def data_path_items(task: str, data: dict) -> list[tuple[str, Path]]:
    """``(key, real path)`` of the task's other local data paths (``data`` values that name an
    existing path and are not final-split sources: e.g. ddpo's reward models), shown read-only.

    Raises:
        InputError: a value that is no usable path (a NUL byte, a name too long), naming
            ``tasks.<task>.data.<key>``.
    """
    from .tasks import get_task

    final = get_task(task).FINAL_SOURCES
    items = [(k, v) for k, v in data.items() if k not in final and isinstance(v, str) and v]
    found = [(k, _usable(v, f"tasks.{task}.data.{k}")) for k, v in items]
    return [(k, p) for k, p in found if p.exists()]


def data_paths(task: str, data: dict) -> list[Path]:
    """The paths of :func:`data_path_items`, without repeats."""
    return list(dict.fromkeys(p for _, p in data_path_items(task, data)))


def _usable(value: str, key: str, source: str = "config") -> Path:
    """``value`` resolved, or :class:`InputError` naming ``key`` when it is no usable path (a
    ``~`` or ``$HOME`` path included: nothing expands it; :func:`unexpanded_path`)."""
    if problem := unexpanded_path(str(value)):
        raise InputError(source, key, problem)
    try:
        path = Path(value).resolve()
        path.exists()  # a name too long raises here
    except (ValueError, OSError) as exc:
        raise InputError(source, key, f"{value!r} is not a usable path ({exc})") from None
    return path


def plan(task: str, data: dict, settings: Settings, run: RunPaths) -> IsolationPlan:
    """The isolation plan of one run of ``task`` (``data``: its config block's ``data``).

    Raises:
        InputError: the task's plug-in does not load, or its code folder holds the working
            directory (:func:`replaykit.tasks.code_roots`); a shown path the config names
            (``sandbox_show``, a data path, a local fixed start) that :func:`declared` refuses;
            a config file in use that is one of the run's paths.
    """
    from .tasks import code_roots, frozen_code, get_task

    if settings.mode == "none":
        return IsolationPlan(mode="none", limits=settings.limits.resolve(run.fixed_start))
    final = final_paths(task, data, settings)
    cwd = Path.cwd().resolve()
    workdirs = (Path(settings.results).parent,)  # an exploration plans from where snakemake starts
    configs = tuple(Path(f).resolve() for f in settings.config_files or workflow_config_paths())
    hidden = tuple(final)
    fixed = _real([run.fixed_start] if run.frozen_only or not get_task(task).FIXED_START_IS_DATA else [], False)
    # a local fixed start is a path the config names, checked as a data path is; a built model
    # (<results>/models/<name>) is the workflow's own, shown by name
    models = Path(settings.results).resolve() / "models"
    local = [p for p in fixed if p.parent != models]
    declared(local, f"tasks.{task}.fixed_start", workdirs=workdirs, config_files=configs, hidden=hidden)
    limits = settings.limits.resolve(run.fixed_start)  # its size, read once it is known to be fine to read
    named = _real([*run.read_only, *fixed, run.public_dir], existing=False)
    named += declared(
        data_paths(task, data), f"tasks.{task}.data", workdirs=workdirs, config_files=configs, hidden=hidden
    )
    shown_by_name = declared(
        _real(map(Path, settings.show)), "sandbox_show", workdirs=workdirs, config_files=configs, hidden=hidden
    )
    named += shown_by_name
    # the frozen scorer verifies every registered plug-in's files; candidate code needs its own
    plugins = [r for roots in frozen_code().plugin_roots().values() for r in roots] if run.frozen_only else []
    # sys.path entries outside the environment's prefixes (a .pth file's folder, which anyone
    # who can write site-packages adds) are refused as a shown path would be
    prefixes = (Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())
    python = python_paths()
    outside = [p for p in python if not any(inside(p, q) for q in prefixes)]
    declared(outside, "sys.path", "the Python environment", workdirs=workdirs, config_files=configs)
    environment = [*python, package_dir(), *_real([*code_roots(task), *plugins])]
    # every secret the plan knows: the final-split paths, the workflow's other hidden splits and
    # builders' private files, and (below) the config files in use
    secrets = [*final, *(p for p in workflow_secrets(workdirs) if p not in final)]
    writable = [p for p in _real(run.writable, existing=False) if not any(inside(p, f) for f in secrets)]
    shown = [p for p in dict.fromkeys(environment + named) if not any(inside(p, f) for f in secrets)]
    shown = [p for p in shown if p not in writable]
    config = next((c for c in configs if c in shown or c in writable), None)
    if config is not None:  # a file: no mask could hide it and show the path
        raise InputError(
            config,
            None,
            "is a config file in use, which can hold final_salt, and a path the sandbox would show "
            "(the run's own paths); keep config files out of them",
        )
    # a hard link to a secret under any shown path (the environment's prefix, /usr: masks go by
    # path; declared() checked only the paths the config names); walked only when a secret has
    # another link (hostile, 2026-12-05: a config file linked into site-packages)
    system = [real for _, real in system_shown()]
    _check_hard_links([*shown, *writable, *system], "shown paths", "the sandbox's plan", workdirs, configs, hidden)
    masks = secret_masks([*secrets, *configs], shown + writable) + [
        f for f in python_masks() if any(inside(f, p) and f != p for p in shown + writable)
    ]
    masks += [cwd] if cwd != Path("/") else []  # empty and read-only, but for what is named inside it
    spelled = [*run.read_only, run.fixed_start, run.public_dir, *run.writable]
    links = python_links() + [link for p in spelled for link in links_to(p)]
    software = [p for p in dict.fromkeys([*environment, *shown_by_name]) if p in shown]
    return IsolationPlan(
        mode=settings.mode,
        frozen_only=run.frozen_only,
        software=tuple(software),
        read_only=tuple(shown),
        writable=tuple(writable),
        masked=tuple(dict.fromkeys(masks)),
        links=tuple(dict.fromkeys(links)),
        limits=limits,
    )


def workflow_secrets(workdirs: tuple[Path, ...] = ()) -> list[Path]:
    """The secrets of the workflow's results (of the working directory and ``workdirs``), as real
    paths: every task's hidden split (``results/<task>/assets/hidden``) and every builder's
    private file (``results/models/*.private.json``), existing ones."""
    found = []
    for root in dict.fromkeys(w.resolve() for w in (Path.cwd(), *workdirs)):
        found += map(Path, sorted(glob.glob(f"{glob.escape(str(root))}/results/*/assets/hidden")))
        found += map(Path, sorted(glob.glob(f"{glob.escape(str(root))}/results/models/*.private.json")))
    return _real(found)


def secret_masks(secrets: list[Path], shown: list[Path]) -> list[Path]:
    """Where the sandbox must mask ``secrets`` (real paths: final-split paths, config files):
    each that lies inside one of ``shown`` (the plan's read-only and writable paths: the Python
    environment, a ``sandbox_show`` folder, a data folder, the run's folders), and where each
    that lies in the system's part of the sandbox appears there
    (:func:`~replaykit.harness.sandbox.system_shown`: ``/usr``, the ``/etc`` entries). Masked, a
    folder is an empty read-only folder and a file ``/dev/null``."""
    out = [f for f in secrets if any(inside(f, p) and f != p for p in shown)]
    for inner, real in system_shown():
        out += [inner / f.relative_to(real) for f in secrets if inside(f, real) and not (f == real and f.is_dir())]
    return list(dict.fromkeys(out))


# The workflow's own folders in a working directory: every run's results (the final split's
# scores row by row, the asset manifests, other tasks' hidden splits, the builders' raw data),
# the job logs and Snakemake's records. A run sees what it needs from them through its plan
# (its public split, its fixed start, its own folders), never through a shown path.
OWN_FOLDERS = ("results", "logs", ".snakemake", "explore")
# The host's process, device, kernel and runtime file systems: a sandbox has its own /proc (its
# own processes), /dev (null, zero, random, the GPUs), the part of /sys the system part of the
# plan shows (harness/sandbox.py) and no /run. Shown from the host, they give every process's
# command line (and any value passed on it), the host's sockets (/run, /dev/shm) and devices.
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"), Path("/run"))


def declared(
    paths: list[Path],
    key: str,
    source: str = "config",
    workdirs: tuple[Path, ...] = (),
    config_files: tuple[Path, ...] = (),
    hidden: tuple[Path, ...] = (),
) -> list[Path]:
    """``paths`` (real paths, shown because the config names them) unless one is the root,
    holds the working directory (or one of ``workdirs``), is or lies inside one of their
    :data:`OWN_FOLDERS` or one of the host's :data:`SYSTEM_FOLDERS`, or is or holds one of
    ``config_files`` (the config files in use, which may hold ``final_salt``). The workflow
    checks this when it loads the config (``check_config``: ``source`` the file that set
    ``key``) and again when a job or a probe plans its sandbox, on the real paths then (a
    symbolic link made after the config was read is followed).

    Raises:
        InputError: ``<source>: <key>: <path> holds the working directory ...`` (or ``is inside
            the workflow's own ...``, ``is the host's ...``, ``is the config file ...`` or
            ``holds the config file ...``).
    """
    own = [w.resolve() / name for w in (Path.cwd(), *workdirs) for name in OWN_FOLDERS]
    for path in paths:
        held = _held_working_directory(path, workdirs)
        if path == Path("/") or held is not None:
            raise InputError(
                source,
                key,
                f"{path} holds the working directory {held or Path.cwd().resolve()}: the sandbox would show "
                "everything beside it (other checkouts, runs, datasets); name the folders it needs instead",
            )
        within = next((f for f in own if path == f or f in path.parents), None)
        if within is not None:
            raise InputError(
                source,
                key,
                f"{path} is inside the workflow's own {within}: it holds every run's scores, the "
                "final split's files and Snakemake's records; a run is shown what it needs from there "
                "by its plan (public split, fixed start), so name folders outside it",
            )
        system = next((f for f in SYSTEM_FOLDERS if _holds(f, path) or _holds(path, f)), None)
        if system is not None:
            raise InputError(
                source,
                key,
                f"{path} is the host's {system} or holds it: it shows every host process's command "
                "line, the host's sockets and devices; the sandbox has its own",
            )
        config = next((c for c in config_files if _holds(path, c)), None)
        if config is not None:
            relation = "is" if path == config else "holds"
            raise InputError(
                source,
                key,
                f"{path} {relation} the config file {config}, which can hold final_salt; keep config "
                "files out of shown paths",
            )
    _check_hard_links(paths, key, source, workdirs, config_files, hidden)
    return paths


def _check_hard_links(
    paths: list[Path],
    key_name: str,
    source: str,
    workdirs: tuple[Path, ...],
    config_files: tuple[Path, ...],
    hidden: tuple[Path, ...] = (),
) -> None:
    """Refuse a file inside ``paths`` that is a hard link to a file the sandbox never shows:
    a config file in use (``final_salt``), a task's hidden split or a builder's private file
    (``results/<task>/assets/hidden/``, ``results/models/*.private.json`` of the working
    directory and ``workdirs``), or a file of ``hidden`` (the plan's final-split paths: the
    task's final sources, ``sandbox_hide``). Paths are compared above; a hard link is the same
    file under another name, so it is found by device and inode. The secrets are looked at
    (one ``lstat`` each) on every plan; the shown trees are walked only when a secret has
    more than one link.

    Raises:
        InputError: ``<source>: <key>: <file> is a hard link to <secret> ...``.
    """
    secrets = [Path(c) for c in config_files]
    for path in hidden:  # the plan's final-split paths: a file, or a folder's files
        secrets += [path] if not path.is_dir() else [p for p in path.rglob("*") if not p.is_dir()]
    for root in {w.resolve() for w in (Path.cwd(), *workdirs)}:
        secrets += [Path(f) for f in glob.glob(str(root / "results/*/assets/hidden/**"), recursive=True)]
        secrets += [Path(f) for f in glob.glob(str(root / "results/models/*.private.json"))]
    linked = {}
    for secret in secrets:
        info = _stat(secret, follow=False)
        if info is not None and info.st_nlink > 1 and stat.S_ISREG(info.st_mode):
            linked[(info.st_dev, info.st_ino)] = secret
    if not linked:  # the usual case: the shown trees are not walked
        return
    for path in paths:
        for found in [path] if not path.is_dir() else path.rglob("*"):
            info = _stat(found, follow=False)
            secret = linked.get((info.st_dev, info.st_ino)) if info is not None else None
            if secret is not None and found != secret:
                raise InputError(
                    source,
                    key_name,
                    f"{found} is a hard link to {secret}, which the sandbox never shows (a config file "
                    "or a final-split file); remove the link or keep it out of shown paths",
                )


def _stat(path: Path, follow: bool = True):
    try:
        return path.stat() if follow else path.lstat()
    except OSError:
        return None


def _held_working_directory(path: Path, workdirs: tuple[Path, ...]) -> Path | None:
    """The working directory (the current one, else one of ``workdirs``) that real path ``path``
    is or holds, or None. Compared as paths, not as folders on disk: a workdir the first run has
    not made yet counts."""
    return next((w.resolve() for w in (Path.cwd(), *workdirs) if _holds(path, w)), None)


def _holds(path: Path, folder: Path) -> bool:
    """Whether real path ``path`` is ``folder`` or one of its parents (neither need exist)."""
    folder = folder.resolve()
    return path == folder or path in folder.parents


def check_shown_paths(
    config: dict, source_of: Callable[[list[str]], str], config_files: Iterable[str | Path] = ()
) -> None:
    """Refused when the workflow or an exploration command reads the config, before any job
    runs: what :func:`plan` refuses, a ``sandbox_show`` entry, a task's local ``data`` path or
    its local ``fixed_start`` (a folder, not a name in ``models``) that is the root, holds the
    working directory (the launch folder, or the config's ``workdir`` under it) or lies inside
    their :data:`OWN_FOLDERS`, or is, holds or lies inside one of the host's
    :data:`SYSTEM_FOLDERS`; also one that is or holds one of ``config_files`` (the config files
    read: names that are not files, such as ``--config``, are passed over); and a
    ``sandbox_hide`` entry that is or holds the working directory (``""``, ``.``, ``/``: no
    sandbox could start in it). Nothing to check with ``isolation: none``. ``source_of(keys)``:
    the config file that set the key (``replaykit.config.source_of`` over the config's layers).

    Raises:
        InputError: ``<file>: sandbox_show: ...``, ``<file>: sandbox_hide: ...``,
            ``<file>: tasks.<task>.data.<key>: ...`` or ``<file>: tasks.<task>.fixed_start: ...``
            (also for a value that is no usable path: a NUL byte, a name too long).
    """
    if config.get("isolation") == "none":
        return
    workdirs = (Path(config.get("workdir") or "."),)
    files = tuple(dict.fromkeys(Path(f).resolve() for f in config_files if Path(f).is_file()))
    where = source_of(["sandbox_show"])
    shown = [_usable(v, "sandbox_show", where) for v in config.get("sandbox_show", [])]  # existing or not
    declared(shown, "sandbox_show", where, workdirs, files)
    hide_source = source_of(["sandbox_hide"])
    for value in config.get("sandbox_hide", []):
        hidden = _usable(value, "sandbox_hide", hide_source)
        held = _held_working_directory(hidden, workdirs)
        if held is not None:  # "" and "." are the working directory itself
            raise InputError(
                hide_source,
                "sandbox_hide",
                f"{value!r} ({hidden}) holds the working directory {held}: no run could start in it; "
                "name the folders to hide",
            )
    for name, task in config["tasks"].items():
        for key, path in data_path_items(name, task.get("data", {})):
            field = f"tasks.{name}.data.{key}"
            declared([path], field, source_of(["tasks", name, "data", key]), workdirs, files)
        fixed = task.get("fixed_start")
        if isinstance(fixed, str) and fixed and fixed not in config.get("models", {}):  # a local folder
            field, where = f"tasks.{name}.fixed_start", source_of(["tasks", name, "fixed_start"])
            declared([_usable(fixed, field, where)], field, where, workdirs, files)


def _real(paths, existing: bool = True) -> list[Path]:
    """The paths resolved (bwrap mounts real paths; order and compare them as such), without
    repeats; with ``existing``, only those that exist (a run's own folders may be made later)."""
    out = []
    for p in paths:
        if p is None or str(p) == "":
            continue
        p = Path(p).resolve()
        if (p.exists() or not existing) and p not in out:
            out.append(p)
    return out


def self_test_targets(task: str, data: dict, settings: Settings, fixed_start: Path, public_dir: Path) -> Targets:
    """What the sandbox's self-test (:mod:`replaykit.harness.selftest`) tries to reach for
    ``task``: every final-split path (:func:`final_paths`, and the fixed start where it is raw
    data whose complement is the test split), the final package data by name and its installed
    copies, files of the frozen package to open for writing, and the folders that must take no
    new file (the frozen package, the working directory, the public split, the fixed start)."""
    from .tasks import get_task

    plugin = get_task(task)
    final = final_paths(task, data, settings)
    copies = _real(p for package, rel in plugin.FINAL_PACKAGE_DATA for p in package_data_copies(package, rel))
    final = [f for f in final if f not in copies] + (_real([fixed_start]) if plugin.FIXED_START_IS_DATA else [])
    package = package_dir().resolve()
    return Targets(
        final=final,
        package_data=list(plugin.FINAL_PACKAGE_DATA),
        package_data_files=copies,
        frozen=[package / "__init__.py", package / "harness" / "sandbox.py"],
        read_only_dirs=[p for p in _real([package, Path.cwd(), public_dir, fixed_start]) if p.is_dir()],
        public=_real([public_dir] + ([] if plugin.FIXED_START_IS_DATA else [fixed_start])),
    )
