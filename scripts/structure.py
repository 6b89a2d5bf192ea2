"""Figures of the package's structure: lines, function sizes, imports between its parts, arrows
that run up the layers, and circles of imports.

    python scripts/structure.py            # the figures, as a table
    python scripts/structure.py --json     # the same, as JSON

Parts are the top-level modules and packages of ``replaykit`` (``harness``, ``tasks``,
``report``, ``cli``, ...). Imports are read by grimp (import-linter's graph; imports inside
functions count too). Layers, top first, are those of the ``replaykit layers`` contract in
pyproject.toml (``[tool.importlinter]``); an arrow runs up when a part imports a part of a
higher layer. Function sizes are read with :mod:`ast` from ``src/`` (a function's lines: from
its ``def`` to its last line, decorators excluded, nested functions counted in their parent
too); ``tests/test_structure.py`` holds the limits.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "replaykit"


def functions(root: Path = SRC) -> list[tuple[str, int]]:
    """``("<file>:<qualified name>", lines)`` of every function and method under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))

        def visit(node, prefix, path=path):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{prefix}{child.name}"
                    out.append((f"{path.relative_to(root.parent)}:{name}", child.end_lineno - child.lineno + 1))
                    visit(child, f"{name}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return out


def lines(root: Path = SRC) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.rglob("*.py"))


def layers() -> list[list[str]]:
    """The layers of pyproject.toml's ``replaykit layers`` contract, top first, each a list of
    parts (``a | b`` and ``a : b`` are both one layer here)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["name"] == "replaykit layers")
    return [[part(p.strip()) for p in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def part(module: str) -> str:
    """``replaykit.harness.replay`` -> ``harness``; ``replaykit.cli`` -> ``cli``."""
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else bits[0]


def import_graph() -> dict[str, set[str]]:
    """Module -> modules of the package it imports (grimp; imports inside functions too)."""
    import grimp

    graph = grimp.build_graph(PACKAGE)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


def figures() -> dict:
    funcs = functions()
    biggest = max(funcs, key=lambda f: f[1])
    modules = import_graph()
    parts: dict[str, set[str]] = {}
    between = set()
    for m, targets in modules.items():
        for t in targets:
            a, b = part(m), part(t)
            if a != b and a != PACKAGE and b != PACKAGE:
                parts.setdefault(a, set()).add(b)
                between.add((m, t))
    rank = {p: i for i, layer in enumerate(layers()) for p in layer}
    upward = sorted(
        f"{m} -> {t}" for m, t in between if part(m) in rank and part(t) in rank and rank[part(t)] < rank[part(m)]
    )
    unlayered = sorted({part(m) for m in modules if part(m) not in rank and part(m) != PACKAGE})
    return {
        "lines": lines(),
        "functions": len(funcs),
        "largest_function": {"name": biggest[0], "lines": biggest[1]},
        "functions_over_50_lines": sum(n > 50 for _, n in funcs),
        "functions_over_80_lines": sorted(f"{name} ({n})" for name, n in funcs if n > 80),
        "imports_between_parts": len(between),
        "part_arrows": {a: sorted(b) for a, b in sorted(parts.items())},
        "upward_arrows": upward,
        "parts_outside_the_layers": unlayered,
        "module_circles": circles(modules),
        "part_circles": circles(parts),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    doc = figures()
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    for key, value in doc.items():
        if isinstance(value, list) and value:
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"  {item}")
        elif isinstance(value, dict) and key == "part_arrows":
            print(f"{key}:")
            for a, bs in value.items():
                print(f"  {a} -> {', '.join(bs)}")
        else:
            print(f"{key}: {value if not isinstance(value, list) else 0}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
