#!/usr/bin/env bash
# GPU slot + sandbox on the GPU machine: does a process launched as the replay launches
# training (replaykit.harness.slots + the isolation plan + harness.launch) see exactly the
# device it was given? bench/device_gpu_slot.py says what it checks; about 1 minute.
#
# Here (once; needs the package registry): bash bench/device_gpu_slot.sh prepare
#     -> shared-carry/bubblewrap_*.deb (`apt-get download bubblewrap`: the GPU machine has no apt)
# There (carry shared-carry; torch present, snakemake and PyYAML not needed):
#     bash bench/device_gpu_slot.sh          # -> $OUT/device_gpu_slot.json, $OUT/device_gpu_slot.log
# Exit 1 when a check fails. Knobs: CARRY (default ./shared-carry), BW_DIR (where the .deb is
# unpacked when bwrap is missing, default $HOME/bw), PYTHON (default: the python that has torch).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CARRY=${CARRY:-$REPO/shared-carry}

if [ "${1:-}" = prepare ]; then
    mkdir -p "$CARRY" && cd "$CARRY" && apt-get download bubblewrap && ls -la "$CARRY"/bubblewrap_*.deb
    exit $?
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for cand in python3 python; do
        if command -v "$cand" >/dev/null && "$cand" -c "import torch" 2>/dev/null; then PY=$(command -v "$cand"); break; fi
    done
    PY=${PY:-$(command -v python3)}
fi
OUT=${OUT:-$REPO/results/device-gpu-slot}
export OUT PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
exec > >(tee "$OUT/device_gpu_slot.log") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) ($(nproc) cores); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if ! command -v bwrap >/dev/null; then  # the carried Debian package, unpacked
    BW_DIR=${BW_DIR:-$HOME/bw}
    deb=$(ls "$CARRY"/bubblewrap_*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || { echo "error: no bwrap and no $CARRY/bubblewrap_*.deb (bash bench/device_gpu_slot.sh prepare)"; exit 2; }
    if command -v dpkg >/dev/null; then dpkg -x "$deb" "$BW_DIR"; else "$PY" bench/unpack_deb.py "$deb" "$BW_DIR"; fi
    export PATH=$BW_DIR/usr/bin:$PATH
fi
echo "bwrap: $(command -v bwrap): $(bwrap --version)"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
SECONDS=0
"$PY" bench/device_gpu_slot.py
rc=$?
echo "== done: exit $rc in $SECONDS s"
exit $rc
