#!/usr/bin/env bash
# Issue 35, ddpo (bench/gpu_ddpo_speed.py) on a lent H200. Wheels: diffusers + importlib_metadata in
# ${WHL:-bench/gpu_ddpo_whl} (or WHL=.whl after `python bench/carry_wheels.py speed`); the recipe to
# compare with the plain one in DDPO_NEW_RECIPE (default bench/gpu_ddpo_recipe).
#   bash bench/gpu_ddpo_device.sh 1   # profile, then the epochs (2026-12-02: EPOCH_T=430, 488 s)
#   bash bench/gpu_ddpo_device.sh 2   # compile: cold, then a second process on the same inductor
#                                     # cache (2026-12-02: STEPS=2, without REF, 408 s); writes $OUT
set -uo pipefail
OUT=${OUT:-/tmp/gpu-ddpo-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-bench/gpu_ddpo_whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi -L; nproc
python3 -c "import torch, diffusers, peft; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), diffusers.__version__, peft.__version__)"
F='-v -e warn -e kept.in.float32 -e Casting.directly'
if [ "$1" = 1 ]; then
  timeout 100 python3 bench/gpu_ddpo_speed.py --mode profile 2>&1 | grep $F
  timeout ${EPOCH_T:-420} python3 bench/gpu_ddpo_speed.py --mode epochs --variants ${VARIANTS:-plain,plain,new,graphs,cudnn_bench,sdpa_cudnn,tf32,bf16_autocast} 2>&1 | grep $F
fi
if [ "$1" = 2 ]; then
  export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
  REF=${REF:+--reference $REF}
  timeout ${COLD_T:-420} python3 bench/gpu_ddpo_speed.py --mode compile ${STEPS:+--steps $STEPS} --tag cold ${NOAD:+--no-auto-dynamic} $REF 2>&1 | grep $F
  du -sh $TORCHINDUCTOR_CACHE_DIR
  timeout ${WARM_T:-150} python3 bench/gpu_ddpo_speed.py --mode compile ${STEPS:+--steps $STEPS} --tag warm ${NOAD:+--no-auto-dynamic} $REF --reference $OUT/compile_cold_w.pt 2>&1 | grep $F
fi
ls -la $OUT
