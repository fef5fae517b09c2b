"""What a real NVML driver answers to the readings imagekit takes for Grace nodes.

    python scripts/nvml-grace-readings.py > grace-readings.json

For each GPU: the raw answer of each NVML call behind the snapshot's host_link, numa_node,
cpu_affinity and fabric keys (its value, or the exception's class, NVML code and words);
imagekit's reader over the real pynvml module; and the reader again with each of those
symbols made missing from the real library, as an older driver lacks them (pynvml then
raises NVMLError_FunctionNotFound, as it does for a symbol the library does not export).
Run on a GPU machine (docs/selfcheck-gpu.md); it needs pynvml and imagekit importable.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

import pynvml

from imagekit.selfcheck.readers import nvml as reader
from imagekit.selfcheck.readers import nvml_calls, nvml_links

GRACE_KEYS = ("host_link", "numa_node", "cpu_affinity", "fabric")
# The library symbols behind those keys; each case below hides some of them.
HIDDEN_CASES = (
    ("nvmlDeviceGetC2cModeInfoV",),
    ("nvmlDeviceGetNumaNodeId",),
    ("nvmlDeviceGetCpuAffinity",),
    ("nvmlDeviceGetGpuFabricInfoV",),
    ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"),
)


class HidingLibrary:
    """The real libnvidia-ml handle with some symbols missing (getattr raises as ctypes
    does for a symbol the library lacks)."""

    def __init__(self, lib: Any, hidden: tuple[str, ...]) -> None:
        self._lib, self._hidden = lib, hidden

    def __getattr__(self, name: str) -> Any:
        if name in self._hidden:
            raise AttributeError(f"undefined symbol: {name}")
        return getattr(self._lib, name)


def answer(call: Any) -> dict[str, Any]:
    """A call's value, or what it raised."""
    try:
        return {"value": call()}
    except Exception as exc:
        return {
            "raised": type(exc).__name__,
            "code": getattr(exc, "value", None),
            "text": nvml_calls.reason_of(exc),
        }


def fabric_fields(info: Any) -> dict[str, Any]:
    """Each field; byte arrays as hex (the cluster UUID)."""
    fields = {}
    for name, _ in type(info)._fields_:
        value = getattr(info, name)
        fields[name] = bytes(value).hex() if hasattr(value, "_length_") else repr(value)
    return fields


def raw_fabric(handle: Any, versioned: bool) -> dict[str, Any]:
    """The fabric structure as NVML filled it (an older binding lacks the versioned one)."""
    name = "GpuFabricInfoV" if versioned else "GpuFabricInfo"
    filled: list[Any] = []

    def call() -> Any:
        info = getattr(pynvml, f"c_nvml{name}_t")()
        filled.append(info)
        return getattr(pynvml, f"nvmlDevice{'Get' + name}")(handle, ctypes.byref(info))

    result = answer(call)
    if "value" in result:
        result["fields"] = fabric_fields(filled[0])
    return result


def raw_answers(index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    words = nvml_links.cpu_set_size(os.cpu_count())
    c2c = answer(lambda: pynvml.nvmlDeviceGetC2cModeInfoV(handle))
    if "value" in c2c:
        c2c["value"] = {"isC2cEnabled": c2c["value"].isC2cEnabled}
    affinity = answer(lambda: [int(w) for w in pynvml.nvmlDeviceGetCpuAffinity(handle, words)])
    return {
        "name": pynvml.nvmlDeviceGetName(handle),
        "nvmlDeviceGetC2cModeInfoV": c2c,
        "nvmlDeviceGetNumaNodeId": answer(lambda: pynvml.nvmlDeviceGetNumaNodeId(handle)),
        "nvmlDeviceGetCpuAffinity": {"cpu_set_size": words, **affinity},
        "nvmlDeviceGetGpuFabricInfoV": raw_fabric(handle, versioned=True),
        "nvmlDeviceGetGpuFabricInfo": raw_fabric(handle, versioned=False),
    }


def read_grace(hidden: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """imagekit's reader over the real module, with `hidden` symbols missing."""
    real = pynvml.nvmlLib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = HidingLibrary(real, hidden) if hidden else real
    try:
        _, gpus = reader.read_nvml()
    finally:
        pynvml.nvmlLib = real
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return [
        {
            **{key: gpu.get(key, "<absent>") for key in GRACE_KEYS},
            "unread": {k: v for k, v in gpu.get("unread", {}).items() if k in GRACE_KEYS},
        }
        for gpu in gpus
    ]


def main() -> int:
    from importlib import metadata

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        report: dict[str, Any] = {
            "nvidia-ml-py": metadata.version("nvidia-ml-py"),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "os.cpu_count": os.cpu_count(),
            "raw": [raw_answers(i) for i in range(count)],
        }
    finally:
        pynvml.nvmlShutdown()
    report["reader"] = read_grace()
    report["reader_with_missing_symbols"] = [
        {"missing": list(hidden), "gpus": read_grace(hidden)} for hidden in HIDDEN_CASES
    ]
    json.dump(report, sys.stdout, indent=1, default=str)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
