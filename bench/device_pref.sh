#!/usr/bin/env bash
# rm and dpo preference-training steps on a lent H200 (device tool), issue 17: Mistral-7B
# size, random bf16 weights, LoRA; each layout side by side with the straightforward path
# (bench/rm_throughput.py --variants, bench/dpo_throughput.py; layouts in bench/pref_batches.py).
# Needs only torch, transformers and peft (no wheels). About 4 minutes in all: each script
# builds its model (~10-20 s), then runs variants until its --budget, skipping the rest.
# Run from the repo root there:  bash bench/device_pref.sh   (writes JSON + Markdown to $OUT)
set -o pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
: "${OUT:=/tmp/out}" "${RM_BUDGET:=100}" "${DPO_BUDGET:=70}"
mkdir -p "$OUT"
nvidia-smi -L
python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'
start=$(date +%s)
timeout $((RM_BUDGET + 45)) python3 bench/rm_throughput.py --arch mistral-7b --variants "${RM_VARIANTS:-default}" --budget "$RM_BUDGET" \
  --json "$OUT/rm-steps.json" 2>&1 | grep -v -i warn | tee "$OUT/rm-steps.md"
echo "rm rc=$? wall=$(( $(date +%s) - start )) s"
start=$(date +%s)
timeout $((DPO_BUDGET + 35)) python3 bench/dpo_throughput.py --arch mistral-7b --variants "${DPO_VARIANTS:-default}" --budget "$DPO_BUDGET" \
  --json "$OUT/dpo-steps.json" 2>&1 | grep -v -i warn | tee "$OUT/dpo-steps.md"
echo "dpo rc=$? wall=$(( $(date +%s) - start )) s"
