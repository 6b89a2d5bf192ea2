"""Bad inputs to the harness and the dpo plug-in: one clear InputError naming file and field."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from replaykit.config import check_config
from replaykit.harness.errors import InputError
from replaykit.harness.profile import check_overrides
from replaykit.harness.publish import publish_checkpoint, read_ledger
from replaykit.harness.results import _rows_by_id, official_result
from replaykit.harness.workspace import patch_paths

SCHEMA = ROOT / "config" / "schema.yaml"


def default_config():
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.mark.parametrize(
    "change, field, message",
    [
        (lambda t: t["data"].pop("train_seed"), "tasks.dpo.data.train_seed", "required key missing"),
        (lambda t: t["data"].update(n_final=0), "tasks.dpo.data.n_final", "less than the minimum of 1"),
        (
            lambda t: t["data"].update(source="local", train_prefs="/nope.jsonl", ifeval_prompts="/nope2.jsonl"),
            "tasks.dpo.data.train_prefs",
            "not found",
        ),
        (lambda t: t["evaluation"].update(dtype="float17"), "tasks.dpo.evaluation.dtype", "is not one of"),
        (lambda t: t.update(candidate="other"), "tasks.dpo.candidate", "not a key of candidates"),
        (lambda t: t.update(candidates={"c1": "/no/such.diff"}), "tasks.dpo.candidates.c1", "not found"),
        (lambda t: t.update(seeds=[]), "tasks.dpo.seeds", "should be non-empty"),
        # hostile (2026-12-03): a whole-number float passed the schema's integer and named a run
        # shipped-seed42.0; a seed past 2**32-1 and an infinite budget ended in tracebacks
        (lambda t: t.update(seeds=[42.0]), "tasks.dpo.seeds.0", "42.0: write a whole number"),
        # hostile (2026-12-05): JSON Schema's integer takes 500.0; --n-boot 500.0 failed after the replays
        (lambda t: t["final"].update(n_boot=500.0), "tasks.dpo.final.n_boot", "500.0: write a whole number"),
        (lambda t: t.update(threads=1.0), "tasks.dpo.threads", "1.0: write a whole number"),
        (lambda t: t.update(seeds=[42, True]), "tasks.dpo.seeds.1", "is not of type 'integer'"),
        (lambda t: t.update(seeds=[10**20]), "tasks.dpo.seeds.0", "greater than the maximum of 4294967295"),
        # hostile (2026-12-05): `workdir: ~` is null, not the home folder
        (lambda t: t.update(threads=None), "tasks.dpo.threads", "empty (YAML reads nothing, `~` and `null` as null)"),
        # hostile (2026-12-05): YAML 1.1 reads 3e2 (no dot, no sign) as a string; the type error had no hint
        (
            lambda t: t["budget"].update(outer_limit_s="3e2"),
            "tasks.dpo.budget.outer_limit_s",
            "'3e2' is a string in YAML 1.1 (an exponent needs a dot and a sign: 3.0e+2): write 300",
        ),
        (
            lambda t: t["final"].update(n_boot="5E-1"),
            "tasks.dpo.final.n_boot",
            "'5E-1' is a string in YAML 1.1 (an exponent needs a dot and a sign: 3.0e+2): write 0.5",
        ),
        (
            lambda t: t["budget"].update(outer_limit_s=float("inf")),
            "tasks.dpo.budget.outer_limit_s",
            "greater than the maximum of 31536000",
        ),
    ],
)
def test_config_errors_name_the_field(change, field, message):
    config = default_config()
    change(config["tasks"]["dpo"])
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/config.yaml")
    assert exc.value.path == "config/config.yaml" and exc.value.field == field
    assert message in exc.value.message


SOUP_MODEL = {"builder": "soup-digits", "seed": 0, "n_ingredients": 3, "pretrain_epochs": 1, "heldout_per_class": 4}


@pytest.mark.parametrize(
    "entry, field, message",
    [
        # found while testing the salt (2026-12-05): "... is not valid under any of the given schemas"
        ({**SOUP_MODEL, "n_ingredients": 1}, "models.m.n_ingredients", "1 is less than the minimum of 2"),
        ({**SOUP_MODEL, "seed": "0"}, "models.m.seed", "'0' is not of type 'integer'"),
        ({**SOUP_MODEL, "threads": 0}, "models.m.threads", "0 is less than the minimum of 1"),
        (
            {**SOUP_MODEL, "builder": "soup-digitz"},
            "models.m.builder",
            "'soup-digitz' is not one of ['soup-digits', 'qm9pack', 'ddpo-digits', 'tiny-llama']",
        ),
        ({"builder": "qm9pack", "wheel": "qm9pack"}, "models.m", "'version' is a required property"),
        ({"builder": "tiny-llama", "seed": 0, "layers": 2}, "models.m.layers", "unknown key"),
        # nothing says which kind of entry was meant: what each kind needs (2026-12-05, later)
        ({"seed": 0}, "models.m", "'seed' alone does not say which kind: an entry needs the keys wheel, version and"),
        ({}, "models.m", "no keys: an entry needs the keys wheel, version and member; or builder: one of ['soup-dig"),
        ({"bogus": 1, "b2": 2}, "models.m", "unknown keys 'bogus', 'b2': an entry needs the keys wheel, version an"),
        # a name where a block is wanted (second hostile pass)
        ("soup-digits", "models.m", "'soup-digits' is not a block of keys (each kind here is one"),
    ],
)
def test_a_models_entry_names_what_is_wrong_in_the_kind_it_is(entry, field, message):
    """A ``models`` entry is one of several kinds (a wheel, or a builder's spec): the error
    names the field within the kind its ``builder`` (or its keys) say it is."""
    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    config["models"]["m"] = entry
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/test.yaml")
    assert (exc.value.path, exc.value.field) == ("config/test.yaml", field)
    assert exc.value.message.startswith(message), exc.value.message


def test_a_workdir_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.md").write_text("x")
    config = {**default_config(), "workdir": "notes.md"}
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/config.yaml")
    assert (exc.value.path, exc.value.field) == ("config/config.yaml", "workdir")
    assert exc.value.message == "'notes.md' is a file, not a folder"


@pytest.mark.parametrize(
    "change, field, start",
    [
        ({"workdir": "~/runs"}, "workdir", "'~/runs' starts with '~', which is not expanded here"),
        ({"gpus": {"lock_dir": "~/locks"}}, "gpus.lock_dir", "'~/locks' starts with '~', which is not expanded here"),
        ({"gpus": {"lock_dir": "locks"}}, "gpus.lock_dir", "'locks' is not an absolute path: every workflow"),
        ({"gpus": {"lock_dir": ""}}, "gpus.lock_dir", "'' is not an absolute path: every workflow"),
        ({"sandbox_show": ["/opt", "~"]}, "sandbox_show", "'~' starts with '~', which is not expanded here"),
        ({"sandbox_hide": ["~/data"]}, "sandbox_hide", "'~/data' starts with '~', which is not expanded here"),
        ({"sandbox_hide": ["$HOME/data"]}, "sandbox_hide", "'$HOME/data' holds a '$' variable, which is not"),
        ({"sandbox_show": ["/opt/${CUDA}"]}, "sandbox_show", "'/opt/${CUDA}' holds a '$' variable, which is not"),
        ({"workdir": " ~/runs"}, "workdir", "' ~/runs' starts or ends with white space"),
        # hostile (2026-12-05): results/, logs/ and .snakemake/ at /
        ({"workdir": "/"}, "workdir", "'/' is the file system's root: results/, logs/ and .snakemake/"),
        ({"workdir": "/usr/.."}, "workdir", "'/usr/..' is the file system's root"),
        ({"gpus": {"lock_dir": "$TMPDIR/l"}}, "gpus.lock_dir", "'$TMPDIR/l' holds a '$' variable"),
        # hostile (2026-12-05): a dry run made the folder "tiny\nx"
        ({"workdir": "tiny\nx"}, "workdir", "'tiny\\nx' holds the control character '\\n': write the path"),
        ({"sandbox_show": ["/opt\tcuda"]}, "sandbox_show", "'/opt\\tcuda' holds the control character '\\t'"),
        (
            {"tasks": {"dpo": {**default_config()["tasks"]["dpo"], "fixed_start": "models/m\r"}}},
            "tasks.dpo.fixed_start",
            "'models/m\\r' holds the control character '\\r'",
        ),
    ],
)
def test_a_path_nothing_expands_or_a_relative_lock_folder_is_refused(change, field, start):
    """``~`` is the shell's: here it would be a folder called ``~`` in the working directory (a
    home folder the operator meant to show would silently not be shown). A relative lock folder
    differs per checkout, so two workflows would each lock their own copy of one GPU."""
    from replaykit.isolation import check_shown_paths

    config = {**default_config(), **change}
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/config.yaml")
        check_shown_paths(config, lambda keys: "config/config.yaml")  # as the workflow does next
    assert (exc.value.path, exc.value.field) == ("config/config.yaml", field)
    assert exc.value.message.startswith(start), exc.value.message
    fine = {**default_config(), "gpus": {"lock_dir": "/var/tmp/locks"}, "sandbox_show": ["/opt/~cuda", "/opt/a$"]}
    check_config(fine, SCHEMA, "config/config.yaml")
    check_shown_paths(fine, lambda keys: "config/config.yaml")


def test_default_config_passes():
    check_config(default_config(), SCHEMA, "config/config.yaml")


def test_unknown_override_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "embedded.yaml").write_text("beta: 0.1\nlora: {r: 16}\n")
    check_overrides(tmp_path, "embedded", {"beta": 0.2, "lora": {"r": 4}})
    with pytest.raises(InputError, match="recipe.overrides.betta"):
        check_overrides(tmp_path, "embedded", {"betta": 0.2})
    with pytest.raises(InputError, match="recipe.overrides.lora.rank"):
        check_overrides(tmp_path, "embedded", {"lora": {"rank": 4}})
    with pytest.raises(InputError, match="profile 'fast' not found"):
        check_overrides(tmp_path, "fast", {})


def test_duplicate_row_ids_are_refused(tmp_path):
    rows = [{"id": "a", "score": 1.0}, {"id": "b", "score": 0.0}, {"id": "a", "score": 0.0}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    digest = hashlib.sha256((tmp_path / "rows.jsonl").read_bytes()).hexdigest()
    (tmp_path / ".complete").write_text(f"{digest}  rows.jsonl\n")  # the score's receipt
    with pytest.raises(InputError, match="line 3.id: duplicate row id 'a'"):
        _rows_by_id(tmp_path)


def test_marker_valid_must_be_a_boolean(tmp_path):
    (tmp_path / "record.json").write_text(json.dumps({"retained": [5], "seed": 42}))
    (tmp_path / "checkpoint-5.json").write_text(json.dumps({"valid": "false", "reason": "bad"}))
    with pytest.raises(InputError, match="valid: must be true or false"):
        official_result(
            task="dpo",
            run="r",
            record_path=tmp_path / "record.json",
            markers={5: tmp_path / "checkpoint-5.json"},
            scores={5: tmp_path / "scores"},
            direction="maximize",
            out=tmp_path / "official.json",
        )
    assert not (tmp_path / "official.json").exists()


def test_ledger_line_cut_short_by_a_kill(tmp_path):
    root = tmp_path / "replay"
    src = tmp_path / "src"
    src.mkdir()
    (src / "w").write_text("x")
    publish_checkpoint(src, root, 1)
    with open(root / "publications.jsonl", "a") as handle:
        handle.write('{"progress": 2, "sha')  # killed mid-append
    assert [e["progress"] for e in read_ledger(root)] == [1]
    publish_checkpoint(src, root, 3)
    assert [e["progress"] for e in read_ledger(root)] == [1, 3]


def test_git_quoted_paths_are_decoded_before_the_check(tmp_path):
    patch = tmp_path / "q.diff"
    patch.write_text('--- "a/\\056\\056/x.py"\n+++ "b/\\056\\056/x.py"\n@@ -1 +1 @@\n-a\n+b\n')
    with pytest.raises(InputError, match="leaves the workspace"):
        patch_paths(patch)
    patch.write_text('--- "a/sub dir/x.py"\n+++ "b/sub dir/x.py"\n@@ -1 +1 @@\n-a\n+b\n')
    assert patch_paths(patch) == ["sub dir/x.py"]


@pytest.mark.parametrize(
    "row, field, message",
    [
        (
            {
                "prompt": "Q?",
                "chosen": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A."}],
                "rejected": "B.",
            },
            "line 1.rejected",
            "both be lists",
        ),
        ({"prompt": "Q?", "chosen": None, "rejected": "B."}, "line 1.chosen", "non-empty string"),
        ({"prompt": "", "chosen": "A.", "rejected": "B."}, "line 1.prompt", "non-empty string"),
        (
            {
                "prompt": "Q?",
                "chosen": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A."}],
                "rejected": [{"role": "user", "content": "Other?"}, {"role": "assistant", "content": "B."}],
            },
            "line 1.rejected",
            "differs from chosen's",
        ),
    ],
)
def test_malformed_preference_rows_name_line_and_field(tmp_path, row, field, message):
    from replaykit.tasks.dpo import read_pairs

    path = tmp_path / "prefs.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError) as err:
        read_pairs(path)
    assert str(err.value).startswith(f"{path}: {field}: ") and message in str(err.value)


def test_item_files_with_a_repeated_id_name_the_line(tmp_path):
    from replaykit.harness.fileio import read_jsonl

    path = tmp_path / "items.jsonl"
    path.write_text('{"id": 1, "x": 0}\n{"id": "2", "x": 0}\n{"id": "1", "x": 0}\n')
    with pytest.raises(InputError, match=r"items.jsonl: line 3.id: duplicate id '1'"):
        read_jsonl(path, required=("id",), unique="id")
    assert len(read_jsonl(path, required=("id",))) == 3  # only checked when asked


@pytest.mark.parametrize(
    "override, field, message",
    [
        ({"beta": "x"}, "recipe.overrides.beta", "expected a number (the profile has 0.1), got 'x'"),
        ({"beta": True}, "recipe.overrides.beta", "expected a number (the profile has 0.1), got True"),
        ({"beta": float("nan")}, "recipe.overrides.beta", "expected a finite number, got nan"),
        ({"lora": 4}, "recipe.overrides.lora", "expected a mapping (the profile has {'r': 16}), got 4"),
        ({"lora": {"r": "four"}}, "recipe.overrides.lora.r", "expected a number (the profile has 16), got 'four'"),
        ({"name": 3}, "recipe.overrides.name", "expected a string (the profile has 'sigmoid'), got 3"),
    ],
)
def test_an_override_of_the_wrong_kind_is_refused(tmp_path, override, field, message):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "embedded.yaml").write_text("beta: 0.1\nlora: {r: 16}\nname: sigmoid\nquant: null\n")
    with pytest.raises(InputError) as exc:
        check_overrides(tmp_path, "embedded", override)
    assert exc.value.field == field and exc.value.message.startswith(message)
    check_overrides(tmp_path, "embedded", {"quant": "nf4", "beta": 1})  # null takes anything; 1 is a number
    check_overrides(tmp_path, "embedded", {"name": None})  # null replaces anything (the knobs dataclass decides)


def test_overrides_spelled_as_strings_are_read_as_the_profiles_kind(tmp_path):
    """``--config`` leaves numbers inside a mapping as strings; YAML 1.1 reads ``2e-4`` as one."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "embedded.yaml").write_text("lr: 0.001\nsteps: 4\nflag: false\nlora: {r: 16}\nname: a\n")
    overrides = {"lr": "2e-4", "steps": "128", "flag": "true", "lora": {"r": "4"}, "name": "5"}
    check_overrides(tmp_path, "embedded", overrides, coerce=True)
    assert overrides == {"lr": 2e-4, "steps": 128, "flag": True, "lora": {"r": 4}, "name": "5"}


