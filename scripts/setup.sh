#!/usr/bin/env bash
# Set up .venv for Netra. Where a CUDA PyTorch is already installed (the H200 image, which
# has no package registry) the venv sees it and Netra installs without dependencies; ptxas
# 13.0.88 then comes from the CUDA toolkit on PATH. Elsewhere torch 2.13.0 is installed
# first (a CPU build; an open-ended `torch` requirement would pull a CUDA build of several
# GB), then Netra with its pinned toolchain wheels and the test extra.
set -euo pipefail
cd "$(dirname "$0")/.."
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 -m venv --system-site-packages .venv
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
else
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -e ".[test]"
fi
.venv/bin/python -c "import netra, torch; print('netra', netra.__version__, '| torch', torch.__version__, '| CUDA', torch.cuda.is_available())"
