"""A thin reader over NVML (the `pynvml` module of the `nvidia-ml-py` package): what the host
snapshot needs of each GPU, and a sampler of the clock event reasons while the perf
measurements run. pynvml is imported lazily; the verdicts live in health.py.

Every field is read on its own, and any exception from any NVML call (an NVMLError:
NotSupported on a MIG slice or on a GPU without row remapping, NoPermission in a container,
...; pynvml's NVMLLibraryMismatchError, which its unversioned wrappers raise where the
driver lacks the versioned symbol, e.g. nvmlDeviceGetComputeRunningProcesses_v3 before
R510; anything else) leaves the key out and records `unread[field] = reason`, so a verdict
says "not judged" instead of passing what was not read. Init, the GPU count and shutdown
fail soft the same way. A GPU that NVML answers "GPU is lost" (fell off the bus) or "GPU
requires reset" for, on any reading, is marked so (`gpu_lost`, `gpu_reset_required`): the
health verdict fails it.

Some answers are readings, not failures: NotSupported from the C2C mode (no C2C link:
`host_link` "pcie") and from the fabric info (no NVLink fabric: state "not_supported").

GPU indices are NVML's (PCI bus order); torch's differ (CUDA_VISIBLE_DEVICES,
CUDA_DEVICE_ORDER): the perf probe matches the two on the UUID (devices.match_devices) and
samples the GPUs it measures by their UUID. In a container with its own PID namespace NVML
reports the host's PIDs, so the self-check's own PID cannot be told apart there: read the
processes before any check starts CUDA.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from imagekit.selfcheck.readers import nvml_counters as counters
from imagekit.selfcheck.verdicts import cpulist

# nvmlClocksEventReason* bits (nvml.h; the same values as the older ClocksThrottleReason*).
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
# nvmlDeviceGetNvLinkVersion returns an nvmlNvlinkVersion_t, not the generation: A100 says 5
# (NVLink 3.1), https://github.com/open-mpi/hwloc/issues/658. Enum -> NVLink generation.
NVLINK_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
# Link queries for links a GPU does not have answer with these (a PCIe card without NVLink).
NO_LINK = ("NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_NotFound")
# A MIG slot with no device, or one that is not this container's.
NO_MIG_DEVICE = ("NVMLError_NotFound", "NVMLError_InvalidArgument", "NVMLError_NoPermission")
MIB = 1 << 20
# NVML's answers that say the GPU itself is gone or unusable, whatever was asked (nvml.h):
# NVML_ERROR_GPU_IS_LOST (15, "the GPU has fallen off the bus or has otherwise become
# inaccessible") and NVML_ERROR_RESET_REQUIRED (16, "the GPU requires a reset before it can
# be used again"). NVML_ERROR_GPU_NOT_FOUND (28, "no GPUs were found") names no GPU: it is
# an unread reading like any other.
GPU_LOST, RESET_REQUIRED = "gpu_lost", "gpu_reset_required"
FAULTS = {15: GPU_LOST, 16: RESET_REQUIRED}
FAULT_KEYS = (GPU_LOST, RESET_REQUIRED)
FAULT_CLASSES = {"NVMLError_GpuIsLost": GPU_LOST, "NVMLError_ResetRequired": RESET_REQUIRED}
# What the clock sampler records per GPU (the keys a failed handle leaves unread): the
# maxima of each sample's power (W) and temperature (C), and the limits read once.
MAXIMA = ("pcie_gen_under_load", "pcie_width_under_load", "power_max_w", "temperature_max_c")
LIMITS = ("power_limit_w", "power_default_limit_w", "temperature_slowdown_c")
SAMPLED = ("clock_event_reasons", *MAXIMA, *LIMITS)
REASON_CHARS = 300
NOT_SUPPORTED = "NVMLError_NotSupported"
# Where a driver or an older nvidia-ml-py lacks a newer symbol (pynvml raises
# FunctionNotFound for the driver, AttributeError is the binding's), the older one is asked.
NO_SYMBOL = "NVMLError_FunctionNotFound"
# nvmlGpuFabricState_t (nvml.h): NVML_GPU_FABRIC_STATE_NOT_SUPPORTED ... _COMPLETED.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# nvmlDeviceGetCpuAffinity's mask where os.cpu_count() does not say how many CPUs there are.
CPUS_UNKNOWN = 1024


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


def reason_names(mask: int) -> list[str]:
    """The clock event reasons set in an NVML bitmask, in bit order; unknown bits by value."""
    names = [name for bit, name in REASON_BITS if mask & bit]
    known = sum(bit for bit, _ in REASON_BITS)
    rest = mask & ~known
    names += [f"unknown_{1 << b:#x}" for b in range(rest.bit_length()) if rest >> b & 1]
    return names


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
        return info, [_read_soft(read_gpu, nvml, index, skip) for index in range(count)]
    finally:
        _shutdown(nvml)


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
        return [_read_soft(read_identity, nvml, index) for index in range(count)], ""
    except Exception as exc:
        return [], f"NVML could not count the GPUs: {reason_of(exc)}"
    finally:
        _shutdown(nvml)


def _read_soft(read: Callable[..., dict[str, Any]], nvml: Any, index: int, *args: Any) -> dict:  # type: ignore[type-arg]
    """read(nvml, index, ...), which records its own failures; should it raise all the same,
    the GPU is left unread with the reason rather than the run ending."""
    try:
        return read(nvml, index, *args)
    except Exception as exc:
        return {"index": index, "unread": {"handle": reason_of(exc)}}


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


Reader = Callable[[str | Sequence[str], Callable[[], Any]], None]


def _reader(gpu: dict[str, Any], unread: dict[str, str]) -> Reader:
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


def _handle_of(nvml: Any, index: int, gpu: dict[str, Any]) -> Any:
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


def read_identity(nvml: Any, index: int) -> dict[str, Any]:
    """Which GPU NVML's `index` is: its UUID, and its MIG devices' where MIG is on."""
    gpu: dict[str, Any] = {"index": index}
    handle = _handle_of(nvml, index, gpu)
    if handle is None:
        return gpu
    unread: dict[str, str] = {}
    read = _reader(gpu, unread)
    read("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    read("mig_mode", lambda: _mig_mode(nvml, handle))
    if gpu.get("mig_mode"):
        read("mig_uuids", lambda: _mig_uuids(nvml, handle))
    read("cpu_affinity", lambda: _cpu_affinity(nvml, handle))  # where its host copies go
    if unread:
        gpu["unread"] = unread
    return gpu


def read_gpu(nvml: Any, index: int, own_pids: Collection[int] = ()) -> dict[str, Any]:
    """One GPU's readings; what NVML refused is in `unread`, with its reason."""
    gpu: dict[str, Any] = {"index": index}
    handle = _handle_of(nvml, index, gpu)  # e.g. GPU is lost (fell off the bus)
    if handle is None:
        return gpu
    unread: dict[str, str] = {}
    read = _reader(gpu, unread)
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
    read(("nvlinks_active", "nvlinks_total", "nvlink_version"), lambda: _nvlinks(nvml, handle))
    if gpu.get("nvlink_version") is None:
        gpu.pop("nvlink_version", None)
    read("host_link", lambda: _host_link(nvml, handle))
    read("numa_node", lambda: _numa_node(nvml, handle))
    read("cpu_affinity", lambda: _cpu_affinity(nvml, handle))
    read("fabric", lambda: _fabric(nvml, handle))
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


