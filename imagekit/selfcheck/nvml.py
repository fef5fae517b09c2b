"""A thin reader over NVML (the `pynvml` module of the `nvidia-ml-py` package): what the host
snapshot needs of each GPU, and a sampler of the clock event reasons while the perf
measurements run. pynvml is imported lazily; the verdicts live in health.py.

Every field is read on its own: an NVMLError (NotSupported on a MIG slice or on a GPU without
row remapping, NoPermission in a container, ...) leaves the key out and records
`unread[field] = reason`, so a verdict says "not judged" instead of passing what was not read.

GPU indices are NVML's (PCI bus order); torch's may differ (CUDA_DEVICE_ORDER): match the two
on the UUID. In a container with its own PID namespace NVML reports the host's PIDs, so the
self-check's own PID cannot be told apart there: read the processes before any check starts
CUDA.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from types import TracebackType
from typing import Any

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
MIB = 1 << 20


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
    return read_with(pynvml, own_pids)


def read_with(
    nvml: Any, own_pids: Collection[int] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """read_nvml over a given pynvml module (tests pass a fake one)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:  # libnvidia-ml.so.1 missing, driver not loaded, ...
        return _unavailable(f"NVML did not start: {exc}"), []
    try:
        info: dict[str, Any] = {"available": True, "reason": ""}
        try:
            info["driver"] = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as exc:
            info["reason"] = f"driver version not read: {exc}"
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            return _unavailable(f"NVML could not count the GPUs: {exc}"), []
        info["device_count"] = count
        skip = {os.getpid(), *own_pids}
        return info, [read_gpu(nvml, index, skip) for index in range(count)]
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_gpu(nvml: Any, index: int, own_pids: Collection[int] = ()) -> dict[str, Any]:
    """One GPU's readings; what NVML refused is in `unread`, with its reason."""
    gpu: dict[str, Any] = {"index": index}
    unread: dict[str, str] = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:  # e.g. GPU is lost (fell off the bus)
        gpu["unread"] = {"handle": str(exc)}
        return gpu

    def read(keys: str | Sequence[str], fn: Callable[[], Any]) -> None:
        names = [keys] if isinstance(keys, str) else list(keys)
        try:
            value = fn()
        except nvml.NVMLError as exc:
            unread.update(dict.fromkeys(names, str(exc)))
            return
        values = [value] if isinstance(keys, str) else list(value)
        gpu.update(zip(names, values, strict=True))

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
    read("ecc_mode", lambda: nvml.nvmlDeviceGetEccMode(handle)[0] == enabled)
    read(
        "ecc_volatile_uncorrected",
        lambda: int(
            nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        ),
    )
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
    read(("nvlinks_active", "nvlinks_total", "nvlink_version"), lambda: _nvlinks(nvml, handle))
    if gpu.get("nvlink_version") is None:
        gpu.pop("nvlink_version", None)
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
    except nvml.NVMLError as exc:
        if type(exc).__name__ == "NVMLError_NotSupported":
            return False
        raise


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
        except nvml.NVMLError as exc:
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
    try:
        return NVLINK_GENERATION.get(int(nvml.nvmlDeviceGetNvLinkVersion(handle, link)))
    except nvml.NVMLError:
        return None


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
    except nvml.NVMLError:
        return ""  # a host PID outside this container's namespace


def clock_reasons_mask(nvml: Any, handle: Any) -> int:
    """nvmlDeviceGetCurrentClocksEventReasons (driver 535+), else the older ThrottleReasons."""
    try:
        return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    except (AttributeError, nvml.NVMLError_FunctionNotFound):
        return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


