#!/usr/bin/env bash
# The three Docker engines imagekit is tested on, installed and started by the project itself,
# one at a time, each with a data folder of its own; nothing else on the host moves.
#
#   bash .ci/engines.sh install                # both engines' packages, cosign, oras (idempotent)
#   bash .ci/engines.sh tools                  # cosign and oras only
#   bash .ci/engines.sh qemu                   # QEMU 11 registered for linux/arm64 (F flag)
#   bash .ci/engines.sh start containerd|classic|docker20
#   bash .ci/engines.sh env [ENGINE]           # the shell lines a client of ENGINE needs
#   bash .ci/engines.sh current                # which of the three answers on the socket
#   bash .ci/engines.sh record                 # (re)write the engine record for the running one
#   bash .ci/engines.sh stop
#   bash .ci/engines.sh prune                  # images, containers, BuildKit cache of the running one
#   bash .ci/engines.sh wipe ENGINE            # stop ENGINE if it runs, delete its data folder
#
# Engines:
#   containerd  Docker 28.5.2 + buildx 0.29.1 + containerd 2.1.9 from Debian unstable, on the
#               containerd image store ({"features": {"containerd-snapshotter": true}});
#               what Docker 29 gives fresh installs. The default.
#   classic     the same daemon on the classic (graphdriver overlay2) store: GitHub's hosted
#               Ubuntu runners.
#   docker20    Debian 12's own docker.io 20.10 (built-in BuildKit, no buildx).
#
# Docker 28 comes from Debian unstable at pinned versions, unpacked (dpkg -x) under
# /opt/imagekit-engines, never installed as packages: unstable's runc needs glibc 2.38, so the
# containers run with Debian 12's own runc, and no host package changes. If a pinned version
# has left unstable, the fallback is Debian 13's docker.io 26.1.5 + docker-buildx 0.13.1 +
# containerd 1.7.24, and the script says so. Every daemon listens on /var/run/docker.sock.
#
# `start` records what a client of the engine needs in the engine record (engine.env, every key
# in docs/doctor.md): /etc/imagekit/engine.env (as root, which starting a daemon needs; readable
# by every user), else ${XDG_CONFIG_HOME:-~/.config}/imagekit/engine.env, or $IMAGEKIT_ENGINE_FILE.
# imagekit reads it, so a new shell's `imagekit build` uses that engine's client with no `eval`;
# `stop` removes it.
set -euo pipefail

PREFIX=${IMAGEKIT_ENGINES_PREFIX:-/opt/imagekit-engines}
STATE=${IMAGEKIT_ENGINES_STATE:-/var/lib/imagekit-engines}
RUN=${IMAGEKIT_ENGINES_RUN:-/run/imagekit-engines}
LOGS=/var/log/imagekit
SOCKET=/var/run/docker.sock
if [ -n "${IMAGEKIT_ENGINE_FILE:-}" ]; then RECORD=$IMAGEKIT_ENGINE_FILE
elif [ "$(id -u)" = 0 ]; then RECORD=/etc/imagekit/engine.env
else RECORD=${XDG_CONFIG_HOME:-$HOME/.config}/imagekit/engine.env
fi
START_TIMEOUT=${IMAGEKIT_ENGINE_START_TIMEOUT:-60}

# Pins (Debian unstable, read 2026-11-26) and the fallback (Debian 13, trixie).
# shellcheck disable=SC2034  # read by name: unpack_pinned's namerefs
PINNED=(docker.io=28.5.2+dfsg4-5 docker-cli=28.5.2+dfsg4-5 docker-buildx=0.29.1+ds1-4
  containerd=2.1.9+ds1-5 tini-static=0.19.0-6+b2)
# shellcheck disable=SC2034  # read by name: unpack_pinned's namerefs
FALLBACK=(docker.io/trixie docker-cli/trixie docker-buildx/trixie containerd/trixie
  tini-static/trixie)
