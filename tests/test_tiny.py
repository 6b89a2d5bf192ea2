"""Tiny runs kept apart (issue 28): config/test.yaml's ``workdir`` moves results/ and logs/ under
tiny/, and the config's relative paths, read from where snakemake starts, are rewritten for it."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import TEST_CONFIG
from replaykit.config import rebase_paths


def test_the_tiny_config_is_marked_and_works_apart():
    config = yaml.safe_load(TEST_CONFIG.read_text())
    assert config["tiny"] is True and config["workdir"] == "tiny"


def test_relative_paths_are_rewritten_for_the_workdir(tmp_path):
    """Each relative path names the same file from ``tmp_path/tiny`` as it did from ``tmp_path``
    (checked by resolving both); absolute paths, built models and values that are no path stay."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data/items.jsonl").write_text("{}\n")
    config = {
        "models": {"tiny-llama": {}},
        "sandbox_show": ["/opt/cuda", "extra"],
        "sandbox_hide": [],
        "tasks": {
            "dpo": {"fixed_start": "tiny-llama", "candidates": {"a": "patches/a.diff"}, "data": {"source": "embedded"}},
            "rm": {"fixed_start": "models/rm", "data": {"pairs": "data/items.jsonl", "n": 3}},
        },
    }
    rebase_paths(config, tmp_path, Path("tiny"))
    work = tmp_path / "tiny"

    def same(before: str, after: str) -> bool:
        return (tmp_path / before).resolve() == (work / after).resolve() and after != before

    assert config["sandbox_show"][0] == "/opt/cuda" and same("extra", config["sandbox_show"][1])
    dpo, rm = config["tasks"]["dpo"], config["tasks"]["rm"]
    assert dpo["fixed_start"] == "tiny-llama" and dpo["data"] == {"source": "embedded"}
    assert same("patches/a.diff", dpo["candidates"]["a"])
    assert same("models/rm", rm["fixed_start"]) and same("data/items.jsonl", rm["data"]["pairs"])
    assert rm["data"]["n"] == 3 and rm["candidates"] == {}
