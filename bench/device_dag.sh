#!/usr/bin/env bash
# The whole dpo DAG on a lent GPU machine (device tool), twice: a tiny random Llama
# (correctness of the CUDA/bf16 paths) and a random-weight SmolLM2-135M at the embedded
# default's sizes (timing). Wheels of the packages the machine lacks travel in .whl/
# (see bench/results-2026-11-30.md for the list and how they were fetched), together with
# .whl/smol-config/ (SmolLM2's config.json and tokenizer files, no weights).
# Run from the repo root there:  bash bench/device_dag.sh   (writes to $OUT)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi -L
python3 bench/device_models.py /tmp/models .whl/smol-config 2>&1 | tail -2
for name in tiny smol; do
  cp /tmp/models/$name.yaml config/config.yaml
  rm -rf results logs benchmarks .snakemake
  start=$(date +%s)
  python3 -m snakemake results/dpo/final --cores 4 --resources gpu=1 --workflow-profile none > "$OUT/$name-snakemake.log" 2>&1
  echo "$name DAG rc=$? wall=$(( $(date +%s) - start )) s"
  mkdir -p "$OUT/$name"
  cat logs/dpo/shipped-seed42/*.log > "$OUT/$name/logs.txt" 2>/dev/null
  python3 bench/collect.py benchmarks > "$OUT/$name/bench.md"
done
