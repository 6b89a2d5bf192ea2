"""Candidate patches: applied when they stay inside the workspace, refused otherwise."""

import hashlib
import os
from pathlib import Path

import pytest

from replaykit.harness.errors import InputError
from replaykit.harness.hashing import sha256_file, sha256_tree
from replaykit.harness.workspace import build_workspace, patch_paths


@pytest.fixture
def recipe(tmp_path):
    root = tmp_path / "recipes" / "demo"
    (root / "configs").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "configs" / "embedded.yaml").write_text("beta: 0.1\nmax_steps: 24\n")
    return root


GOOD = """diff --git a/configs/embedded.yaml b/configs/embedded.yaml
--- a/configs/embedded.yaml
+++ b/configs/embedded.yaml
@@ -1,2 +1,2 @@
-beta: 0.1
+beta: 0.2
 max_steps: 24
"""


def _write(tmp_path, text, name="cand.diff"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_patch_applies_and_is_recorded(tmp_path, recipe):
    patch = _write(tmp_path, GOOD)
    out = tmp_path / "run" / "workspace"
    info = build_workspace(recipe, out, tmp_path / "run" / "workspace.json", patch)
    assert (out / "configs" / "embedded.yaml").read_text() == "beta: 0.2\nmax_steps: 24\n"
    assert (recipe / "configs" / "embedded.yaml").read_text().startswith("beta: 0.1")  # recipe untouched
    assert info["patch_sha256"] == sha256_file(patch)
    assert info["workspace_sha256"] == sha256_tree(out)
    assert info["patch_touches"] == ["configs/embedded.yaml"]


def test_no_patch_is_a_plain_copy(tmp_path, recipe):
    info = build_workspace(recipe, tmp_path / "ws", tmp_path / "ws.json")
    assert info["patch_sha256"] is None
    assert info["workspace_sha256"] == info["recipe_sha256"]


@pytest.mark.parametrize(
    "text, field",
    [
        (
            GOOD.replace("a/configs/embedded.yaml", "/etc/passwd", 1).replace("--- a/configs", "--- /etc/passwd"),
            "absolute",
        ),
        (GOOD.replace("configs/embedded.yaml", "../../outside.yaml"), "leaves the workspace"),
        (GOOD.replace("b/configs/embedded.yaml", "b/configs/../../x.yaml"), "leaves the workspace"),
        ("just some text\nwithout headers\n", "not a unified diff"),
        ("", "empty"),
        (
            "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc\n",
            "symlink",
        ),
    ],
)
def test_refused_patches_leave_nothing(tmp_path, recipe, text, field):
    patch = _write(tmp_path, text)
    out = tmp_path / "run" / "workspace"
    with pytest.raises(InputError, match=field) as exc:
        build_workspace(recipe, out, tmp_path / "run" / "workspace.json", patch)
    assert str(patch) in str(exc.value)
    assert not out.exists() and not (tmp_path / "run" / "workspace.json").exists()


def test_patch_that_does_not_apply(tmp_path, recipe):
    patch = _write(tmp_path, GOOD.replace("-beta: 0.1", "-beta: 0.7"))
    with pytest.raises(InputError, match="does not apply"):
        build_workspace(recipe, tmp_path / "ws", tmp_path / "ws.json", patch)
    assert not (tmp_path / "ws").exists()


def test_patch_paths_strip_git_prefixes(tmp_path):
    assert patch_paths(_write(tmp_path, GOOD)) == ["configs/embedded.yaml"]


def test_scoring_refuses_a_workspace_on_sys_path(tmp_path, monkeypatch):
    from replaykit.harness.scoring import assert_workspace_free

    ws = tmp_path / "results" / "dpo" / "shipped-seed42" / "workspace"
    ws.mkdir(parents=True)
    assert_workspace_free(ws)  # not on sys.path: fine
    monkeypatch.syspath_prepend(str(ws))
    with pytest.raises(RuntimeError, match="must not see the workspace"):
        assert_workspace_free(ws)


def test_scoring_refuses_a_module_imported_from_the_workspace(tmp_path, monkeypatch):
    import importlib.util
    import sys

    from replaykit.harness.scoring import assert_workspace_free

    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "recipe_helper.py").write_text("X = 1\n")
    spec = importlib.util.spec_from_file_location("recipe_helper", ws / "recipe_helper.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "recipe_helper", module)
    with pytest.raises(RuntimeError, match="recipe_helper"):
        assert_workspace_free(ws)


LINK = (
    "diff --git a/link.py b/link.py\n{mode}\n--- /dev/null\n+++ b/link.py\n@@ -0,0 +1 @@\n"
    "+../../../../src/replaykit/tasks/soup/evaluator.py\n\\ No newline at end of file\n"
)
# Spellings of a symlink mode line that git apply accepts (octal, parsed with strtoul;
# trailing whitespace allowed; a mode on the index line)
SYMLINK_MODES = [
    "new file mode 120000",
    "new file mode 120000 ",
    "new file mode 120000\t",
    "new file mode 0120000",
    "new file mode 120777",
    "new file mode +120000",
    "new file mode 120000\nindex 0000000..1234567",
]


@pytest.mark.parametrize("mode", SYMLINK_MODES)
def test_symlink_patches_in_every_spelling_git_accepts_are_refused(tmp_path, recipe, mode):
    import subprocess

    patch = _write(tmp_path, LINK.format(mode=mode))
    plain = tmp_path / "plain"  # git itself applies the patch and makes a symlink: the threat is real
    plain.mkdir()
    applied = subprocess.run(["git", "apply", str(patch)], cwd=plain, capture_output=True, text=True)
    assert applied.returncode == 0 and (plain / "link.py").is_symlink(), applied.stderr
    out = tmp_path / "run" / "workspace"
    with pytest.raises(InputError, match="symlink"):
        build_workspace(recipe, out, tmp_path / "run" / "workspace.json", patch)
    assert not out.exists() and not (tmp_path / "run" / "workspace.json").exists()


def test_a_symlink_in_the_applied_tree_is_refused_by_lstat(tmp_path, recipe):
    """Trees are judged with lstat, not only the patch text: a recipe that somehow holds a
    symlink (copying would follow it) or a FIFO is refused by path."""
    import os

    (recipe / "link.py").symlink_to("/etc/passwd")
    with pytest.raises(InputError, match="link.py: not a regular file in the shipped recipe"):
        build_workspace(recipe, tmp_path / "ws", tmp_path / "ws.json", _write(tmp_path, GOOD))
    (recipe / "link.py").unlink()
    os.mkfifo(recipe / "pipe")
    with pytest.raises(InputError, match="pipe: not a regular file in the shipped recipe"):
        build_workspace(recipe, tmp_path / "ws", tmp_path / "ws.json", _write(tmp_path, GOOD))
    assert not (tmp_path / "ws").exists()


def test_applied_tree_is_judged_even_when_the_text_check_misses(tmp_path, recipe, monkeypatch):
    """Defence in depth: with the mode-line check disabled (a spelling it did not foresee),
    the lstat walk of the applied tree still refuses the symlink by name."""
    import re

    from replaykit.harness import workspace

    monkeypatch.setattr(workspace, "_MODE_RE", re.compile(r"(?!)"))  # never matches
    patch = _write(tmp_path, LINK.format(mode="new file mode 120000 "))
    with pytest.raises(InputError, match="link.py: a symlink in the applied workspace"):
        build_workspace(recipe, tmp_path / "ws", tmp_path / "ws.json", patch)
    assert not (tmp_path / "ws").exists()


def test_special_entries_walks_a_tree_of_any_depth(tmp_path, monkeypatch):
    """A candidate can leave folders nested 1,100 deep in its replay state (the compile cache is
    a natural place): the link at the bottom is found, a folder whose path passes PATH_MAX (4,096
    bytes on Linux) is reported itself as not checkable, and neither raises RecursionError
    (Python 3.11's ``Path.rglob`` recursed once per level)."""
    import subprocess

    from replaykit.harness.workspace import special_entries

    try:
        _deep_trees_are_walked(tmp_path, monkeypatch, special_entries)
    finally:  # shutil.rmtree (pytest's own clean-up of old tmp folders) recurses once per level too
        subprocess.run(["rm", "-rf", str(tmp_path / "deep"), str(tmp_path / "deeper")], check=True)


def _deep_trees_are_walked(tmp_path, monkeypatch, special_entries) -> None:
    for name, depth in (("deep", 1100), ("deeper", 1500)):  # 3 bytes a level: 3,300 and 4,500
        monkeypatch.chdir(tmp_path)
        os.mkdir(name)
        os.chdir(name)
        for _ in range(depth):
            os.mkdir("dd")
            os.chdir("dd")
        os.symlink("/etc", "link")
        Path("weights.bin").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    # the checkpoint hash over the deep tree: one file, recomputed here from its definition
    line = "dd/" * 1100 + f"weights.bin\0{hashlib.sha256(b'x').hexdigest()}\n"
    assert sha256_tree(tmp_path / "deep") == hashlib.sha256(line.encode()).hexdigest()
    found = special_entries(tmp_path)
    assert len(found) == 2
    assert found[0] == "deep/" + "dd/" * 1100 + "link"
    # the folder whose entries' paths reach PATH_MAX (the kernel refuses to stat them)
    assert found[1] == "deeper" + "/dd" * found[1].count("/") and len(str(tmp_path / found[1]) + "/dd") >= 4096
    with pytest.raises(OSError):  # the hash of a tree it cannot list is an error, not a partial hash
        sha256_tree(tmp_path / "deeper")
    assert special_entries(tmp_path / "missing") == []