def test_an_override_string_that_yaml_1_1_reads_as_another_number_is_refused(tmp_path):
    """``--config`` leaves ``042`` in a mapping as the string '042'; YAML 1.1 would read it as
    octal 34, so it is left a string and refused as not a number, never run as 34."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "embedded.yaml").write_text("steps: 4\n")
    for text in ("042", "0x2A", "1_000", "1:30", "1_0e-4", "nan", "!!int 1e5"):
        with pytest.raises(InputError) as exc:
            check_overrides(tmp_path, "embedded", {"steps": text}, coerce=True)
        assert exc.value.message.startswith(f"expected a number (the profile has 4), got {text!r}")


def test_a_profile_that_is_not_yaml_is_named_with_its_line(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "embedded.yaml").write_text("beta: 0.1\nlora: [r, \n")
    with pytest.raises(InputError) as exc:
        check_overrides(tmp_path, "embedded", {})
    assert exc.value.path == str(tmp_path / "configs" / "embedded.yaml") and "not valid YAML" in exc.value.message


def test_overrides_are_checked_against_the_shipped_profile_even_when_a_candidate_patches_it(tmp_path):
    """The shipped reference gets the overrides too: a knob only the candidate's patch adds
    cannot be an override (its replay would fail at its start), and the value's kind is checked."""
    import difflib

    profile = (ROOT / "recipes/soup/configs/embedded.yaml").read_text()
    patch = tmp_path / "temp.diff"
    patch.write_text(
        "".join(
            difflib.unified_diff(
                profile.splitlines(True),
                (profile + "temperature: 1.0\n").splitlines(True),
                "a/configs/embedded.yaml",
                "b/configs/embedded.yaml",
            )
        )
    )
    config = default_config()
    soup = config["tasks"]["soup"]
    soup.update(candidates={"temp": str(patch)}, candidate="temp")
    soup["recipe"] = {"profile": "embedded", "overrides": {"temperature": 2.0}}
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "c.yaml", recipes_root=ROOT / "recipes")
    assert exc.value.field == "tasks.soup.recipe.overrides.temperature"
    assert "overrides apply to every run, the shipped reference too" in exc.value.message
    soup["recipe"]["overrides"] = {"batch_size": "128"}  # a number as --config gives it: converted in place
    check_config(config, SCHEMA, "c.yaml", recipes_root=ROOT / "recipes")
    assert soup["recipe"]["overrides"] == {"batch_size": 128}


