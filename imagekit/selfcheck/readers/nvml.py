"""A thin reader over NVML (the `pynvml` module of the `nvidia-ml-py` package): what the host
snapshot needs of each GPU, its identity and state. pynvml is imported lazily; the verdicts
live in health.py, where a GPU sits is read by nvml_links.py, and the clock sampler of the
perf run is clock_sampler.py.

Every field is read on its own, and any exception from any NVML call (an NVMLError:
NotSupported on a MIG slice or on a GPU without row remapping, NoPermission in a container,
...; pynvml's NVMLLibraryMismatchError, which its unversioned wrappers raise where the
driver lacks the versioned symbol, e.g. nvmlDeviceGetComputeRunningProcesses_v3 before
R510; anything else) leaves the key out and records `unread[field] = reason`, so a verdict
says "not judged" instead of passing what was not read. Init, the GPU count and shutdown
fail soft the same way. A GPU that NVML answers "GPU is lost" (fell off the bus) or "GPU
requires reset" for, on any reading, is marked so (`gpu_lost`, `gpu_reset_required`): the
health verdict fails it.

GPU indices are NVML's (PCI bus order); torch's differ (CUDA_VISIBLE_DEVICES,
CUDA_DEVICE_ORDER): the perf probe matches the two on the UUID (devices.match_devices) and
samples the GPUs it measures by their UUID. In a container with its own PID namespace NVML
reports the host's PIDs, so the self-check's own PID cannot be told apart there: read the
processes before any check starts CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from imagekit.selfcheck.readers import nvml_counters as counters
from imagekit.selfcheck.readers import nvml_links as links
from imagekit.selfcheck.readers.nvml_calls import handle_of, read_soft, reader, reason_of, shutdown

COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
# A MIG slot with no device, or one that is not this container's.
NO_MIG_DEVICE = ("NVMLError_NotFound", "NVMLError_InvalidArgument", "NVMLError_NoPermission")
MIB = 1 << 20


def read_nvml(own_pids: Collection[int] = ()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The snapshot's `nvml` dict and one dict per GPU (NVML's keys of the snapshot)."""
    try:
        import pynvml
    except ImportError as exc:
        return _unavailable(f"pynvml is not installed ({exc}): the image lacks nvidia-ml-py"), []
    except Exception as exc:  # a broken install
        return _unavailable(f"pynvml did not import: {reason_of(exc)}"), []
    return read_with(pynvml, own_pids)


