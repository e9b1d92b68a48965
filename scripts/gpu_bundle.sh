#!/usr/bin/env bash
# What scripts/gpu_check.sh needs that the lent GPU machine lacks, gathered here (where
# PyPI is reachable) into .gpu/ (git-ignored), which the call carries: `carry: [".gpu"]`.
#
#   bash scripts/gpu_bundle.sh             # then: run `bash scripts/gpu_check.sh` there
#   QM9_STRUCTURES=20000 bash scripts/gpu_bundle.sh
#
# .gpu/wheels: Python 3.12 x86-64 wheels of the packages the machine's image lacks (its list:
#   ../shared/ENVIRONMENT.md), at the versions this checkout's .venv runs; python-hostlist
#   has no wheel on PyPI and is built here (pure Python).
# .gpu/data/prepared/qm9.npz: a seeded random part of QM9 (`equibench datasets subset`),
#   compressed: the machine has no network and qm9pack (224 MB) does not fit a call. Rows
#   measured there sample their molecules from that part; `datasets info` says so.
# A call carries at most 64 MiB (this tree included): the script stops above LIMIT_MIB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
BUNDLE=.gpu
QM9_STRUCTURES=${QM9_STRUCTURES:-20000}
LIMIT_MIB=${LIMIT_MIB:-60}

# Missing from the image: our schema check (jsonschema and its parts), ase and vesin
# (structures, neighbour lists), rdkit (the SE(3)-Transformer's bond graphs), e3nn at our
# version, cuEquivariance's Python packages (its ops wheels, 73 MB, are over one call's
# size: cuEquivariance runs its naive path there and says so), mace-torch and what it imports.
WHEELS=(jsonschema jsonschema-specifications referencing rpds-py ase vesin rdkit e3nn
        cuequivariance cuequivariance-torch mace-torch torch-ema matscipy lmdb orjson
        prettytable wcwidth configargparse GitPython gitdb smmap)
BUILT=(python-hostlist)

pinned() {  # NAME==VERSION as installed in this checkout's environment
    "$PY" -c "import importlib.metadata as m, sys; print(f'{sys.argv[1]}=={m.version(sys.argv[1])}')" "$1"
}

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/wheels" "$BUNDLE/data/prepared"
specs=()
for name in "${WHEELS[@]}"; do specs+=("$(pinned "$name")"); done
echo "[gpu_bundle] wheels: ${specs[*]}"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$BUNDLE/wheels" "${specs[@]}"
for name in "${BUILT[@]}"; do
    "$PY" -m pip wheel --quiet --no-deps -w "$BUNDLE/wheels" "$(pinned "$name")"
done

echo "[gpu_bundle] QM9: $QM9_STRUCTURES molecules"
"$PY" -m equibench.cli datasets subset qm9 --structures "$QM9_STRUCTURES" --seed 0 \
    --out "$BUNDLE/data/prepared/qm9.npz"

tree_kib=$(git ls-files -z | du -ck --files0-from=- | tail -n 1 | cut -f1)
bundle_kib=$(du -sk "$BUNDLE" | cut -f1)
total_mib=$(( (tree_kib + bundle_kib) / 1024 ))
echo "[gpu_bundle] $BUNDLE $(( bundle_kib / 1024 )) MiB + tracked tree $(( tree_kib / 1024 )) MiB = ${total_mib} MiB (limit ${LIMIT_MIB})"
if (( total_mib > LIMIT_MIB )); then
    echo "[gpu_bundle] too large for one call: lower QM9_STRUCTURES" >&2
    exit 1
fi