@pytest.mark.parametrize("shown", ["/", ".", "..", "tiny", "tiny/", "./tiny/..", "tiny/sub/.."])
def test_a_shown_path_that_holds_the_working_directory_is_refused_when_the_config_loads(shown, tmp_path, monkeypatch):
    """The sandbox plan refuses to show the root or a folder holding the working directory; the
    workflow refuses it when it reads the config, before any job runs, naming the file that set
    it: the launch folder (``.``), its parent, or the config's ``workdir`` (``tiny``)."""
    from replaykit.config import source_of
    from replaykit.isolation import check_shown_paths

    launch = tmp_path / "checkout"
    launch.mkdir()  # tiny/ not made yet: a first run on a fresh checkout
    monkeypatch.chdir(launch)
    config = default_config()
    config["workdir"] = "tiny"
    extra = {"sandbox_show": ["/opt", shown]}
    config.update(extra)
    layers = [("config/config.yaml", default_config()), ("shown.yaml", extra)]
    with pytest.raises(InputError) as exc:
        check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))
    assert (exc.value.path, exc.value.field) == ("shown.yaml", "sandbox_show")
    assert "holds the working directory" in exc.value.message
    config["isolation"] = "none"  # nothing is shown by a sandbox: nothing to refuse
    check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))
    config.update(isolation="bwrap", sandbox_show=["/opt", str(tmp_path / "beside")])  # beside: shown as named
    (tmp_path / "beside").mkdir()
    check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))


