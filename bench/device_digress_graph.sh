#!/usr/bin/env bash
# digress on the H200 at full size (issue 17): the CUDA-graph step (recipe `cuda_graph: true`)
# against the plain loop and the resident path without it, in one run; then the CPU/GPU test
# that the graphed step computes the plain step's loss. DATA_DIR as for device_digress.sh
# (bench/digress_tensors.py). Writes digress_throughput.{md,json} and pytest.txt under $OUT.
# Usage (repo root there): bash bench/device_digress_graph.sh DATA_DIR
set -uo pipefail
DATA_DIR=${1:-shared-carry/digress}
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, torch_geometric, platform; print('torch', torch.__version__, 'pyg', torch_geometric.__version__, 'python', platform.python_version(), 'cpus', __import__('os').cpu_count())"
# without train_graphs.npz (no way to carry it): 100k synthetic graphs with its stats' histograms
if [ -f "$DATA_DIR/train_graphs.npz" ]; then DATA=(--data "$DATA_DIR/train_graphs.npz"); else DATA=(--synthetic 100000); fi
timeout 300 python3 bench/digress_throughput.py "${DATA[@]}" --stats "$DATA_DIR/stats.json" \
    --profile full --epochs 1 --threads 8 --data-only --out "${OUT:-/tmp}"
# the equivalence test, on the GPU too (pytest carried as wheels in shared-carry/whl-test when missing)
python3 -c "import pytest" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/testsite \
    shared-carry/whl-test/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/testsite
timeout 120 python3 -m pytest -q -p no:cacheprovider -rs "tests/test_digress.py::test_graphed_step_matches_the_plain_step" \
    2>&1 | tail -8 | tee "${OUT:-/tmp}/pytest.txt"
