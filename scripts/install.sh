#!/usr/bin/env bash
# Create .venv and install equibench into it (editable, with the test tools).
# torch first: a CPU build by default; when .venv already has a torch (e.g. the build for your
# CUDA, installed by you), it is kept. Letting pip choose torch freely pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${EQUIBENCH_TORCH:-torch==2.13.0}

if [ ! -x .venv/bin/python ]; then
    echo "[install] creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
if .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "[install] keeping torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
else
    echo "[install] installing $TORCH_SPEC"
    .venv/bin/pip install --quiet --disable-pip-version-check "$TORCH_SPEC"
fi
echo "[install] installing equibench and its dependencies"
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[test]"
# mace-torch 0.3.16 pins e3nn==0.4.4, which fails on current torch; it runs with e3nn 0.6, so
# it is installed without its pins (its real dependencies are in pyproject.toml).
.venv/bin/pip install --quiet --disable-pip-version-check --no-deps "mace-torch==0.3.16"
echo "[install] done: $(.venv/bin/equibench --help | head -1)"