def test_a_task_data_path_that_holds_the_working_directory_is_refused_when_the_config_loads(tmp_path, monkeypatch):
    from replaykit.config import source_of
    from replaykit.isolation import check_shown_paths

    monkeypatch.chdir(tmp_path)
    config = default_config()
    # train_prefs is shown to the replay (not a final source): here it names the launch folder's parent
    config["tasks"]["dpo"]["data"].update(source="local", train_prefs=str(tmp_path.parent))
    layers = [
        ("config/config.yaml", default_config()),
        ("local.yaml", {"tasks": {"dpo": {"data": {"train_prefs": str(tmp_path.parent)}}}}),
        ("more.yaml", {"tasks": {"dpo": {"data": {"n_proxy": 5}}}}),  # touches the data block last
    ]
    with pytest.raises(InputError) as exc:
        check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))
    # the file that set the key, not the last one that touched the data block
    assert (exc.value.path, exc.value.field) == ("local.yaml", "tasks.dpo.data.train_prefs")
    assert f"{tmp_path.parent} holds the working directory" in exc.value.message


def test_a_local_fixed_start_is_checked_as_a_shown_path_when_the_config_loads(tmp_path, monkeypatch):
    """A local fixed start (a folder, not a name in ``models``) is shown to the sandbox as a data
    path is, and refused as one when the config loads (it was not: a hostile tester's suspicion,
    2026-12-05): here a model folder holding the private config file, and one inside the
    workflow's ``results/``, each naming the file that set it; a name in ``models`` is no path."""
    from replaykit.config import source_of
    from replaykit.isolation import check_shown_paths

    monkeypatch.chdir(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    private = model / "private.yaml"
    private.write_text("final_salt: s3cret\n")
    config = default_config()
    for fixed, message in (
        (str(model), f"{model} holds the config file {private}"),
        ("results/models/soup-digits", f"{tmp_path / 'results/models/soup-digits'} is inside the workflow's own"),
    ):
        config["tasks"]["soup"]["fixed_start"] = fixed
        layers = [("config/config.yaml", default_config()), ("local.yaml", {"tasks": {"soup": {"fixed_start": fixed}}})]
        with pytest.raises(InputError) as exc:
            check_shown_paths(
                config, lambda keys, layers=layers: source_of(keys, layers, "config"), config_files=[private]
            )
        assert (exc.value.path, exc.value.field) == ("local.yaml", "tasks.soup.fixed_start")
        assert exc.value.message.startswith(message), exc.value.message
    config["tasks"]["soup"]["fixed_start"] = "soup-digits"  # a name in models: built in results/models
    check_shown_paths(config, lambda keys: "config/config.yaml", config_files=[private])


@pytest.mark.parametrize(
    "shown, own",
    [
        ("tiny/results", "tiny/results"),
        ("./tiny/results/soup/assets", "tiny/results"),
        ("tiny/logs", "tiny/logs"),
        ("tiny/.snakemake/metadata", "tiny/.snakemake"),
        ("results", "results"),  # the launch folder's own, too
        ("logs/dpo", "logs"),
    ],
)
def test_a_shown_path_in_the_workflows_own_folders_is_refused_when_the_config_loads(tmp_path, monkeypatch, shown, own):
    """The hostile run of 2026-12-02: ``sandbox_show: [tiny/results]`` showed every run's
    ``rows.jsonl`` and manifests and other tasks' hidden splits. Refused at load time, made or
    not, naming the file and the key."""
    from replaykit.config import source_of
    from replaykit.isolation import check_shown_paths

    launch = tmp_path / "checkout"
    launch.mkdir()
    monkeypatch.chdir(launch)
    config = default_config()
    config["workdir"] = "tiny"
    extra = {"sandbox_show": [shown]}
    config.update(extra)
    layers = [("config/config.yaml", default_config()), ("shown.yaml", extra)]
    with pytest.raises(InputError) as exc:
        check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))
    assert (exc.value.path, exc.value.field) == ("shown.yaml", "sandbox_show")
    assert exc.value.message.startswith(f"{(launch / shown).resolve()} is inside the workflow's own {launch / own}:")


