#!/usr/bin/env bash
# One sandboxed digress replay on the GPU machine: does CUDA work inside bubblewrap?
#
# The GPU machine has no network and no apt: bubblewrap travels as Debian's .deb
# (`apt-get download bubblewrap`, 47 KB) and is unpacked there with `dpkg -x`; the digress
# public split travels with a manifest derived from the real one (the fixed start of digress
# is the raw QM9 data, 216 MB, which the replay must not see and is not carried: the derived
# manifest lists only its config.json, carried as a stub, so verify_assets still checks
# hashes). Nothing of the hidden split travels.
#
# Here (a machine with the built assets, `snakemake results/digress/assets/manifest.json`):
#     bash bench/device_sandbox.sh prepare        # -> shared-carry/digress/{assets,fixed-start-stub}
# There (carry shared-carry; the device copies /work/main's tree, so from a worktree put
# `git archive` of the branch + shared-carry under an ignored path of /work/main and carry that):
#     bash bench/device_sandbox.sh                # writes logs and the record under $OUT
# Knobs (environment): BUDGET (replay budget JSON), OVERRIDES (recipe overrides JSON),
# BW_DIR (where the .deb is unpacked, default $HOME/bw), FORCE_DEB=1 (use the .deb even
# when bwrap is installed), RUN_DIR (default results/device-sandbox).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CARRY=${CARRY:-$REPO/shared-carry}

if [ "${1:-}" = prepare ]; then
    set -e
    src=results/digress/assets
    dst=$CARRY/digress
    rm -rf "$dst" && mkdir -p "$dst/assets" "$dst/fixed-start-stub"
    cp -r "$src/public" "$dst/assets/public"
    rm -f "$dst/assets/public/.snakemake_timestamp"
    cp results/models/qm9pack/config.json "$dst/fixed-start-stub/config.json"
    python3 - "$src/manifest.json" "$dst/assets/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["fixed_start"]["files"] = {k: v for k, v in m["fixed_start"]["files"].items() if k == "config.json"}
m["files"] = {k: v for k, v in m["files"].items() if v.get("split") == "public"}
m["derived"] = ("bench/device_sandbox.sh prepare: public split only; fixed start reduced to its "
                "config.json (the QM9 CSVs stay behind, the replay of digress does not see them)")
