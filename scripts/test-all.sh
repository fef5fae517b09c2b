#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: installs and starts what the real tests
# need (Docker engine, local registry, debootstrap, the actionlint checker), makes the
# virtual environment, then runs ruff and every test, the slow real-engine ones included.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/setup-host.sh
bash scripts/dev-setup.sh

. .venv/bin/activate
ruff check imagekit tests bench
ruff format --check imagekit tests bench
imagekit render --check
exec python -m pytest "$@"