@pytest.mark.parametrize("value", ["", ".", "/", "./"])
def test_a_hidden_working_directory_is_refused_when_the_config_loads(tmp_path, monkeypatch, value):
    """A hostile tester's finding: ``sandbox_hide: [""]`` (or ``/``) was accepted, every probe
    then failed in bwrap (``Can't chdir``) using up its budget, and the self-test failed with a
    line naming neither file nor key. Refused when the config is read, naming both."""
    from replaykit.config import source_of
    from replaykit.isolation import check_shown_paths

    monkeypatch.chdir(tmp_path)
    config = default_config()
    extra = {"sandbox_hide": ["/opt/secret", value]}
    config.update(extra)
    layers = [("config/config.yaml", default_config()), ("hide.yaml", extra)]
    with pytest.raises(InputError) as exc:
        check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))
    assert (exc.value.path, exc.value.field) == ("hide.yaml", "sandbox_hide")
    assert exc.value.message.startswith(f"{value!r} ({Path(value).resolve()}) holds the working directory {tmp_path}")
    config["sandbox_hide"] = ["/opt/secret", "datasets/final"]  # folders to hide: fine, made or not
    check_shown_paths(config, lambda keys: source_of(keys, layers, "config"))


def test_a_shown_folder_holding_a_config_file_is_refused_when_the_config_loads(tmp_path, monkeypatch):
    """A private ``--configfile`` (it can hold ``final_salt``) in a shown folder: refused, inside
    the launch folder or outside it; a ``--config`` layer is no file and is passed over."""
    from replaykit.config import source_of
    from replaykit.isolation import check_shown_paths

    launch = tmp_path / "checkout"
    (launch / "hcfg").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    monkeypatch.chdir(launch)
    for folder, file in (
        (launch / "hcfg", "hcfg/p5.yaml"),
        (tmp_path / "private", str(tmp_path / "private/salt.yaml")),
    ):
        Path(file).write_text("final_salt: s3cret\n")
        config = default_config()
        extra = {"sandbox_show": [str(folder)], "final_salt": "s3cret"}
        config.update(extra)
        layers = [("config/config.yaml", default_config()), (file, extra), ("--config", {})]
        with pytest.raises(InputError) as exc:
            check_shown_paths(
                config, lambda keys, layers=layers: source_of(keys, layers, "config"), [n for n, _ in layers]
            )
        assert (exc.value.path, exc.value.field) == (file, "sandbox_show")
        assert exc.value.message.startswith(f"{folder} holds the config file {Path(file).resolve()}, which can hold")
        # the same folder without the config file in it: shown as named
        check_shown_paths(
            config, lambda keys, layers=layers: source_of(keys, layers, "config"), ["config/config.yaml", "--config"]
        )


