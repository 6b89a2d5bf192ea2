"""Issue 21: inputs that real users get wrong, tried as a user would: `snakemake <target>
--cores 1` (a real run, not a dry run) on a workflow copy that already holds built results.

Each row of the table asserts a non-zero exit, exactly one `error: <file>: <key>: ...` line
naming the source file (or `--config`) and the key, and that the results tree is byte for
byte what it was (hashed before and after). Controls show the same inputs, corrected, pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT, config_patch, copy_workflow, snakemake

# ---------------------------------------------------------------- fixtures: files a user has


def _ifeval_row(kwargs, iid="length_constraints:number_words", key="b"):
    return {
        "key": key,
        "prompt": "Write a short note.",
        "instruction_id_list": [iid],
        "kwargs": [kwargs],
    }


GOOD_IFEVAL = [_ifeval_row({"num_words": 50, "relation": "less than"}, key=str(i)) for i in range(4)]
GOOD_PAIR = {"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "No."}


def _jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _soup_start(root: Path, shifted: int = 0) -> Path:
    """A soup fixed start (heads only: the workflow-start check reads nothing else): a zero-shot
    head with a large shared component, and 4 ingredients near it; ``shifted`` of them have
    their class rows rolled by one (class c's row is class c-1's)."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    zeroshot = torch.randn(10, 16, generator=gen) + 5.0 * torch.randn(1, 16, generator=gen)
    (root / "ingredients").mkdir(parents=True)
    names = []
    for i in range(4):
        head = zeroshot + 0.2 * torch.randn(10, 16, generator=gen)
        if i < shifted:
            head = torch.roll(head, 1, dims=0)
        names.append(f"ingredients/ingredient_{i:02d}.safetensors")
        save_file({"head.weight": head.contiguous(), "head.bias": torch.zeros(10)}, str(root / names[-1]))
    save_file(
        {"head.weight": zeroshot.contiguous(), "head.bias": torch.zeros(10)},
        str(root / "zeroshot.safetensors"),
    )
    (root / "config.json").write_text(
        json.dumps(
            {
                "model_name": "x",
                "n_classes": 10,
                "ingredients": names,
                "zeroshot": "zeroshot.safetensors",
            }
        )
    )
    return root


