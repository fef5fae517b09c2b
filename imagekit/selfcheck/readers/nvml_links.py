"""Where a GPU sits, read through NVML: its NVLinks and their generation, how it reaches its
CPU (NVLink-C2C or PCIe), its NVLink fabric, its NUMA node and its nearest CPUs.

Some answers are readings, not failures: NotSupported from the C2C mode (no C2C link:
`host_link` "pcie") and from the fabric info (no NVLink fabric: state "not_supported").
"""

from __future__ import annotations

import ctypes
import math
import os
import uuid
from typing import Any

from imagekit.selfcheck.readers.nvml_calls import (
    NO_SYMBOL,
    NOT_SUPPORTED,
    NotRead,
    call_symbol,
    fault_of,
    reason_of,
)
from imagekit.selfcheck.verdicts import cpulist

# nvmlDeviceGetNvLinkVersion returns an nvmlNvlinkVersion_t, not the generation: A100 says 5
# (NVLink 3.1), https://github.com/open-mpi/hwloc/issues/658. Enum -> NVLink generation.
NVLINK_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
# Link queries for links a GPU does not have answer with these (a PCIe card without NVLink).
NO_LINK = ("NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_NotFound")
# nvmlGpuFabricState_t (nvml.h): NVML_GPU_FABRIC_STATE_NOT_SUPPORTED ... _COMPLETED.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# nvmlDeviceGetCpuAffinity's mask where os.cpu_count() does not say how many CPUs there are.
CPUS_UNKNOWN = 1024


def nvlinks(nvml: Any, handle: Any) -> tuple[int, int, int | None]:
    """(active links, links the GPU has, NVLink generation of an active link)."""
    active = total = 0
    version = None
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as exc:
            if type(exc).__name__ in NO_LINK:
                continue  # no such link on this GPU
            raise
        total += 1
        if state == nvml.NVML_FEATURE_ENABLED:
            active += 1
            if version is None:
                version = _nvlink_generation(nvml, handle, link)
    return active, total, version


def _nvlink_generation(nvml: Any, handle: Any, link: int) -> int | None:
    """None where NVML does not say (the links verdict then goes by the architecture); a lost
    GPU is lost all the same."""
    try:
        return NVLINK_GENERATION.get(int(nvml.nvmlDeviceGetNvLinkVersion(handle, link)))
    except Exception as exc:
        if fault_of(exc):
            raise
        return None


def host_link(nvml: Any, handle: Any) -> str:
    """How the GPU reaches its CPU: "c2c" over NVLink-C2C (GH200, GB200), else "pcie"; a
    GPU without a C2C link answers NotSupported, which says just that."""
    try:
        enabled = _c2c_enabled(nvml, handle)
    except Exception as exc:
        if type(exc).__name__ == NOT_SUPPORTED:
            return "pcie"
        raise
    return "c2c" if enabled else "pcie"


class C2cModeInfo(ctypes.Structure):
    """nvmlC2cModeInfo_v1_t (nvml.h), for bindings that do not declare it."""

    _fields_ = [("isC2cEnabled", ctypes.c_uint)]


def _c2c_enabled(nvml: Any, handle: Any) -> int:
    """isC2cEnabled. nvidia-ml-py 12.535 (which images may still hold) has no wrapper for
    the C2C mode nor the NUMA node, though the driver answers both (seen on R580): then the
    driver's symbol is called as nvml.h declares it."""
    if hasattr(nvml, "nvmlDeviceGetC2cModeInfoV"):
        return int(nvml.nvmlDeviceGetC2cModeInfoV(handle).isC2cEnabled)
    info = C2cModeInfo()
    call_symbol(nvml, "nvmlDeviceGetC2cModeInfoV", handle, ctypes.byref(info))
    return int(info.isC2cEnabled)


