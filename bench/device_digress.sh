#!/usr/bin/env bash
# digress training throughput on the H200 at full size (9 layers, batch 512, 100k QM9
# training graphs): the fast path (graphs resident on the GPU, bf16) against a
# straightforward per-batch loop (torch_geometric DataLoader + host-to-device copy), in
# the same run. No RDKit needed: the graphs come featurised from DATA_DIR, made on a
# machine with RDKit by
#     python bench/digress_tensors.py --out <DATA_DIR>
# (train_graphs.npz ~1 MB + stats.json).
#
# Usage: bash bench/device_digress.sh [DATA_DIR]      (default: shared/digress)
#        bash bench/device_digress.sh DATA_DIR --tiny  (CPU check at toy size)
# Writes digress_throughput.{md,json} under $OUT when $OUT is set.
set -euo pipefail
DATA_DIR=${1:-shared/digress}
shift || true
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
python -c "import torch, torch_geometric; print('torch', torch.__version__, 'pyg', torch_geometric.__version__, 'cuda', torch.cuda.is_available())"
python bench/digress_throughput.py --data "$DATA_DIR/train_graphs.npz" --stats "$DATA_DIR/stats.json" \
    --profile full --epochs 2 --threads 8 --workers 4 --eval --compile "$@"