def _ddpo_start(root: Path, **changes) -> Path:
    """A diffusers pipeline folder whose scheduler config is the embedded one changed by
    ``changes`` (a value None removes the key)."""
    from diffusers import DDIMScheduler

    from replaykit.tasks.ddpo.pipeline import SCHEDULER

    DDIMScheduler(**SCHEDULER).save_pretrained(root / "scheduler")
    path = root / "scheduler" / "scheduler_config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    path.write_text(json.dumps(config))
    (root / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    return root


@pytest.fixture(scope="module")
def wf(tmp_path_factory):
    """A workflow copy with a results tree of 'built' files, and the user's local files."""
    work = copy_workflow(tmp_path_factory.mktemp("wf"))
    shutil.copytree(ROOT / "patches", work / "patches")
    config_patch(work, "patches/beta02", "beta", 0.2)
    for rel in (
        "results/dpo/assets/public/train_prefs.jsonl",
        "results/soup/shipped-seed42/official.json",
        "results/models/smollm2-135m-instruct/model.safetensors",
        "results/digress/notes/summary.json",
    ):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(hashlib.sha256(rel.encode()).digest() * 64)
    files = work / "user"
    files.mkdir()
    _jsonl(files / "ifeval.jsonl", GOOD_IFEVAL)
    _jsonl(files / "prefs.jsonl", [GOOD_PAIR])
    _soup_start(files / "soup-aligned")
    _soup_start(files / "soup-shifted", shifted=2)
    (files / "imagenetv2").mkdir()
    _ddpo_start(files / "ddpo-good")
    return work


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_user(wf: Path, target: str, config: dict | str | None = None, args: tuple = ()):
    """`snakemake <target> --cores 1 [--configfile bad.yaml] [args]`, as README writes it
    (target first: --configfile / --config take several values)."""
    cmd = [target, "--cores", "1", *args]
    if config is not None:
        (wf / "bad.yaml").write_text(yaml.safe_dump(config) if isinstance(config, dict) else config)
        cmd += ["--configfile", "bad.yaml"]
    return snakemake(wf, *cmd, timeout=120)


def task(name, block):
    return {"tasks": {name: block}}


def local_dpo(wf, ifeval=None, prefs=None):
    user = wf / "user"
    ifeval_path = _jsonl(user / "bad-ifeval.jsonl", ifeval) if ifeval is not None else str(user / "ifeval.jsonl")
    prefs_path = _jsonl(user / "bad-prefs.jsonl", prefs) if prefs is not None else str(user / "prefs.jsonl")
    return task(
        "dpo",
        {
            "data": {
                "source": "local",
                "train_prefs": prefs_path,
                "ifeval_prompts": ifeval_path,
                "public_seed": 1,
                "n_proxy": 2,
            }
        },
    )


# (id, target, config (bad.yaml) or a function of the workflow dir, extra args,
#  the error line's file, its key, a piece of its message)
ROWS = [
    # ---- config: typos inside blocks, per-task blocks
    (
        "dpo-eval-typo",
        "dpo",
        task("dpo", {"evaluation": {"max_new_token": 50}}),
        (),
        "bad.yaml",
        "tasks.dpo.evaluation.max_new_token",
        "did you mean 'max_new_tokens'",
    ),
    (
        "dpo-data-typo",
        "dpo",
        task("dpo", {"data": {"n_proxi": 3}}),
        (),
        "bad.yaml",
        "tasks.dpo.data.n_proxi",
        "did you mean 'n_proxy'",
    ),
    (
        "rm-gets-dpo-key",
        "rm",
        task("rm", {"evaluation": {"max_new_tokens": 50}}),
        (),
        "bad.yaml",
        "tasks.rm.evaluation.max_new_tokens",
        "unknown key",
    ),
    (
        "soup-validation-typo",
        "soup",
        task("soup", {"validation": {"atoll": 1e-5}}),
        (),
        "bad.yaml",
        "tasks.soup.validation.atoll",
        "did you mean 'atol'",
    ),
    (
        "digress-device-cuda",
        "digress",
        task("digress", {"evaluation": {"device": "cuda"}}),
        (),
        "bad.yaml",
        "tasks.digress.evaluation.device",
        "is not one of ['auto', 'cpu']",
    ),
    (
        "ddpo-device-gpu",
        "ddpo",
        task("ddpo", {"evaluation": {"device": "gpu"}}),
        (),
        "bad.yaml",
        "tasks.ddpo.evaluation.device",
        "is not one of ['auto', 'cpu', 'cuda']",
    ),
    (
        "digress-no-source",
        "digress",
        task("digress", {"data": {"source": "local"}}),
        (),
        "bad.yaml",
        "tasks.digress.data.source",
        "unknown key",
    ),
    (
        "ddpo-budget-typo",
        "ddpo",
        task("ddpo", {"budget": {"export_reserve": 60}}),
        (),
        "bad.yaml",
        "tasks.ddpo.budget.export_reserve",
        "did you mean 'export_reserve_s'",
    ),
    (
        "dpo-final-typo",
        "dpo",
        task("dpo", {"final": {"n_boots": 500}}),
        (),
        "bad.yaml",
        "tasks.dpo.final.n_boots",
        "did you mean 'n_boot'",
    ),
    (
        "rm-references-typo",
        "rm",
        task("rm", {"references": {"publishd": {}}}),
        (),
        "bad.yaml",
        "tasks.rm.references.publishd",
        "did you mean 'published'",
    ),
    ("top-level-typo", "dpo", {"task": {}}, (), "bad.yaml", "task", "did you mean 'tasks'"),
    (
        "unknown-task-block",
        "dpo",
        {"tasks": {"soupp": {}}},
        (),
        "bad.yaml",
        "tasks.soupp",
        "did you mean 'soup'",
    ),
    (
        "soup-threads-zero",
        "soup",
        task("soup", {"threads": 0}),
        (),
        "bad.yaml",
        "tasks.soup.threads",
        "less than the minimum of 1",
    ),
    (
        "digress-negative-seed",
        "digress",
        task("digress", {"seeds": [-1]}),
        (),
        "bad.yaml",
        "tasks.digress.seeds.0",
        "less than the minimum of 0",
    ),
    (
        "soup-runtime-string",
        "soup",
        task("soup", {"validation": {"runtime": "10m"}}),
        (),
        "bad.yaml",
        "tasks.soup.validation.runtime",
        "is not of type 'integer'",
    ),
    (
        "digress-nll-repeats",
        "digress",
        task("digress", {"evaluation": {"nll_repeats": 0}}),
        (),
        "bad.yaml",
        "tasks.digress.evaluation.nll_repeats",
        "less than the minimum of 1",
    ),
    (
        "rm-deadline-past-limit",
        "rm",
        task("rm", {"budget": {"internal_deadline_s": 5000}}),
        (),
        "bad.yaml",
        "tasks.rm.budget",
        "internal_deadline_s",
    ),
    (
        "digress-missing-patch",
        "digress",
        task("digress", {"candidates": {"c1": "nope.diff"}}),
        (),
        "bad.yaml",
        "tasks.digress.candidates.c1",
        "not found",
    ),
    (
        "ddpo-unknown-candidate",
        "ddpo",
        task("ddpo", {"candidate": "other"}),
        (),
        "bad.yaml",
        "tasks.ddpo.candidate",
        "not a key of candidates",
    ),
    (
        "duplicate-key",
        "dpo",
        "tasks:\n  dpo:\n    seeds: [1]\n    seeds: [2]\n",
        (),
        "bad.yaml",
        "line 4",
        "key 'seeds' given twice",
    ),
    # ---- config: recipe profile and overrides, checked at workflow start
    (
        "dpo-override-typo",
        "dpo",
        task("dpo", {"recipe": {"overrides": {"betta": 0.2}}}),
        (),
        "bad.yaml",
        "tasks.dpo.recipe.overrides.betta",
        "not a key of the shipped recipe's recipes/dpo/configs/",
    ),
    (
        "soup-override-typo",
        "soup",
        task("soup", {"recipe": {"overrides": {"metod": "greedy"}}}),
        (),
        "bad.yaml",
        "tasks.soup.recipe.overrides.metod",
        "not a key of the shipped recipe",
    ),
    (
        "rm-nested-override",
        "rm",
        task("rm", {"recipe": {"overrides": {"lora": {"rank": 4}}}}),
        (),
        "bad.yaml",
        "tasks.rm.recipe.overrides.lora.rank",
        "not a key of the shipped recipe",
    ),
    (
        "rm-profile",
        "rm",
        task("rm", {"recipe": {"profile": "fast"}}),
        (),
        "bad.yaml",
        "tasks.rm.recipe.profile",
        "'fast' is not a profile of the shipped recipe",
    ),
    # ---- config: values given with --config name --config
    (
        "cli-typo",
        "dpo",
        None,
        ("--config", 'tasks={"dpo": {"evaluation": {"max_new_token": 5}}}'),
        "--config",
        "tasks.dpo.evaluation.max_new_token",
        "did you mean 'max_new_tokens'",
    ),
    (
        "cli-bad-list-item",
        "dpo",
        None,
        ("--config", 'tasks={"dpo": {"seeds": [42, "x"]}}'),
        "--config",
        "tasks.dpo.seeds.1",
        "write numbers and booleans unquoted",
    ),
    (
        "cli-bad-bool",
        "ddpo",
        None,
        ("--config", 'tasks={"ddpo": {"evaluation": {"diversity_reference": "maybe"}}}'),
        "--config",
        "tasks.ddpo.evaluation.diversity_reference",
        "is not of type 'boolean'",
    ),
    # ---- targets
    (
        "unknown-task-target",
        "results/soupp/final",
        None,
        (),
        "config/config.yaml",
        "tasks",
        "unknown task 'soupp'",
    ),
    (
        "unknown-task-report",
        "results/dpoo/report.html",
        None,
        (),
        "config/config.yaml",
        "tasks",
        "tasks: ddpo, digress, dpo, rm, soup",
    ),
    # ---- dpo data: IFEval items and preference pairs (read at workflow start)
    (
        "ifeval-empty-kwargs",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({})]),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs.0",
        "argument 'num_words' missing or empty",
    ),
    (
        "ifeval-half-kwargs",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({"num_words": 50})]),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs.0",
        "argument 'relation' missing or empty",
    ),
    (
        "ifeval-null-kwargs",
        "dpo",
        lambda wf: local_dpo(
            wf,
            ifeval=[
                _ifeval_row({}, "detectable_content:postscript")
                | {"kwargs": [{"postscript_marker": None, "num_words": None}]}
            ],
        ),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs.0",
        "argument 'postscript_marker' missing or empty",
    ),
    (
        "ifeval-misspelt-kwarg",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({"num_word": 50, "relation": "less than"})]),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs.0",
        "unknown argument 'num_word'",
    ),
    (
        "ifeval-negative-count",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({"num_words": -5, "relation": "less than"})]),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs.0",
        "argument 'num_words' is -5; must be a whole number ≥ 1 (lm_eval would draw one at random)",
    ),
    (
        "ifeval-relation-outside-domain",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({"num_words": 50, "relation": "more than"})]),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs.0",
        "id 'b': length_constraints:number_words: argument 'relation' is 'more than'; must be 'less than' or "
        "'at least' (lm_eval would raise)",
    ),
    (
        "ifeval-unknown-instruction",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({}, "length:words")]),
        (),
        "bad-ifeval.jsonl",
        "line 1.instruction_id_list",
        "unknown instruction 'length:words'",
    ),
    (
        "ifeval-kwargs-count",
        "dpo",
        lambda wf: local_dpo(wf, ifeval=[_ifeval_row({}, "punctuation:no_comma") | {"kwargs": [{}, {}]}]),
        (),
        "bad-ifeval.jsonl",
        "line 1.kwargs",
        "one kwargs dict per instruction",
    ),
    (
        "pairs-identical",
        "dpo",
        lambda wf: local_dpo(wf, prefs=[{**GOOD_PAIR, "rejected": "Blue."}]),
        (),
        "bad-prefs.jsonl",
        "line 1.chosen",
        "identical",
    ),
    (
        "pairs-missing-field",
        "dpo",
        lambda wf: local_dpo(wf, prefs=[{"prompt": "Q?", "chosen": "A."}]),
        (),
        "bad-prefs.jsonl",
        "line 1.rejected",
        "required",
    ),
    # ---- soup: ingredients whose heads are not aligned; a missing image folder
    (
        "soup-shifted-heads",
        "soup",
        lambda wf: task("soup", {"fixed_start": str(wf / "user/soup-shifted")}),
        (),
        "ingredient_00.safetensors",
        "head.weight",
        "class row 0 is not aligned with zeroshot.safetensors",
    ),
    (
        "soup-imagenetv2-missing",
        "soup",
        lambda wf: task("soup", {"data": {"source": "local", "imagenetv2_dir": str(wf / "user/none")}}),
        (),
        "bad.yaml",
        "tasks.soup.data.imagenetv2_dir",
        "not found",
    ),
    # ---- ddpo: scheduler settings the DDIM-with-log-prob step does not support
    *[
        (
            f"ddpo-scheduler-{key}",
            "ddpo",
            (
                lambda wf, k=key, v=value: task(
                    "ddpo",
                    {"fixed_start": str(_ddpo_start(wf / "user" / f"ddpo-{k}-{v}", **{k: v}))},
                )
            ),
            (),
            "scheduler_config.json",
            key,
            message,
        )
        for key, value, message in [
            (
                "timestep_spacing",
                "linspace",
                "'linspace' is not supported by the DDIM-with-log-prob step",
            ),
            ("set_alpha_to_one", True, "True is not supported"),
            ("prediction_type", "v_prediction", "use 'epsilon'"),
            ("steps_offset", 50, "must be an integer in [0, 50)"),
            ("clip_sample", None, "absent from the file: DDIMScheduler's default"),
            ("rescale_betas_zero_snr", True, "use False"),
            ("timestep_spacng", "leading", "not a DDIMScheduler setting"),
        ]
    ],
    (
        "ddpo-clip-dir-missing",
        "ddpo",
        lambda wf: task(
            "ddpo",
            {
                "data": {
                    "source": "local",
                    "prompts_file": str(wf / "user/ifeval.jsonl"),
                    "clip_dir": str(wf / "user/none"),
                    "aesthetic_mlp": str(wf / "user/ifeval.jsonl"),
                }
            },
        ),
        (),
        "bad.yaml",
        "tasks.ddpo.data.clip_dir",
        "not found",
    ),
]


