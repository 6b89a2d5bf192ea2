"""The package's structure cannot regress: the import contracts of pyproject.toml hold (the
harness imports no task, report, config, model or exploration module; no part imports a part
above it, so there are no circles; `lint-imports`, import-linter's command, reads imports inside
functions too), and no function in src/ is over 80 lines but the command line's argument parser
(scripts/structure.py prints the figures)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80  # lines of a function, its docstring included
EXEMPT = {"src/replaykit/cli.py:parser"}  # one add_argument per option, read as a table


def structure():
    spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_import_contracts_are_kept():
    out = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "2 kept, 0 broken" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]


def test_no_circle_and_no_arrow_up_the_layers():
    figures = structure().figures()
    assert figures["upward_arrows"] == [] and figures["module_circles"] == [] and figures["part_circles"] == []
    assert figures["parts_outside_the_layers"] == []


def test_no_function_is_over_80_lines():
    long = {name: n for name, n in structure().functions() if n > LIMIT and name not in EXEMPT}
    assert long == {}


def test_the_size_measure_counts_a_functions_lines(tmp_path):
    """functions() on a file written here: def to last line, a method by its class."""
    (tmp_path / "m.py").write_text("def f():\n    x = 1\n    return x\n\n\nclass C:\n    def g(self):\n        pass\n")
    found = dict(structure().functions(tmp_path))
    assert {name.split(":")[1]: n for name, n in found.items()} == {"f": 3, "C.g": 2}
