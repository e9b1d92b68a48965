#!/usr/bin/env bash
# The GPU checks, as one script for a machine with one NVIDIA GPU and no network (the lent
# H100/H200: 10 minutes a command, 64 MiB carried), run from the repo root:
#
#   bash scripts/gpu_bundle.sh            # here first: .gpu/ (wheels, a QM9 part)
#   bash scripts/gpu_check.sh             # there, carrying .gpu; results in $OUT
#   CHECKS="se3t-claims tp" DEADLINE_S=300 bash scripts/gpu_check.sh
#   DEVICE=cpu WHEELS=none SMOKE=1 bash scripts/gpu_check.sh   # the plumbing, on a CPU
#   bash scripts/gpu_check.sh --dry-run   # here, no GPU: every command parses, every name exists
#
# Checks run in CHECKS order, most wanted first (the SE(3)-Transformer cases that the 43x
# memory, max-batch and 21x AMP claims need), each cut to what is left of DEADLINE_S, so a
# check that cannot finish costs only itself and the rest are listed as skipped. Each case
# line is printed as it finishes. $OUT gets at most 8 files: log.txt, machine.json,
# results.parquet (every check merged; commit it as results/baselines/gpu-<gpu>.parquet),
# claims.md (`equibench claims` on it) and se3t-ddp.json.
# Exit status: 0 when every check ran, 1 when one failed or was skipped, 2 on a bad setup.
#
# --dry-run (CI runs it): sets nothing up and runs no case; each step runs its check instead
# (`equibench run --dry-run` for the benchmark runs: arguments and every case name; pytest
# --collect-only; the autotune script's --dry-run; the DDP module importable), with the
# repository's .venv, on any machine.
set -uo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET  # Triton's CPU interpreter (the kernel tests') has no place here
DRY=""
if [ "${1:-}" = --dry-run ]; then
    DRY=1
elif [ -n "${1:-}" ]; then
    echo "usage: bash scripts/gpu_check.sh [--dry-run]" >&2; exit 2
fi
if [ -n "$DRY" ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
PY=${PYTHON:-python3}
if [ -n "$DRY" ]; then OUT=${OUT:-$(mktemp -d)}; fi
OUT=${OUT:-results/gpu-check}
DEVICE=${DEVICE:-cuda:0}
CHECKS=${CHECKS:-"se3t-claims tp conv mace kernels autotune se3t tp-dbl md"}
DEADLINE_S=${DEADLINE_S:-540}
BUDGET=${BUDGET:-0.3}
ROUNDS=${ROUNDS:-3}
WHEELS=${WHEELS:-.gpu/wheels}
START=$SECONDS
KNOWN="se3t-claims tp tp-dbl conv kernels autotune mace se3t md"
for check in $CHECKS; do
    [[ " $KNOWN " == *" $check "* ]] || { echo "unknown check $check; known: $KNOWN" >&2; exit 2; }
done
mkdir -p "$OUT"
TABLES=$(mktemp -d)
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
say() { echo "[gpu_check $(( SECONDS - START ))s] $*" >&2; }  # stderr: also to the log
setup_failed() { say "setup failed: $*"; exit 2; }

# Setup: the carried wheels on PYTHONPATH (ahead of the image's own e3nn), the carried QM9
# part as the data cache, then this checkout itself.
if [ -n "$DRY" ]; then
    say "dry run with $PY: checks only, nothing installed or run"
elif [ "$WHEELS" != none ]; then
    [ -d "$WHEELS" ] || setup_failed "no $WHEELS: run scripts/gpu_bundle.sh here and carry .gpu"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl || setup_failed "installing $WHEELS"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d .gpu/data ]; then export EQUIBENCH_DATA_DIR=$PWD/.gpu/data; fi