@pytest.mark.parametrize("name, target, config, args, source, key, message", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_refused_in_one_line(wf, name, target, config, args, source, key, message):
    target = target if "/" in target else f"results/{target}/final"
    config = config(wf) if callable(config) else config
    before = tree_hash(wf / "results")
    result = run_user(wf, target, config, args)
    assert result.returncode != 0, result.stdout[-1500:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr
    file, field = re.match(r"error: (.+?): (.+?): ", errors[0]).groups()
    assert (file == source or file.endswith("/" + source)) and field == key, errors[0]
    assert message in errors[0], errors[0]
    assert tree_hash(wf / "results") == before


def test_corrected_inputs_pass(wf):
    """The controls of the table: the same kinds of input, right, start (dry run) fine."""
    user = wf / "user"
    good = [
        task("soup", {"fixed_start": str(user / "soup-aligned")}),
        task("ddpo", {"fixed_start": str(user / "ddpo-good")}),
        local_dpo(wf, ifeval=GOOD_IFEVAL, prefs=[GOOD_PAIR]),
        task("dpo", {"recipe": {"overrides": {"beta": 0.2, "lora": {"r": 4}}}}),
    ]
    for config in good:
        (wf / "bad.yaml").write_text(yaml.safe_dump(config))
        result = snakemake(wf, "-n", "results/dpo/final", "--configfile", "bad.yaml", timeout=120)
        assert result.returncode == 0, (config, result.stderr[-2000:])


def test_config_lists_and_readme_forms_from_the_command_line(wf):
    """`--config` as README writes it: lists of numbers, booleans, candidates; Snakemake's
    parser makes the list items strings ("44"), which are read back where the schema wants
    numbers / booleans."""
    forms = [
        (
            "results/digress/final",
            'tasks={"digress": {"seeds": [42, 43, 44]}}',
            ["digress/shipped-seed44/"],
        ),
        (
            "results/ddpo/final",
            'tasks={"ddpo": {"evaluation": {"diversity_reference": false}, "seeds": [7]}}',
            ["ddpo/shipped-seed7/"],
        ),
        (
            "results/soup/greedy-seed42/official.json",
            'tasks={"soup": {"candidates": {"greedy": "patches/soup-greedy.diff"}}}',
            ["soup/greedy-seed42/"],
        ),
        # the candidate's patch changes the profile: its overrides are checked at replay start
        (
            "results/dpo/final",
            'tasks={"dpo": {"candidate": "beta02", "candidates": {"beta02": "patches/beta02.diff"}}}',
            ["dpo/beta02-seed42/"],
        ),
    ]
    for target, value, expected in forms:
        result = snakemake(wf, target, "--cores", "1", "-n", "--config", value, timeout=120)
        assert result.returncode == 0, (value, result.stderr[-2000:])
        for text in expected:
            assert text in result.stdout, (value, text)


def test_unconfigured_task_target_names_the_configured_tasks(wf):
    (wf / "only-dpo.yaml").write_text(
        yaml.safe_dump(
            {
                "tasks": {"dpo": yaml.safe_load((wf / "config/config.yaml").read_text())["tasks"]["dpo"]},
                "models": yaml.safe_load((wf / "config/config.yaml").read_text())["models"],
            }
        )
    )
    result = snakemake(
        wf,
        "results/rm/final",
        "--cores",
        "1",
        "--configfile",
        "only-dpo.yaml",
        "--replace-workflow-config",
        timeout=120,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and ": tasks.rm: " in errors[0] and "(configured: dpo)" in errors[0], errors


def test_unwritable_home_scores_ifeval_without_a_traceback(tmp_path):
    """HOME=/dev/null (cannot hold ~/.cache): the Punkt files go to a temporary folder, and
    the sentence counter gives the verdict it gives with a writable cache."""
    code = (
        "from replaykit.tasks.dpo import ifeval; item = {'id': 'a', 'prompt': 'p', "
        "'instruction_id_list': ['length_constraints:number_sentences'], "
        "'kwargs': [{'num_sentences': 3, 'relation': 'less than'}]}; "
        "print(ifeval.check(item, 'One. Two.')['prompt_level_strict_acc'], "
        "ifeval.check(item, 'One. Two. Three. Four.')['prompt_level_strict_acc'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "HOME": "/dev/null"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]  # 2 < 3 sentences; 4 is not