@pytest.mark.parametrize(
    "value, message",
    [
        ("/tmp/a\0b", "'/tmp/a\\x00b' holds the control character '\\x00'"),
        ("/tmp/" + "x" * 300, "is not a usable path"),
    ],
)
def test_a_shown_path_that_is_no_path_is_one_line_naming_the_key(value, message):
    from replaykit.isolation import check_shown_paths

    config = default_config()
    config["sandbox_show"] = [value]
    with pytest.raises(InputError) as exc:
        check_shown_paths(config, lambda keys: "shown.yaml")
    assert (exc.value.path, exc.value.field) == ("shown.yaml", "sandbox_show")
    assert message in exc.value.message and "\n" not in str(exc.value)


def dry_run_errors(work: Path, *options: str):
    """``snakemake --workflow-profile none OPTIONS -n -- results/soup/final`` in ``work``: its
    result and its ``error:`` lines."""
    import subprocess
    import sys

    snakemake = Path(sys.executable).parent / "snakemake"
    argv = [str(snakemake), "--workflow-profile", "none", *options, "-n", "--", "results/soup/final"]
    out = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=300)
    return out, [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("shown", ["/", "results/soup", "shown.yaml", "/proc"])
def test_the_workflow_refuses_a_shown_root_before_any_job(tmp_path, shown):
    """``snakemake -n`` with a ``--configfile`` naming ``sandbox_show: [/]`` (or a folder of its
    own ``results/``, the config file itself, which can hold ``final_salt``, or the host's
    ``/proc``): one line naming that file and the key, exit 1, no job planned."""
    from conftest import copy_workflow

    work = copy_workflow(tmp_path)
    (work / "shown.yaml").write_text(f"sandbox_show: [{shown}]\n")
    out, errors = dry_run_errors(work, "--configfile", "shown.yaml")
    expected = {
        "/": f"/ holds the working directory {work.resolve()}: the sandbox would show everything beside it "
        "(other checkouts, runs, datasets); name the folders it needs instead",
        "results/soup": f"{work.resolve()}/results/soup is inside the workflow's own {work.resolve()}/results: it "
        "holds every run's scores, the final split's files and Snakemake's records; a run is shown what it needs "
        "from there by its plan (public split, fixed start), so name folders outside it",
        "shown.yaml": f"{work.resolve()}/shown.yaml is the config file {work.resolve()}/shown.yaml, which can "
        "hold final_salt; keep config files out of shown paths",
        "/proc": "/proc is the host's /proc or holds it: it shows every host process's command line, the host's "
        "sockets and devices; the sandbox has its own",
    }[shown]
    assert out.returncode != 0 and errors == [f"error: shown.yaml: sandbox_show: {expected}"], (
        out.stdout[-2000:] + out.stderr[-2000:]
    )
    assert "Job stats" not in out.stdout


def test_a_config_file_outside_the_checkout_is_named_as_given(tmp_path):
    """A ``--configfile`` outside the folder snakemake starts in was named relative to it
    (``../../tmp/x.yaml``, hostile 2026-12-02); it is named by its absolute path now. Its
    ``workdir: /`` is refused in one line before any job (hostile 2026-12-05: a dry run took it),
    and so is ``--directory /`` (second hostile pass)."""
    from conftest import copy_workflow

    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    outside = tmp_path / "elsewhere" / "root.yaml"
    outside.parent.mkdir()
    outside.write_text("workdir: /\n")
    out, errors = dry_run_errors(work, "--configfile", str(outside))
    assert out.returncode != 0 and errors == [
        f"error: {outside}: workdir: '/' is the file system's root: results/, logs/ and .snakemake/ would lie "
        "beside /usr and /etc, and the sandbox cannot hide it as it hides any other working directory; name a folder"
    ], out.stdout[-2000:] + out.stderr[-2000:]
    assert "Job stats" not in out.stdout
    out, errors = dry_run_errors(work, "--configfile", "config/test.yaml", "--directory", "/")
    assert out.returncode != 0 and errors == [
        "error: command line: --directory: '/' is the file system's root: results/, logs/ and .snakemake/ would "
        "lie beside /usr and /etc; name a folder"
    ], out.stdout[-2000:] + out.stderr[-2000:]


def test_a_salt_on_the_command_line_is_refused(tmp_path):
    """``--config final_salt=...`` puts the salt in Snakemake's banner and its log (second
    hostile pass, 2026-12-05): refused in one line before any job, naming the private config
    file as the place for it."""
    from conftest import copy_workflow

    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    out, errors = dry_run_errors(work, "--config", "final_salt=S3CRET")
    assert out.returncode != 0 and errors == [
        "error: command line: final_salt: Snakemake prints its command line and keeps it in .snakemake/log/; "
        "put the salt in a private --configfile (docs/operations.md)"
    ], out.stdout[-2000:] + out.stderr[-2000:]
    assert "Job stats" not in out.stdout


def test_printed_commands_keep_every_config_file():
    """The formal replay command ``explore submit`` prints (and the assets hint) name every
    config file after config/config.yaml in one ``--configfile`` option: Snakemake keeps only
    the last of repeated ones, and a dropped file (the tiny config, a private salt file) would
    replay another config. Checked with Snakemake's own argument parser."""
    import shlex

    from snakemake.cli import get_argument_parser

    from replaykit.exploration.submit import formal_replay_command

    files = [{"path": p, "sha256": "0" * 64} for p in ("config/config.yaml", "config/test.yaml", "private/salt.yaml")]
    doc = {"task": "soup", "name": "s1", "patch": "patches/soup-s1.diff", "config_files": files}
    args = get_argument_parser().parse_args(shlex.split(formal_replay_command(doc))[1:])
    assert args.configfile == [Path("config/test.yaml"), Path("private/salt.yaml")]  # repeated options: only the last
    alone = get_argument_parser().parse_args(shlex.split(formal_replay_command({**doc, "config_files": files[:1]}))[1:])
    assert not alone.configfile


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--configfile", "a.yaml", "--configfile", "b.yaml"], "--configfile"),  # read b.yaml only
        (["--configf", "a.yaml", "--configfiles=b.yaml"], "--configfile"),  # a prefix and =: as argparse reads them
        (["--config", "tiny=true", "-n", "-C", "seed=1"], "--config"),
        (["--resources", "gpu=1", "--res", "mem_mb=9000"], "--resources"),  # the gpu would be lost
        (["--set-threads", "replay=4", "--set-threads", "score=2"], "--set-threads"),
        (["-C", "a=1", "-Cb=2"], "--config"),  # attached (second hostile test, 2026-12-05)
        (["-pC", "a=1", "--config", "b=2"], "--config"),  # after a flag
        (["-n", "-p", "-C", "a=1", "-F"], None),
        (["--configfile", "a.yaml", "b.yaml", "--config", "x=1", "--", "--configfile"], None),  # once each: fine
        (["--cores", "1", "--cores", "2"], None),  # a single value: the last is meant (argparse's rule)
    ],
)
def test_an_option_that_takes_a_list_given_twice_is_refused(argv, option):
    """Snakemake's parser keeps only the last ``--configfile`` (``--config``, ``--resources``, ...)
    and drops the earlier values without a word."""
    from replaykit.config import check_repeated_options

    if option is None:
        check_repeated_options(argv)
        return
    with pytest.raises(InputError) as exc:
        check_repeated_options(argv)
    assert (exc.value.path, exc.value.field) == ("command line", option)
    assert exc.value.message == (
        "given 2 times: Snakemake keeps the values after the last one and drops the others without a word; "
        f"give all of them after one {option}"
    )


