"""Issue 21, data items checked by direct calls: digress novelty from graphs, dpo plain-text
pairs and the prompt format in the summary, the ddpo JPEG caveat, soup head alignment when
assets are built, the ddpo scheduler audit when assets are built, and the schema itself."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT
from replaykit.harness.errors import InputError

# QM9 rows whose source strings carry charges and stereo marks; their graphs carry neither.
CHARGED_STEREO = {
    "[NH3+]CCC([O-])=O": "NCCC(=O)O",
    "C[C@H](N)C(=O)O": "CC(N)C(=O)O",
    "C[C@@H](O)C#N": "CC(O)C#N",
    "CCO": "CCO",
    "c1ccoc1": "c1ccoc1",
    "CC(C)=O": "CC(C)=O",
}


def test_digress_training_set_is_not_novel_against_itself(tmp_path):
    from test_digress import write_fixed_start

    from replaykit.tasks import digress
    from replaykit.tasks.digress import data, metrics

    rows = list(CHARGED_STEREO) * 2  # every molecule in every split
    fixed = write_fixed_start(tmp_path / "fixed", rows)
    digress.build_assets(
        {"split_seed": 42, "split_train": 8, "n_train": None, "n_val": None, "n_test": None},
        fixed,
        tmp_path / "public",
        tmp_path / "hidden",
    )
    train_smiles = set((tmp_path / "public/train_smiles.txt").read_text().split())
    train_rows = [json.loads(l)["smiles"] for l in (tmp_path / "public/train.jsonl").read_text().splitlines()]
    assert train_smiles == {CHARGED_STEREO[s] for s in train_rows}  # the graphs' SMILES, written by hand
    assert not any(c in s for s in train_smiles for c in "+-@")
    atoms, bonds = data.load_npz(tmp_path / "public/train_graphs.npz")
    scored, _ = metrics.graph_metrics(atoms, bonds, train_smiles)
    assert scored["novelty"] == 0.0 and scored["validity"] == 1.0
    # the old rule (canonical source strings) counted the charged / stereo molecules as novel
    old = {data.canonical(s) for s in train_rows}
    assert metrics.graph_metrics(atoms, bonds, old)[0]["novelty"] > 0


def test_dpo_plain_text_pairs_are_trained_as_chat_turns(tmp_path):
    from replaykit.tasks.dpo import read_pairs

    path = tmp_path / "prefs.jsonl"
    path.write_text(json.dumps({"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "No."}) + "\n")
    assert read_pairs(path) == [
        {
            "prompt": [{"role": "user", "content": "Name a colour."}],
            "chosen": [{"role": "assistant", "content": "Blue."}],
            "rejected": [{"role": "assistant", "content": "No."}],
        }
    ]


SMOLLM2_TEMPLATE = (  # SmolLM2-135M-Instruct's template: a default system turn when none is given
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_dpo_summary_names_template_and_system_prompt(tiny_llama):
    import hashlib

    from transformers import AutoTokenizer

    from conftest import CHAT_TEMPLATE
    from replaykit.tasks.dpo.evaluator import prompt_format

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    plain = prompt_format(tokenizer)
    assert plain == {
        "chat_template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
        "prompt_format": "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n",
        "system_prompt": None,
    }
    tokenizer.chat_template = SMOLLM2_TEMPLATE
    smol = prompt_format(tokenizer)
    assert smol["system_prompt"] == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert smol["prompt_format"].startswith("<|im_start|>system\nYou are a helpful")


def test_ddpo_jpeg_caveat_states_the_measured_overhead():
    from replaykit.tasks.ddpo.evaluator import jpeg_caveat

    buffer = io.BytesIO()  # a uniform grey 32 x 32 image, saved by PIL directly
    Image.fromarray(np.full((32, 32, 3), 128, dtype=np.uint8)).save(buffer, format="JPEG", quality=95)
    caveat = jpeg_caveat((32, 32), 95)
    assert caveat["fixed_overhead_kb"] == pytest.approx(len(buffer.getvalue()) / 1000, abs=0.002)
    assert "not comparable with the DDPO paper" in caveat["advisory"]
    assert f"{caveat['fixed_overhead_kb']:.3f} kB" in caveat["advisory"]


def test_soup_assets_refuse_shifted_heads_and_record_alignment(tmp_path):
    from test_input_table import _soup_start

    from replaykit.tasks import soup
    from replaykit.tasks.soup import heads

    with pytest.raises(InputError) as err:
        soup.check_fixed_start(_soup_start(tmp_path / "shifted", shifted=1))
    assert err.value.path.endswith("ingredient_00.safetensors") and err.value.field == "head.weight"
    aligned = _soup_start(tmp_path / "aligned")
    soup.check_fixed_start(aligned)
    info = heads.check_heads(aligned)
    assert info["reference"] == "zeroshot.safetensors" and min(info["worst"].values()) > 0.9


def test_ddpo_assets_refuse_the_scheduler_before_writing(tmp_path):
    from test_input_table import _ddpo_start

    from replaykit.tasks import ddpo

    start = _ddpo_start(tmp_path / "start", timestep_spacing="linspace")
    for sub in ("unet", "vae", "text_encoder", "tokenizer"):
        (start / sub).mkdir()
    with pytest.raises(InputError, match="scheduler_config.json: timestep_spacing: 'linspace'"):
        ddpo.build_assets(
            {"source": "embedded", "public_seed": 1, "n_proxy": 2, "hidden_seed": 2, "n_final": 2},
            start,
            tmp_path / "public",
            tmp_path / "hidden",
        )
    assert not (tmp_path / "public").exists() and not (tmp_path / "hidden").exists()


def test_embedded_ddpo_scheduler_passes_the_audit(tmp_path):
    from diffusers import DDIMScheduler

    from replaykit.tasks.ddpo import INFERENCE_STEPS
    from replaykit.tasks.ddpo.pipeline import SCHEDULER, check_scheduler

    DDIMScheduler(**SCHEDULER).save_pretrained(tmp_path)
    effective = check_scheduler(tmp_path, INFERENCE_STEPS)
    assert (effective["timestep_spacing"], effective["steps_offset"]) == ("leading", 1)


def test_schema_has_each_key_once_and_closed_blocks(tmp_path):
    """The schema parses with duplicate keys refused (it once had `device:` twice), and every
    object of a task block refuses keys it does not define."""
    from replaykit.config import load_yaml_strict

    schema = load_yaml_strict(ROOT / "config/schema.yaml")
    path = tmp_path / "dup.yaml"
    path.write_text("device: {type: string}\ndevice: {type: integer}\n")
    with pytest.raises(InputError, match="dup.yaml: line 2: key 'device' given twice"):
        load_yaml_strict(path, "dup.yaml")
    for name in ("dpo", "rm", "soup", "digress", "ddpo"):
        block = schema["$defs"][name]
        assert block["additionalProperties"] is False
        for key in ("data", "evaluation", "validation"):
            sub = block["properties"][key]
            sub = schema["$defs"][sub["$ref"].split("/")[-1]] if "$ref" in sub else sub
            assert sub["additionalProperties"] is False, (name, key)


def test_stable_diffusion_v1_5_scheduler_config_passes_the_audit(tmp_path):
    """SD v1.5 ships PNDMScheduler's config (no timestep_spacing, prediction_type, ...); DDPO
    builds its DDIMScheduler from it, and the effective values are the supported ones."""
    from replaykit.tasks.ddpo.pipeline import check_scheduler

    sd15 = {
        "_class_name": "PNDMScheduler",
        "_diffusers_version": "0.6.0",
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "beta_start": 0.00085,
        "num_train_timesteps": 1000,
        "set_alpha_to_one": False,
        "skip_prk_steps": True,
        "steps_offset": 1,
        "trained_betas": None,
        "clip_sample": False,
    }
    (tmp_path / "scheduler_config.json").write_text(json.dumps(sd15))
    effective = check_scheduler(tmp_path, 20)
    assert (effective["timestep_spacing"], effective["prediction_type"]) == ("leading", "epsilon")


def test_refused_spacing_breaks_the_fixed_stride_the_logprob_step_assumes():
    """ddim_step_with_logprob takes the previous timestep as t - T // steps: true for
    'leading' (the accepted value), false for 'linspace' (refused)."""
    from diffusers import DDIMScheduler

    from replaykit.tasks.ddpo.pipeline import SCHEDULER

    for spacing, fixed in (("leading", True), ("linspace", False)):
        scheduler = DDIMScheduler(**{**SCHEDULER, "timestep_spacing": spacing})
        scheduler.set_timesteps(20)
        strides = set((scheduler.timesteps[:-1] - scheduler.timesteps[1:]).tolist())
        assert (strides == {1000 // 20}) is fixed, (spacing, strides)


@pytest.mark.parametrize(
    "text, value",
    # what PyYAML's YAML 1.1 resolver makes of each (octal, hex, binary, digit groups,
    # sexagesimal 1*60 + 30), worked out by hand
    [("042", 34), ("0x2A", 42), ("0b101010", 42), ("1_000", 1000), ("1:30", 90), ("1_0.5", 10.5)],
)
def test_a_number_that_yaml_1_1_reads_as_another_is_refused_naming_file_and_line(tmp_path, text, value):
    import yaml

    from replaykit.config import load_yaml_strict

    path = tmp_path / "seeds.yaml"
    path.write_text(f"tasks:\n  soup:\n    seeds: [{text}]\n")
    assert yaml.safe_load(path.read_text())["tasks"]["soup"]["seeds"] == [value]  # what would have run
    with pytest.raises(InputError) as exc:
        load_yaml_strict(path, "seeds.yaml")
    assert str(exc.value).startswith(f"seeds.yaml: line 3: {text!r} is read by YAML 1.1 as {value!r}: ")
    path.write_text(f"seeds: [42, -7, +3, 0, 2.5, -0.5, 1.0e-4, .inf, '{text}']\n")  # plain, or quoted: kept
    assert load_yaml_strict(path)["seeds"] == [42, -7, 3, 0, 2.5, -0.5, 1.0e-4, float("inf"), text]


@pytest.mark.parametrize("text", ['!!int "1e5"', "!!float ''", "!!bool maybe", "!!timestamp x"])
def test_a_tagged_value_that_is_no_such_value_is_one_line_naming_the_file(tmp_path, text):
    from replaykit.config import load_yaml_strict

    path = tmp_path / "tagged.yaml"
    path.write_text(f"tasks:\n  soup:\n    seeds: [{text}]\n")
    with pytest.raises(InputError) as exc:
        load_yaml_strict(path, "tagged.yaml")
    assert exc.value.path == "tagged.yaml" and "\n" not in str(exc.value)


def test_a_profiles_config_block_is_checked_as_a_config_file(tmp_path, monkeypatch):
    """Snakemake reads a profile's ``config:`` itself (YAML 1.1: ``042`` is 34) and passes the
    numbers on, so the workflow finds the profile files as Snakemake does and checks that block."""
    from replaykit.config import profile_files
    from replaykit.harness.yamlfile import check_plain_numbers

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("cores: 010\nconfig:\n  tasks:\n    soup: {seeds: [7, 042]}\n")
    (tmp_path / "profiles" / "default").mkdir(parents=True)
    (tmp_path / "profiles" / "default" / "config.yaml").write_text("cores: 1\n")
    found = profile_files(["--profile", "mine", "-n", "results/soup/final"], tmp_path / "Snakefile")
    assert found == [Path("mine/config.yaml"), Path("profiles/default/config.yaml")]
    assert profile_files(["--workflow-profile", "none"], tmp_path / "Snakefile") == []
    assert profile_files(["--cores", "abc"], tmp_path / "Snakefile") == []  # not Snakemake's command line
    with pytest.raises(InputError) as exc:
        check_plain_numbers(found[0], "config", "mine/config.yaml")
    # line 4 holds the seeds; `cores: 010` is Snakemake's own setting, outside `config:`
    assert str(exc.value).startswith("mine/config.yaml: line 4: '042' is read by YAML 1.1 as 34: ")
    check_plain_numbers(found[1], "config")  # no config block: nothing to refuse


def test_cli_strings_are_read_back_only_where_the_schema_wants_another_type():
    """What Snakemake's --config parser (YAML BaseLoader) leaves: every scalar a string."""
    import copy

    import yaml

    from replaykit.config import coerce_cli_values

    schema = yaml.safe_load((ROOT / "config/schema.yaml").read_text())
    cli = {
        "tasks": {
            "digress": {"seeds": ["42", "43"], "threads": "a: b: c", "candidate": "007"},
            "ddpo": {"evaluation": {"diversity_reference": "false"}},
        }
    }
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for task, block in cli["tasks"].items():
        for key, value in block.items():
            if isinstance(value, dict):
                config["tasks"][task][key].update(copy.deepcopy(value))
            else:
                config["tasks"][task][key] = copy.deepcopy(value)
    coerce_cli_values(config, cli, schema)
    digress, ddpo = config["tasks"]["digress"], config["tasks"]["ddpo"]
    assert digress["seeds"] == [42, 43] and cli["tasks"]["digress"]["seeds"] == [42, 43]
    assert digress["threads"] == "a: b: c"  # not a number: left for the schema's error
    assert digress["candidate"] == "007"  # a string where the schema wants one: kept as given
    assert ddpo["evaluation"]["diversity_reference"] is False
    cli = {"tasks": {"digress": {"seeds": ["042"]}}}  # YAML 1.1 would read octal 34
    config["tasks"]["digress"]["seeds"] = ["042"]
    with pytest.raises(InputError, match=r"^--config: tasks.digress.seeds.0: '042' is read by YAML 1.1 as 34: "):
        coerce_cli_values(config, cli, schema)


