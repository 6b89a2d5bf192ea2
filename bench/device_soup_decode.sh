#!/usr/bin/env bash
# soup on the H200 (issue 17): full scoring of 10,000 JPEGs with the evaluator's decoding
# workers against one process, and a candidate as one product over a flat ingredient buffer
# against the per-tensor tensordot, in one run. open_clip_torch, ftfy, wcwidth travel as
# wheels in WHEEL_DIR (pip download --no-deps, see PITFALLS). Writes soup.json/txt to $OUT.
# Usage (repo root there): bash bench/device_soup_decode.sh WHEEL_DIR
# Not run yet: on 2026-12-01 the wheels could not reach the device; bench/soup_timm_throughput.py
# measured the same with a timm stand-in (bench/results-2026-12-01-soup.md). Checked on the CPU
# at toy size (2 ingredients, 16 images).
set -o pipefail
WHEEL_DIR=${1:-shared-carry/whl}
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEEL_DIR"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi -L; python3 -c "import torch, torchvision, PIL, os; print(torch.__version__, torchvision.__version__, PIL.__version__, os.cpu_count(), 'cpus')"
timeout 400 python3 bench/soup_throughput.py --arch ViT-B-32 --n-ingredients 72 --n-proxy 2000 --n-final 10000 \
  --threads 16 --workers 14 --flat --big-batch 2000 --skip-naive --json "$OUT/soup-vitb32.json" 2>&1 \
  | grep -v -i warn | tee "$OUT/soup-vitb32.txt"
