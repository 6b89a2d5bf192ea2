#!/usr/bin/env bash
# soup on a lent GPU machine (device tool): seconds per candidate soup and for full scoring
# with 72 random-weight ViT-B/32 ingredients, fast path against the naive one in the same run,
# then the whole soup DAG on the tests' tiny ingredients. Wheels the machine lacks travel in
# .whl/ (open_clip_torch, ftfy, wcwidth added for soup; timm and torchvision are there).
# Run from the repo root there:  bash bench/device_soup.sh   (writes to $OUT)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi -L; python3 -c "import torch, torchvision, PIL; print(torch.__version__, torchvision.__version__, PIL.__version__)"
timeout 420 python3 bench/soup_throughput.py --arch ViT-B-32 --n-ingredients 72 --n-proxy 2000 --n-final 10000 \
  --threads 16 --json "$OUT/soup-vitb32.json" 2>&1 | grep -v -i warn | tee "$OUT/soup-vitb32.txt"