def test_the_workflow_refuses_a_repeated_configfile_before_any_job(tmp_path):
    import subprocess
    import sys

    from conftest import copy_workflow

    work = copy_workflow(tmp_path)
    (work / "a.yaml").write_text("tasks: {dpo: {threads: 1}}\n")
    (work / "b.yaml").write_text("tiny: true\n")
    snakemake = Path(sys.executable).parent / "snakemake"
    argv = ["--workflow-profile", "none", "--configfile", "a.yaml", "--configfile", "b.yaml", "-n", "results/dpo/final"]
    out = subprocess.run([str(snakemake), *argv], cwd=work, capture_output=True, text=True, timeout=300)
    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("error:")]
    assert out.returncode != 0 and errors == [
        "error: command line: --configfile: given 2 times: Snakemake keeps the values after the last one and "
        "drops the others without a word; give all of them after one --configfile"
    ], out.stdout[-2000:] + out.stderr[-2000:]
    assert "Job stats" not in out.stdout


@pytest.mark.parametrize(
    "change, field, message",
    [
        # hostile (2026-12-05): the exponent hint is given only where a number is wanted, and
        # where the schema's alternatives (a byte count or 'auto') hold one
        ({"tiny": "1e0"}, "tiny", "'1e0' is not of type 'boolean'"),
        ({"sandbox_show": "1e3"}, "sandbox_show", "'1e3' is not of type 'array'"),
        (
            {"sandbox_limits": {"memory_bytes": "8e9"}},
            "sandbox_limits.memory_bytes",
            "'8e9' is a string in YAML 1.1 (an exponent needs a dot and a sign: 3.0e+2): write 8000000000",
        ),
        (
            {"sandbox_limits": {"memory_bytes": None}},
            "sandbox_limits.memory_bytes",
            "empty (YAML reads nothing, `~` and `null` as null), should be of type integer or string",
        ),
        ({"tiny": 1.0}, "tiny", "1.0 is not of type 'boolean'"),  # not "write a whole number"
        # a number whose plain form has an exponent is written the way YAML 1.1 reads as a float
        (
            {"sandbox_limits": {"processes": "1e-05"}},
            "sandbox_limits.processes",
            "'1e-05' is a string in YAML 1.1 (an exponent needs a dot and a sign: 3.0e+2): write 1.0e-05",
        ),
    ],
)
def test_type_hints_fit_the_type_the_schema_wants(change, field, message):
    config = {**default_config(), **change}
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/config.yaml")
    assert (exc.value.field, exc.value.message) == (field, message)


