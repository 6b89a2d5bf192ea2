#!/usr/bin/env bash
# Issue 35, soup candidate on a lent GPU machine (device tool): every variant of
# bench/soup_candidate_variants.py in one process (float32 as the recipe runs it, TF32,
# bf16/fp16 autocast, fp16 with a float32 re-check of near-tie images, torch.compile and
# CUDA graphs), seconds per candidate and predictions changed against float32. open_clip,
# ftfy and wcwidth travel in .whl/ as for bench/device_soup.sh.
# Run from the repo root there:  BUDGET=420 bash bench/device_soup_candidate.sh   (writes to $OUT)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
timeout $(( ${BUDGET:-420} + 40 )) python3 bench/soup_candidate_variants.py --out "$OUT" --budget "${BUDGET:-420}" "$@" 2>&1 \
  | grep -v -i -E "warn|No pretrained|autotune|triton_mm|select_algorithm|strides|dtypes|^ " | tee "$OUT/soup-candidate.log"
