#!/usr/bin/env bash
# The GPU checks, as one script for a machine with an NVIDIA GPU (run from the repo root).
#
#   bash scripts/gpu_check.sh            # all checks, ~8 minutes on one H100/H200-class GPU
#   CHECKS="tp conv" bash scripts/gpu_check.sh
#
# Uses the python on PATH (which must have a CUDA torch). Packages the machine lacks are
# installed from ./wheels when that folder exists (machines without internet). Results go to
# $OUT (default results/gpu-check) and are merged into
# results/baselines/gpu-<gpu name>.parquet, to be committed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-results/gpu-check}
CHECKS=${CHECKS:-"tp tp-dbl conv kernels mace se3t md"}
BUDGET=${BUDGET:-0.5}
mkdir -p "$OUT"

if [ -d wheels ]; then
    "$PY" -m pip install --quiet --no-index --find-links wheels wheels/*.whl
fi
"$PY" -m pip install --quiet --no-deps --no-build-isolation -e . >/dev/null
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device visible'; print(torch.cuda.get_device_name(0))"

run() {  # run NAME equibench-run-arguments...
    local name=$1; shift
    echo "[gpu_check] $name"
    timeout 600 "$PY" -m equibench.cli run --device cuda:0 --budget "$BUDGET" --quiet \
        --out "$OUT/$name.parquet" "$@" | tail -n 60 || echo "[gpu_check] $name failed: see above"
}

# OpenEquivariance's problems, under its names (README, Levels)
TP_ALL=mace-large,mace-medium,nequip-lips,nequip-revmd17-aspirin,nequip-revmd17-toluene,nequip-revmd17-benzene,nequip-water,DiffDock-L=1,DiffDock-L=2
IMPLS=e3nn,cuequivariance,openequivariance,fused

"$PY" -m equibench.cli probe --device cuda:0 --out "$OUT/machine.json"
for check in $CHECKS; do
    case $check in
        tp) run tp --level tp --workload "$TP_ALL" --implementation "$IMPLS" \
                --direction forward,backward --precision float32,float64 --batch 50000 ;;
        tp-dbl) run tp-dbl --level tp --workload "$TP_ALL" --implementation "$IMPLS" \
                --direction double_backward --precision float32,float64 --batch 20000 ;;
        conv) run conv --level conv --workload mace-large@qm9,mace-large@carbon \
                --implementation "$IMPLS,e3nn-compiled" --direction forward,backward \
                --precision float32,float64 --batch 1000 ;;
        kernels) run kernels --level conv --workload mace-large@carbon \
                --implementation fused --direction forward,backward,double_backward \
                --precision float32 --batch 4096
                 # the symmetric contraction's generated Triton kernels against autograd
                 timeout 600 "$PY" -m pytest -q tests/kernels/test_symmetric_contraction_kernels.py \
                     | tail -n 5 || echo "[gpu_check] symmetric contraction kernels failed" ;;
        # mace-torch pins e3nn==0.4.4: bring its wheel in wheels/no-deps/ (out of the
        # resolver); wheels/ holds its dependencies and cuequivariance-ops-torch-cu13.
        mace)
            if [ -d wheels/no-deps ]; then
                "$PY" -m pip install --quiet --no-index --no-deps wheels/no-deps/*.whl
            fi
            # fused: our convolution and symmetric contraction, both Triton on the GPU.
            # batch doubles until out of memory: the oom rows give the largest batch that fits
            run mace-inf --level model --workload mace-qm9 --variant oeq \
                --implementation e3nn,openequivariance,fused --direction inference \
                --precision float32 --batch 32,64,128,256,512,1024,2048,4096
            # mace's cuEquivariance conversion runs in every case: fewer of them
            run mace-cueq --level model --workload mace-qm9 --variant oeq \
                --implementation cuequivariance --direction inference,train_step \
                --precision float32 --batch 32,256
            run mace-train --level model --workload mace-qm9,mace-oc20-like --variant oeq \
                --implementation e3nn,openequivariance,fused --direction train_step \
                --precision float32,float64 --batch 32 ;;
        # NVIDIA's conditions: training at batch 100 (memory) and 240 (throughput).
        se3t) run se3t-train --level model --workload se3t-qm9 --implementation basis \
                --variant optimized,low-memory,baseline --direction train_step \
                --precision float32,tfloat32 --batch 100
              run se3t-backends --level model --workload se3t-qm9 \
                --implementation basis,e3nn,cuequivariance,fused --variant optimized \
                --direction train_step,inference --precision float32 --batch 240
              timeout 300 torchrun --standalone --nproc_per_node 1 \
                -m equibench.implementations.se3_transformer.ddp --steps 20 --batch 240 \
                | tee "$OUT/se3t-ddp.json" || echo "[gpu_check] ddp failed" ;;
        # MD scaling: diamond from 4,096 to 64,000 atoms, each backend until out of memory or
        # over 0.5 s per step (the largest system per backend on this GPU).
        md) run md-scaling --level md \
                --workload diamond@8x8x8,diamond@12x12x12,diamond@16x16x16,diamond@20x20x20 \
                --implementation "$IMPLS" --variant small,oeq --direction nve \
                --precision float32 --batch 5 --scaling-limit 0.5 ;;
        *) echo "[gpu_check] unknown check $check" >&2; exit 2 ;;
    esac
done

gpu=$("$PY" -c "import torch,re; print(re.sub('[^A-Za-z0-9]+','-',torch.cuda.get_device_name(0)).strip('-').lower())")
mkdir -p results/baselines
"$PY" -m equibench.cli merge --out "results/baselines/gpu-$gpu.parquet" "$OUT"/*.parquet
cp "$OUT/machine.json" "results/baselines/gpu-$gpu.machine.json"
"$PY" -m equibench.cli show "results/baselines/gpu-$gpu.parquet" --columns \
    level,workload,implementation,direction,precision,batch,status,time_median_s,throughput | tail -n 40