D28=$PREFIX/docker28
# The supply-chain tools (imagekit sbom/test --attest/verify): cosign signs and verifies the
# self-check attestation offline with a key pair, oras attaches the SBOM as a referrer.
# Debian unstable's (Go programs that run on Debian 12), unpacked beside the engines and
# linked into /usr/local/bin; the fallback is Debian 13's.
# shellcheck disable=SC2034  # read by name: unpack_pinned's namerefs
TOOLS_PINNED=(cosign=3.1.1-2 oras=1.3.3-1)
# shellcheck disable=SC2034  # read by name: unpack_pinned's namerefs
TOOLS_FALLBACK=(cosign/trixie oras/trixie)
TOOLS=$PREFIX/supply-tools

# linux/arm64 under emulation: Debian unstable's qemu-user (static binaries), unpacked here and
# registered for aarch64 with the F flag. Debian 12's QEMU 7.2 runs torch but kills
# onnxruntime's aarch64 build with SIGSEGV on import; 11.1.3 runs it and its INT8 kernels
# (docs/benchmarks.md). The fallback is Debian 13's qemu-user 10.0.
# shellcheck disable=SC2034  # read by name: unpack_pinned's namerefs
QEMU_PINNED=(qemu-user=1:11.1.3+ds-1)
# shellcheck disable=SC2034  # read by name: unpack_pinned's namerefs
QEMU_FALLBACK=(qemu-user/trixie)
QEMU=$PREFIX/qemu-user
BINFMT=/proc/sys/fs/binfmt_misc
# The aarch64 ELF header's magic and mask, as QEMU's own scripts/qemu-binfmt-conf.sh has them.
AARCH64_MAGIC='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
AARCH64_MASK='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

say() { echo "engines: $*" >&2; }

private_apt() {  # apt with its own sources and state: the host's lists and pins stay as they are
  local dir=$STATE/apt
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  printf 'deb http://deb.debian.org/debian %s main\n' unstable trixie >"$dir/sources.list"
  APT_OPTS=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o APT::Sandbox::User=root)
  timeout 300 apt-get "${APT_OPTS[@]}" update -qq
}

unpack_pinned() {  # DEST WHAT PINNED FALLBACK (array names): the pinned packages, else the
  # fallback, downloaded with the private apt and unpacked (dpkg-deb -x) into DEST
  local dest=$1 what=$2 deb
  local -n pinned=$3 fallback=$4
  [ -n "${APT_OPTS+x}" ] || private_apt
  local debs=$STATE/debs-${dest##*/}
  rm -rf "$debs" && mkdir -p "$debs"
  if (cd "$debs" && timeout 600 apt-get "${APT_OPTS[@]}" download "${pinned[@]}" >/dev/null); then
    say "$what from Debian unstable: ${pinned[*]}"
  else
    say "the pinned $what left unstable; FALLBACK: ${fallback[*]}"
    (cd "$debs" && timeout 600 apt-get "${APT_OPTS[@]}" download "${fallback[@]}" >/dev/null)
  fi
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$dest.tmp"; done
  rm -rf "$dest" && mv "$dest.tmp" "$dest" && rm -rf "$debs"
}

install_docker20() {
  local need=()
  [ -x /usr/sbin/dockerd ] || need+=(docker.io)
  [ -x /usr/sbin/runc ] || need+=(runc)
  [ -x /usr/sbin/iptables ] || need+=(iptables)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing Debian 12's ${need[*]}"
    timeout 300 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need[@]}" >/dev/null
    # The package just installed starts its daemon where there is an init system: this
    # script starts the engines itself, one at a time, on the shared socket.
    if [ -d /run/systemd/system ]; then
      systemctl disable --now docker.service docker.socket 2>/dev/null || true
    fi
  fi
}

