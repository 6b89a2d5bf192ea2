#!/usr/bin/env bash
# ddpo on a lent H200 (device tool): seconds per DDPO epoch at SPEC's size (32 samples, 50 DDIM
# steps, guidance 5) with Stable Diffusion v1.5's UNet / VAE / text encoder built from their
# configs (random weights, fp16 base, fp32 LoRA r=4 on to_q/to_k/to_v/to_out.0), sampling and
# training, fused (SDPA) against unfused attention, with the shipped recipe's own functions.
# The machine lacks diffusers: its wheel travels in .whl/ (diffusers-0.42.1; importlib_metadata
# and zipp as well, in case the machine lacks them). Reference system: about 216 s per epoch.
# Run from the repo root there:  bash bench/device_ddpo.sh   (writes to $OUT; about 3-5 min).
# A CPU check of the script at toy size: DDPO_TINY=1 TRAIN_ITERS=2 bash bench/device_ddpo.sh
# Other variants: VARIANTS=spec,large,large+cl,large+cl+compile DDPO_TIMEOUT=540 bash bench/device_ddpo.sh
set -o pipefail
OUT=${OUT:-/tmp/ddpo-bench}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "${SITE:=/tmp/site}" .whl/*.whl || exit 1
export PYTHONPATH=$SITE:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi -L
python3 -c "import torch, diffusers, transformers, peft; print('torch', torch.__version__, 'diffusers', diffusers.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" || exit 1
timeout ${DDPO_TIMEOUT:-480} python3 bench/ddpo_throughput.py --sd15 ${DDPO_TINY:+--tiny} --train-iters ${TRAIN_ITERS:-10} --variants ${VARIANTS:-spec,large,spec+unfused} ${AUTOCAST:+--autocast} --json "$OUT/ddpo-sd15.json" 2>&1 \
  | grep -v -i -e warn -e "kept in float32" | tee "$OUT/ddpo-sd15.txt"
