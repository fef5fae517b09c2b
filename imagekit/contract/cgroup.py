"""The CPUs this container's cgroup allows: the threads hook (runtime/threads.py) sizes
OMP_NUM_THREADS by it, and the self-check's stack check judges OMP_NUM_THREADS against it."""

from __future__ import annotations


def cgroup_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs the cgroup allows (v2 cpu.max, else v1 cfs quota), None when unlimited."""
    try:
        with open(f"{root}/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(f"{root}/cpu/cpu.cfs_quota_us") as q, open(f"{root}/cpu/cpu.cfs_period_us") as p:
            quota_us, period_us = int(q.read()), int(p.read())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None
