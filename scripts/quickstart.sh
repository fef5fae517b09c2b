#!/usr/bin/env bash
# The main job on a fresh Debian machine: install and start Docker (and the rest of the
# host setup), install imagekit, build the README cell (CUDA 12.6, torch 2.7.1, Python
# 3.11, Debian 12, slim) from PyPI with BuildKit, then self-check the image.
# Needs no container registry: the Debian base is made with debootstrap when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/setup-host.sh  # the engine that answers here, else Docker 28 on the containerd store
# The engine .ci/engines.sh started (if it did) is recorded in its engine.env, which imagekit
# reads: this script, and every new shell after it, use that engine's client with no `eval`.
bash .ci/engines.sh record
bash scripts/dev-setup.sh
# shellcheck source=/dev/null  # made by dev-setup.sh above
. .venv/bin/activate
README_CELL=(--cuda 12.6 --torch 2.7 --python 3.11 --os debian12 --flavor slim)
# What the README cell needs of this machine, each ok or its fix; stops here when one is missing.
imagekit doctor "${README_CELL[@]}"
echo "quickstart: set up. A new shell's imagekit finds this engine by itself (no eval needed)."

imagekit build "${README_CELL[@]}" --bootstrap-base "$@"
image=$(imagekit list --json - "${README_CELL[@]}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["tags"][0])')
echo "quickstart: built $image"
imagekit test "$image" --json reports/selfcheck.json --junit reports/selfcheck.xml
echo "quickstart: $image passed its self-check (reports/selfcheck.json, reports/selfcheck.xml)"
