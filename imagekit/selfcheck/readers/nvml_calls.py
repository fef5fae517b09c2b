"""The soft way every NVML reading is made: an exception's reason in words, the GPU faults
NVML can answer (lost, needs a reset), and the reader that records a failed call as unread.

nvml.py, nvml_links.py, clock_sampler.py and nvml_counters.py read through these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

# NVML's answers that say the GPU itself is gone or unusable, whatever was asked (nvml.h):
# NVML_ERROR_GPU_IS_LOST (15, "the GPU has fallen off the bus or has otherwise become
# inaccessible") and NVML_ERROR_RESET_REQUIRED (16, "the GPU requires a reset before it can
# be used again"). NVML_ERROR_GPU_NOT_FOUND (28, "no GPUs were found") names no GPU: it is
# an unread reading like any other.
GPU_LOST, RESET_REQUIRED = "gpu_lost", "gpu_reset_required"
FAULTS = {15: GPU_LOST, 16: RESET_REQUIRED}
FAULT_KEYS = (GPU_LOST, RESET_REQUIRED)
FAULT_CLASSES = {"NVMLError_GpuIsLost": GPU_LOST, "NVMLError_ResetRequired": RESET_REQUIRED}
REASON_CHARS = 300
NOT_SUPPORTED = "NVMLError_NotSupported"
# Where a driver or an older nvidia-ml-py lacks a newer symbol (pynvml raises
# FunctionNotFound for the driver, AttributeError is the binding's), the older one is asked.
NO_SYMBOL = "NVMLError_FunctionNotFound"


class NotRead(Exception):
    """An answer NVML gave that is no reading (a negative NUMA node: the GPU has none); its
    text alone is the reason recorded in `unread`."""


def reason_of(exc: BaseException) -> str:
    """Why a reading failed, in words: an NVMLError's own ("Not Supported"), anything else
    with its class ("NVMLLibraryMismatchError: Unversioned function called ...")."""
    try:
        text = str(exc)
    except Exception:  # NVMLError.__str__ asks the library for the words of newer codes
        text = f"code {getattr(exc, 'value', '?')}"
    if not type(exc).__name__.startswith("NVMLError") and not isinstance(exc, NotRead):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text[:REASON_CHARS]


def fault_of(exc: BaseException) -> str | None:
    """GPU_LOST or RESET_REQUIRED where NVML's answer says so of the GPU, else None."""
    if type(exc).__name__ in FAULT_CLASSES:
        return FAULT_CLASSES[type(exc).__name__]
    if type(exc).__name__.startswith("NVMLError"):
        value = getattr(exc, "value", None)
        return FAULTS.get(value) if isinstance(value, int) else None
    return None


def read_soft(read: Callable[..., dict[str, Any]], nvml: Any, index: int, *args: Any) -> dict:  # type: ignore[type-arg]
    """read(nvml, index, ...), which records its own failures; should it raise all the same,
    the GPU is left unread with the reason rather than the run ending."""
    try:
        return read(nvml, index, *args)
    except Exception as exc:
        return {"index": index, "unread": {"handle": reason_of(exc)}}


def shutdown(nvml: Any) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


Reader = Callable[[str | Sequence[str], Callable[[], Any]], None]


def reader(gpu: dict[str, Any], unread: dict[str, str]) -> Reader:
    """read(keys, fn): fn's value(s) into gpu[keys]; any exception leaves the keys out with
    its reason in `unread`, and a lost GPU (or one that needs a reset) is marked so."""

    def read(keys: str | Sequence[str], fn: Callable[[], Any]) -> None:
        names = [keys] if isinstance(keys, str) else list(keys)
        try:
            value = fn()
            values = [value] if isinstance(keys, str) else list(value)
            got = dict(zip(names, values, strict=True))
        except Exception as exc:
            why = reason_of(exc)
            unread.update(dict.fromkeys(names, why))
            fault = fault_of(exc)
            if fault:
                gpu.setdefault(fault, f"{names[0]}: {why}")
            return
        gpu.update(got)

    return read


def handle_of(nvml: Any, index: int, gpu: dict[str, Any]) -> Any:
    """The GPU's handle, or None with the reason in gpu["unread"]["handle"]."""
    try:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        why = reason_of(exc)
        gpu["unread"] = {"handle": why}
        fault = fault_of(exc)
        if fault:
            gpu[fault] = f"handle: {why}"
        return None


def call_symbol(nvml: Any, name: str, *args: Any) -> None:
    """libnvidia-ml's `name` through pynvml's own lookup (FunctionNotFound where the driver
    lacks it) and return check (an NVMLError for any other answer than success)."""
    nvml._nvmlCheckReturn(nvml._nvmlGetFunctionPointer(name)(*args))