def numa_node(nvml: Any, handle: Any) -> int:
    """The NUMA node of the GPU's own memory, where the OS has onlined it as one (a Grace
    host without CDMM); NVML answers a negative node where there is none."""
    if hasattr(nvml, "nvmlDeviceGetNumaNodeId"):
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    else:  # an older binding: the driver's own symbol
        out = ctypes.c_int()
        call_symbol(nvml, "nvmlDeviceGetNumaNodeId", handle, ctypes.byref(out))
        node = out.value
    if node < 0:
        raise NotRead("no NUMA node")
    return node


def cpu_affinity(nvml: Any, handle: Any) -> str:
    """The CPUs nearest the GPU, as a cpulist in the host's CPU numbers (NVML's, whatever
    cpuset the container has). An empty mask says nothing of the GPU: not a reading."""
    masks = nvml.nvmlDeviceGetCpuAffinity(handle, cpu_set_size(os.cpu_count()))
    cpus = cpulist.cpulist([int(mask) for mask in masks])
    if not cpus:
        raise NotRead("no CPU in NVML's affinity mask")
    return cpus


def cpu_set_size(cpus: int | None) -> int:
    """nvmlDeviceGetCpuAffinity's cpuSetSize: enough words for every CPU. os.cpu_count()
    counts the host's CPUs, which is what NVML numbers, not the container's cpuset."""
    return max(1, math.ceil((cpus or CPUS_UNKNOWN) / cpulist.WORD_BITS))


def fabric(nvml: Any, handle: Any) -> dict[str, Any]:
    """The GPU's registration with an NVLink fabric (the NVLink switches of a GB200 NVL72
    rack, through which multi-node NVLink runs): {"state"}, and where there is a fabric,
    its "status", "clique_id" and "cluster_uuid". A GPU outside any fabric answers
    NotSupported, or the state NOT_SUPPORTED."""
    try:
        info = _fabric_info(nvml, handle)
    except Exception as exc:
        if type(exc).__name__ == NOT_SUPPORTED:
            return {"state": "not_supported"}
        raise
    state = FABRIC_STATES.get(int(info.state))
    if state is None:
        raise NotRead(f"fabric state {int(info.state)} is none NVML documents")
    if state == "not_supported":
        return {"state": state}
    return {
        "state": state,
        "status": _return_text(nvml, int(info.status)),
        "clique_id": _clique_id(info),
        "cluster_uuid": _cluster_uuid(info),
    }


def _fabric_info(nvml: Any, handle: Any) -> Any:
    """nvmlDeviceGetGpuFabricInfoV (R550 and later); on a driver or an nvidia-ml-py without
    it, the older (deprecated) nvmlDeviceGetGpuFabricInfo."""
    try:
        info = nvml.c_nvmlGpuFabricInfoV_t()  # sets its own version
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        return info
    except Exception as exc:
        if not isinstance(exc, AttributeError) and type(exc).__name__ != NO_SYMBOL:
            raise
    info = FabricInfoV1()
    nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return info


class FabricInfoV1(ctypes.Structure):
    """nvmlGpuFabricInfo_t as nvml.h lays it out, for the older call. The bindings' own are
    wrong: nvidia-ml-py 13.610 sizes the UUID as 80 bytes (NVML_DEVICE_UUID_BUFFER_SIZE, not
    NVML_GPU_FABRIC_UUID_LEN), so status, clique and state are read past what the driver
    wrote (seen on an H200, docs/gpu-runs/2026-11-27-h200); 12.535 names the clique
    partitionId and types the UUID as text."""

    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


def _return_text(nvml: Any, code: int) -> str:
    """An nvmlReturn_t the structure holds, in NVML's words ("success" for NVML_SUCCESS)."""
    return "success" if code == nvml.NVML_SUCCESS else reason_of(nvml.NVMLError(code))


def _clique_id(info: Any) -> int:
    return int(info.cliqueId)


def _cluster_uuid(info: Any) -> str:
    """8-4-4-4-12 hex, from the structure's 16 bytes themselves (a binding that declared
    them as c_char would read them back as text cut at the first NUL)."""
    field = type(info).clusterUuid
    raw = ctypes.string_at(ctypes.addressof(info) + field.offset, 16)
    return str(uuid.UUID(bytes=raw))
