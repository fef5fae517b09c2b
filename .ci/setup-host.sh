#!/usr/bin/env bash
# Installs and starts what imagekit's real tests need on a fresh Debian machine:
# a Docker engine (the one that answers, else .ci/engines.sh's $IMAGEKIT_ENGINE or containerd),
# a local registry on 127.0.0.1:5000, cosign and oras, debootstrap, qemu-user (the int8 test runs
# onnxruntime on an emulated CPU without VNNI) and QEMU 11 registered for arm64 in binfmt_misc
# with the F flag (.ci/engines.sh qemu: linux/arm64 images built and run under QEMU). Safe to
# run again: each step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY_DATA=/var/lib/imagekit-registry

start_registry() {
  curl -fsS --max-time 5 http://127.0.0.1:5000/v2/ >/dev/null 2>&1 && return 0
  echo "setup-host: starting a local registry on 127.0.0.1:5000"
  mkdir -p "$REGISTRY_DATA" /var/log/imagekit
  cat > /etc/imagekit-registry.yml <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $REGISTRY_DATA
  delete:
    enabled: true
http:
  addr: 127.0.0.1:5000
YML
  setsid /usr/bin/docker-registry serve /etc/imagekit-registry.yml \
    >/var/log/imagekit/registry.log 2>&1 < /dev/null &
  for _ in $(seq 30); do curl -fsS --max-time 5 http://127.0.0.1:5000/v2/ >/dev/null 2>&1 && break; sleep 1; done
  curl -fsS --max-time 5 http://127.0.0.1:5000/v2/ >/dev/null || { tail -20 /var/log/imagekit/registry.log; exit 1; }
}

if [ "${1:-}" = reset-registry ]; then  # the registry emptied: what a test phase pushed is gone
  if pkill -f "docker-registry serve /etc/imagekit-registry.yml"; then sleep 1; fi
  rm -rf "$REGISTRY_DATA"
  start_registry
  exit 0
fi

need=()
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-x86_64 >/dev/null || need+=(qemu-user)
command -v jq >/dev/null || need+=(jq)  # the images workflow's matrix step, run by a real test
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-host: installing ${need[*]}"
  timeout 300 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${need[@]}" >/dev/null
fi

# arm64 under QEMU 11, static, registered with the F flag (containers need it); Debian 12's
# QEMU 7.2 crashes onnxruntime. imagekit says what is missing where this fails.
bash .ci/engines.sh qemu || echo "setup-host: could not register QEMU for arm64"

# The engine: the one asked for ($IMAGEKIT_ENGINE: containerd, classic or docker20, installed
# and started by .ci/engines.sh); else whatever engine already answers on this host (the
# user's own, left as it is); else the default, Docker 28 on the containerd image store.
engine=${IMAGEKIT_ENGINE:-}
if [ -z "$engine" ] && ! timeout 20 docker info >/dev/null 2>&1; then engine=containerd; fi
if [ -n "$engine" ]; then
  bash .ci/engines.sh install
  bash .ci/engines.sh start "$engine"  # leaves it be when it already runs
fi

# cosign and oras (imagekit sbom, test --attest, verify, and the SBOM attached on --push),
# whichever engine runs
bash .ci/engines.sh tools
start_registry
echo "setup-host: engine $(timeout 20 docker version --format '{{.Server.Version}}'), registry on 127.0.0.1:5000"