if [ -z "${SMOKE:-}" ] && [ -z "$DRY" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null \
        || setup_failed "pip install -e . (needs setuptools>=69 there)"
fi
"$PY" -c "import equibench.cli, equibench.runner, jsonschema, ase, vesin, rdkit, mace.modules" \
    || setup_failed "an import above failed: add its wheel in scripts/gpu_bundle.sh"
if [[ $DEVICE == cuda* ]] && [ -z "$DRY" ]; then
    "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))" \
        || setup_failed "no CUDA device visible"
fi
[ -n "$DRY" ] || "$PY" -m equibench.datasets.cli datasets info qm9 | head -n 4

FAILED=()
SKIPPED=()
left() { echo $(( DEADLINE_S - (SECONDS - START) - 30 )); }  # 30 s kept for merge and claims

# step NAME CAP_S CHECK command...: the command, cut to CAP_S and to what is left of
# DEADLINE_S. Under --dry-run the command's CHECK runs instead: --dry-run or --collect-only
# appended to it, or `module` (the module after its last -m can be imported).
step() {
    local name=$1 cap=$2 check=$3 limit rc
    shift 3
    if [ -n "$DRY" ]; then
        if [ "$check" = module ]; then
            local module="" previous=""
            for arg in "$@"; do [ "$previous" = -m ] && module=$arg; previous=$arg; done
            "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)" "$module"
        else
            "$@" "$check" >/dev/null
        fi
        rc=$?
        if (( rc != 0 )); then FAILED+=("$name"); say "$name: dry run FAILED (exit $rc)"
        else say "$name: dry run ok"; fi
        return
    fi
    limit=$(left)
    (( limit > cap )) && limit=$cap
    if (( limit < 30 )); then
        say "$name: skipped (out of time)"; SKIPPED+=("$name"); return
    fi
    say "$name: up to ${limit} s"
    PYTHONUNBUFFERED=1 timeout -k 10 "$limit" "$@"
    rc=$?
    if (( rc != 0 )); then  # 124: out of time (a run keeps the groups that finished)
        FAILED+=("$name"); say "$name: FAILED (exit $rc$( (( rc == 124 )) && echo ', out of time'))"
    fi
}

# run NAME CAP_S equibench-run-arguments...: one `equibench run` as a step, then the merge.
run() {
    local name=$1 cap=$2
    shift 2
    step "$name" "$cap" --dry-run "$PY" -m equibench.cli run --device "$DEVICE" --budget "$BUDGET" \
        --rounds "$ROUNDS" --quiet --out "$TABLES/$name.parquet" "$@"
    merge
}

# $OUT/results.parquet after every check: a kill of the whole command keeps what finished.
merge() {
    [ -z "$DRY" ] || return 0
    local tables=("$TABLES"/*.parquet)
    (( ${#tables[@]} )) || return 0
    "$PY" -m equibench.cli merge --out "$OUT/results.parquet" "${tables[@]}" >/dev/null \
        || FAILED+=(merge)
}
shopt -s nullglob

# In SMOKE mode every batch is cut to 2 (the plumbing, not the sizes, is what is checked).
b() { if [ -n "${SMOKE:-}" ]; then echo 2; else echo "$1"; fi; }

# OpenEquivariance's problems, under its names (docs/workloads.md, "Tensor products")
TP_ALL=mace-large,mace-medium,nequip-lips,nequip-revmd17-aspirin,nequip-revmd17-toluene,nequip-revmd17-benzene,nequip-water,DiffDock-L=1,DiffDock-L=2
IMPLS=e3nn,cuequivariance,openequivariance,fused

[ -n "$DRY" ] || "$PY" -m equibench.cli probe --device "$DEVICE" --out "$OUT/machine.json" \
    || FAILED+=(probe)
for check in $CHECKS; do
    case $check in
        # NVIDIA's claims at their own batch (100), as the claims preset runs them: FP32
        # baseline and NVIDIA's switches (20.2x), AMP (21x, and the 43x memory figure in
        # low-memory mode), then larger batches for the max batch (10x: 1000 molecules in
        # low-memory AMP), a run each so that a slow one costs only itself.
        se3t-claims)
            run se3t-fp32 120 --level model --workload se3t-qm9 --implementation basis \
                --variant baseline,nvidia-default --direction train_step --precision float32 \
                --batch "$(b 100)"
            run se3t-amp 120 --level model --workload se3t-qm9 --implementation basis \
                --variant low-memory,nvidia-default --direction train_step \
                --precision amp-float16 --batch "$(b 100)"
            run se3t-amp-large 120 --level model --workload se3t-qm9 --implementation basis \
                --variant low-memory --direction train_step --precision amp-float16 \
                --batch "$(b 400),$(b 1000)"
            run se3t-fp32-large 90 --level model --workload se3t-qm9 --implementation basis \
                --variant baseline --direction train_step --precision float32 \
                --batch "$(b 200),$(b 400)" ;;
        tp) run tp 120 --level tp --workload "$TP_ALL" --implementation "$IMPLS" \
                --direction forward,backward --precision float32 --batch "$(b 50000)" ;;
        tp-dbl) run tp-dbl 120 --level tp --workload "$TP_ALL" --implementation "$IMPLS" \
                --direction double_backward --precision float32 --batch "$(b 20000)" ;;
        conv) run conv 90 --level conv --workload mace-large@qm9,mace-large@carbon \
                --implementation "$IMPLS" --direction forward,backward \
                --precision float32 --batch "$(b 1000)" ;;
        kernels) run kernels 60 --level conv --workload mace-large@carbon \
                --implementation fused --direction forward,backward,double_backward \
                --precision float32 --batch "$(b 4096)"
            # the generated Triton kernels against autograd (a GPU's, not SMOKE's, to test)
            [ -n "${SMOKE:-}" ] || step sc-kernels 120 --collect-only "$PY" -m pytest -q \
                -p no:cacheprovider tests/kernels/test_symmetric_contraction_kernels.py ;;
        # Our Triton kernels' autotuning: the configuration each picks and every candidate's
        # time ($OUT/autotune.json), the candidates `equibench gpu-compile` checks for spills.
        autotune) [ -n "${SMOKE:-}" ] || step autotune 60 --dry-run "$PY" \
                benchmarks/gpu_autotune.py --out "$OUT/autotune.json" ;;
        # fused: our convolution and symmetric contraction, both Triton on the GPU; the
        # batch doubles until out of memory (the oom rows give the largest batch that fits).
        mace) run mace-inf 120 --level model --workload mace-qm9 --variant oeq \
                --implementation e3nn,cuequivariance,openequivariance,fused \
                --direction inference --precision float32 \
                --batch "$(b 32),$(b 256),$(b 2048)"
              run mace-train 90 --level model --workload mace-qm9 --variant oeq \
                --implementation e3nn,openequivariance,fused --direction train_step \
                --precision float32 --batch "$(b 32)" ;;
        se3t) run se3t-backends 90 --level model --workload se3t-qm9 \
                --implementation basis,e3nn,cuequivariance,fused --variant optimized \
                --direction train_step,inference --precision float32 --batch "$(b 240)"
              [ -n "${SMOKE:-}" ] || step se3t-ddp 60 module "$PY" -m torch.distributed.run \
                  --standalone --nproc_per_node 1 -m equibench.implementations.se3_transformer.ddp \
                  --steps 20 --batch 240 > "$OUT/se3t-ddp.json" ;;
        # MD scaling: diamond from 4,096 to 64,000 atoms, each backend until out of memory or
        # over 0.5 s per step (the largest system per backend on this GPU).
        md) run md-scaling 90 --level md \
                --workload diamond@8x8x8,diamond@12x12x12,diamond@16x16x16,diamond@20x20x20 \
                --implementation "$IMPLS" --variant small --direction nve \
                --precision float32 --batch 5 --scaling-limit 0.5 ;;
    esac
done

tables=("$TABLES"/*.parquet)
if [ -n "$DRY" ]; then
    say "dry run: every step checked"
elif (( ${#tables[@]} )); then
    "$PY" -m equibench.cli show "$OUT/results.parquet" --columns \
        level,workload,implementation,variant,direction,precision,batch,status,time_median_s \
        && "$PY" -m equibench.cli claims "$OUT/results.parquet" --markdown > "$OUT/claims.md" \
        || FAILED+=(claims)
else
    say "no check wrote a table"
fi
say "done: ${#tables[@]} tables; failed: ${FAILED[*]:-none}; skipped: ${SKIPPED[*]:-none}"
status=$(( ${#FAILED[@]} + ${#SKIPPED[@]} ? 1 : 0 ))
exec >&- 2>&-  # let tee write the last lines to log.txt before the command returns
wait "$TEE"
exit "$status"
