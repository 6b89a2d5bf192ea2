"""Per-rule times of a finished run, from Snakemake's `benchmark:` files.

Usage: python bench/collect.py [benchmarks/] > table.md
Prints a Markdown table: rule file, wall seconds (s), max RSS (MB), CPU time (s), mean load.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def rows(root: Path):
    for path in sorted(root.rglob("*.tsv")):
        with open(path, newline="") as handle:
            record = list(csv.DictReader(handle, delimiter="\t"))[-1]
        yield path.relative_to(root).as_posix(), record


def main(root: str = "benchmarks") -> None:
    total = 0.0
    print("| benchmark | wall (s) | max RSS (MB) | CPU (s) | mean load |")
    print("|---|---|---|---|---|")
    for name, r in rows(Path(root)):
        total += float(r["s"])
        print(f"| {name} | {float(r['s']):.1f} | {r['max_rss']} | {r['cpu_time']} | {r['mean_load']} |")
    print(f"| **sum** | {total:.1f} | | | |")


if __name__ == "__main__":
    main(*sys.argv[1:])
