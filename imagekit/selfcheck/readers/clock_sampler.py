"""A sampler of the clock event reasons, PCIe link, power and temperature of the GPUs under
test while the perf measurements run, read through NVML, and the merge of its readings into
the snapshot's GPU dicts.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from imagekit.selfcheck.readers.nvml_calls import FAULT_KEYS, fault_of, reason_of, shutdown

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
# What the clock sampler records per GPU (the keys a failed handle leaves unread): the
# maxima of each sample's power (W) and temperature (C), and the limits read once.
MAXIMA = ("pcie_gen_under_load", "pcie_width_under_load", "power_max_w", "temperature_max_c")
LIMITS = ("power_limit_w", "power_default_limit_w", "temperature_slowdown_c")
SAMPLED = ("clock_event_reasons", *MAXIMA, *LIMITS)


def reason_names(mask: int) -> list[str]:
    """The clock event reasons set in an NVML bitmask, in bit order; unknown bits by value."""
    names = [name for bit, name in REASON_BITS if mask & bit]
    known = sum(bit for bit, _ in REASON_BITS)
    rest = mask & ~known
    names += [f"unknown_{1 << b:#x}" for b in range(rest.bit_length()) if rest >> b & 1]
    return names


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
            shutdown(self._nvml)

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
