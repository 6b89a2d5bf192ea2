#!/usr/bin/env bash
# Parse cost of the workflow: wall time of `snakemake -n` of all five tasks' final results
# (embedded config, nothing built), at git refs given as arguments, against a one-rule
# workflow (Snakemake's own start-up). Runs are interleaved so that load from other jobs falls
# on all variants alike; prints every run and the medians.
#
#   bench/parse_time.sh [RUNS] REF...      e.g. bench/parse_time.sh 7 04daa1a HEAD
#
# Each ref is exported with `git archive` into a temporary folder and run there with its own
# src/ first on PYTHONPATH, by this checkout's .venv/bin/snakemake.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SM="$ROOT/.venv/bin/snakemake"
RUNS=${1:-7}; shift
TARGETS="results/dpo/final results/rm/final results/soup/final results/digress/final results/ddpo/final"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/empty"; printf 'rule all:\n    output: "x"\n    shell: "touch {output}"\n' > "$TMP/empty/Snakefile"
for ref in "$@"; do mkdir "$TMP/$ref"; git -C "$ROOT" archive "$ref" | tar -x -C "$TMP/$ref"; done
wall() { /usr/bin/time -f "%e" "$@" >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; exit 1; }; tail -1 "$TMP/err"; }
declare -A all
for i in $(seq "$RUNS"); do
  line="run $i:"
  t=$(cd "$TMP/empty" && wall "$SM" -n --cores 1 --workflow-profile none); all[empty]+="$t "; line+=" empty $t"
  for ref in "$@"; do
    t=$(cd "$TMP/$ref" && PYTHONPATH="$TMP/$ref/src" wall "$SM" $TARGETS -n --cores 1 --workflow-profile none)
    all[$ref]+="$t "; line+="  $ref $t"
  done
  echo "$line"
done
for key in empty "$@"; do
  echo "median $key: $(printf '%s\n' ${all[$key]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') s"
done
