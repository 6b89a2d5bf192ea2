"""replaykit.runtime: typed recipe knobs and the recipe's session of the replay protocol
(publication, state, result file, exit status), on hand-made requests."""

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import torch

from replaykit.runtime import NAN_EXIT, ReplayRequest, Session, knob, load_config


@dataclass(frozen=True)
class Knobs:
    method: Literal["a", "b"] = knob("a or b")
    steps: int = knob("optimizer steps", minimum=1)
    lr: float = knob("learning rate", minimum=0, maximum=1)
    shuffle: bool = knob("shuffle the data")
    lora: dict = knob("LoRA {r, alpha}")
    note: str | None = knob("free text", default=None)


def write_profile(tmp_path, text):
    (tmp_path / "configs").mkdir(exist_ok=True)
    (tmp_path / "configs" / "p.yaml").write_text(text)
    return tmp_path / "configs"


PROFILE = "method: a\nsteps: 4\nlr: 1\nshuffle: true\nlora: {r: 8, alpha: 16}\n"


def test_config_from_profile_and_overrides(tmp_path):
    configs = write_profile(tmp_path, PROFILE)
    knobs = load_config(Knobs, configs, "p", {"steps": 6, "lora": {"r": 4}})
    assert knobs == Knobs(method="a", steps=6, lr=1.0, shuffle=True, lora={"r": 4, "alpha": 16}, note=None)
    assert isinstance(knobs.lr, float)  # an integer given for a float knob is converted


@pytest.mark.parametrize(
    "text,overrides,message",
    [
        (PROFILE + "extra: 1\n", {}, "p.yaml: extra: not a knob of this recipe (Knobs in train.py defines them)"),
        (PROFILE.replace("steps: 4\n", ""), {}, "p.yaml: steps: missing (optimizer steps)"),
        (PROFILE, {"steps": "4"}, "p.yaml: steps: expected int, got '4'"),
        (PROFILE, {"steps": True}, "p.yaml: steps: expected int, got True"),
        (PROFILE, {"method": "c"}, "p.yaml: method: expected 'a' | 'b', got 'c'"),
        (PROFILE, {"lr": "1e-3"}, "p.yaml: lr: expected float, got '1e-3'"),
        (PROFILE, {"nope": 1}, "p.yaml: nope: unknown recipe key in overrides"),
        ("- a\n", {}, "p.yaml: a recipe profile is a mapping of knobs"),
        (PROFILE, {"steps": 0}, "p.yaml: steps: 0 is out of range (1 <= steps <= inf)"),
        (PROFILE, {"lr": 1.5}, "p.yaml: lr: 1.5 is out of range (0 <= lr <= 1)"),
        (PROFILE, {"lr": float("nan")}, "p.yaml: lr: expected a finite number, got nan"),
        (PROFILE, {"lora": None}, "p.yaml: lora: an override of a mapping is a mapping, got None"),
    ],
)
def test_bad_knobs_are_refused_naming_file_and_key(tmp_path, text, overrides, message):
    configs = write_profile(tmp_path, text)
    with pytest.raises(SystemExit) as exc:
        load_config(Knobs, configs, "p", overrides)
    assert str(exc.value) == f"{configs / 'p.yaml'}: {message.split('p.yaml: ', 1)[1]}"


def session(tmp_path, **request):
    for name in ("state", "pub"):
        (tmp_path / name).mkdir(exist_ok=True)
    base = {
        "fixed_start": Path("/nonexistent"),
        "public_dir": Path("/nonexistent"),
        "profile": "p",
        "overrides": {},
        "export_reserve_s": 5.0,
        "seed": 1,
        "threads": 1,
        "deadline_unix": time.time() + 60,
        "publish_dir": tmp_path / "pub",
        "state_dir": tmp_path / "state",
        "keep": 2,
        "resume": False,
    }
    return Session(ReplayRequest(**{**base, **request}))


def test_publication_retention_and_result(tmp_path):
    s = session(tmp_path)
    for progress in (1, 2, 3):
        entry = s.checkpoint(progress, lambda out, p=progress: (out / "w.txt").write_text(str(p)))
        assert entry["count"] == progress
    assert sorted(p.name for p in (tmp_path / "pub").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert (tmp_path / "pub/checkpoint-3/w.txt").read_text() == "3"
    assert not list((tmp_path / "state").glob(".export-*"))  # export folders removed
    assert s.published_now == [1, 2, 3] and s.last_published() == 3
    assert not s.checkpoint_if_missing(3, lambda out: None) and s.published_now == [1, 2, 3]
    history = [{"progress": 3, "loss": 0.5}]
    assert s.finish(history) == 0
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["steps"] == 3 and result["metrics"] == {"loss": 0.5} and "error" not in result
    assert result["stop_reason"] == "max_steps"
    assert result["train_end_unix"] >= result["train_start_unix"] and result["publish_s"] >= 0


def test_exit_status(tmp_path, capsys):
    s = session(tmp_path, deadline_unix=time.time() - 1)
    assert s.should_stop() and s.finish([]) == 1  # nothing published, by any attempt
    assert "stopped (deadline) before the first checkpoint: nothing published" in capsys.readouterr().out
    s.nan_loss("NaN loss in epoch 3")
    assert s.finish([], steps=2) == NAN_EXIT
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["error"] == "NaN loss in epoch 3" and result["stop_reason"] == "nan_loss"
    (tmp_path / "pub/checkpoint-1").mkdir()  # published by an earlier attempt
    assert session(tmp_path).finish([]) == 0


def test_deadline_and_state(tmp_path):
    s = session(tmp_path, deadline_unix=time.time() + 30)
    assert not s.should_stop() and s.stop_reason == "max_steps"
    assert s.should_stop(next_step_s=31) and s.stop_reason == "deadline"
    s.save_state({"epoch": 2, "w": torch.ones(2)})
    assert s.load_state() is None  # no resume asked
    state = session(tmp_path, resume=True).load_state()
    assert state["epoch"] == 2 and torch.equal(state["w"], torch.ones(2))
    assert not (tmp_path / "state/.tmp-train_state.pt").exists()
