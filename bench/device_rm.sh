#!/usr/bin/env bash
# rm on a lent GPU machine (device tool): reward-model throughput at Mistral-7B size with
# random weights (bf16, LoRA), then the whole rm DAG on a tiny random Llama (CUDA paths) and
# on a random-weight SmolLM2-135M at the embedded default's sizes. Wheels of the packages the
# machine lacks travel in .whl/ (see bench/results-2026-11-30.md), with .whl/smol-config/.
# Run from the repo root there:  bash bench/device_rm.sh   (writes to $OUT)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi -L
timeout 240 python3 bench/rm_throughput.py --arch mistral-7b --json "$OUT/rm-7b.json" 2>&1 | grep -v Warning | tee "$OUT/rm-7b.md"
python3 bench/device_models.py /tmp/models .whl/smol-config rm 2>&1 | tail -2
for name in tiny smol; do
  cp /tmp/models/$name.yaml config/config.yaml
  rm -rf results logs benchmarks .snakemake
  start=$(date +%s)
  timeout 200 python3 -m snakemake results/rm/final --cores 4 --resources gpu=1 --workflow-profile none > "$OUT/rm-$name-snakemake.log" 2>&1
  echo "$name rm DAG rc=$? wall=$(( $(date +%s) - start )) s"
  mkdir -p "$OUT/rm-$name"
  cat logs/rm/shipped-seed42/*.log > "$OUT/rm-$name/logs.txt" 2>/dev/null
  cp results/rm/final/summary.json "$OUT/rm-$name/" 2>/dev/null
  python3 bench/collect.py benchmarks > "$OUT/rm-$name/bench.md"
done
