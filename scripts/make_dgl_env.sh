#!/usr/bin/env bash
# Create .venv-dgl: torch 2.2.1 + DGL 2.1.0 for the se3t `+dgl` variants, with equibench
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
# torch from the PyTorch CPU index when it answers (a 180 MB CPU build). Otherwise from PyPI:
# its torch 2.2.1 wheel is the CUDA build, which pulls the CUDA libraries (2.9 GB of wheels,
# 40 s to download at PyPI's 45 MB/s here) and runs on a CPU all the same. The line
# `torch source:` tells equibench/dgl_env.py which it was.
if "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
        "$TORCH_INDEX/torch/" 2>/dev/null; then
    "${PIP[@]}" --index-url "$TORCH_INDEX" "torch==2.2.1"
    echo "torch source: $TORCH_INDEX (CPU build)"
else
    echo "$TORCH_INDEX is unreachable; taking torch 2.2.1 from PyPI (CUDA build, runs on CPU)"
    "${PIP[@]}" "torch==2.2.1"
    echo "torch source: PyPI (CUDA build with its CUDA libraries, no GPU used)"
fi
# torchdata 0.7.x pins another torch; DGL only needs its datapipes module.
"${PIP[@]}" --no-deps "torchdata==0.7.1"
"${PIP[@]}" "dgl==2.1.0" "pydantic>=2" "e3nn==0.5.6" "numpy<2" "pandas>=2.2" "pyarrow>=15,<20" \
    "jsonschema>=4.20" "pyyaml>=6" "psutil>=5.9" "scipy>=1.11" "tqdm>=4.66" "vesin>=0.3" \
    "qm9pack>=1.0.3" "rdkit>=2024.3" "pytest>=8"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -e .
"$VENV/bin/python" -c "import dgl, dgl.ops, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)"
