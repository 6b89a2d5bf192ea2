#!/usr/bin/env bash
# Issue 35 on a lent H200 (device tool): the budget-bound steps inside the recipes, each new path
# side by side with the straightforward one in the same run, within one call of at most 9 minutes.
#
# Here first (PyPI):  python bench/carry_wheels.py speed      # .whl/, ~11 MB; name .whl in `carry`
# There:              bash bench/device_speed.sh [SECTION...]  # from the repo root; writes $OUT
#
# Sections, in this order by default (call 1); each starts only if its estimate (seconds, below)
# ends before DEADLINE (default: start + ${BUDGET:-520} s), else it is listed as skipped:
#   probe        versions, sdpa's backend for the rm/dpo shapes, the cost of new sequence lengths  15
#   prefs        the Mistral-7B stand-in (random bf16, 14.5 GB) and 256 UltraFeedback-like pairs      45
#   rm           rm `full`: grouped micro-batches (the profile now) 3 steps, then micro_batch_tokens
#                null (the profile before: 1 pair x 64) 1 step, timed per micro-batch too           150
#   dpo          dpo `full` (NF4): now (causal_padding + micro_batch_tokens) vs before, 3 steps each  125
#   ddpo         PPO ratio before an update, SD v1.5 fp16, eager: the recipe vs the old bookkeeping  50
#   dpo-bf16     dpo `full-bf16` (>= 120 GB GPUs) now, 3 steps: model TFLOP/s                          45
#   rm-nogc      rm `full` grouped without gradient checkpointing, 3 steps                            60
# Issue 35's second pass (results-2026-12-02-speed2.md; DPO_STEPS=5 for a median of 4 steps):
#   dpo-mbt      dpo `full` with micro_batch_tokens 16384, then 12288                                 120
#   dpo-flash    dpo `full` with cuDNN's sdpa off (flash: no plan built per new shape)                 60
#   rm-flash     rm `full` grouped with cuDNN's sdpa off, 3 steps                                      70
#   rm-mbt       rm `full` grouped with micro_batch_tokens 16384, 3 steps                              70
# Call 2 of that pass, once the profiles set cudnn_attention: false (DPO_STEPS=5 BUDGET=560):
#   sdpa-accuracy cuDNN, flash and efficient attention against float64, and each twice          20
#   knob-dpo     dpo `full` (now), with cudnn_attention true (twice: the spread), the plain path;   310
#                the first step's gradients compared (bench/compare_grads.py)
#   knob-rm      rm `full` (now), with cudnn_attention true, the plain path; gradients compared     235
# Call 2 (BUDGET=330 bash bench/device_speed.sh digress ddpo-compile; digress needs .whl/digress):
#   digress      the recipe with compile_scope layers, then model: 3 epochs each, each run stopping   200
#                itself by DEADLINE. Needs the QM9 split made here with RDKit (the device has none):
#                python bench/digress_tensors.py --out .whl/digress   (1.1 MB; or DIGRESS_PUBLIC=DIR)
#                and no wheels: INSTALL=0 BUDGET=230 bash bench/device_speed.sh digress, carry .whl/digress
#   ddpo-compile the ratio through a compiled toy UNet in fp16 (the mechanism, not SD's 6 minutes)  130
#   dpo-bf16-more `full-bf16` before, and with lora_dtype bfloat16 (a recipe change) (+ prefs)      90
#   soup         72 ViT-B/32 stand-ins: a candidate in float32, TF32 and bf16, predictions changed  60
#
# A CPU check of the script (toy sizes, the recipes' CPU settings, no wheels):
#   INSTALL=0 SIZE=tiny PY=.venv/bin/python EXTRA_RM='{"dtype": "float32", "optim": "adamw_torch"}' \
#   EXTRA_DPO='{"dtype": "float32", "optim": "adamw_torch", "quantization": null}' bash bench/device_speed.sh prefs rm dpo
#
# Output in $OUT: speed.md (the table, bench/speed_table.py), speed.json (every row), speed.log
# (everything printed). Wheels: .whl/*.whl installed into /tmp/site (trl, datasets, dill,
# multiprocess, bitsandbytes cpu+cuda130, diffusers, importlib_metadata).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/speed-out}
mkdir -p "$OUT"
START=$(date +%s)
DEADLINE=${DEADLINE:-$((START + ${BUDGET:-520}))}
WORK=${WORK:-/tmp/speed-work}
mkdir -p "$WORK"
LOG=$OUT/speed.log
JSON=$WORK/rows.json
exec > >(tee -a "$LOG") 2>&1
[ $# -gt 0 ] || set -- probe prefs rm dpo ddpo dpo-bf16 rm-nogc
PY=${PY:-python3} SIZE=${SIZE:-full} EXTRA_RM=${EXTRA_RM:-"{}"} EXTRA_DPO=${EXTRA_DPO:-"{}"}
if [ "${INSTALL:-1}" = 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src:$PWD/bench PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c 'import sys, importlib.metadata as m
def v(n):
    try: return m.version(n)
    except m.PackageNotFoundError: return "missing"
print("python", sys.version.split()[0], *(f"{n} {v(n)}" for n in "torch transformers peft accelerate trl datasets bitsandbytes diffusers timm".split()))'
left() { echo $((DEADLINE - $(date +%s))); }
skipped=()
# run ESTIMATE NAME COMMAND...: the command under `timeout` (the time left), unless it would not fit
run() {
    local estimate=$1 name=$2
    shift 2
    if [ "$(left)" -lt "$estimate" ]; then
        echo "== $name: skipped ($(left) s left, estimate $estimate s)"
        skipped+=("$name")
        return 0
    fi
    echo "== $name ($(( $(date +%s) - START )) s into the call, $(left) s left)"
    timeout "$(left)" "$@" 2>&1 | grep -v -i -e warn -e "it/s]" -e "LOAD REPORT" -e "^Key " -e "^---" -e "MISSING" -e "^Notes" \
        -e "newly initialized" \
        -e "examples/s"
    echo "== $name rc=${PIPESTATUS[0]}"
}
steps() {  # steps ESTIMATE LABEL TASK PROFILE STEPS OVERRIDES [FLAG...]
    local extra=$EXTRA_RM
    [ "$3" = dpo ] && extra=$EXTRA_DPO
    run "$1" "$2" "$PY" bench/recipe_steps.py run --data "$WORK/prefs" --task "$3" --profile "$4" --steps "$5" \
        --overrides "$6" --extra "$extra" --label "$2" --work "$WORK/runs" --json "$JSON" "${@:7}"
}
DPO_STEPS=${DPO_STEPS:-3}
gsteps() {  # steps, saving the first step's gradients to $WORK/grads-TASK/LABEL.pt (bench/compare_grads.py)
    steps "$@" --save-grads "$WORK/grads-$3/$2.pt"
}
for section in "$@"; do
    case $section in
    probe) run 15 probe "$PY" bench/sdpa_probe.py --json "$WORK/sdpa.json" ;;
    prefs) [ -e "$WORK/prefs/model/.complete" ] || run 45 prefs "$PY" bench/recipe_steps.py prepare --size "$SIZE" --out "$WORK/prefs" ;;
    rm)
        steps 75 rm-grouped rm full 3 '{}'
        steps 75 rm-plain rm full 1 '{"micro_batch_tokens": null, "cudnn_attention": true}'
        ;;
    rm-nogc) steps 60 rm-grouped-nogc rm full 3 '{"gradient_checkpointing": false}' ;;
    dpo)
        steps 60 dpo-nf4 dpo full "$DPO_STEPS" '{}'
        steps 65 dpo-nf4-plain dpo full "$DPO_STEPS" '{"causal_padding": false, "micro_batch_tokens": null, "cudnn_attention": true}'
        ;;
    dpo-mbt)
        steps 60 dpo-nf4-16384 dpo full "$DPO_STEPS" '{"micro_batch_tokens": 16384}'
        steps 60 dpo-nf4-12288 dpo full "$DPO_STEPS" '{"micro_batch_tokens": 12288}'
        ;;
    dpo-flash) steps 60 dpo-nf4-no-cudnn dpo full "$DPO_STEPS" '{}' --no-cudnn-sdp ;;
    rm-flash) steps 70 rm-grouped-no-cudnn rm full 3 '{}' --no-cudnn-sdp ;;
    rm-mbt) steps 70 rm-grouped-16384 rm full 3 '{"micro_batch_tokens": 16384}' ;;
    sdpa-accuracy) run 20 sdpa-accuracy "$PY" bench/sdpa_accuracy.py --json "$WORK/sdpa-accuracy.json" ;;
    knob-dpo)
        gsteps 65 dpo-nf4 dpo full "$DPO_STEPS" '{}'
        gsteps 65 dpo-nf4-cudnn dpo full "$DPO_STEPS" '{"cudnn_attention": true}'
        gsteps 80 dpo-nf4-plain dpo full "$DPO_STEPS" '{"causal_padding": false, "micro_batch_tokens": null, "cudnn_attention": true}'
        gsteps 65 dpo-nf4-cudnn-b dpo full "$DPO_STEPS" '{"cudnn_attention": true}'
        run 30 grads-dpo "$PY" bench/compare_grads.py "$WORK/grads-dpo" dpo-nf4-cudnn --json "$WORK/grads-dpo.json"
        ;;
    knob-rm)
        gsteps 70 rm-grouped rm full 3 '{}'
        gsteps 70 rm-grouped-cudnn rm full 3 '{"cudnn_attention": true}'
        gsteps 80 rm-plain rm full 1 '{"micro_batch_tokens": null, "cudnn_attention": true}'
        run 15 grads-rm "$PY" bench/compare_grads.py "$WORK/grads-rm" rm-grouped-cudnn --json "$WORK/grads-rm.json"
        ;;
    dpo-bf16) steps 45 dpo-bf16 dpo full-bf16 3 '{}' ;;
    dpo-bf16-more)
        steps 45 dpo-bf16-plain dpo full-bf16 3 '{"causal_padding": false, "micro_batch_tokens": null}'
        steps 45 dpo-bf16-lora-bf16 dpo full-bf16 3 '{"lora_dtype": "bfloat16"}'
        ;;
    digress) run 200 digress "$PY" bench/digress_compile.py --public "${DIGRESS_PUBLIC:-.whl/digress}" \
        --scopes layers,model --epochs 3 --until "$DEADLINE" --json "$WORK/digress.json" ;;
    ddpo) run 50 ddpo "$PY" bench/ddpo_ratio.py --paths eager --json "$WORK/ddpo-ratio.json" ;;
    ddpo-compile) run 130 ddpo-compile "$PY" bench/ddpo_ratio.py --tiny --dtype float16 --paths eager,compile \
        --steps 50 --json "$WORK/ddpo-ratio-compile.json" ;;
    soup) run 60 soup "$PY" bench/soup_candidate.py --json "$WORK/soup.json" ;;
    *) echo "unknown section $section" ;;
    esac
done
"$PY" bench/speed_table.py "$WORK" > "$OUT/speed.md"
cat "$OUT/speed.md"
"$PY" -c 'import json, sys, pathlib; w = pathlib.Path(sys.argv[1]); print(json.dumps({p.stem: json.loads(p.read_text()) for p in sorted(w.glob("*.json"))}, indent=1))' \
    "$WORK" > "$OUT/speed.json"
echo "skipped: ${skipped[*]:-none}; call wall $(( $(date +%s) - START )) s"