install_docker28() {
  [ -x "$D28/usr/sbin/dockerd" ] && return 0
  unpack_pinned "$D28" "Docker 28" PINNED FALLBACK
  # The CLI finds buildx in its config folder's cli-plugins (one of its own for this engine).
  mkdir -p "$STATE/docker28-cli/cli-plugins"
  ln -sf "$D28/usr/libexec/docker/cli-plugins/docker-buildx" "$STATE/docker28-cli/cli-plugins/"
  [ -f "$STATE/docker28-cli/config.json" ] || echo '{}' >"$STATE/docker28-cli/config.json"
}

install_supply_tools() {
  if [ -x "$TOOLS/usr/bin/cosign" ] && [ -x "$TOOLS/usr/bin/oras" ]; then link_supply_tools; return 0; fi
  unpack_pinned "$TOOLS" "cosign and oras" TOOLS_PINNED TOOLS_FALLBACK
  link_supply_tools
}

install_qemu() {
  [ -x "$QEMU/usr/bin/qemu-aarch64" ] || unpack_pinned "$QEMU" "QEMU" QEMU_PINNED QEMU_FALLBACK
  register_qemu_arm64
}

register_qemu_arm64() {  # replaces another aarch64 registration (Debian 12's QEMU 7.2)
  mountpoint -q "$BINFMT" || mount -t binfmt_misc binfmt_misc "$BINFMT"
  local entry=$BINFMT/qemu-aarch64
  if grep -qx "interpreter $QEMU/usr/bin/qemu-aarch64" "$entry" 2>/dev/null &&
    grep -qx 'flags: PF' "$entry"; then
    say "arm64 emulation: $("$QEMU/usr/bin/qemu-aarch64" --version | head -1) (registered)"
    return 0
  fi
  if [ -e "$entry" ]; then echo -1 >"$entry"; fi
  # F: the kernel opens the interpreter now, so it runs inside containers' own root too;
  # P: argv[0] kept (QEMU learns it from the auxiliary vector), as Debian's own registration
  printf ':qemu-aarch64:M::%s:%s:%s:PF' "$AARCH64_MAGIC" "$AARCH64_MASK" \
    "$QEMU/usr/bin/qemu-aarch64" >"$BINFMT/register"
  say "arm64 emulation: $("$QEMU/usr/bin/qemu-aarch64" --version | head -1), registered with the F flag"
}

link_supply_tools() {
  local tool
  for tool in cosign oras; do ln -sf "$TOOLS/usr/bin/$tool" "/usr/local/bin/$tool"; done
  say "supply-chain tools: /usr/local/bin/cosign and /usr/local/bin/oras (from $TOOLS)"
}

daemon_of() {  # ENGINE -> the dockerd binary
  case "$1" in
    containerd | classic) echo "$D28/usr/sbin/dockerd" ;;
    docker20) echo /usr/sbin/dockerd ;;
    *) say "unknown engine '$1': one of containerd, classic, docker20"; exit 2 ;;
  esac
}

cli_of() {
  case "$1" in
    containerd | classic) echo "$D28/usr/bin/docker" ;;
    docker20) echo /usr/bin/docker ;;
  esac
}

config_of() {  # ENGINE -> the DOCKER_CONFIG its CLI needs ("" for the CLI's own default)
  case "$1" in
    containerd | classic) echo "$STATE/docker28-cli" ;;  # where its buildx plugin is
    docker20) echo "" ;;
  esac
}

env_of() {  # the environment a client of ENGINE (default: the running one) needs, as shell lines
  local engine=${1:-$(cat "$STATE/current" 2>/dev/null || true)} config
  [ -n "$engine" ] || return 0  # none of ours runs: a client finds the engine it has
  config=$(config_of "$engine")
  echo "export IMAGEKIT_ENGINE=$engine"
  echo "export IMAGEKIT_DOCKER=$(cli_of "$engine")"
  if [ -n "$config" ]; then echo "export DOCKER_CONFIG=$config"; else echo "unset DOCKER_CONFIG"; fi
}

