"""NVIDIA GPU models: compute capability and whether the part is a data-center one.

Plain data and pure lookups (stdlib only: it also runs inside images). Sources: NVIDIA's
"CUDA GPUs - Compute Capability" table (developer.nvidia.com/cuda-gpus, read 2026-11-23) and
the CUDA Compatibility guide, "Forward Compatibility" (docs.nvidia.com/deploy/cuda-compatibility,
read 2026-11-23): the forward-compatibility package works on data-center GPUs (and select NGC
Server Ready RTX SKUs), not on GeForce or workstation RTX cards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    key: str  # the model as it appears in the device name, e.g. "H100"
    capability: tuple[int, int]
    datacenter: bool


# Longer keys first where one is a prefix of another ("A100" before "A10", "GH200" before
# "H200"). Matching is on whole words of the device name ("NVIDIA H100 80GB HBM3").
MODELS: tuple[GpuModel, ...] = (
    GpuModel("GB300", (10, 3), True),
    GpuModel("B300", (10, 3), True),
    GpuModel("GB200", (10, 0), True),
    GpuModel("B200", (10, 0), True),
    GpuModel("B100", (10, 0), True),
    GpuModel("GH200", (9, 0), True),
    GpuModel("H200", (9, 0), True),
    GpuModel("H100", (9, 0), True),
    GpuModel("H800", (9, 0), True),
    GpuModel("H20", (9, 0), True),
    GpuModel("L40S", (8, 9), True),
    GpuModel("L40", (8, 9), True),
    GpuModel("L4", (8, 9), True),
    GpuModel("A100", (8, 0), True),
    GpuModel("A800", (8, 0), True),
    GpuModel("A30", (8, 0), True),
    GpuModel("A40", (8, 6), True),
    GpuModel("A10G", (8, 6), True),
    GpuModel("A10", (8, 6), True),
    GpuModel("A16", (8, 6), True),
    GpuModel("A2", (8, 6), True),
    GpuModel("T4", (7, 5), True),
    GpuModel("V100", (7, 0), True),
    GpuModel("P100", (6, 0), True),
    GpuModel("RTX 5090", (12, 0), False),
    GpuModel("RTX 5080", (12, 0), False),
    GpuModel("RTX 5070", (12, 0), False),
    GpuModel("RTX PRO 6000", (12, 0), False),
    GpuModel("RTX 4090", (8, 9), False),
    GpuModel("RTX 4080", (8, 9), False),
    GpuModel("RTX 6000 Ada", (8, 9), False),
    GpuModel("RTX 3090", (8, 6), False),
    GpuModel("RTX 3080", (8, 6), False),
    GpuModel("RTX A6000", (8, 6), False),
    GpuModel("RTX 2080", (7, 5), False),
    GpuModel("GB10", (12, 1), False),  # DGX Spark
)

# sm_90, sm90, 9.0, 90, and the real arch names with a suffix: sm_90a, sm_100a, sm_100f
# (the a/f variants run on the same capability), compute_90
_SM = re.compile(r"^(?:sm_?|compute_)?(\d{1,2})\.?(\d)[af]?$", re.IGNORECASE)


def model_of(name: str) -> GpuModel | None:
    """The model a device name or a short name ("H100", "rtx 5090") names, else None."""
    words = " " + re.sub(r"[^A-Z0-9]+", " ", name.upper()) + " "
    for model in MODELS:
        if f" {model.key.upper()} " in words:
            return model
    return None


def capability_of(text: str) -> tuple[int, int] | None:
    """'sm_90', 'sm90', '9.0', '90', '12.0' -> (major, minor); a model name -> its capability."""
    if match := _SM.match(text.strip()):
        return int(match[1]), int(match[2])
    model = model_of(text)
    return model.capability if model else None


def known_names() -> str:
    return ", ".join(m.key for m in MODELS)