def _nvlinks(nvml: Any, handle: Any) -> tuple[int, int, int | None]:
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


def _host_link(nvml: Any, handle: Any) -> str:
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
    _call_symbol(nvml, "nvmlDeviceGetC2cModeInfoV", handle, ctypes.byref(info))
    return int(info.isC2cEnabled)


def _call_symbol(nvml: Any, name: str, *args: Any) -> None:
    """libnvidia-ml's `name` through pynvml's own lookup (FunctionNotFound where the driver
    lacks it) and return check (an NVMLError for any other answer than success)."""
    nvml._nvmlCheckReturn(nvml._nvmlGetFunctionPointer(name)(*args))


def _numa_node(nvml: Any, handle: Any) -> int:
    """The NUMA node of the GPU's own memory, where the OS has onlined it as one (a Grace
    host without CDMM); NVML answers a negative node where there is none."""
    if hasattr(nvml, "nvmlDeviceGetNumaNodeId"):
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    else:  # an older binding: the driver's own symbol
        out = ctypes.c_int()
        _call_symbol(nvml, "nvmlDeviceGetNumaNodeId", handle, ctypes.byref(out))
        node = out.value
    if node < 0:
        raise NotRead("no NUMA node")
    return node


def _cpu_affinity(nvml: Any, handle: Any) -> str:
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


