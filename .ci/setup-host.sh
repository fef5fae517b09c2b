#!/usr/bin/env bash
# Installs and starts what imagekit's real tests need on a fresh Debian machine:
# a Docker engine (docker.io, whose 20.10 CLI has built-in BuildKit), a local
# registry on 127.0.0.1:5000, debootstrap, and qemu-user (the int8 test runs
# onnxruntime on an emulated CPU without VNNI). Safe to run again: each step
# checks before it acts.
set -euo pipefail

need=()
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-x86_64 >/dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-host: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! /usr/bin/docker info >/dev/null 2>&1; then
  echo "setup-host: starting dockerd"
  # A daemon killed without cleanup leaves its pid file behind, which blocks a new one.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  mkdir -p /var/log/imagekit
  # setsid: the daemon must outlive the shell that started it.
  setsid dockerd >/var/log/imagekit/dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 60); do /usr/bin/docker info >/dev/null 2>&1 && break; sleep 1; done
  /usr/bin/docker info >/dev/null 2>&1 || { tail -20 /var/log/imagekit/dockerd.log; exit 1; }
fi

if ! curl -fsS http://127.0.0.1:5000/v2/ >/dev/null 2>&1; then
  echo "setup-host: starting a local registry on 127.0.0.1:5000"
  mkdir -p /var/lib/imagekit-registry /var/log/imagekit
  cat > /etc/imagekit-registry.yml <<'YML'
version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/imagekit-registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:5000
YML
  setsid /usr/bin/docker-registry serve /etc/imagekit-registry.yml \
    >/var/log/imagekit/registry.log 2>&1 < /dev/null &
  for _ in $(seq 30); do curl -fsS http://127.0.0.1:5000/v2/ >/dev/null 2>&1 && break; sleep 1; done
  curl -fsS http://127.0.0.1:5000/v2/ >/dev/null || { tail -20 /var/log/imagekit/registry.log; exit 1; }
fi
echo "setup-host: docker $(/usr/bin/docker version --format '{{.Server.Version}}'), registry on 127.0.0.1:5000"
