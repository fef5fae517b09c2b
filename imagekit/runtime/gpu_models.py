"""NVIDIA GPU models for `compat show --gpu` and the forward-compat decision: compute
capability and whether the part is a data-center one. A thin user of the one product table,
contract/gpus.py (its sources, its matching rule); stdlib only, it also runs inside images.
"""

from __future__ import annotations

import re

from imagekit.contract.gpus import Product, families, match

GpuModel = Product  # the table's row: .model, .capability, .datacenter

# sm_90, sm90, 9.0, 90, and the real arch names with a suffix: sm_90a, sm_100a, sm_100f
# (the a/f variants run on the same capability), compute_90
_SM = re.compile(r"^(?:sm_?|compute_)?(\d{1,2})\.?(\d)[af]?$", re.IGNORECASE)


def model_of(name: str) -> GpuModel | None:
    """The model a device name or a short name ("H100", "rtx 5090") names, else None."""
    return match(name)


def capability_of(text: str) -> tuple[int, int] | None:
    """'sm_90', 'sm90', '9.0', '90', '12.0' -> (major, minor); a model name -> its capability."""
    if found := _SM.match(text.strip()):
        return int(found[1]), int(found[2])
    model = model_of(text)
    return model.capability if model else None


def known_names() -> str:
    return ", ".join(families())
