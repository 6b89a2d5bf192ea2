"""The rm frozen loader and evaluator on a tiny Llama reward model."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from replaykit.harness.errors import InputError
from replaykit.tasks.rm import data, evaluator, loader, rewardbench


@pytest.fixture(scope="module")
def checkpoint(tiny_llama, tmp_path_factory):
    """A LoRA reward-model checkpoint as the recipe saves it (head in modules_to_save)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(1)
    base = AutoModelForSequenceClassification.from_pretrained(tiny_llama, num_labels=1)
    model = get_peft_model(
        base,
        LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["score"], task_type="SEQ_CLS"
        ),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "score" in name:
                p.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("rm-ckpt") / "checkpoint-1"
    model.save_pretrained(out)
    return out


def copy_with(checkpoint, dest, tensors=None, config=None):
    dest.mkdir()
    weights = load_file(checkpoint / "adapter_model.safetensors")
    save_file(tensors(weights) if tensors else weights, dest / "adapter_model.safetensors")
    cfg = json.loads((checkpoint / "adapter_config.json").read_text())
    (dest / "adapter_config.json").write_text(json.dumps(config(cfg) if config else cfg))
    return dest


def test_valid_checkpoint_and_padding_invariance(checkpoint, tiny_llama):
    verdict = loader.validate(checkpoint, tiny_llama, {"dtype": "float32"})
    assert verdict["valid"], verdict["reason"]
    assert verdict["checks"]["head_shape"] == [1, 32]
    assert verdict["checks"]["probes"]["max_relative_drift"] < 1e-4
    tok = loader.load_tokenizer(tiny_llama)
    model = loader.load_reward_model(tiny_llama, checkpoint, "float32")
    seqs = [loader.encode(tok, p, r, 512) for p, r in loader.PROBES]
    alone = loader.rewards(model, tok.pad_token_id, seqs, 1)
    left = loader.rewards(model, tok.pad_token_id, seqs, 4, "left")
    assert left == pytest.approx(alone, abs=1e-5)
    assert len(set(round(v, 4) for v in alone)) == len(alone)  # the head distinguishes the probes


def test_encode_keeps_the_last_tokens(tiny_llama):
    tok = loader.load_tokenizer(tiny_llama)
    full = loader.encode(tok, "Describe a tree.", "A tree is tall.", 10_000)
    assert full == list(
        tok.apply_chat_template(
            [{"role": "user", "content": "Describe a tree."}, {"role": "assistant", "content": "A tree is tall."}],
            tokenize=True,
            return_dict=True,
        )["input_ids"]
    )
    assert loader.encode(tok, "Describe a tree.", "A tree is tall.", 7) == full[-7:]


def test_checkpoint_without_head_is_invalid(checkpoint, tiny_llama, tmp_path):
    no_head = copy_with(
        checkpoint,
        tmp_path / "no-head",
        tensors=lambda w: {k: v for k, v in w.items() if not k.endswith("score.weight")},
    )
    verdict = loader.validate(no_head, tiny_llama, {"dtype": "float32"})
    assert not verdict["valid"] and "no reward head" in verdict["reason"]
    not_saved = copy_with(checkpoint, tmp_path / "not-saved", config=lambda c: {**c, "modules_to_save": None})
    verdict = loader.validate(not_saved, tiny_llama, {"dtype": "float32"})
    assert not verdict["valid"] and "modules_to_save" in verdict["reason"]


def test_wrong_head_or_lora_shape_is_invalid(checkpoint, tiny_llama, tmp_path):
    def wide_head(w):
        return {k: (torch.zeros(2, 32) if k.endswith("score.weight") else v) for k, v in w.items()}

    verdict = loader.validate(
        copy_with(checkpoint, tmp_path / "head", tensors=wide_head), tiny_llama, {"dtype": "float32"}
    )
    assert not verdict["valid"] and "(2, 32), expected (1, 32)" in verdict["reason"]

    def bad_lora(w):
        key = next(k for k in w if k.endswith("q_proj.lora_A.weight"))
        return {**w, key: torch.zeros(3, 32)}

    verdict = loader.validate(
        copy_with(checkpoint, tmp_path / "lora", tensors=bad_lora), tiny_llama, {"dtype": "float32"}
    )
    assert not verdict["valid"] and "q_proj.lora_A.weight" in verdict["reason"]

    def nan_head(w):
        return {k: (torch.full((1, 32), float("nan")) if k.endswith("score.weight") else v) for k, v in w.items()}

    verdict = loader.validate(
        copy_with(checkpoint, tmp_path / "nan", tensors=nan_head), tiny_llama, {"dtype": "float32"}
    )
    assert not verdict["valid"] and "non-finite" in verdict["reason"]


