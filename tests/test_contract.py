"""The task contract (replaykit.tasks.contract): every shipped plug-in satisfies it, an
incomplete one is refused with one line naming what is missing, and the registries (tasks,
fixed-start builders) are found from the plug-ins."""

import ast
import re
import types
from pathlib import Path

import pytest
import yaml

from replaykit.harness.errors import InputError
from replaykit.tasks import KNOWN, builders, contract, get_task

ROOT = Path(__file__).resolve().parents[1]
TASKS_DIR = ROOT / "src" / "replaykit" / "tasks"


def test_the_registry_is_found_from_the_tasks_package():
    assert KNOWN == ("ddpo", "digress", "dpo", "rm", "soup")  # sorted; 'common' is not a task
    folders = {p.name for p in TASKS_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert set(KNOWN) == folders - {"common"}


@pytest.mark.parametrize("name", KNOWN)
def test_every_shipped_plugin_satisfies_the_contract(name):
    plugin = get_task(name)
    assert isinstance(plugin, contract.TaskPlugin) and plugin.name == name
    for member in contract.REQUIRED:
        assert hasattr(plugin.module, member), member
    for f in contract.MEMBERS:  # every member present (given or defaulted), of its kind
        assert contract._problem(f.name, f.metadata["kind"], getattr(plugin, f.name)) is None, f.name
    assert set(plugin.METRIC) >= {"final", "proxy", "direction", "scale", "uncertainty"}
    assert plugin.split_file("proxy").startswith("public/") and plugin.split_file("final").startswith("hidden/")


def test_defaults_are_declared_once_in_the_contract():
    rm, soup = get_task("rm"), get_task("soup")
    assert rm.REPORT_DIAGNOSTICS == ("Chat", "Chat Hard", "Reasoning", "Safety")
    assert get_task("dpo").METRIC["scale"] == 1.0 and rm.METRIC["scale"] == 100.0
    assert get_task("dpo").METRIC["uncertainty"] == "binomial_se"  # the default
    assert (rm.FIXED_START_REFERENCE, soup.FIXED_START_REFERENCE) == (False, True)
    assert (soup.REFERENCE_USES_PUBLIC, rm.REFERENCE_USES_PUBLIC) == (True, False)
    assert (soup.ROW_CLUSTER, rm.ROW_CLUSTER) == ("label", None)
    assert get_task("ddpo").TRAINING_CURVE == "reward_mean" and rm.TRAINING_CURVE is None
    assert rm.check_fixed_start is None and callable(soup.check_fixed_start)
    # the contract documents every member it declares
    text = contract.describe()
    for f in contract.MEMBERS:
        assert f"{f.name} (" in text and f.metadata["doc"]


def test_a_missing_required_member_is_one_clear_error():
    module = types.ModuleType("replaykit.tasks.toy")
    module.__file__ = "src/replaykit/tasks/toy/__init__.py"
    module.METRIC = {"final": "f", "proxy": "p", "direction": "maximize"}
    module.check_data = module.build_assets = module.split_file = module.validate = lambda *a: None
    with pytest.raises(contract.ContractError) as err:
        contract.load("toy", module)
    line = str(err.value)
    assert isinstance(err.value, InputError) and "\n" not in line
    assert line.startswith("src/replaykit/tasks/toy/__init__.py: ")
    for member in ("evaluate", "FINAL_SOURCES", "FINAL_PACKAGE_DATA", "FIXED_START_IS_DATA"):
        assert member in line
    assert "missing required members" in line and "'toy'" in line


def test_a_member_of_the_wrong_kind_is_named():
    module = types.ModuleType("replaykit.tasks.toy")
    module.__file__ = "toy/__init__.py"
    for member in contract.REQUIRED:
        setattr(module, member, lambda *a: None)
    module.METRIC = {"final": "f", "proxy": "p", "direction": "up"}
    module.FINAL_SOURCES, module.FINAL_PACKAGE_DATA, module.FIXED_START_IS_DATA = "data", (), 0
    with pytest.raises(contract.ContractError) as err:
        contract.load("toy", module)
    assert "METRIC direction 'up'" in str(err.value)
    assert "FINAL_SOURCES not a tuple of strings" in str(err.value)
    assert "FIXED_START_IS_DATA not a bool" in str(err.value)
    module.METRIC["direction"], module.FINAL_SOURCES, module.FIXED_START_IS_DATA = "minimize", (), False
    plugin = contract.load("toy", module)
    assert plugin.METRIC["scale"] == 1.0 and plugin.FIXED_START_BUILDERS == {}


def test_fixed_start_builders_come_from_the_plugins_and_match_the_schema():
    found = builders()
    assert found == {
        "soup-digits": "replaykit.tasks.soup.ingredients",
        "qm9pack": "replaykit.tasks.digress.qm9",
        "ddpo-digits": "replaykit.tasks.ddpo.pipeline",
        "tiny-llama": "replaykit.tiny_model",
    }
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    enums = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("builder"), dict) and "enum" in node["builder"]:
                enums.update(node["builder"]["enum"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert enums == set(found)


def test_readers_use_the_contract_not_getattr_defaults():
    """No ``getattr(plugin, ...)`` / ``getattr(get_task(...), ...)`` left in the package or rules."""
    files = [*(ROOT / "src" / "replaykit").rglob("*.py"), *(ROOT / "rules").glob("*.smk")]
    pattern = re.compile(r"getattr\((plugin|task|get_task\()")
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def _imported_tasks(path: Path) -> set[str]:
    """Task subpackages a module of ``replaykit.tasks.<own>`` imports (relative or absolute)."""
    rel = path.relative_to(TASKS_DIR).parts
    own, depth = rel[0], len(rel)  # a relative import of level ``depth`` names replaykit.tasks
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: climb to replaykit.tasks, then read the first part
                up = node.level - depth
                parts = (node.module or "").split(".") if up == 0 else []
                if up == 0 and not node.module:
                    parts = [a.name for a in node.names]
            else:
                name = node.module or ""
                parts = name.split(".")[2:] if name.startswith("replaykit.tasks.") else []
            out.update(p for p in parts[:1] if p in KNOWN and p != own)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("replaykit.tasks."):
                    first = alias.name.split(".")[2]
                    if first in KNOWN and first != own:
                        out.add(first)
    return out


def test_no_task_imports_another_task():
    imports = {
        str(p.relative_to(TASKS_DIR)): _imported_tasks(p) for name in KNOWN for p in (TASKS_DIR / name).rglob("*.py")
    }
    assert {k: v for k, v in imports.items() if v} == {}


def test_the_shared_modules_are_frozen_code():
    """The frozen-code record covers the whole package, the shared task modules included."""
    from replaykit.tasks import frozen_code

    files = frozen_code().files()
    for rel in (
        "tasks/common/ifeval.py",
        "tasks/common/ifeval_text.py",
        "tasks/common/preference_pairs.py",
        "tasks/common/clip.py",
        "tasks/contract.py",
    ):
        assert rel in files, rel
