"""The NVIDIA driver as the container sees it, read the same way by the self-check
(selfcheck/gpu_host.py) and the entrypoint's forward-compatibility step (runtime/fwdcompat.py)."""

from __future__ import annotations

import re
from pathlib import Path

PROC_DRIVER = "/proc/driver/nvidia/version"


def version_tuple(version: str) -> tuple[int, ...]:
    """'580.95.05' -> (580, 95, 5): driver and CUDA versions compare as numbers."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def read_driver(path: str = PROC_DRIVER) -> str | None:
    """The kernel module's version from its /proc file, None where there is none. The file
    also names the gcc that built the module: the first version between spaces is the
    driver's ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ...")."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    match = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return match.group(1) if match else None
