"""Is a GPU expected here, and if torch sees none, why? Pure functions over plain data.

The thin readers at the bottom collect that data from the container (device nodes, the
driver's /proc file, the environment); the decisions never touch the system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagekit.contract import labels as label
from imagekit.contract.driver import PROC_DRIVER, read_driver, version_tuple

# Oldest Linux driver each CUDA major runs on under minor-version compatibility
# (CUDA Toolkit release notes, table "CUDA Toolkit and Minimum Required Driver Version for
# CUDA Minor Version Compatibility"). The image's io.imagekit.min-driver label wins.
MAJOR_DRIVER_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class Host:
    """What the container shows of NVIDIA hardware, read before torch is asked."""

    device_nodes: tuple[str, ...]  # /dev/nvidia0, /dev/nvidia1, ... (not nvidiactl, uvm)
    proc_driver: bool  # /proc/driver/nvidia/version exists
    driver: str | None  # its version, e.g. "580.159.04"
    visible_devices: str | None  # $NVIDIA_VISIBLE_DEVICES
    gpus_requested: bool  # `imagekit test` passed GPUs ($IMAGEKIT_EXPECT_GPU=1)


def is_cuda_image(labels: Mapping[str, str], torch_cuda: str | None) -> bool:
    """A CUDA image by its label; without labels (run natively), by the torch build."""
    cuda = labels.get(label.CUDA)
    if cuda is not None:
        return cuda not in ("", "cpu")
    return bool(torch_cuda)


def gpu_expected(host: Host, cuda_image: bool) -> bool:
    """A CUDA image in a container that has NVIDIA devices (or was given GPUs) must use them."""
    return cuda_image and (bool(host.device_nodes) or host.proc_driver or host.gpus_requested)


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


def no_gpu_cause(host: Host, need_driver: str | None, torch_cuda: str | None, warning: str) -> str:
    """Why torch sees no GPU in a container where one is expected: the likeliest cause first."""
    visible = (host.visible_devices or "").strip().lower()
    if visible in ("void", "none"):
        return (
            f"NVIDIA_VISIBLE_DEVICES={host.visible_devices} hides every GPU from this "
            "container: unset it or name the GPUs (e.g. all)"
        )
    if not host.device_nodes and not host.proc_driver:
        return (
            "GPUs were requested, but the container has no /dev/nvidia* devices: the engine "
            "has no working NVIDIA runtime (install nvidia-container-toolkit and run with "
            "--gpus all, or --runtime nvidia)"
        )
    too_old = driver_problem(host.driver, need_driver, torch_cuda)
    if too_old:
        return too_old
    seen = f" torch said: {warning}" if warning else ""
    return (
        f"the container has {', '.join(host.device_nodes) or 'the NVIDIA driver'} (driver "
        f"{host.driver or 'unknown'}), but torch (CUDA {torch_cuda}) sees no GPU.{seen} "
        "Check NVIDIA_VISIBLE_DEVICES, the device cgroup and `nvidia-smi` in the container"
    )


# -- thin readers -------------------------------------------------------------------------


def read_host(env: Mapping[str, str] = os.environ, dev: str = "/dev") -> Host:
    try:
        nodes = sorted(f"{dev}/{n}" for n in os.listdir(dev) if re.fullmatch(r"nvidia\d+", n))
    except OSError:
        nodes = []
    return Host(
        device_nodes=tuple(nodes),
        proc_driver=Path(PROC_DRIVER).is_file(),
        driver=read_driver(),
        visible_devices=env.get("NVIDIA_VISIBLE_DEVICES"),
        gpus_requested=env.get("IMAGEKIT_EXPECT_GPU") == "1",
    )
