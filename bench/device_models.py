"""Device check configs: a tiny random Llama (test fixture) and a random-weight SmolLM2-135M.

Usage: python bench/device_models.py <out dir> <SmolLM2 config dir> [dpo|rm]
Writes <out>/tiny.yaml (the tests' tiny config) and <out>/smol.yaml (the embedded default's
sizes on random SmolLM2-135M weights) for the task.
"""

import sys
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, "tests")
from conftest import make_tiny_model, rm_config, tiny_config  # noqa: E402

root, smol_config = Path(sys.argv[1]), sys.argv[2]
task = sys.argv[3] if len(sys.argv) > 3 else "dpo"
make_tiny_model(root / "tiny-llama", "llama")
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(smol_config)).save_pretrained(root / "smol-random")
AutoTokenizer.from_pretrained(smol_config).save_pretrained(root / "smol-random")
default = yaml.safe_load(open("config/config.yaml"))["tasks"][task]
for name, fixed in (("tiny", root / "tiny-llama"), ("smol", root / "smol-random")):
    if task == "rm":
        cfg = rm_config(fixed)
    else:
        cfg = tiny_config(fixed)
    if name == "smol":  # the embedded default's sizes on a random SmolLM2-135M
        cfg["tasks"][task].update({k: default[k] for k in ("data", "recipe", "evaluation", "budget")})
    (root / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
