"""The NVIDIA driver as the container sees it and the driver each CUDA needs, read and judged
the same way by the self-check, `compat show` on the host and the entrypoint's
forward-compatibility step (runtime/fwdcompat.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from imagekit.contract import labels as label

PROC_DRIVER = "/proc/driver/nvidia/version"

# Oldest Linux driver each CUDA major runs on under minor-version compatibility
# (CUDA Toolkit release notes, table "CUDA Toolkit and Minimum Required Driver Version for
# CUDA Minor Version Compatibility"). The image's io.imagekit.min-driver label wins.
MAJOR_DRIVER_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


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


def min_driver(labels: Mapping[str, str], torch_cuda: str | None) -> str | None:
    """The driver the image needs: its label, else the floor of torch's CUDA major."""
    if labels.get(label.MIN_DRIVER):
        return labels[label.MIN_DRIVER]
    if not torch_cuda:
        return None
    return MAJOR_DRIVER_FLOOR.get(version_tuple(torch_cuda)[0])


def driver_problem(
    driver: str | None, need: str | None, cuda: str | None, forward: str | None = None
) -> str | None:
    """None when the driver is new enough (or either side is unknown), else the refusal.
    `forward`: the compat libcuda the entrypoint put first ($IMAGEKIT_FORWARD_COMPAT), which
    runs the image's CUDA on an older driver (runtime/fwdcompat.py decided it may)."""
    if not driver or not need or version_tuple(driver) >= version_tuple(need):
        return None
    if forward and version_tuple(forward) >= version_tuple(need):
        return None
    return (
        f"driver {driver} is older than {need}, the minimum for CUDA {cuda or '?'}: "
        "update the host driver, or use an image of an older CUDA variant (on a data-center "
        "GPU, the nvidia flavor's forward-compatibility package also runs it)"
    )
