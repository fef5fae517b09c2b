"""OMP_NUM_THREADS from the CPUs this container may use, for every Python start.

The entrypoint does the same at container start, but Kubernetes `command:`, `docker run
--entrypoint`, Slurm/pyxis and most CI runners replace the entrypoint. A .pth file in the
venv calls at_start() when the venv's Python starts, before any user code (so before
torch reads the variable). A value the user set is never touched; a value imagekit set
(IMAGEKIT_OMP_AUTO=1) is recomputed in torchrun's workers, which know LOCAL_WORLD_SIZE.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping

from imagekit.contract.cgroup import cgroup_quota


def threads_for(cpus_visible: int, quota: float | None, local_ranks: int) -> int:
    """The CPUs this process may really use (cpuset and quota), shared by the local ranks."""
    cpus = cpus_visible if quota is None else min(cpus_visible, max(1, math.floor(quota)))
    return max(1, cpus // max(1, local_ranks))


def apply(env: MutableMapping[str, str] = os.environ) -> None:
    if env.get("OMP_NUM_THREADS") and env.get("IMAGEKIT_OMP_AUTO") != "1":
        return  # the user's choice
    ranks = _int(env, "LOCAL_WORLD_SIZE") or _int(env, "IMAGEKIT_LOCAL_RANKS") or 1
    threads = threads_for(len(os.sched_getaffinity(0)), cgroup_quota(), ranks)
    env["OMP_NUM_THREADS"] = str(threads)
    env["IMAGEKIT_OMP_AUTO"] = "1"


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env.get(name, "") or 0)
    except ValueError:
        return 0


def at_start() -> None:
    """Called by the venv's .pth line at every Python start (importing sets nothing)."""
    if os.environ.get("IMAGEKIT_THREADS_HOOK") != "off":  # an escape hatch
        apply()
