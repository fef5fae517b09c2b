"""Verdicts over the counters and sensors the fleet tools watch (nvml_counters.py and the
clock sampler read them): Xid events during the run, SRAM and lifetime ECC counts, the PCIe
replay rate during the run, a lowered power limit, the temperature under load. Pure
functions over one GPU's snapshot readings; gpu_rules.py runs them with its other rules.

A reading that is missing is never a pass: a skip with NVML's reason, or "not read" (a
snapshot written before these readings existed). A MIG slice's container reads the whole
GPU's counters, which are not the slice's own: skipped there.
"""

from __future__ import annotations

import math
from typing import Any

from imagekit.contract.host_snapshot import Gpu
from imagekit.contract.records import or_none
from imagekit.selfcheck.verdicts.findings import Finding, fail, mig_skip, not_read, skip, warn

Judged = tuple[list[Finding], int]

# The Xids Azure's health checks fail a node for (customTests/azure_gpu_xid.nhc): memory
# errors (48, 63, 64, 92, 94, 95), the GPU off the bus or stopped (79, 119, 120), NVLink
# (74), and the rest of its list; NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)
# says what each is. Any other Xid is a warning: application faults (13, 31, 43) come from
# the workload, not the GPU.
CRITICAL_XIDS = frozenset(
    {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120}
)
# SRAM: Azure fails any uncorrectable error and more than 10000 correctable ones
# (check_gpu_ecc 20000000 10000).
SRAM_CORRECTED_LIMIT = 10_000
# DCGM's PCIe replay warning (DcgmHealthWatch.cpp): more replays a minute than
# ceil(rate per lane x lanes), the rates per lane per minute of a 1e-12 bit error rate.
REPLAYS_PER_LANE_MINUTE = {1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}
# Under load, this close to the temperature at which the GPU slows itself is a warning:
# the next warm day, or a soak, crosses it.
TEMPERATURE_MARGIN_C = 5


def _count(value: Any) -> bool:
    """A count as a snapshot holds it: an int (a number field may also hold a float)."""
    return isinstance(value, int) and not isinstance(value, bool)


def xids(gpu: Gpu) -> Judged:
    events = or_none(gpu.xid_events)
    if events is None:
        return [not_read(gpu, "xid_events", "xid", "Xid events during the run")], 0
    critical = sorted({x for x in events if x in CRITICAL_XIDS})
    others = sorted({x for x in events if x not in CRITICAL_XIDS})
    found: list[Finding] = []
    index = or_none(gpu.index)
    if critical:
        listed = ", ".join(map(str, critical))
        found.append(
            fail(
                "xid",
                f"Xid {listed} during the run: the driver reported a GPU fault (memory, bus or "
                "NVLink; NVIDIA's Xid catalogue names each): drain the GPU and see the kernel log",
                index,
            )
        )
    if others:
        listed = ", ".join(map(str, others))
        found.append(warn("xid", f"Xid {listed} during the run (see the kernel log)", index))
    return found, 1


def sram_ecc(gpu: Gpu) -> Judged:
    if gpu.mig_mode:
        return [mig_skip(gpu, "ecc-sram", "the SRAM error count")], 0
    bad, fixed = gpu.ecc_sram_uncorrected, gpu.ecc_sram_corrected
    if not _count(bad) or not _count(fixed):
        return [not_read(gpu, "ecc_sram_uncorrected", "ecc-sram", "SRAM ECC counts")], 0
    index = or_none(gpu.index)
    if bad > 0:
        text = (
            f"{bad} uncorrectable SRAM ECC error(s) in the GPU's life: SRAM has no spare rows "
            "to remap, and Azure's health checks fail any; take the GPU out of service"
        )
        return [fail("ecc-sram", text, index)], 1
    if fixed > SRAM_CORRECTED_LIMIT:
        text = (
            f"{fixed} correctable SRAM ECC errors in the GPU's life, above the "
            f"{SRAM_CORRECTED_LIMIT} Azure's health checks allow: SRAM is failing"
        )
        return [fail("ecc-sram", text, index)], 1
    return [], 1