json.dump(m, open(sys.argv[2], "w"), indent=1, sort_keys=True)
EOF
    du -sh "$CARRY"/*
    exit 0
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then  # the interpreter that has torch
    for cand in python3 python; do
        if command -v "$cand" >/dev/null && "$cand" -c "import torch" 2>/dev/null; then PY=$(command -v "$cand"); break; fi
    done
    PY=${PY:-$(command -v python3)}
fi
OUT=${OUT:-$REPO/results/device-sandbox-out}
RUN_DIR=${RUN_DIR:-$REPO/results/device-sandbox}
BUDGET=${BUDGET:-'{"outer_limit_s": 240, "internal_deadline_s": 150, "export_reserve_s": 60}'}
OVERRIDES=${OVERRIDES:-'{"device": "auto"}'}
ASSETS=$CARRY/digress/assets
STUB=$CARRY/digress/fixed-start-stub
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
exec > >(tee "$OUT/device_sandbox.log") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) ($(nproc) cores)"

echo "== bubblewrap"
if [ "${FORCE_DEB:-0}" = 1 ] || ! command -v bwrap >/dev/null; then
    BW_DIR=${BW_DIR:-$HOME/bw}
    deb=$(ls "$CARRY"/bubblewrap_*.deb | head -1)
    if command -v dpkg >/dev/null; then
        dpkg -x "$deb" "$BW_DIR"
    else  # no dpkg there
        "$PY" bench/unpack_deb.py "$deb" "$BW_DIR"
    fi
    export PATH=$BW_DIR/usr/bin:$PATH
fi
echo "bwrap: $(command -v bwrap): $(bwrap --version)"

echo "== GPU and Python"
if ! "$PY" -c "import yaml" 2>/dev/null; then  # no PyYAML there: the carried wheel, unpacked
    ls "$CARRY"/pyyaml-*.whl >/dev/null 2>&1 && "$PY" -m zipfile -e "$(ls "$CARRY"/pyyaml-*.whl | head -1)" "$CARRY/pylib" \
        && export PYTHONPATH=$PYTHONPATH:$CARRY/pylib && echo "PyYAML missing: using the carried wheel ($CARRY/pylib)"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
"$PY" - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0], sys.executable, "prefix", sys.prefix)
for name in ("torch", "torch_geometric", "numpy", "safetensors", "yaml"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')} at {mod.__file__}")
    except Exception as exc:
        print(f"{name}: MISSING ({exc})")
import torch
print("cuda outside the sandbox:", torch.cuda.is_available(), torch.version.cuda)
EOF
# Library folders outside the Python environment the sandbox shows (python_paths(); e.g. a user
# site under $HOME, which the sandbox replaces by an empty folder): shown read-only with the
# config's sandbox_show, and named here, since that is a finding.
mapfile -t EXTRA < <("$PY" - <<'EOF'
import importlib, os, sys
from replaykit.harness.sandbox import python_paths
roots = [str(r) for r in python_paths()]
seen = set()
for name in ("torch", "torch_geometric", "numpy", "safetensors", "yaml"):
    try:
        path = os.path.dirname(os.path.dirname(os.path.realpath(importlib.import_module(name).__file__)))
    except Exception:
        continue
    if not any(path == r or path.startswith(r + os.sep) for r in roots) and path not in seen:
        seen.add(path)
        print(path)
EOF
)
echo "python_paths: $("$PY" -c 'from replaykit.harness.sandbox import python_paths; print(*python_paths())')"
echo "library folders outside python_paths (shown with sandbox_show): ${EXTRA[*]:-none}"
SANDBOX=$("$PY" -c 'import json, sys; print(json.dumps({"isolation": "bwrap", "sandbox_show": sys.argv[1:], "sandbox_hide": []}))' "${EXTRA[@]}")

echo "== workspace"
rm -rf "$RUN_DIR" && mkdir -p "$RUN_DIR"
WS=$RUN_DIR/workspace
"$PY" -m replaykit workspace --recipe recipes/digress --out "$WS" --record "$WS.json"
echo "workspace rc=$?"

echo "== probe in the replay's isolation plan (replaykit.isolation.plan, as the replay's)"
mkdir -p "$RUN_DIR/replay" "$RUN_DIR/replay-state"
"$PY" - "$WS" "$ASSETS/public" "$RUN_DIR" "$STUB" "${EXTRA[@]}" <<'EOF'
import os, subprocess, sys, time
from pathlib import Path
from replaykit.isolation import RunPaths, Settings, plan
ws, public, run, stub, *extra = sys.argv[1:]
probe = r'''
import os, socket, sys, time
t0 = time.time()
import torch
print("inside: cuda", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("inside: device 0 =", torch.cuda.get_device_name(0))
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize(); t = time.time()
    for _ in range(20): b = a @ a
    torch.cuda.synchronize(); dt = time.time() - t
    print(f"inside: bf16 matmul 4096^3 x20: {20 * 2 * 4096**3 / dt / 1e12:.0f} TFLOP/s")
print("inside: interfaces", socket.if_nameindex())
print("inside: pid", os.getpid(), "processes visible", len([p for p in os.listdir("/proc") if p.isdigit()]))
print("inside: repo root listing", sorted(os.listdir(sys.argv[1]))[:8])
print("inside: fixed-start stub visible", os.path.exists(sys.argv[2]) and bool(os.listdir(sys.argv[2])))
print("inside: home listing", os.listdir(os.path.expanduser("~")))
print(f"inside: torch import + probe {time.time() - t0:.1f} s")
'''
paths = RunPaths(Path(stub), Path(public), read_only=(Path(ws),), writable=(Path(f"{run}/replay"), Path(f"{run}/replay-state")))
sandbox = plan("digress", {}, Settings("bwrap", show=tuple(extra)), paths)
print("plan:", sandbox.describe())
argv = sandbox.argv([sys.executable, "-c", probe, os.getcwd(), stub], chdir=ws)
print("argv:", " ".join(a if "\n" not in a else "<probe>" for a in argv))
t = time.time()
rc = subprocess.run(argv, cwd=ws, env=sandbox.environment(os.environ)).returncode
print(f"probe rc={rc} in {time.time() - t:.1f} s")
EOF

echo "== replay (isolation bwrap, fixed start hidden)"
SECONDS=0
"$PY" -m replaykit replay --task digress --run shipped-seed42 --workspace "$WS" --workspace-record "$WS.json" \
    --manifest "$ASSETS/manifest.json" --fixed-start "$STUB" --public "$ASSETS/public" \
    --publish-dir "$RUN_DIR/replay" --state-dir "$RUN_DIR/replay-state" --record "$RUN_DIR/replay/record.json" \
    --budget "$BUDGET" --profile embedded --overrides "$OVERRIDES" --seed 42 --threads 2 \
    --data '{}' --sandbox "$SANDBOX"
rc=$?
echo "replay rc=$rc in $SECONDS s (driver wall clock)"

echo "== summary"
cp "$RUN_DIR/replay/record.json" "$OUT/record.json" 2>/dev/null
cp "$RUN_DIR/replay/last-failure.json" "$OUT/last-failure.json" 2>/dev/null
cp "$RUN_DIR/replay-state/request.json" "$OUT/request.json" 2>/dev/null
ls -la "$RUN_DIR/replay" > "$OUT/publish_dir.txt" 2>&1
"$PY" - "$RUN_DIR/replay/record.json" <<'EOF'
import json, statistics, sys
try:
    r = json.load(open(sys.argv[1]))
except OSError as exc:
    print("no record:", exc); raise SystemExit
h = r["train_history"]
secs = [e["epoch_s"] for e in h]
print(f"isolation={r['isolation']} stop_reason={r['stop_reason']} steps(epochs)={r['steps']} retained={r['retained']} "
      f"publications={r['publication_count']} wall_s={r['wall_s']:.1f}")
print("utilisation:", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r["utilisation"].items()})
if secs:
    print(f"epoch_s: first {secs[0]:.3f}, median {statistics.median(secs):.3f}, median after the first "
          f"{statistics.median(secs[1:] or secs):.3f}; last loss {h[-1]['loss']:.4f}")
print("libraries:", r.get("libraries"))
EOF
