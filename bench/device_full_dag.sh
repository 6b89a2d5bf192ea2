#!/usr/bin/env bash
# Each task's full-scale config through the whole DAG on random weights (bench/full_dag.py).
#
#   bash bench/device_full_dag.sh full dpo rm      # on the GPU machine (any folder: it cds to the repo)
#   PY=.venv/bin/python bash bench/device_full_dag.sh tiny dpo rm ddpo soup digress   # CPU check
#   bash bench/device_full_dag.sh wait 570         # wait (at most 570 s) for a run started with
#                                                   # setsid, then pack $RESULTS into $OUT
# A device call lasts at most 10 minutes: start the run with `setsid` so that it goes on
# after the call, and wait for it in this call and, if need be, in the next one
# (bench/results-2026-12-01-full-dag.md shows the commands).
#
# For each task: a copy of the workflow under $WORK/<task>, the stand-ins and the config from
# `bench/full_dag.py <task> --size <size>`, then `snakemake results/<task>/final` with the
# sandbox on (bubblewrap: the machine's own, else .whl/bubblewrap_*.deb, unpacked). digress
# needs .whl/qm9-slim (here, with PyPI: `python bench/full_dag.py qm9-slim --out .whl/qm9-slim`).
# Writes to $RESULTS (kept between calls; `wait` packs it into $OUT): <task>-config.yaml (the
# config that ran), <task>-prepare.log, <task>-snakemake.log, <task>-bench.md (bench/collect.py:
# per-rule times), <task>-logs.txt (the end of each rule's log), <task>-summary.json,
# <task>-<run>-replay.log, -replay.attempt-<n>.log, -record.json and -replay-attempts.json (each
# replay whole: every attempt's log), gpu.csv
# (GPU memory every 2 s; bench/gpu_peaks.py reads it) and summary.txt (one line per step).
#
# Environment: PY (the Python, default python3); RESULTS (default results/full-dag-out);
# WORK (workflow copies and stand-ins, default results/full-dag); INSTALL (1: install
# .whl/*.whl, the packages the machine lacks, into SITE first; default 1 for `full`, 0 for
# `tiny`); SITE (default /opt/site: outside /tmp, which the sandbox replaces with its own, so
# that the replay sees the packages too); KEEP (1: keep the full-size stand-ins, tens of GB;
# default 0); DEADLINE (unix time after which no further task starts; default none); SET
# (space-separated DOTTED=YAML changes to each task block, after bench/full_dag.py's own, e.g.
# "recipe.profile=full-nogc recipe.overrides.max_steps=10"; a value holds no space:
# "lora.target_modules=[q_proj,v_proj]"); TARGET (what Snakemake builds,
# relative to results/<task>/; default final; e.g. shipped-seed42/replay/record.json stops after
# the replay); SNAKEMAKE_ARGS (more Snakemake options, e.g. "--retries 1").
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
RESULTS=${RESULTS:-$REPO/results/full-dag-out}
usage="usage: bash bench/device_full_dag.sh full|tiny TASK... | wait SECONDS"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
if [ "$1" = wait ]; then
    end=$(( $(date +%s) + $2 ))
    while [ ! -e "$RESULTS/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    cat "$RESULTS/summary.txt" 2>/dev/null || echo "no $RESULTS/summary.txt"
    [ -e "$RESULTS/done" ] || echo "still running"
    [ -n "${OUT:-}" ] && [ -d "$RESULTS" ] \
        && tar -czf "$OUT/$(basename "$RESULTS").tar.gz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"
    exit 0
fi
SIZE=$1
shift
case $SIZE in full | tiny) ;; *) echo "$usage" >&2; exit 2 ;; esac
PY=${PY:-python3}
case $PY in */*) PY=$(realpath -s "$PY") ;; esac  # the steps run in $WORK/<task>
WORK=${WORK:-$REPO/results/full-dag}
SITE=${SITE:-/opt/site}
DEADLINE=${DEADLINE:-0}
[ "$SIZE" = full ] && INSTALL=${INSTALL:-1} || INSTALL=${INSTALL:-0}
mkdir -p "$RESULTS" "$WORK"
rm -f "$RESULTS/done"
trap 'kill ${SAMPLER:-} 2>/dev/null; touch "$RESULTS/done"' EXIT  # `wait` stops waiting, whatever the end
say() { echo "$*" | tee -a "$RESULTS/summary.txt"; }

if [ "$INSTALL" = 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
    t0=$(date +%s)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || { say "wheel install failed"; exit 1; }
    say "wheels installed into $SITE in $(( $(date +%s) - t0 )) s"
fi
[ "$INSTALL" = 1 ] && [ -d "$SITE" ] && export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$REPO/src:$REPO/bench${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if ! command -v bwrap >/dev/null; then
    deb=$(compgen -G ".whl/bubblewrap_*.deb" | head -1)
    [ -n "$deb" ] || { say "no bwrap and no .whl/bubblewrap_*.deb"; exit 1; }
    { dpkg -x "$deb" "$HOME/bw" 2>/dev/null || "$PY" bench/unpack_deb.py "$deb" "$HOME/bw"; } && export PATH=$HOME/bw/usr/bin:$PATH
fi
say "== $(date -u +%FT%TZ) size=$SIZE tasks=$* $(nproc) cores; bwrap $(bwrap --version 2>&1)"
if command -v nvidia-smi >/dev/null; then
    say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
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
    # the sandbox shows the Python environment and sandbox_show only: the carried packages too
    [ "$INSTALL" = 1 ] && [ -d "$SITE" ] && printf 'sandbox_show: [%s]\n' "$SITE" >>"$work/config/config.yaml"
    t0=$(date +%s)
    sets=()
    set -f  # SET's words are not globs
    for setting in ${SET:-}; do sets+=(--set "$setting"); done
    set +f
    "$PY" bench/full_dag.py "$task" --size "$SIZE" --out "$work/assets" --qm9 "$REPO/.whl/qm9-slim" --shared "$WORK" \
        "${sets[@]}" >"$RESULTS/$task-prepare.log" 2>&1
    rc=$?
    say "$task prepare rc=$rc $(( $(date +%s) - t0 )) s (stand-ins: $(du -sh "$work/assets" | cut -f1), shared ones not counted)"
    [ $rc = 0 ] || continue
    cp "$work/assets/$task.yaml" "$RESULTS/$task-config.yaml"
    t0=$(date +%s)
    # shellcheck disable=SC2086  # SNAKEMAKE_ARGS: words on purpose
    (cd "$work" && "$PY" -m snakemake "results/$task/${TARGET:-final}" --configfile "assets/$task.yaml" \
        --cores "$(nproc)" --resources gpu=1 --scheduler greedy ${SNAKEMAKE_ARGS:-}) >"$RESULTS/$task-snakemake.log" 2>&1
    say "$task DAG rc=$? wall $(( $(date +%s) - t0 )) s"
    "$PY" bench/collect.py "$work/benchmarks" >"$RESULTS/$task-bench.md" 2>&1
    for f in $(cd "$work" && find logs -name '*.log' | sort); do
        echo "==> $f"
        tail -n 60 "$work/$f"
    done >"$RESULTS/$task-logs.txt" 2>&1
    [ -f "$work/results/$task/final/summary.json" ] && cp "$work/results/$task/final/summary.json" "$RESULTS/$task-summary.json"
    # each replay whole: its log (every attempt), the record and the attempts' ledger
    for run in "$work"/results/"$task"/*/replay-attempts.json; do
        [ -f "$run" ] || continue
        name=$(basename "$(dirname "$run")")
        cp "$run" "$RESULTS/$task-$name-replay-attempts.json"
        for log in "$work/logs/$task/$name"/replay*.log; do  # replay.log and replay.attempt-<n>.log
            [ -f "$log" ] && cp "$log" "$RESULTS/$task-$name-$(basename "$log")"
        done
        cp "$(dirname "$run")/replay/record.json" "$RESULTS/$task-$name-record.json" 2>/dev/null
    done
    [ "$SIZE" = full ] && [ "${KEEP:-0}" = 0 ] && rm -rf "$work/assets"  # tens of GB: free the disk for the next task
done
exit 0
