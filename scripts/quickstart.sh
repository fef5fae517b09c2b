#!/usr/bin/env bash
# The main job on a fresh Debian machine: install and start Docker (and the rest of the
# host setup), install imagekit, build the README cell (CUDA 12.6, torch 2.7.1, Python
# 3.11, Debian 12, slim) from PyPI with BuildKit, then self-check the image.
# Needs no container registry: the Debian base is made with debootstrap when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/setup-host.sh  # the engine that answers here, else Docker 28 on the containerd store
bash scripts/dev-setup.sh
. .venv/bin/activate
eval "$(bash .ci/engines.sh env)"  # the CLI of the engine .ci/engines.sh started, if it did

imagekit build --cuda 12.6 --torch 2.7 --python 3.11 --os debian12 --flavor slim --bootstrap-base "$@"
image=$(imagekit matrix --format json --cuda 12.6 --torch 2.7 --python 3.11 --os debian12 --flavor slim \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["tags"][0])')
echo "quickstart: built $image"
imagekit test "$image" --json reports/selfcheck.json --junit reports/selfcheck.xml
echo "quickstart: $image passed its self-check (reports/selfcheck.json, reports/selfcheck.xml)"