def _fabric(nvml: Any, handle: Any) -> dict[str, Any]:
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


def clock_reasons_mask(nvml: Any, handle: Any) -> int:
    """nvmlDeviceGetCurrentClocksEventReasons (driver 535+: older libraries lack the symbol,
    and pynvml raises NVMLError_FunctionNotFound), else the older ThrottleReasons."""
    try:
        return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    except Exception as exc:
        if not isinstance(exc, AttributeError) and type(exc).__name__ != (
            "NVMLError_FunctionNotFound"
        ):
            raise
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


class ClockSampler:
    """Samples the clock event reasons and PCIe link of the GPUs under test every `interval`
    seconds on a thread while the perf measurements run:

        with ClockSampler({0: "GPU-5d1a...", 1: "GPU-9e8d..."}) as sampler:
            run_perf()
        merge_readings(measured, sampler.readings(), key="torch_index")

    `gpus` maps a key of the caller's (the perf probe: torch's device index) to the GPU to
    sample: its NVML UUID (str), or its NVML index (int); a plain list of NVML indices keys
    each by itself. NVML reports "HW Slowdown" briefly during a P-state or clock change, so
    a reason counts only when at least `min_samples` samples saw it. The PCIe generation
    drops when a GPU is idle; the fastest link seen under load is what the card trained to.

    It never raises and its thread never dies silently: whatever NVML answers (a GPU whose
    handle cannot be had, an error from any call, NVML that will not start) ends up as the
    reason in the `unread` of the GPUs it concerns, or in `error`.
    """

    def __init__(
        self,
        gpus: Iterable[int] | Mapping[int, int | str],
        interval: float = 0.1,
        nvml: Any = None,
        min_samples: int = 2,
    ) -> None:
        self.targets: dict[int, int | str] = (
            dict(gpus) if isinstance(gpus, Mapping) else {i: i for i in gpus}
        )
        self.indices = list(self.targets)
        self.interval = interval
        self.min_samples = min_samples
        self.error = ""  # why nothing was sampled, or why sampling stopped
        self.samples: Counter[int] = Counter()
        self._reads: Counter[int] = Counter()
        self.unread: dict[int, dict[str, str]] = {}
        self.faults: dict[int, dict[str, str]] = {}  # GPU_LOST / RESET_REQUIRED, per key
        self._nvml = nvml
        self._seen: dict[int, Counter[str]] = {i: Counter() for i in self.indices}
        self._pcie: dict[int, dict[str, int]] = {i: {} for i in self.indices}  # MAXIMA
        self._limits: dict[int, dict[str, int]] = {}
        self._handles: dict[int, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> bool:
        """Start NVML and find the GPUs; False (with `error`) where NVML cannot be had. A GPU
        whose handle cannot be had is not sampled: its readings are unread, with the reason."""
        if self._nvml is None:
            try:
                import pynvml
            except Exception as exc:
                self.error = f"pynvml is not installed ({reason_of(exc)})"
                return False
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.error = f"NVML did not start: {reason_of(exc)}"
            return False
        for key, gpu in self.targets.items():
            try:
                if isinstance(gpu, str):
                    self._handles[key] = nvml.nvmlDeviceGetHandleByUUID(gpu)
                else:
                    self._handles[key] = nvml.nvmlDeviceGetHandleByIndex(gpu)
            except Exception as exc:
                self._failed(key, SAMPLED, exc, f"NVML found no handle for {gpu}: ")
        for key, handle in self._handles.items():
            self._read_limits(key, handle)
        if not self._handles:
            self.close()
            return False
        return True

    def _read_limits(self, key: int, handle: Any) -> None:
        """The power limit in force and its default (W), and the temperature (C) at which
        the GPU starts to slow itself: read once, each on its own."""
        nvml = self._nvml
        for name, read in (
            ("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) // 1000),
            (
                "power_default_limit_w",
                lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) // 1000,
            ),
            (
                "temperature_slowdown_c",
                lambda: nvml.nvmlDeviceGetTemperatureThreshold(
                    handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
                ),
            ),
        ):
            try:
                self._limits.setdefault(key, {})[name] = int(read())
            except Exception as exc:
                self._failed(key, [name], exc)

    def close(self) -> None:
        """Shut NVML down (the readings stay)."""
        if self._nvml is not None:
            _shutdown(self._nvml)

    def __enter__(self) -> ClockSampler:
        if self.open():
            self._thread = threading.Thread(target=self._run, name="clock-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.close()

    def _run(self) -> None:
        try:
            while True:
                self.sample()
                if self._stop.wait(self.interval):
                    self.sample()  # the last moment of the measurement too
                    return
        except BaseException as exc:  # never die silently: say why sampling stopped
            self.error = f"clock sampling stopped: {reason_of(exc)}"

    def _failed(self, key: int, names: Iterable[str], exc: BaseException, lead: str = "") -> None:
        why = lead + reason_of(exc)
        for name in names:
            self.unread.setdefault(key, {})[name] = why
        fault = fault_of(exc)
        if fault:
            self.faults.setdefault(key, {}).setdefault(fault, f"{next(iter(names))}: {why}")

    def sample(self) -> None:
        """One reading of every GPU (the thread calls it; tests call it directly)."""
        nvml = self._nvml
        for key, handle in self._handles.items():
            self.samples[key] += 1
            try:
                self._seen[key].update(reason_names(clock_reasons_mask(nvml, handle)))
                self._reads[key] += 1
            except Exception as exc:
                self._failed(key, ["clock_event_reasons"], exc)
            for name, read in (
                ("pcie_gen_under_load", lambda h: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                ("pcie_width_under_load", lambda h: nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
                ("power_max_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) // 1000),  # mW
                (
                    "temperature_max_c",
                    lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
                ),
            ):
                try:
                    value = int(read(handle))
                except Exception as exc:
                    self._failed(key, [name], exc)
                    continue
                self._pcie[key][name] = max(value, self._pcie[key].get(name, 0))

    def reasons(self) -> dict[int, list[str]]:
        """Per GPU, the reasons seen in at least `min_samples` samples, in bit order."""
        order = [name for _, name in REASON_BITS]
        out = {}
        for key in self._handles:
            seen = [n for n, c in self._seen[key].items() if c >= self.min_samples]
            out[key] = sorted(seen, key=lambda n: order.index(n) if n in order else len(order))
        return out

    def readings(self) -> dict[int, dict[str, Any]]:
        """Per GPU key, what to merge into its snapshot dict (see merge_readings):
        clock_event_reasons (and clock_event_counts: in how many samples each was seen),
        pcie_gen_under_load, pcie_width_under_load, power_max_w, temperature_max_c (the
        highest seen), power_limit_w, power_default_limit_w, temperature_slowdown_c (read
        once), clock_samples,
        gpu_lost / gpu_reset_required, and `unread` for what no sample could read (with
        NVML's reason, or the sampler's own `error`)."""
        out: dict[int, dict[str, Any]] = {}
        reasons = self.reasons()
        for key in self.indices:
            entry: dict[str, Any] = {"clock_samples": self.samples[key]}
            if self._reads[key]:
                entry["clock_event_reasons"] = reasons[key]
                entry["clock_event_counts"] = {n: self._seen[key][n] for n in reasons[key]}
            entry.update(self._pcie[key])
            entry.update(self._limits.get(key, {}))
            entry.update(self.faults.get(key, {}))
            failed = {k: v for k, v in self.unread.get(key, {}).items() if k not in entry}
            if self.error:
                failed.update({k: self.error for k in SAMPLED if k not in entry | failed})
            if failed:
                entry["unread"] = failed
            out[key] = entry
        return out


def merge_readings(
    gpus: list[dict[str, Any]], readings: Mapping[int, dict[str, Any]], key: str = "index"
) -> None:
    """Merge ClockSampler.readings() into the GPU dicts whose `key` (NVML's "index", or the
    perf probe's "torch_index") is the sampler's; the `unread` dicts are merged, not
    replaced, and a GPU already marked lost keeps the first answer that said so."""
    for gpu in gpus:
        extra = dict(readings.get(gpu.get(key, -1), {}))
        unread = extra.pop("unread", {})
        for fault in FAULT_KEYS:
            if fault in gpu:
                extra.pop(fault, None)
        gpu.update(extra)
        if unread:
            gpu["unread"] = {**gpu.get("unread", {}), **unread}
