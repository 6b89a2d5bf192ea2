#!/usr/bin/env bash
# Each task's full-scale config through the whole DAG on random weights (bench/full_dag.py).
#
#   bash bench/device_full_dag.sh full dpo rm      # on the GPU machine, from the repo root
#   PY=.venv/bin/python bash bench/device_full_dag.sh tiny dpo rm ddpo soup digress   # CPU check
#   bash bench/device_full_dag.sh wait 570         # device: wait for a run started with setsid
#                                                   # (at most 570 s), then pack $RESULTS into $OUT
# A device call lasts at most 10 minutes: start the run with `setsid` so that it goes on
# after the call, and wait for it in this call and, if need be, in the next one.
#
# For each task: a copy of the workflow under $WORK/<task>, the stand-ins and the config from
# `bench/full_dag.py <task> --size <size>`, then `snakemake results/<task>/final` with the
# sandbox on (bubblewrap: the machine's own, else the .deb in .whl/, unpacked). Writes to
# $RESULTS (kept between calls; `wait` packs it into $OUT): <task>-prepare.log,
# <task>-snakemake.log, <task>-bench.md (bench/collect.py: per-rule times), <task>-logs.txt
# (the end of each rule's log), <task>-summary.json, gpu.csv (GPU memory every 2 s) and
# summary.txt (one line per step).
# Wheels in .whl/*.whl (packages the machine lacks) are installed into $SITE first, outside
# /tmp (the sandbox mounts its own /tmp) so that the replay sees them too.
set -uo pipefail
REPO=$PWD
RESULTS=${RESULTS:-$REPO/results/full-dag-out}
if [ "$1" = wait ]; then
    end=$(( $(date +%s) + $2 ))
    while [ ! -e "$RESULTS/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    cat "$RESULTS/summary.txt"
    [ -e "$RESULTS/done" ] || echo "still running"
    [ -n "${OUT:-}" ] && tar -czf "$OUT/$(basename "$RESULTS").tar.gz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"
    exit 0
fi
SIZE=$1
shift
PY=${PY:-python3}
case $PY in */*) PY=$(realpath -s "$PY") ;; esac  # the steps run in $WORK/<task>
WORK=${WORK:-$REPO/results/full-dag}
SITE=${SITE:-/opt/site}
DEADLINE=${DEADLINE:-0}  # unix time after which no further task starts (0: none)
mkdir -p "$RESULTS" "$WORK"
rm -f "$RESULTS/done"
say() { echo "$*" | tee -a "$RESULTS/summary.txt"; }

if compgen -G ".whl/*.whl" >/dev/null && [ "${INSTALL:-1}" = 1 ]; then
    t0=$(date +%s)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || { say "wheel install failed"; exit 1; }
    say "wheels installed into $SITE in $(( $(date +%s) - t0 )) s"
fi
[ -d "$SITE" ] && export PYTHONPATH=$SITE
export PYTHONPATH=$REPO/src:$REPO/bench${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if ! command -v bwrap >/dev/null; then
    deb=$(compgen -G ".whl/bubblewrap_*.deb" | head -1)
    [ -n "$deb" ] || { say "no bwrap and no .whl/bubblewrap_*.deb"; exit 1; }
    { dpkg -x "$deb" "$HOME/bw" 2>/dev/null || "$PY" bench/unpack_deb.py "$deb" "$HOME/bw"; } && export PATH=$HOME/bw/usr/bin:$PATH
fi
say "== $(date -u +%FT%TZ) size=$SIZE tasks=$* $(nproc) cores; bwrap $(bwrap --version 2>&1)"
if command -v nvidia-smi >/dev/null; then
    say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
    # GPU memory and load every 2 s, to read each job's peak beside the rule times
    nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 2 >"$RESULTS/gpu.csv" 2>&1 &
    SAMPLER=$!
fi
say "$("$PY" -c 'import sys, torch, transformers, snakemake; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "snakemake", snakemake.__version__)' 2>&1 | tail -1)"

for task in "$@"; do
    if [ "$DEADLINE" != 0 ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then
        say "$task: not started (DEADLINE)"
        continue
    fi
    work=$WORK/$task
    rm -rf "$work" && mkdir -p "$work"
    cp -r Snakefile rules config recipes envs report "$work/"
    t0=$(date +%s)
    "$PY" bench/full_dag.py "$task" --size "$SIZE" --out "$work/assets" --qm9 "$REPO/.whl/qm9-slim" --shared "$WORK" \
        >"$RESULTS/$task-prepare.log" 2>&1
    say "$task prepare rc=$? $(( $(date +%s) - t0 )) s (stand-ins: $(du -sh "$work/assets" | cut -f1))"
    t0=$(date +%s)
    (cd "$work" && "$PY" -m snakemake "results/$task/final" --configfile "assets/$task.yaml" \
        --cores "$(nproc)" --resources gpu=1 --scheduler greedy) >"$RESULTS/$task-snakemake.log" 2>&1
    rc=$?
    say "$task DAG rc=$rc wall $(( $(date +%s) - t0 )) s"
    "$PY" bench/collect.py "$work/benchmarks" >"$RESULTS/$task-bench.md" 2>&1
    for f in $(cd "$work" && find logs -name '*.log' | sort); do
        echo "==> $f"
        tail -n 60 "$work/$f"
    done >"$RESULTS/$task-logs.txt" 2>&1
    [ -f "$work/results/$task/final/summary.json" ] && cp "$work/results/$task/final/summary.json" "$RESULTS/$task-summary.json"
    [ "$SIZE" = full ] && [ "${KEEP:-0}" = 0 ] && rm -rf "$work/assets"  # tens of GB: free the disk for the next task
done
[ -n "${SAMPLER:-}" ] && kill "$SAMPLER"
touch "$RESULTS/done"
exit 0
