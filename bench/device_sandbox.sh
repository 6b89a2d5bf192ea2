#!/usr/bin/env bash
# Does a process in the allow-list sandbox, under its resource limits, see the GPU? (issue 27)
#
#     bash bench/device_sandbox.sh          # on the GPU machine, from any folder; about 1 minute
#
# bench/device_sandbox.py lays out a working directory (results/device-sandbox, ignored), builds
# the dpo task's isolation plan (replaykit.isolation.plan, default sandbox_limits) and starts a
# probe as the replay starts train.py, directly and in the sandbox: torch.cuda.is_available(),
# the device's name, a 256x256 float32 matmul on the GPU checked against the CPU's, the bf16
# matmul rate, whether the hidden split is readable; then the canary self-test in the same plan.
# Needs only torch (no snakemake, TRL or diffusers) and the repository's src/.
# bubblewrap: the machine's own, else .whl/bubblewrap_*.deb (carried; `apt-get download
# bubblewrap` here) unpacked into $HOME/bw; with neither, one line says so and the script stops.
# Writes $OUT/device_sandbox.log and $OUT/device_sandbox.json (OUT defaults to
# results/device-sandbox-out). The previous version of this script (a whole digress replay,
# bench/results-2026-12-01-sandbox.md) is in git history.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/results/device-sandbox-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/device_sandbox.log") 2>&1
PY=${PY:-}
if [ -z "$PY" ]; then  # the interpreter that has torch
    for cand in python3 python; do
        if command -v "$cand" >/dev/null && "$cand" -c "import torch" 2>/dev/null; then PY=$(command -v "$cand"); break; fi
    done
fi
[ -n "$PY" ] || { echo "device_sandbox: no python with torch on PATH (set PY)"; exit 2; }
if ! command -v bwrap >/dev/null; then
    deb=$(compgen -G ".whl/bubblewrap_*.deb" | head -1)
    if [ -z "$deb" ]; then
        echo "device_sandbox: bubblewrap is not on this machine (no bwrap on PATH, no .whl/bubblewrap_*.deb carried): nothing tested"
        exit 3
    fi
    { dpkg -x "$deb" "$HOME/bw" 2>/dev/null || "$PY" bench/unpack_deb.py "$deb" "$HOME/bw"; } && export PATH=$HOME/bw/usr/bin:$PATH
fi
echo "== $(date -u +%FT%TZ) $(nproc) cores; $(bwrap --version); $("$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)')"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 170 "$PY" bench/device_sandbox.py --work results/device-sandbox --out "$OUT/device_sandbox.json"
rc=$?
[ "$rc" = 124 ] && echo "device_sandbox: stopped after 170 s"
exit "$rc"