def test_soup_head_check_runs_without_torch_and_agrees_with_torch(tmp_path):
    """The workflow-start head check (every snakemake invocation on a local soup fixed start)
    imports no torch, and its least cosines are torch's ``normalize`` of the centred rows,
    recomputed here; a bfloat16 head (NumPy cannot read it) and a ``.pt`` ingredient go
    through torch and give the same verdict."""
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file, save_file
    from test_input_table import _soup_start

    from replaykit.tasks.soup import heads

    start = _soup_start(tmp_path / "aligned")
    code = (
        "import sys; from replaykit.tasks import soup; "
        f"soup.check_fixed_start({str(start)!r}); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr

    def centred(w):
        return torch.nn.functional.normalize(w - w.mean(0, keepdim=True), dim=1)

    reference = centred(load_file(str(start / "zeroshot.safetensors"))["head.weight"])
    info = heads.check_heads(start)
    for name, least in info["worst"].items():
        head = load_file(str(start / "ingredients" / name))["head.weight"]
        expected = (centred(head) @ reference.T).diag().min().item()
        assert least == pytest.approx(expected, abs=1e-4)  # rounded to 4 decimals
    # the first ingredient as bfloat16 safetensors, the second as a torch .pt file
    first, second = start / "ingredients/ingredient_00.safetensors", start / "ingredients/ingredient_01.safetensors"
    state = load_file(str(first))
    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, str(first))
    torch.save(load_file(str(second)), start / "ingredients/ingredient_01.pt")
    config = json.loads((start / "config.json").read_text())
    config["ingredients"][1] = "ingredients/ingredient_01.pt"
    (start / "config.json").write_text(json.dumps(config))
    again = heads.check_heads(start)
    assert list(again["worst"]) == ["ingredient_00.safetensors", "ingredient_01.pt", *list(info["worst"])[2:]]
    # bfloat16 keeps 8 bits of mantissa: a cosine moves by about 2**-8 at most
    assert again["worst"]["ingredient_00.safetensors"] == pytest.approx(
        info["worst"]["ingredient_00.safetensors"], abs=4e-3
    )
    assert again["worst"]["ingredient_01.pt"] == info["worst"]["ingredient_01.safetensors"]


