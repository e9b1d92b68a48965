#!/usr/bin/env bash
# Create .venv-dgl: torch 2.2.1 (CPU) + DGL 2.1.0 for the se3t `+dgl` variants, with equibench
# installed editable without its dependency list (it asks for torch >= 2.4). Same packages as
# workflows/envs/dgl.yaml. The workflow runs it through `equibench dgl-env` (rule dgl_env),
# which records whether it worked. By hand:
#   bash scripts/make_dgl_env.sh
#   .venv-dgl/bin/equibench run --level model --workload se3t-qm9 --variant optimized+dgl ...
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${EQUIBENCH_DGL_VENV:-.venv-dgl}
TORCH_INDEX=${EQUIBENCH_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --quiet --disable-pip-version-check --timeout 20 --retries 1)
# torch from the CPU index only: from PyPI pip would take the CUDA build (several GB).
"${PIP[@]}" --index-url "$TORCH_INDEX" "torch==2.2.1"
# torchdata 0.7.x pins another torch; DGL only needs its datapipes module.
"${PIP[@]}" --no-deps "torchdata==0.7.1"
"${PIP[@]}" "dgl==2.1.0" "e3nn==0.5.6" "numpy<2" "pandas>=2.2" "pyarrow>=15" \
    "jsonschema>=4.20" "pyyaml>=6" "psutil>=5.9" "scipy>=1.11" "tqdm>=4.66" "vesin>=0.3" \
    "qm9pack>=1.0.3" "rdkit>=2024.3" "pytest>=8"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -e .
"$VENV/bin/python" -c "import dgl, dgl.ops, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)"