class ClockSampler:
    """Samples each GPU's clock event reasons and PCIe link every `interval` seconds on a
    thread while the perf measurements run:

        with ClockSampler([0, 1]) as sampler:
            run_perf()
        for index, readings in sampler.readings().items(): gpus[index].update(readings)

    NVML reports "HW Slowdown" briefly during a P-state or clock change, so a reason counts
    only when at least `min_samples` samples saw it. The PCIe generation drops when a GPU is
    idle; the fastest link seen under load is what the card trained to.
    """

    def __init__(
        self, indices: Iterable[int], interval: float = 0.1, nvml: Any = None, min_samples: int = 2
    ) -> None:
        self.indices = list(indices)
        self.interval = interval
        self.min_samples = min_samples
        self.error = ""  # why nothing was sampled, when nothing was
        self.samples: Counter[int] = Counter()
        self._reads: Counter[int] = Counter()
        self.unread: dict[int, dict[str, str]] = {}
        self._nvml = nvml
        self._seen: dict[int, Counter[str]] = {i: Counter() for i in self.indices}
        self._pcie: dict[int, dict[str, int]] = {i: {} for i in self.indices}
        self._handles: dict[int, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> bool:
        """Start NVML and find the GPUs; False (with `error`) where NVML cannot be had."""
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                self.error = f"pynvml is not installed ({exc})"
                return False
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self.error = f"NVML did not start: {exc}"
            return False
        try:
            self._handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices}
        except nvml.NVMLError as exc:
            self.error = f"NVML: {exc}"
            self._handles = {}
            self.close()
            return False
        return True

    def close(self) -> None:
        """Shut NVML down (the readings stay)."""
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

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
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                self.sample()  # the last moment of the measurement too
                return

    def sample(self) -> None:
        """One reading of every GPU (the thread calls it; tests call it directly)."""
        nvml = self._nvml
        for index, handle in self._handles.items():
            self.samples[index] += 1
            try:
                self._seen[index].update(reason_names(clock_reasons_mask(nvml, handle)))
                self._reads[index] += 1
            except nvml.NVMLError as exc:
                self.unread.setdefault(index, {})["clock_event_reasons"] = str(exc)
            for key, fn in (
                ("pcie_gen_under_load", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
                ("pcie_width_under_load", nvml.nvmlDeviceGetCurrPcieLinkWidth),
            ):
                try:
                    value = int(fn(handle))
                except nvml.NVMLError as exc:
                    self.unread.setdefault(index, {})[key] = str(exc)
                    continue
                self._pcie[index][key] = max(value, self._pcie[index].get(key, 0))

    def reasons(self) -> dict[int, list[str]]:
        """Per GPU, the reasons seen in at least `min_samples` samples, in bit order."""
        order = [name for _, name in REASON_BITS]
        out = {}
        for index in self._handles:
            seen = [n for n, c in self._seen[index].items() if c >= self.min_samples]
            out[index] = sorted(seen, key=lambda n: order.index(n) if n in order else len(order))
        return out

    def readings(self) -> dict[int, dict[str, Any]]:
        """Per GPU, the keys to merge into the snapshot's GPU dict (see merge_readings):
        clock_event_reasons, pcie_gen_under_load, pcie_width_under_load, clock_samples, and
        `unread` for what no sample could read."""
        out: dict[int, dict[str, Any]] = {}
        reasons = self.reasons()
        for index in self._handles:
            entry: dict[str, Any] = {"clock_samples": self.samples[index]}
            if self._reads[index]:
                entry["clock_event_reasons"] = reasons[index]
            entry.update(self._pcie[index])
            failed = {k: v for k, v in self.unread.get(index, {}).items() if k not in entry}
            if failed:
                entry["unread"] = failed
            out[index] = entry
        return out


def merge_readings(gpus: list[dict[str, Any]], readings: dict[int, dict[str, Any]]) -> None:
    """Merge ClockSampler.readings() into the snapshot's GPU dicts (by NVML index); the
    `unread` dicts are merged, not replaced."""
    for gpu in gpus:
        extra = dict(readings.get(gpu.get("index", -1), {}))
        unread = extra.pop("unread", {})
        gpu.update(extra)
        if unread:
            gpu["unread"] = {**gpu.get("unread", {}), **unread}
