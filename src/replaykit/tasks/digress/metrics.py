"""Molecule metrics of sampled graphs: validity, uniqueness, novelty and their product.

Rules (DiGress's ``BasicMolecularMetrics`` in ``src/analysis/rdkit_functions.py``, strict form):

* **valid**: the graph is built as an RDKit molecule (atom classes C/N/O/F without formal
  charges, bond classes single/double/triple/aromatic; :func:`.data.to_mol`) and
  ``Chem.SanitizeMol`` succeeds; the largest fragment is then kept, so a disconnected
  graph whose fragments sanitise counts as valid (as in DiGress). Validity = valid / N.
* **unique**: distinct canonical SMILES (of the largest fragments) among the valid
  molecules / number of valid.
* **novel**: distinct valid SMILES not in the training set's SMILES / number of distinct
  valid SMILES. The training SMILES are made from the training *graphs* by the same
  function (``training_smiles`` in the package), not from the source strings: charges and
  stereo marks there would never match a sampled graph. The training set scored against
  itself is 0 % novel.
* V × U × N: the product.

DiGress computes uniqueness and novelty on a *relaxed*-valid set (a +1 charge allowed on
N, O, S); here the strict set is used for all three, so charged species never count.
Also reported: the fraction of valid molecules that were connected before keeping the
largest fragment.
"""

from __future__ import annotations

from .data import to_mol


def molecule_smiles(atoms, bonds) -> tuple[str | None, bool]:
    """Canonical SMILES of the largest fragment of a sanitised graph, or None when
    sanitisation fails; and whether the molecule was one fragment."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    mol = to_mol(atoms, bonds)
    if mol.GetNumAtoms() == 0:
        return None, False
    try:
        Chem.SanitizeMol(mol)
        frags = Chem.rdmolops.GetMolFrags(mol, asMols=True, sanitizeFrags=True)
    except Exception:  # RDKit raises several sanitisation errors (valence, kekulize, ...)
        return None, False
    largest = max(frags, key=lambda m: m.GetNumAtoms())
    return Chem.MolToSmiles(largest), len(frags) == 1


def smiles_metrics(smiles: list[str | None], train_smiles: set[str], connected: list[bool] | None = None) -> dict:
    """Metrics of per-molecule canonical SMILES (None = invalid). Raises ValueError for an empty list."""
    if not smiles:
        raise ValueError("no molecules")
    valid = [s for s in smiles if s is not None]
    unique = set(valid)
    novel = unique - set(train_smiles)
    v = len(valid) / len(smiles)
    u = len(unique) / len(valid) if valid else 0.0
    nv = len(novel) / len(unique) if unique else 0.0
    out = {
        "n_samples": len(smiles),
        "n_valid": len(valid),
        "n_unique": len(unique),
        "n_novel": len(novel),
        "validity": v,
        "uniqueness": u,
        "novelty": nv,
        "vun": v * u * nv,
    }
    if connected is not None:
        out["connected_of_valid"] = (
            (sum(c for s, c in zip(smiles, connected) if s is not None) / len(valid)) if valid else 0.0
        )
    return out


def graph_metrics(atoms, bonds, train_smiles: set[str]) -> tuple[dict, list[str | None]]:
    """Metrics of sampled class arrays (``B × n`` atoms with -1 padding, ``B × n × n`` bonds)."""
    pairs = [molecule_smiles(a, b) for a, b in zip(atoms, bonds)]
    smiles = [p[0] for p in pairs]
    return smiles_metrics(smiles, train_smiles, [p[1] for p in pairs]), smiles
