"""A package lock as both the host and the build read it: its groups, pins and staged folders.

The host (imagekit/locks/) imports it. groups.py, sbom_writer.py and team_install.py each run
alone in the build, bind-mounted one file at a time, so the build context's copy of each has
this module's lines in place of its import of it (builder/context.py, script_text): one
definition, and the rendered Dockerfiles mount no extra file. Standard library only, and
nothing here may share a name with those scripts' own (tests/test_platform_locks.py).
"""

from __future__ import annotations

import re

# The venv's layer groups in layer order, then the team's packages (installed over them by the
# team's step; a lock has that group only where the cell has team packages). The build context
# stages each group as <group>.txt.
GROUPS = ("cuda", "torch", "features")
TEAM = "team"
LOCK_GROUPS = (*GROUPS, TEAM)

# Where a staged lock keeps each machine's (`uname -m`) group files, under the context's
# imagekit/locked/: amd64's at the top, as before arm64 had one.
LOCKED_FOLDERS = {"x86_64": "", "aarch64": "linux-arm64"}

# A pin as the lock writer writes it: a PEP 508 name, `==`, a version (PEP 440 characters),
# then only `--hash=sha256:<64 hex>` entries.
PIN = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>[A-Za-z0-9.+!_-]+)"
)
HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")

# nvidia-* wheels that are no CUDA library: nvidia-ml-py (pynvml, pure Python NVML bindings,
# released on the driver's schedule) rides with torch, so bumping it never rebuilds the
# multi-GB CUDA layer.
NOT_CUDA_LIBRARIES = ("nvidia-ml-py",)


# The CUDA libraries' layers: the cuda group split by content, so that BuildKit compresses
# them (and a registry takes them) side by side on every core, not as one 2.8 GB stream. A
# wheel's name decides its part, so every cell that pins the same wheels makes the same
# layers, byte for byte. cuDNN; cuBLAS with NCCL; cuSPARSE, cuSPARSELt and cuFFT; the
# rest: each about 0.7-1 GB unpacked for CUDA 12.6. The build context stages part N of
# the group as cuda-N.txt (N from 1).
CUDA_PARTS = (
    ("nvidia-cudnn",),
    ("nvidia-cublas", "nvidia-nccl"),
    ("nvidia-cusparse", "nvidia-cufft"),
    (),  # the rest
)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_name(pin: str) -> str:
    """NAME==VERSION (or a bare NAME) -> the normalized name."""
    return normalize(pin.split("==")[0])


def is_cuda_library(pin: str) -> bool:
    """The nvidia-* CUDA wheels (`pin`: NAME==VERSION or a bare NAME): py3-none, so one copy
    serves every Python; the lock's cuda group holds them and only them."""
    name = pin_name(pin)
    return name.startswith("nvidia-") and name not in NOT_CUDA_LIBRARIES


def cuda_part(pin: str) -> int:
    """The part (0-based, CUDA_PARTS) of the CUDA libraries' layers that installs `pin`."""
    name = pin_name(pin)
    return next(
        (i for i, prefixes in enumerate(CUDA_PARTS) if name.startswith(prefixes)),
        len(CUDA_PARTS) - 1,
    )