def aggregate_ecc(gpu: Gpu) -> Judged:
    if gpu.mig_mode:
        return [mig_skip(gpu, "ecc-aggregate", "the lifetime ECC count")], 0
    count = gpu.ecc_aggregate_uncorrected
    if not _count(count):
        what = "lifetime ECC count"
        return [not_read(gpu, "ecc_aggregate_uncorrected", "ecc-aggregate", what)], 0
    if count == 0:
        return [], 1
    text = (
        f"{count} uncorrectable ECC error(s) in the GPU's life (0 since the driver loaded "
        "where ecc-uncorrected passes): repaired by row remapping where no remap is pending "
        "or failed; watch it"
    )
    return [warn("ecc-aggregate", text, or_none(gpu.index))], 1


def replay_limit(gen: int, width: int, seconds: float) -> int:
    """The replays DCGM's rate allows over `seconds`, at least one minute's worth."""
    per_minute = math.ceil(REPLAYS_PER_LANE_MINUTE[gen] * width)
    return math.ceil(per_minute * max(1.0, seconds / 60))


def pcie_replays(gpu: Gpu, run_seconds: Any) -> Judged:
    if gpu.mig_mode:
        return [mig_skip(gpu, "pcie-replays", "the PCIe replay counter")], 0
    during = or_none(gpu.pcie_replays_during_run)
    index = or_none(gpu.index)
    if during is None and gpu.host_link == "c2c" and or_none(gpu.pcie_max_gen) is None:
        return [], 0  # NVML read the host link as NVLink-C2C: no PCIe link to judge
    if during is None:
        return [not_read(gpu, "pcie_replays", "pcie-replays", "PCIe replays during the run")], 0
    if during < 0:
        text = f"the replay counter went back by {-during} (the driver reloaded): not judged"
        return [skip("pcie-replays", text, index)], 0
    gen = or_none(gpu.pcie_gen_under_load or gpu.pcie_max_gen)
    width = or_none(gpu.pcie_width_under_load or gpu.pcie_max_width)
    if gen not in REPLAYS_PER_LANE_MINUTE or not _count(width) or width <= 0:
        return [skip("pcie-replays", f"{during} replays; link not read", index)], 0
    seconds = run_seconds if isinstance(run_seconds, (int, float)) else 60.0
    limit = replay_limit(gen, width, seconds)
    if during <= limit:
        return [], 1
    text = (
        f"{during} PCIe replays in {seconds:g} s, above the {limit} DCGM's health watch allows "
        f"on Gen{gen} x{width} (a bit error rate over 1e-12): a marginal link, riser or slot"
    )
    return [warn("pcie-replays", text, index)], 1


def power_limit(gpu: Gpu) -> Judged:
    if gpu.mig_mode:
        return [mig_skip(gpu, "power-limit", "the power limit")], 0
    limit, default = gpu.power_limit_w, gpu.power_default_limit_w
    if not _count(limit) or not _count(default):
        return [not_read(gpu, "power_limit_w", "power-limit", "power limit")], 0
    if limit >= default:
        return [], 1
    text = (
        f"the power limit is {limit} W, lowered from the default {default} W: the GPU is held "
        "below what its GEMM floor assumes (nvidia-smi -q -d POWER; nvidia-smi -pl)"
    )
    return [warn("power-limit", text, or_none(gpu.index))], 1


def temperature(gpu: Gpu) -> Judged:
    if gpu.mig_mode:
        return [mig_skip(gpu, "temperature", "the temperature")], 0
    peak, slowdown = gpu.temperature_max_c, gpu.temperature_slowdown_c
    if not _count(peak) or not _count(slowdown):
        what = "temperature under load"
        key = "temperature_max_c" if not _count(peak) else "temperature_slowdown_c"
        return [not_read(gpu, key, "temperature", what)], 0
    if peak < slowdown - TEMPERATURE_MARGIN_C:
        return [], 1
    text = (
        f"{peak} C under load, within {TEMPERATURE_MARGIN_C} C of the {slowdown} C at which "
        "the GPU slows itself: check cooling and airflow"
    )
    return [warn("temperature", text, or_none(gpu.index))], 1


def counter_findings(gpu: Gpu, run_seconds: Any = None) -> Judged:
    found: list[Finding] = []
    judged = 0
    for more, n in (
        xids(gpu),
        sram_ecc(gpu),
        aggregate_ecc(gpu),
        pcie_replays(gpu, run_seconds),
        power_limit(gpu),
        temperature(gpu),
    ):
        found += more
        judged += n
    return found, judged
