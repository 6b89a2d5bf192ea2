"""Parsing the workflow is cheap: it imports no torch (nor the other model libraries), and
local data files are read again only when they change (replaykit.harness.checked)."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_workflow
from replaykit.harness import checked

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEAVY = ("torch", "transformers", "diffusers", "open_clip", "trl", "peft", "rdkit", "torch_geometric")


def test_importing_every_plugin_imports_no_model_library():
    code = (
        "import sys; import replaykit.config; from replaykit.tasks import KNOWN, get_task, builders; "
        "[get_task(n) for n in KNOWN]; builders(); "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_dry_run_of_all_five_tasks_imports_no_torch(tmp_path):
    """`snakemake -n` of every task's final result (the embedded config) imports none of the
    model libraries (before: the soup plug-in imported torch, ~4 s of every parse)."""
    targets = [f"results/{t}/final" for t in ("dpo", "rm", "soup", "digress", "ddpo")]
    work = copy_workflow(tmp_path)
    code = (
        "import atexit, sys; from snakemake.cli import main; "
        "atexit.register(lambda: print('MODULES', ' '.join(sorted(m for m in sys.modules "
        f"if m.split('.')[0] in {HEAVY!r} or m.startswith('replaykit.tasks.'))), file=sys.stderr)); "
        f"sys.argv = ['snakemake', *{targets!r}, '-n', '--cores', '1', '--workflow-profile', 'none']; main()"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    modules = [line for line in out.stderr.splitlines() if line.startswith("MODULES")][-1].split()[1:]
    assert "replaykit.tasks.soup" in modules and "replaykit.tasks.ddpo" in modules  # the plug-ins were read
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []


def test_a_local_file_is_checked_again_only_when_it_changes(tmp_path):
    data, record = tmp_path / "pairs.jsonl", tmp_path / ".snakemake" / "checked.json"
    data.write_text("good\n")
    record.parent.mkdir()
    reads = []

    def check(path):
        reads.append(path)
        if Path(path).read_text().startswith("bad"):
            raise ValueError("bad row")

    for _ in range(2):  # two parses of the workflow
        with checked.remembering(record):
            checked.check_once(data, check)
    assert len(reads) == 1 and record.is_file()
    data.write_text("bad!\n")  # a change (ctime moves even if size and mtime were restored)
    for _ in range(2):  # a bad file is read, and refused, every time
        with pytest.raises(ValueError), checked.remembering(record):
            checked.check_once(data, check)
    assert len(reads) == 3
    data.write_text("good\n")
    with checked.remembering(record):
        checked.check_once(data, check)
        checked.check_once(data, lambda path: reads.append("other check"))  # another check: its own entry
    assert len(reads) == 5
    checked.check_once(data, check)  # outside remembering(): always checked
    assert len(reads) == 6
