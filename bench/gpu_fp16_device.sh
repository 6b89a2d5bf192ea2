#!/usr/bin/env bash
# ddpo's float16 gradients (bench/gpu_fp16_grads.py) on a lent H200: the wheels (diffusers 0.42.1,
# importlib_metadata 10.2.0) in ${WHL:-bench/gpu_fp16_whl}, branch ddpo-fp16's recipe in bench/gpu_fp16_recipe.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-fp16-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-bench/gpu_fp16_whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi -L; nproc
python3 -c "import torch, diffusers, peft; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), diffusers.__version__, peft.__version__)"
timeout ${T:-530} python3 bench/gpu_fp16_grads.py --budget ${BUDGET:-490} "$@" 2>&1 | grep -v -e warn -e kept.in.float32 -e Casting.directly
ls -la "$OUT"
