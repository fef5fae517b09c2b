"""What the container shows of NVIDIA hardware before torch is asked: device nodes, the
driver, the visible-devices variables and the IMEX channels, read into devices.Host."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from imagekit.contract.checks import gpus_given
from imagekit.contract.driver import PROC_DRIVER, read_driver
from imagekit.selfcheck.verdicts.devices import Host

IMEX_CHANNELS = "nvidia-caps-imex-channels"


def read_imex_channels(folder: Path) -> tuple[str, ...] | None:
    """The IMEX channels the container was given ("channel0", ...), sorted; () where the
    folder is absent (no channel passed in: the usual case off an NVL72 rack)."""
    try:
        return tuple(sorted(os.listdir(folder)))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except OSError:
        return None


def read_container(env: Mapping[str, str] = os.environ, dev: str = "/dev") -> Host:
    try:
        nodes = sorted(f"{dev}/{n}" for n in os.listdir(dev) if re.fullmatch(r"nvidia\d+", n))
    except OSError:
        nodes = []
    return Host(
        device_nodes=tuple(nodes),
        proc_driver=Path(PROC_DRIVER).is_file(),
        driver=read_driver(),
        visible_devices=env.get("NVIDIA_VISIBLE_DEVICES"),
        gpus_requested=gpus_given(env)[0],
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        cuda_device_order=env.get("CUDA_DEVICE_ORDER"),
        imex_channels=read_imex_channels(Path(dev) / IMEX_CHANNELS),
    )
