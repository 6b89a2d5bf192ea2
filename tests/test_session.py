"""harness/session.py: typed recipe configs and the replay protocol of recipes without a
Trainer (publication, state, result file, exit status), on hand-made requests."""

import json
import time
from dataclasses import dataclass
from typing import Literal

import pytest
import torch

from replaykit.harness.session import NAN_EXIT, ReplaySession, knob, load_config


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
        ("- a\n", {}, "p.yaml: -: a recipe profile is a mapping of knobs"),
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
        "seed": 1,
        "threads": 1,
        "deadline_unix": time.time() + 60,
        "publish_dir": str(tmp_path / "pub"),
        "state_dir": str(tmp_path / "state"),
        "keep": 2,
        "resume": False,
    }
    return ReplaySession({**base, **request}, recipe=None)


def test_publication_retention_and_result(tmp_path):
    s = session(tmp_path)
    for progress in (1, 2, 3):
        entry = s.publish(progress, lambda out, p=progress: (out / "w.txt").write_text(str(p)))
        assert entry["count"] == progress
    assert sorted(p.name for p in (tmp_path / "pub").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert (tmp_path / "pub/checkpoint-3/w.txt").read_text() == "3"
    assert not list((tmp_path / "state").glob(".export-*"))  # export folders removed
    assert s.published_now == [1, 2, 3] and s.published_before() == [1, 2, 3]
    history = [{"progress": 3, "loss": 0.5}]
    assert s.finish("max_steps", history) == 0
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["steps"] == 3 and result["metrics"] == {"loss": 0.5} and "error" not in result
    assert result["train_end_unix"] >= result["train_start_unix"] and result["publish_s"] >= 0


def test_exit_status(tmp_path, capsys):
    s = session(tmp_path)
    assert s.finish("deadline", []) == 1  # nothing published, by any attempt
    assert "nothing published" in capsys.readouterr().out
    assert s.finish("nan_loss", [], steps=2, error="NaN loss in epoch 3") == NAN_EXIT
    assert json.loads((tmp_path / "state/train_result.json").read_text())["error"] == "NaN loss in epoch 3"
    (tmp_path / "pub/checkpoint-1").mkdir()  # published by an earlier attempt
    assert session(tmp_path).finish("deadline", []) == 0


def test_deadline_and_state(tmp_path):
    s = session(tmp_path, deadline_unix=time.time() + 30)
    assert not s.past_deadline() and s.past_deadline(ahead_s=31)
    s.save_state({"epoch": 2, "w": torch.ones(2)})
    assert s.load_state() is None  # no resume asked
    state = session(tmp_path, resume=True).load_state()
    assert state["epoch"] == 2 and torch.equal(state["w"], torch.ones(2))
    assert not (tmp_path / "state/.tmp-train_state.pt").exists()
