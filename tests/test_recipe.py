"""The recipes' Trainer glue (replaykit.runtime.trainer) and the shipped dpo recipe's profiles."""

import json
from pathlib import Path

import pytest

from replaykit.harness.profile import load_recipe
from replaykit.runtime import ReplayRequest, Session, TrainerKnobs
from replaykit.runtime import trainer as train

DPO_CONFIGS = Path(__file__).resolve().parents[1] / "recipes" / "dpo" / "configs"


def test_resume_skips_a_checkpoint_cut_short_by_a_kill(tmp_path):
    for step in (2, 3, 4, 5):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    # checkpoint-4: killed before trainer_state.json; checkpoint-5: killed while writing it
    (tmp_path / "checkpoint-5" / "trainer_state.json").write_text('{"global_st')
    assert train.last_complete_state(tmp_path) == str(tmp_path / "checkpoint-3")
    assert train.last_complete_state(tmp_path / "missing") is None


def test_resume_with_no_time_left_reports_the_saved_state(tmp_path):
    """A retry that starts after the internal deadline (earlier attempts spent the budget)
    trains nothing, but its result keeps the steps and curve of the state it resumed."""
    import time

    from transformers import TrainerState

    saved = TrainerState(
        global_step=30, log_history=[{"step": 10, "loss": 0.7}, {"step": 20, "loss": 0.5}, {"step": 30, "loss": 0.4}]
    )
    (tmp_path / "state/trainer/checkpoint-30").mkdir(parents=True)
    saved.save_to_json(str(tmp_path / "state/trainer/checkpoint-30/trainer_state.json"))

    class NoTimeTrainer:  # the Trainer surface run_trainer uses
        state = TrainerState()

        def remove_callback(self, _):
            pass

        def train(self, **_):
            raise AssertionError("trained after the deadline")

    request = ReplayRequest(
        fixed_start=tmp_path,
        public_dir=tmp_path,
        publish_dir=tmp_path / "publish",
        state_dir=tmp_path / "state",
        seed=1,
        deadline_unix=time.time() - 1,
        export_reserve_s=1.0,
        profile="embedded",
        overrides={},
        threads=1,
        keep=3,
        resume=True,
    )
    knobs = TrainerKnobs(*(None,) * 6, max_steps=100, save_steps=10, gradient_checkpointing=False)
    callback = train.ReplayCallback(Session(request, knobs), files=())
    assert train.run_trainer(NoTimeTrainer(), callback) == 0
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["stop_reason"] == "deadline" and result["steps"] == 30
    assert [h["progress"] for h in result["history"]] == [10, 20, 30]
    assert result["metrics"]["loss"] == 0.4


def test_recipe_profiles_and_overrides():
    embedded = load_recipe(DPO_CONFIGS, "embedded", {})
    full = load_recipe(DPO_CONFIGS, "full", {})
    # SPEC dpo, full scale: beta 0.01, LoRA r = alpha = 128, 4 x 4 = 16 pairs/step, 772 steps, lr 5e-6
    assert (full["beta"], full["lora"]["r"], full["lora"]["alpha"]) == (0.01, 128, 128)
    assert full["per_device_train_batch_size"] * full["gradient_accumulation_steps"] == 16
    assert (full["max_steps"], full["learning_rate"], full["max_length"]) == (772, 5e-6, 1024)
    assert (full["quantization"], full["optim"], full["loss_type"]) == ("nf4", "paged_adamw_32bit", "sigmoid")
    assert set(full["lora"]["target_modules"]) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    assert embedded["max_steps"] // embedded["save_steps"] == 3  # three publications
    merged = load_recipe(DPO_CONFIGS, "embedded", {"lora": {"r": 4}, "beta": 0.3})
    assert merged["lora"]["r"] == 4 and merged["lora"]["alpha"] == embedded["lora"]["alpha"] and merged["beta"] == 0.3
    with pytest.raises(SystemExit, match="betta: unknown recipe key"):
        load_recipe(DPO_CONFIGS, "embedded", {"betta": 0.3})


KNOBS = {"dpo": "DPOKnobs", "rm": "RewardKnobs", "soup": "SoupConfig", "digress": "DigressConfig", "ddpo": "DDPOConfig"}


@pytest.mark.parametrize("task", sorted(KNOBS))
def test_every_knob_is_listed_in_every_shipped_profile(task):
    """A knob with a default (rm ``causal_padding``, ddpo ``compile``) that a shipped profile
    leaves out cannot be set by ``recipe.overrides`` on that profile: the workflow refuses the
    override when it starts ("not a key of the shipped recipe's ..."). So every profile lists
    every knob of the recipe's dataclass."""
    import dataclasses

    import yaml

    from conftest import ROOT, recipe_train
    from replaykit.harness.profile import check_overrides

    knobs = {f.name for f in dataclasses.fields(getattr(recipe_train(task), KNOBS[task]))}
    recipe = ROOT / "recipes" / task
    for profile in sorted((recipe / "configs").glob("*.yaml")):
        values = yaml.safe_load(profile.read_text())
        assert set(values) == knobs, f"{profile.name}: missing {sorted(knobs - set(values))}"
        check_overrides(recipe, profile.stem, dict(values))  # each knob may be overridden (here: by its value)