def test_an_exponent_out_of_a_floats_range_gets_no_number_to_write():
    for text in ("1e400", "1e-400"):
        config = default_config()
        config["tasks"]["dpo"]["budget"]["outer_limit_s"] = text
        with pytest.raises(InputError) as exc:
            check_config(config, SCHEMA, "config/config.yaml")
        assert exc.value.message == f"{text!r} is a string in YAML 1.1, and out of a float's range"


@pytest.mark.parametrize(
    "doc, field, message",
    [
        # hostile (2026-12-05): the replay trained, then stopped on KeyError: 'budget_s'
        ({"name": "g2"}, "budget_s", "None is not a number of seconds (finite, at least 0)"),
        ({"budget_s": 10, "budget_used_s": float("nan")}, "budget_used_s", "nan is not a number of seconds"),
        ({"budget_s": 10, "budget_used_s": 1, "probes": True}, "probes", "True is not a count of probes"),
        ({"budget_s": 10, "budget_used_s": 1, "probes": 1, "receipts": {}}, "receipts", "{} is not a list of receipts"),
        ({"budget_s": 10, "budget_used_s": 1, "probes": 1, "receipts": [3]}, "receipts[0]", "not a receipt"),
    ],
)
def test_a_malformed_exploration_sidecar_stops_the_workflow_before_any_job(tmp_path, doc, field, message):
    """A candidate patch's sidecar (``<patch>.exploration.json``) that names the patch is read
    into the replay record after training: its fields are checked when the workflow starts."""
    import hashlib

    patch = tmp_path / "soup-g2.diff"
    patch.write_text("--- a/train.py\n+++ b/train.py\n")
    side = tmp_path / "soup-g2.exploration.json"
    side.write_text(json.dumps({"patch_sha256": hashlib.sha256(patch.read_bytes()).hexdigest(), **doc}))
    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    config["tasks"]["soup"].update(candidates={"g2": str(patch)}, candidate="g2")
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/test.yaml")
    assert (exc.value.path, exc.value.field) == (str(side), field)
    assert exc.value.message.startswith(message), exc.value.message
    # a sidecar naming another patch is no error: the record says it is not linked
    side.write_text(json.dumps({"patch_sha256": "0" * 64}))
    check_config(config, SCHEMA, "config/test.yaml")


def test_a_config_file_in_the_recipes_folder_is_refused(tmp_path):
    """Hostile (2026-12-05): a config file holding ``final_salt`` kept in ``recipes/soup/`` was
    copied into the exploration's workspace (and would be into a replay's), where candidate
    code read it: the sandbox masks a config file by its path, not its copies."""
    recipes = tmp_path / "recipes"
    (recipes / "soup").mkdir(parents=True)
    inside = recipes / "soup" / "op.yaml"
    inside.write_text("final_salt: s3cret\n")
    config = default_config()
    layers = [("config/config.yaml", config), (str(inside), {})]
    with pytest.raises(InputError) as exc:
        check_config(config, SCHEMA, "config/config.yaml", layers, recipes_root=recipes)
    assert (exc.value.path, exc.value.field) == (str(inside), None)
    assert exc.value.message.startswith(f"a config file in use lies in {recipes}/, which every workspace copies")
    outside = tmp_path / "op.yaml"
    outside.write_text("final_salt: s3cret\n")
    check_config(config, SCHEMA, "config/config.yaml", [("config/config.yaml", config), (str(outside), {})])
