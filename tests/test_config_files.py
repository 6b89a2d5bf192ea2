"""config/README.md is generated from the schema; config/test.yaml is valid and runs every task."""

from __future__ import annotations

import subprocess
import sys

import jsonschema
import pytest
import yaml

from conftest import ROOT, TEST_CONFIG, copy_workflow, snakemake


def test_config_readme_equals_the_generated_one():
    result = subprocess.run(
        [sys.executable, "scripts/config_readme.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_schema_key_with_a_description_is_in_config_readme():
    readme = (ROOT / "config/README.md").read_text()
    schema = yaml.safe_load((ROOT / "config/schema.yaml").read_text())
    for key in (
        "isolation",
        "final_salt",
        "tasks.dpo.budget.outer_limit_s",
        "tasks.digress.data.split_seed",
        "tasks.soup.recipe.overrides",
    ):
        assert f"| `{key}` |" in readme
    assert schema["description"].split()[0] in readme


@pytest.mark.parametrize("name", ["config.yaml", "test.yaml"])
def test_config_files_are_valid(name):
    schema = yaml.safe_load((ROOT / "config/schema.yaml").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load((ROOT / "config" / name).read_text()))


def test_test_config_covers_every_task():
    test = yaml.safe_load(TEST_CONFIG.read_text())
    default = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert sorted(test["tasks"]) == sorted(default["tasks"])
    assert all(t["fixed_start"] in test["models"] for t in test["tasks"].values())


def test_test_config_dry_run_lists_every_task(tmp_path):
    """The README's command for the whole test DAG, as a dry run (the run itself: minutes)."""
    work = copy_workflow(tmp_path)
    out = snakemake(work, "--configfile", "config/test.yaml", "--cores", "1", "--resources", "gpu=1", "-n")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for task in ("dpo", "rm", "soup", "digress", "ddpo"):
        assert f"results/{task}/assets/manifest.json" in out.stdout
    for model in ("tiny-llama", "soup-tiny", "qm9pack", "ddpo-tiny"):
        assert f"results/models/{model}" in out.stdout