def read_with(
    nvml: Any, own_pids: Collection[int] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """read_nvml over a given pynvml module (tests pass a fake one or patch the real one)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # libnvidia-ml.so.1 missing, driver not loaded, ...
        return _unavailable(f"NVML did not start: {reason_of(exc)}"), []
    try:
        info: dict[str, Any] = {"available": True, "reason": ""}
        try:
            info["driver"] = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception as exc:
            info["reason"] = f"driver version not read: {reason_of(exc)}"
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            return _unavailable(f"NVML could not count the GPUs: {reason_of(exc)}"), []
        info["device_count"] = count
        skip = {os.getpid(), *own_pids}
        return info, [read_soft(read_gpu, nvml, index, skip) for index in range(count)]
    finally:
        shutdown(nvml)


def read_identities(nvml: Any = None) -> tuple[list[dict[str, Any]], str]:
    """Each GPU's `index`, `uuid`, `mig_mode` and `mig_uuids` (what the perf probe matches
    torch's devices against) and `cpu_affinity` (where its pinned host copies are placed),
    with `unread` as read_gpu; ([], why) where NVML cannot be read.
    """
    if nvml is None:
        try:
            import pynvml as nvml
        except Exception as exc:
            return [], f"pynvml did not import: {reason_of(exc)}"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return [], f"NVML did not start: {reason_of(exc)}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
        return [read_soft(read_identity, nvml, index) for index in range(count)], ""
    except Exception as exc:
        return [], f"NVML could not count the GPUs: {reason_of(exc)}"
    finally:
        shutdown(nvml)


def _unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_identity(nvml: Any, index: int) -> dict[str, Any]:
    """Which GPU NVML's `index` is: its UUID, and its MIG devices' where MIG is on."""
    gpu: dict[str, Any] = {"index": index}
    handle = handle_of(nvml, index, gpu)
    if handle is None:
        return gpu
    unread: dict[str, str] = {}
    read = reader(gpu, unread)
    read("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    read("mig_mode", lambda: _mig_mode(nvml, handle))
    if gpu.get("mig_mode"):
        read("mig_uuids", lambda: _mig_uuids(nvml, handle))
    read("cpu_affinity", lambda: links.cpu_affinity(nvml, handle))  # where its host copies go
    if unread:
        gpu["unread"] = unread
    return gpu


def read_gpu(nvml: Any, index: int, own_pids: Collection[int] = ()) -> dict[str, Any]:
    """One GPU's readings; what NVML refused is in `unread`, with its reason."""
    gpu: dict[str, Any] = {"index": index}
    handle = handle_of(nvml, index, gpu)  # e.g. GPU is lost (fell off the bus)
    if handle is None:
        return gpu
    unread: dict[str, str] = {}
    read = reader(gpu, unread)
    enabled = nvml.NVML_FEATURE_ENABLED
    read("name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
    read("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    read("memory_total_mib", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB)
    read(
        "compute_capability",
        lambda: _capability(nvml.nvmlDeviceGetCudaComputeCapability(handle)),
    )
    read("compute_mode", lambda: _compute_mode(nvml.nvmlDeviceGetComputeMode(handle)))
    read("persistence_mode", lambda: nvml.nvmlDeviceGetPersistenceMode(handle) == enabled)
    read("mig_mode", lambda: _mig_mode(nvml, handle))
    if gpu.get("mig_mode"):
        read("mig_uuids", lambda: _mig_uuids(nvml, handle))
    read("ecc_mode", lambda: nvml.nvmlDeviceGetEccMode(handle)[0] == enabled)
    read(
        "ecc_volatile_uncorrected",
        lambda: int(
            nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        ),
    )
    read("ecc_aggregate_uncorrected", lambda: counters.aggregate_uncorrected(nvml, handle))
    read(("ecc_sram_uncorrected", "ecc_sram_corrected"), lambda: counters.sram(nvml, handle))
    read(("remapped_rows_pending", "remapped_rows_failure"), lambda: _remapped(nvml, handle))
    read(
        "retired_pages_pending",
        lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == enabled,
    )
    read("pcie_gen", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)))
    read("pcie_width", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)))
    # The maximum "possible with this GPU and system configuration" (nvidia-smi's
    # pcie.link.gen.max): a Gen5 card in a Gen4 slot says 4, which is no fault of the link.
    read("pcie_max_gen", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)))
    read("pcie_max_width", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)))
    read("pcie_replays", lambda: counters.pcie_replays(nvml, handle))
    read(("nvlinks_active", "nvlinks_total", "nvlink_version"), lambda: links.nvlinks(nvml, handle))
    if gpu.get("nvlink_version") is None:
        gpu.pop("nvlink_version", None)
    read("host_link", lambda: links.host_link(nvml, handle))
    read("numa_node", lambda: links.numa_node(nvml, handle))
    read("cpu_affinity", lambda: links.cpu_affinity(nvml, handle))
    read("fabric", lambda: links.fabric(nvml, handle))
    read("processes", lambda: _processes(nvml, handle, own_pids))
    if unread:
        gpu["unread"] = unread
    return gpu


def _capability(major_minor: tuple[int, int]) -> str:
    return f"{major_minor[0]}.{major_minor[1]}"


def _compute_mode(value: int) -> str:
    return COMPUTE_MODES.get(int(value), str(value))


def _mig_mode(nvml: Any, handle: Any) -> bool:
    """A GPU without MIG (L4, T4, consumer cards) answers NotSupported: it is no MIG slice."""
    try:
        return bool(nvml.nvmlDeviceGetMigMode(handle)[0] == nvml.NVML_DEVICE_MIG_ENABLE)
    except Exception as exc:
        if type(exc).__name__ == "NVMLError_NotSupported":
            return False
        raise


def _mig_uuids(nvml: Any, handle: Any) -> list[str]:
    """The UUIDs ("MIG-<uuid>") of the MIG devices on this GPU that NVML shows here; a slot
    with none, or one that is not this container's, is passed over."""
    out = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception as exc:
            if type(exc).__name__ in NO_MIG_DEVICE:
                continue
            raise
        out.append(_text(nvml.nvmlDeviceGetUUID(mig)))
    return out


def _remapped(nvml: Any, handle: Any) -> tuple[bool, bool]:
    _corrected, _uncorrected, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    return bool(pending), bool(failure)


def _processes(nvml: Any, handle: Any, own_pids: Collection[int]) -> list[dict[str, Any]]:
    """Other processes with a CUDA context on this GPU (the self-check's own left out)."""
    out = []
    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if proc.pid in own_pids:
            continue
        used = getattr(proc, "usedGpuMemory", None)
        out.append(
            {
                "pid": int(proc.pid),
                "used_mib": None if used is None else int(used) // MIB,
                "name": _process_name(nvml, proc.pid),
            }
        )
    return out


def _process_name(nvml: Any, pid: int) -> str:
    try:
        return _text(nvml.nvmlSystemGetProcessName(pid))
    except Exception:
        return ""  # a host PID outside this container's namespace
