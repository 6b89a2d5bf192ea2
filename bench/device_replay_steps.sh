#!/usr/bin/env bash
# Issue 35's in-replay measurements still open after bench/results-2026-12-04-replay-steps.md,
# each through the workflow's replay rule (Snakemake, sandbox on) by bench/device_full_dag.sh,
# stopped after the replay (TARGET), one variant after the other on one stand-in model:
#
#   rm        `full` over 16 steps (10.3 s per step over steps 2-7 on 2026-12-04: the goal is
#             10 s; more steps say whether that run drew heavier pairs), `full-nogc` over 10 steps
#             (GPUs with >= 80 GB; 7.9 s in the recipe bench), then the straightforward path
#             (`full` with `micro_batch_tokens: null`, one pair per micro-batch) over 3 steps.
#   rm-layers `full` with gradient_checkpointing_every_n_layers 2, 1 and 4, over 12 steps each
#             (LAYERS="2 1": those two only, which fit one 10-minute device call).
#   digress   `full` (compiled, CUDA graph) over 4 epochs, saving every 2, whose first attempt
#             exits right after checkpoint-2 (publish.FAULT_ENV) and is retried by Snakemake
#             (--retries 1): the resumed attempt's first epoch_s holds its compile, from the
#             inductor/triton cache that the first attempt left in replay-state/compile-cache/.
#
#   bash bench/device_replay_steps.sh rm|rm-layers|digress    # starts the runs (setsid) and returns
#   bash bench/device_replay_steps.sh wait SECONDS  # waits for them, then packs $OUT/replay-steps.tar.gz (when $OUT is set)
#   SIZE=tiny PY=.venv/bin/python bash bench/device_replay_steps.sh rm   # the same on toy stand-ins (CPU)
#
# Carry `.whl` (bench/carry_wheels.py): `full-dag-prefs` for rm; for digress the `full-dag-rest`
# set and .whl/qm9-slim (`python bench/full_dag.py qm9-slim --out .whl/qm9-slim`). A device call
# lasts at most 10 minutes and the machine is given back 30 s after a call: start and wait in one
# call (`bash bench/device_replay_steps.sh rm && bash bench/device_replay_steps.sh wait 560`);
# rm takes about 11 minutes (wheels, the stand-in model, three replays), so call `wait` again at
# once, in the next call, for the rest.
set -uo pipefail
SELF=$(realpath "$0")  # the background half runs this file again, after the cd
cd "$(dirname "$SELF")/.."
R=$PWD/results/replay-steps
T=shipped-seed42/replay/record.json
export WORK=$PWD/results/full-dag
runs_of() {  # name|SET|SNAKEMAKE_ARGS of each replay of task $1
    case $1 in
        rm)
            echo "full|recipe.overrides.max_steps=16 recipe.overrides.save_steps=16|"
            echo "nogc|recipe.profile=full-nogc recipe.overrides.max_steps=10 recipe.overrides.save_steps=10|"
            echo "plain|recipe.overrides.max_steps=3 recipe.overrides.save_steps=3 recipe.overrides.micro_batch_tokens=null|"
            ;;
        rm-layers)  # gradient_checkpointing_every_n_layers 2 and 4 against 1 (`full` as it is), steps 2-12 each
            for n in ${LAYERS:-2 1 4}; do
                echo "layers$n|recipe.overrides.max_steps=12 recipe.overrides.save_steps=12 recipe.overrides.gradient_checkpointing_every_n_layers=$n|"
            done
            ;;
        digress) echo "resume|recipe.overrides.epochs=4 recipe.overrides.save_every=2|--retries 1" ;;
    esac
}
case ${1:-} in
    wait)
        end=$(( $(date +%s) + ${2:-560} ))
        while [ ! -e "$R/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
        for d in "$R"/*/; do [ -f "$d/summary.txt" ] && echo "== $(basename "$d")" && cat "$d/summary.txt"; done
        [ -e "$R/done" ] || echo "still running"
        [ -n "${OUT:-}" ] && tar -czf "$OUT/replay-steps.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
        exit 0
        ;;
    rm | rm-layers | digress)
        mkdir -p "$R"
        rm -f "$R/done"
        # its own session, so that the runs go on after the device call that started them
        setsid bash "$SELF" _run "$1" >"$R/$1.log" 2>&1 </dev/null &
        echo "started: $1 ($(runs_of "$1" | wc -l) replays); log $R/$1.log"
        ;;
    _run)
        [ "$2" = digress ] && export REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH=2  # the first attempt exits after checkpoint-2
        while IFS='|' read -r name set args; do
            RESULTS=$R/$2-$name SET=$set TARGET=$T SNAKEMAKE_ARGS=$args bash bench/device_full_dag.sh "${SIZE:-full}" "${2%%-*}" \
                </dev/null  # the loop reads the variants from stdin
        done < <(runs_of "$2")
        touch "$R/done"
        ;;
    *)
        echo "usage: bash bench/device_replay_steps.sh rm|rm-layers|digress | wait SECONDS" >&2
        exit 2
        ;;
esac