@pytest.mark.parametrize(
    "head, message",
    [
        ("vector", "shape (10,): expected n_classes x embed_dim"),
        ("classes", "shape (9, 16), zeroshot.safetensors has (10, 16)"),
        ("nan", "non-finite values"),
    ],
)
def test_soup_head_check_names_a_bad_head(tmp_path, head, message):
    """A head that is no matrix, has another shape than the reference's or holds NaN is one
    InputError naming the ingredient file and ``head.weight`` (numpy's own errors were caught
    and split into a garbled path)."""
    import torch
    from safetensors.torch import load_file, save_file
    from test_input_table import _soup_start

    from replaykit.tasks import soup

    start = _soup_start(tmp_path / "start")
    path = start / "ingredients/ingredient_02.safetensors"
    weight = load_file(str(path))["head.weight"]
    weight = {
        "vector": weight[:, 0],
        "classes": weight[:9],
        "nan": weight.index_fill(1, torch.tensor([3]), float("nan")),
    }
    save_file({"head.weight": weight[head].contiguous()}, str(path))
    with pytest.raises(InputError) as err:
        soup.check_fixed_start(start)
    assert (err.value.path, err.value.field) == (str(path), "head.weight") and err.value.message == message


def _break_start(start, how: str):
    """Make the soup fixed start ``start`` bad in one way; returns (file, field) the error names."""
    import os

    import torch
    from safetensors.torch import load_file, save_file

    config_path, first = start / "config.json", start / "ingredients/ingredient_01.safetensors"
    config = json.loads(config_path.read_text())
    weight = load_file(str(first))["head.weight"]
    if how in ("list", "not json", "deep json"):
        config_path.write_text({"list": "[]", "not json": "{'ingredients': 1", "deep json": "[" * 100000}[how])
        return config_path, None
    if how == "long name":
        config_path.write_text(json.dumps({**config, "ingredients": ["a" * 5000]}))
        return config_path, "ingredients[0]"
    if how == "huge":  # a sparse file whose header claims a 1 GiB head: refused before it is read
        header = json.dumps({"head.weight": {"dtype": "F32", "shape": [1, 1 << 28], "data_offsets": [0, 1 << 30]}})
        header += " " * (-len(header) % 8)
        with first.open("wb") as f:
            f.write(len(header).to_bytes(8, "little") + header.encode())
            f.truncate(8 + len(header) + (1 << 30))
        return first, "head.weight"
    if how in ("string", "empty", "absolute", "escape"):
        value = {"string": "ingredients", "empty": [], "absolute": [str(first)], "escape": ["../x.safetensors"]}[how]
        config_path.write_text(json.dumps({**config, "ingredients": value}))
        return config_path, "ingredients" if how in ("string", "empty") else "ingredients[0]"
    if how in ("missing", "fifo", "folder"):
        first.unlink()
        {"missing": lambda: None, "fifo": lambda: os.mkfifo(first), "folder": first.mkdir}[how]()
        return first, None
    if how == "truncated":
        first.write_bytes(first.read_bytes()[:20])
    elif how in ("float8", "int8", "no rows"):
        head = {"float8": weight.to(torch.float8_e4m3fn), "int8": weight.to(torch.int8), "no rows": weight[:0]}[how]
        save_file({"head.weight": head.contiguous()}, str(first))
        if how == "float8":  # a float: read through torch, aligned still
            return None, None
    else:  # a .pt holding nn.Parameter (accepted) or a list (refused)
        pt = first.with_suffix(".pt")
        torch.save({"head.weight": torch.nn.Parameter(weight) if how == "parameter" else [1, 2]}, pt)
        config_path.write_text(
            json.dumps({**config, "ingredients": [*config["ingredients"][:1], "ingredients/ingredient_01.pt"]})
        )
        return (None, None) if how == "parameter" else (pt, "head.weight")
    return first, "head.weight"


@pytest.mark.parametrize(
    "how",
    [
        "list",
        "not json",
        "deep json",
        "long name",
        "huge",
        "string",
        "empty",
        "absolute",
        "escape",
        "missing",
        "fifo",
        "folder",
        "truncated",
        "float8",
        "int8",
        "no rows",
        "parameter",
        "pt list",
    ],
)
def test_a_bad_soup_fixed_start_is_one_line_naming_the_file_and_field(tmp_path, how):
    """Hostile fixed starts of 2026-12-04 (each was a Snakemake traceback, a garbled line, a
    hang on a FIFO, or a refusal of a head the torch-based check took): one InputError naming
    ``config.json`` and its field, or the ingredient file (and ``head.weight``); a float8 head
    or a ``.pt`` of ``nn.Parameter`` passes."""
    from test_input_table import _soup_start

    from replaykit.tasks import soup

    start = _soup_start(tmp_path / "start")
    path, field = _break_start(start, how)
    if path is None:
        soup.check_fixed_start(start)
        return
    with pytest.raises(InputError) as err:
        soup.check_fixed_start(start)
    assert (err.value.path, err.value.field) == (str(path), field) and "\n" not in str(err.value), str(err.value)
