"""Device check: a tiny random Llama (test fixture) and a random-weight SmolLM2-135M."""
import sys
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, "tests")
from conftest import make_tiny_model, tiny_config  # noqa: E402

root = Path(sys.argv[1])
make_tiny_model(root / "tiny-llama", "llama")
torch.manual_seed(0)
config = AutoConfig.from_pretrained(sys.argv[2])
AutoModelForCausalLM.from_config(config).save_pretrained(root / "smol-random")
AutoTokenizer.from_pretrained(sys.argv[2]).save_pretrained(root / "smol-random")
for name, fixed in (("tiny", root / "tiny-llama"), ("smol", root / "smol-random")):
    cfg = tiny_config(fixed)
    if name == "smol":  # the embedded default's sizes on a random SmolLM2-135M
        default = yaml.safe_load(open("config/config.yaml"))["tasks"]["dpo"]
        cfg["tasks"]["dpo"].update({k: default[k] for k in ("data", "recipe", "evaluation", "budget")})
    (root / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