def write_assets(root, rows, train):
    """A hidden split as the assets step writes it: rows + overlap.json from the training pairs."""
    (root / "hidden").mkdir(parents=True)
    items = root / "hidden" / "final_rows.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "hidden" / "overlap.json").write_text(json.dumps(data.overlap(rows, train)))
    return items


ROWS = [
    {
        "id": str(i),
        "subset": s,
        "prompt": f"Question {i}?",
        "chosen": f"Good answer {i}.",
        "rejected": f"Bad {i}.",
        "visible": i < 3,
    }
    for i, s in enumerate(
        [
            "alpacaeval-easy",
            "alpacaeval-easy",
            "llmbar-natural",
            "math-prm",
            "math-prm",
            "hep-python",
            "donotanswer",
            "xstest-should-respond",
        ]
    )
]
TRAIN = [
    {
        "prompt": [{"role": "user", "content": "Other question?"}],
        "chosen": [{"role": "assistant", "content": "Yes."}],
        "rejected": [{"role": "assistant", "content": "No."}],
    }
]


def test_evaluate_recomputes_rewardbench_from_rewards(checkpoint, tiny_llama, tmp_path):
    items = write_assets(tmp_path / "assets", ROWS, TRAIN)
    cfg = {"max_length": 64, "batch_size": 3, "dtype": "float32"}
    summary, rows = evaluator.evaluate(checkpoint, tiny_llama, items, "rewardbench_v1_score", cfg)
    tok = loader.load_tokenizer(tiny_llama)
    model = loader.load_reward_model(tiny_llama, checkpoint, "float32")
    for row, item in zip(rows, ROWS):
        direct = loader.rewards(model, tok.pad_token_id, [loader.encode(tok, item["prompt"], item["chosen"], 64)], 1)[0]
        assert row["reward_chosen"] == pytest.approx(direct, abs=1e-5)
        assert row["correct"] == int(row["reward_chosen"] > row["reward_rejected"])
    expected = rewardbench.score([{"subset": r["subset"], "correct": r["correct"]} for r in rows])
    assert summary["value"] == pytest.approx(expected["score"])
    assert summary["uncertainty"] == {"value": pytest.approx(expected["se"]), "kind": "subset_binomial_se_propagated"}
    assert summary["diagnostics"]["overlap_with_training"]["prompts"] == 0
    assert 100 * sum(r["weight"] * r["score"] for r in rows) == pytest.approx(summary["value"])
    visible = rewardbench.score([{"subset": r["subset"], "correct": r["correct"]} for r in rows[:3]])["score"]
    assert summary["diagnostics"]["decomposition"]["visible"] == {"n": 3, "score": pytest.approx(visible)}
    assert summary["diagnostics"]["decomposition"]["hidden_only"]["n"] == 5
    with pytest.raises(ValueError, match="no reward head"):
        evaluator.evaluate(None, tiny_llama, items, "rewardbench_v1_score", cfg)


def test_overlap_is_reported(checkpoint, tiny_llama, tmp_path):
    train = TRAIN + [
        {
            "prompt": [{"role": "user", "content": "Question 0?"}],
            "chosen": [{"role": "assistant", "content": "x"}],
            "rejected": [{"role": "assistant", "content": "y"}],
        }
    ]
    items = write_assets(tmp_path / "assets", ROWS, train)
    summary, _ = evaluator.evaluate(checkpoint, tiny_llama, items, "m", {"max_length": 64, "batch_size": 8})
    assert summary["diagnostics"]["overlap_with_training"]["prompts"] == 1
    assert any("overlap the training pairs" in a for a in summary["advisories"])
    (items.parent / "overlap.json").unlink()
    summary, _ = evaluator.evaluate(checkpoint, tiny_llama, items, "m", {"max_length": 64, "batch_size": 8})
    assert summary["diagnostics"]["overlap_with_training"] is None
    assert any("overlap with the training pairs unknown" in a for a in summary["advisories"])


