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

if [ -z "${OMP_NUM_THREADS:-}" ]; then
  ranks=${LOCAL_WORLD_SIZE:-${IMAGEKIT_LOCAL_RANKS:-1}}
  threads=$(( $(cpus_allowed) / ranks ))
  [ "$threads" -lt 1 ] && threads=1
  export OMP_NUM_THREADS="$threads"
fi
exec "$@"
