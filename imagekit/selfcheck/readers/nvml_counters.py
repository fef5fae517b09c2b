"""The counters the fleet tools watch, read through NVML (the `pynvml` module): memory errors
over the GPU's life (aggregate) and in its SRAM, the PCIe replay counter, and the Xid events
of the run, from an NVML event set held open from the first host reading to the last.
nvml.py reads them with its other readings; the verdicts are counter_rules.py's.

Sources: Azure's health checks (Azure/azurehpc-health-checks, customTests/azure_gpu_ecc.nhc,
azure_gpu_xid.nhc) and DCGM's health watches (modules/health/DcgmHealthWatch.cpp) read the
same counters; pynvml and nvml.h name the calls and constants used here.
"""

from __future__ import annotations

import contextlib
from typing import Any

from imagekit.selfcheck.readers.nvml_calls import fault_of, reason_of

# nvml.h: nvmlMemoryErrorType_t, nvmlEccCounterType_t, nvmlMemoryLocation_t.
CORRECTED, UNCORRECTED = 0, 1
VOLATILE, AGGREGATE = 0, 1
LOCATION_SRAM = 7
# nvmlEventTypeXidCriticalError; an event's eventData is the Xid (999: unknown).
XID_CRITICAL = 0x8
# An Xid watch drains its events without waiting, at most this many a GPU.
DRAIN_MS = 0
MAX_EVENTS = 1000


def aggregate_uncorrected(nvml: Any, handle: Any) -> int:
    """Uncorrectable ECC errors over the GPU's life (the volatile count starts at 0 with the
    driver; this one survives reboots)."""
    return int(nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, AGGREGATE))


def sram(nvml: Any, handle: Any) -> tuple[int, int]:
    """(uncorrectable, correctable) ECC errors in the GPU's SRAM over its life: register
    files, caches; memory that no row remap repairs."""
    return (
        int(nvml.nvmlDeviceGetMemoryErrorCounter(handle, UNCORRECTED, AGGREGATE, LOCATION_SRAM)),
        int(nvml.nvmlDeviceGetMemoryErrorCounter(handle, CORRECTED, AGGREGATE, LOCATION_SRAM)),
    )


def pcie_replays(nvml: Any, handle: Any) -> int:
    """The PCIe replay counter: packets the link had to send again, since the driver loaded."""
    return int(nvml.nvmlDeviceGetPcieReplayCounter(handle))


def unread(exc: BaseException, lead: str = "") -> dict[str, Any]:
    """`xid_events` unread with the reason, and the GPU marked lost (or needing a reset) where
    NVML answered so: the snapshot's way for any reading (nvml_calls.py)."""
    why = lead + reason_of(exc)
    fault = fault_of(exc)
    return {"unread": {"xid_events": why}, **({fault: f"xid_events: {why}"} if fault else {})}


class XidWatch:
    """Every GPU registered for NVML's Xid events when the run starts, each in an event set of
    its own (so an event needs no call to say which GPU it came from); the events drained
    when the run ends:

        watch = XidWatch()
        watch.start()
        run_the_checks()
        readings = watch.stop()   # {NVML index: {"xid_events": [79]} or {"unread": {...}}}

    It never raises: NVML that will not start, a GPU that cannot be registered (NotSupported
    in many VMs), an event set that cannot be made or read, each leaves `xid_events` unread
    on the GPUs it concerns, with the reason (key -1: every GPU).
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._sets: dict[int, Any] = {}
        self._unread: dict[int, dict[str, Any]] = {}
        self._started = False

    def start(self) -> None:
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            self._started = True  # shut down in stop(), whatever follows
            count = int(self._nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self._unread[-1] = unread(exc, "NVML did not start: ")
            return
        for index in range(count):
            try:
                self._sets[index] = self._register(index)
            except Exception as exc:
                self._unread[index] = unread(exc)

    def _register(self, index: int) -> Any:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        events = nvml.nvmlEventSetCreate()
        try:
            nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
        except Exception:
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(events)
            raise
        return events

    def stop(self) -> dict[int, dict[str, Any]]:
        """Per NVML index: the Xids seen since start(), in order, or why they were not."""
        out: dict[int, dict[str, Any]] = {}
        for index, events in self._sets.items():
            try:
                out[index] = {"xid_events": self._drain(events)}
            except Exception as exc:
                out[index] = unread(exc, "events not read: ")
        out.update(self._unread)
        self._close()
        return out

    def _drain(self, events: Any) -> list[int]:
        xids: list[int] = []
        for _ in range(MAX_EVENTS):
            try:
                data = self._nvml.nvmlEventSetWait_v2(events, DRAIN_MS)
            except Exception as exc:
                if type(exc).__name__ == "NVMLError_Timeout":  # no event left
                    return xids
                raise
            xids.append(int(data.eventData))
        return xids

    def _close(self) -> None:
        nvml = self._nvml
        if nvml is None:
            return
        for events in self._sets.values():
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(events)
        self._sets = {}
        if self._started:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            self._started = False