def test_non_finite_rewards_count_as_wrong(checkpoint, tiny_llama, tmp_path):
    def huge_head(w):
        return {k: (torch.full((1, 32), 3e38) if k.endswith("score.weight") else v) for k, v in w.items()}

    overflow = copy_with(checkpoint, tmp_path / "overflow", tensors=huge_head)
    assert not loader.validate(overflow, tiny_llama, {"dtype": "float32"})["valid"]
    items = write_assets(tmp_path / "assets", ROWS, TRAIN)
    summary, rows = evaluator.evaluate(overflow, tiny_llama, items, "m", {"max_length": 64, "batch_size": 8})
    assert summary["value"] == 0.0 and summary["diagnostics"]["non_finite_rows"] == len(ROWS)
    assert all(r["reward_chosen"] is None and r["correct"] == 0 for r in rows)
    json.dumps(rows, allow_nan=False)  # rows.jsonl stays valid JSON


def test_pad_token_equal_to_eos(checkpoint, tiny_llama, tmp_path):
    """SmolLM2 and Mistral pad with their eos, which also ends turns inside the sequence: the
    reward must still be the head at the sequence's last token, whatever the padding."""
    import shutil

    from transformers import AutoTokenizer

    model_dir = tmp_path / "pad-eos"
    shutil.copytree(tiny_llama, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.pad_token = tok.eos_token
    tok.save_pretrained(model_dir)
    verdict = loader.validate(checkpoint, model_dir, {"dtype": "float32"})
    assert verdict["valid"], verdict["reason"]
    tok = loader.load_tokenizer(model_dir)
    assert tok.pad_token_id == tok.eos_token_id
    model = loader.load_reward_model(model_dir, checkpoint, "float32")
    seqs = [loader.encode(tok, p, r, 512) for p, r in loader.PROBES]
    assert sum(t == tok.eos_token_id for t in seqs[0]) >= 2  # eos inside the sequence too
    batched = loader.rewards(model, tok.pad_token_id, seqs, 4, "left")
    # independent pooling: the merged model's hidden state at the last position, through the head
    weights = load_file(checkpoint / "adapter_model.safetensors")
    head = next(v for k, v in weights.items() if k.endswith("score.weight"))
    for seq, reward in zip(seqs, batched):
        ids = torch.tensor([seq])
        with torch.no_grad():
            hidden = model.model(input_ids=ids).last_hidden_state[0, -1]
        assert reward == pytest.approx(float(head[0] @ hidden), abs=1e-4)


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"subset": "not-a-subset"}, "line 2.subset", "has no RewardBench v1 section"),
        ({"section": "Safety"}, "line 2.section", "disagrees with subset"),
        ({"rejected": "Good answer 1."}, "line 2.chosen", "identical"),
        ({"chosen": None}, "line 2.chosen", "must be a non-empty string"),
        ({"prompt": 7}, "line 2.prompt", "must be a non-empty string or a list of messages"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, change, field, message):
    rows = [dict(r) for r in ROWS]
    rows[1].update(change)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as err:
        evaluator.read_items(path)
    assert f"{path}: {field}: " in str(err.value) and message in str(err.value)
    missing = [{k: v for k, v in r.items() if k != "subset"} for r in ROWS]
    path.write_text("".join(json.dumps(r) + "\n" for r in missing))
    with pytest.raises(InputError, match="line 1.subset: required field missing"):
        evaluator.read_items(path)


def test_list_prompts_are_accepted_and_compared():
    row = {
        "id": "1",
        "subset": "math-prm",
        "prompt": [{"role": "user", "content": "Question 0?"}],
        "chosen": "2",
        "rejected": "3",
    }
    assert data.overlap([row], [{"prompt": "Question 0?", "chosen": "x", "rejected": "y"}])["prompts"] == 1
