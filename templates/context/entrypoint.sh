#!/bin/sh
# imagekit entrypoint: tunes the environment for the container it runs in, then runs CMD.
# OMP_NUM_THREADS comes from the CPUs this container may really use (the cgroup quota and
# the cpuset), divided by the local ranks, unless the user set it.
set -e

cpus_allowed() {
  n=$(nproc 2>/dev/null || echo 1)  # honours the cpuset
  quota=""
  if [ -r /sys/fs/cgroup/cpu.max ]; then
    read -r q p < /sys/fs/cgroup/cpu.max
    [ "$q" != "max" ] && quota=$((q / p))
  elif [ -r /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)
    p=$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)
    [ "$q" -gt 0 ] && quota=$((q / p))
  fi
  if [ -n "$quota" ] && [ "$quota" -lt "$n" ]; then n=$quota; fi
  [ "$n" -lt 1 ] && n=1
  echo "$n"
}

# The ranks a torchrun launch (torchrun ... or python -m torch.distributed.run ...) will start
# on this node: its --nproc-per-node, 1 by default; empty for any other command. The
# entrypoint runs before torchrun, so LOCAL_WORLD_SIZE is not set yet.
torchrun_ranks() {
  case "$1" in
    torchrun|*/torchrun) ;;
    python|python3|python3.*|*/python|*/python3|*/python3.*)
      [ "${2:-}" = "-m" ] || return 0
      case "${3:-}" in torch.distributed.run|torch.distributed.launch) ;; *) return 0 ;; esac ;;
    *) return 0 ;;
  esac
  n=1
  prev=""
  for arg in "$@"; do
    case "$prev" in --nproc-per-node|--nproc_per_node) n=$arg ;; esac
    case "$arg" in --nproc-per-node=*|--nproc_per_node=*) n=${arg#*=} ;; esac
    prev=$arg
  done
  echo "$n"
}

# IMAGEKIT_OMP_AUTO=1 marks a value imagekit computed: torchrun's workers recompute it
# (imagekit/runtime/threads.py, run by the venv's Python at start) from LOCAL_WORLD_SIZE.
if [ -z "${OMP_NUM_THREADS:-}" ] || [ "${IMAGEKIT_OMP_AUTO:-}" = 1 ]; then
  ranks=${LOCAL_WORLD_SIZE:-${IMAGEKIT_LOCAL_RANKS:-$(torchrun_ranks "$@")}}
  case "${ranks:-1}" in
    # --nproc-per-node gpu|auto|...: the count is torchrun's to know; it sets 1 thread a rank.
    *[!0-9]*|0) ;;
    *)
      threads=$(( $(cpus_allowed) / ${ranks:-1} ))
      [ "$threads" -lt 1 ] && threads=1
      export OMP_NUM_THREADS="$threads" IMAGEKIT_OMP_AUTO=1 ;;
  esac
fi
# CUDA forward compatibility (nvidia flavor): on a data-center GPU whose driver is older than
# this image's CUDA needs, put the image's newer libcuda first and say so
# (imagekit/runtime/fwdcompat.py decides; nothing happens where the driver is new enough).
if [ -d /usr/local/cuda/compat ] && [ -r /proc/driver/nvidia/version ] \
    && [ -z "${IMAGEKIT_FORWARD_COMPAT:-}" ]; then
  eval "$(/opt/venv/bin/python -m imagekit.runtime.fwdcompat)" || true
fi
exec "$@"