write_record() {  # ENGINE: its client, for imagekit in a new shell (docs/doctor.md, every key)
  local engine=$1
  mkdir -p "$(dirname "$RECORD")"
  {
    echo "# The engine .ci/engines.sh started, for imagekit's client (docs/doctor.md)."
    echo "# Rewritten by 'start', removed by 'stop'; delete it to use the docker CLI on PATH."
    printf 'IMAGEKIT_ENGINE=%q\n' "$engine"
    printf 'IMAGEKIT_DOCKER=%q\n' "$(cli_of "$engine")"
    printf 'DOCKER_HOST=%q\n' "unix://$SOCKET"
    printf 'DOCKER_CONFIG=%q\n' "$(config_of "$engine")"
  } >"$RECORD.tmp"
  chmod 644 "$RECORD.tmp"  # read by every user's imagekit, not only root's
  mv -f "$RECORD.tmp" "$RECORD"  # whole or not at all: imagekit may read it at any time
  say "recorded $engine in $RECORD: a new shell's imagekit uses $(cli_of "$engine")"
}

record() {  # the record for the running engine of ours (none runs: left as it is)
  local engine
  engine=$(current)
  if [ -n "$engine" ]; then write_record "$engine"; else say "none of ours runs: nothing recorded"; fi
}

stop_all() {
  local pidfile pid
  # Ours, and a daemon started by hand with the default pid file on the shared socket.
  for pidfile in "$RUN"/*/docker.pid /var/run/docker.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$pidfile"
  done
  rm -f "$SOCKET" "$STATE/current" "$RECORD"
}

# BuildKit's garbage collection on Docker 28 by default starts evicting the build cache when
# the disk has less than 20% free (47.5 GB on a 250 GB disk): within one run of the test suite,
# which fills tens of GB and wipes the engine afterwards, that evicted the shared session
# image's cache after the CUDA build, and the next test to build it ran cold (1-2 minutes more,
# in a random order a random test). Here it starts at 10 GB free; the installers' cache
# mounts keep up to 8 GB (the CUDA wheels are 3.6 GB; Docker's default kept 3.3 GB there).
# (dockerd turns the first "=" of a filter into "==": the others are written as BuildKit reads them)
GC='"builder": {"gc": {"enabled": true, "policy": [
  {"filter": ["unused-for=48h", "type=source.local,type==exec.cachemount,type==source.git.checkout"],
   "maxUsedSpace": "8GB"},
  {"filter": ["unused-for=1440h"], "minFreeSpace": "10GB"},
  {"minFreeSpace": "10GB"},
  {"all": true, "minFreeSpace": "10GB"}]}}'

gc_of() {  # the GC policy for Docker 28's daemon; the fallback's 26.1 reads no minFreeSpace
  if "$D28/usr/sbin/dockerd" --version 2>/dev/null | grep -q "version 28\."; then echo ", $GC"; fi
}

daemon_json() {  # ENGINE -> its daemon.json
  case "$1" in
    containerd) echo '{"features": {"containerd-snapshotter": true}'"$(gc_of)"'}' ;;
    classic) echo '{"features": {"containerd-snapshotter": false}'"$(gc_of)"'}' ;;
    docker20) echo '{}' ;;
  esac
}

start() {
  local engine=$1 dockerd
  dockerd=$(daemon_of "$engine")
  [ -x "$dockerd" ] || { say "$engine is not installed: bash .ci/engines.sh install"; exit 1; }
  if [ "$(current)" = "$engine" ]; then say "$engine already running"; write_record "$engine"; return 0; fi
  stop_all
  local exec_root=$RUN/$engine data=$STATE/$engine
  mkdir -p "$exec_root" "$data" "$LOGS"
  daemon_json "$engine" >"$exec_root/daemon.json"
  # Docker 28's own containerd, shim and docker-init come first on its PATH; runc is Debian 12's.
  local path=$PATH
  [ "$engine" != docker20 ] && path=$D28/usr/bin:$D28/usr/sbin:$PATH
  say "starting $engine ($dockerd, data in $data)"
  PATH=$path setsid "$dockerd" --config-file "$exec_root/daemon.json" --data-root "$data" \
    --exec-root "$exec_root" --pidfile "$exec_root/docker.pid" -H "unix://$SOCKET" \
    >"$LOGS/dockerd-$engine.log" 2>&1 </dev/null &
  local cli
  cli=$(cli_of "$engine")
  for _ in $(seq "$START_TIMEOUT"); do
    timeout 10 "$cli" info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! timeout 10 "$cli" info >/dev/null 2>&1; then
    say "$engine did not come up within ${START_TIMEOUT}s; its log:"
    tail -30 "$LOGS/dockerd-$engine.log" >&2
    exit 1
  fi
  echo "$engine" >"$STATE/current"
  write_record "$engine"
  say "$engine up: $(timeout 10 "$cli" version --format 'server {{.Server.Version}} ({{.Server.GoVersion}})')," \
    "store: $(timeout 10 "$cli" info --format '{{.Driver}}')"
}

current() {  # the running engine, if it is one of ours and answers
  local engine
  engine=$(cat "$STATE/current" 2>/dev/null) || return 0
  if timeout 10 "$(cli_of "$engine")" info >/dev/null 2>&1; then echo "$engine"; fi
}

prune() {  # what the running engine holds: containers, images, BuildKit's cache
  local engine cli
  engine=$(cat "$STATE/current")
  cli=$(cli_of "$engine")
  eval "$(env_of "$engine")"  # Docker 28's CLI prunes BuildKit's cache through its buildx
  timeout 300 "$cli" container prune -f >/dev/null || true
  timeout 600 "$cli" image prune -af >/dev/null || true
  timeout 600 "$cli" builder prune -af >/dev/null || true
}

wipe() {  # ENGINE: everything it holds gone at once, faster than pruning it item by item
  local engine=${1:?engine: containerd, classic or docker20} data pidfile pid mount gone
  case "$engine" in containerd | classic | docker20) ;; *) say "no engine $engine"; exit 2 ;; esac
  data=$STATE/$engine pidfile=$RUN/$engine/docker.pid
  if [ -f "$pidfile" ] && pid=$(cat "$pidfile") && kill -0 "$pid" 2>/dev/null; then stop_all; fi
  # the data folder itself (dockerd bind-mounts it onto itself) and a container's or
  # snapshot's mount a killed daemon left: unmounted first, deepest first, so that rm never
  # reaches into what another path shows through them
  findmnt -rn -o TARGET | awk -v d="$data" '$0 == d || index($0, d "/") == 1' | sort -r \
    | while read -r mount; do umount -l "$mount" || true; done
  # renamed at once, deleted in the background (tens of GB take 25-40 s to delete), so the
  # next engine starts meanwhile; a deletion an earlier wipe left unfinished goes with it
  if [ -e "$data" ]; then mv "$data" "$STATE/.wiping-$engine-$$"; fi
  [ ! -e "$data" ] || { say "could not move $data aside"; exit 1; }
  for gone in "$STATE"/.wiping-*; do
    [ -e "$gone" ] && setsid rm -rf "$gone" >/dev/null 2>&1 </dev/null &
  done
  say "$engine wiped: $data emptied (its old files deleted in the background)"
}

# Sourced (the tests read its functions), it defines them and runs nothing.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0
mkdir -p "$STATE"
case "${1:-}" in
  install) install_docker20 && install_docker28 && install_supply_tools ;;
  tools) install_supply_tools ;;
  qemu) install_qemu ;;
  start) start "${2:?engine: containerd, classic or docker20}" ;;
  stop) stop_all ;;
  env) env_of "${2:-}" ;;
  current) current ;;
  record) record ;;
  prune) prune ;;
  wipe) wipe "${2:-}" ;;
  *) echo "usage: $0 install|tools|qemu|start ENGINE|stop|env [ENGINE]|current|record|prune|wipe ENGINE" >&2; exit 2 ;;
esac
