"""The health rules over one GPU's readings: memory errors and repair, the PCIe and NVLink
links, compute and persistence mode, clocks during the perf measurements, other processes,
and a GPU NVML found lost. Pure functions over a typed GPU record; health.py runs them.

A reading that is missing is never a pass: it is a Status.SKIPPED with the reason NVML gave
(`unread`), or "not read". A MIG slice's container reads the whole GPU's ECC, PCIe and NVLink
state, which is not the slice's own: those are skipped there. A GPU that NVML answered "GPU
is lost" or "GPU requires reset" for, on any reading, fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from imagekit.contract import gpus as gpus_table
from imagekit.contract.host_snapshot import Gpu, Process
from imagekit.contract.records import given, or_default, or_none
from imagekit.selfcheck.verdicts.counter_rules import counter_findings
from imagekit.selfcheck.verdicts.findings import (
    Finding,
    fail,
    mig_skip,
    name_of,
    not_read,
    skip,
    warn,
)
from imagekit.selfcheck.verdicts.peaks import normalise

Judged = tuple[list[Finding], int]

EXCLUSIVE = ("EXCLUSIVE_PROCESS", "EXCLUSIVE_THREAD")
# NVML sets "hw_slowdown" together with the thermal and power-brake bits; each means the
# hardware cut the clocks to protect itself (nvmlClocksEventReason* in nvml.h).
HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
# Parts whose NVLinks go to NVSwitches or peers on a baseboard (HGX/DGX, SXM modules): every
# link must be up. PCIe cards have links only where a bridge is fitted.
_FABRIC = re.compile(r".*\b(SXM\d?|HBM3|HBM3E)\b.*|(H200|H20|B100|B200|B300|GB200|GB300)")


def _memory(gpu: Gpu) -> Judged:
    index = or_none(gpu.index)
    if gpu.mig_mode:
        return [
            mig_skip(gpu, "ecc-uncorrected", "the memory error state"),
            mig_skip(gpu, "row-remap-pending", "memory repair (row remapping, page retirement)"),
        ], 0
    found: list[Finding] = []
    judged = 0
    errors = or_none(gpu.ecc_volatile_uncorrected)
    if errors is not None:
        judged += 1
        if errors > 0:
            found.append(
                fail(
                    "ecc-uncorrected",
                    f"{errors} uncorrectable ECC error(s) since the driver loaded: data on this "
                    "GPU may be corrupt and the process that hit them was stopped; drain the "
                    "GPU and reset it (a pending row remap takes effect then)",
                    index,
                )
            )
    elif gpu.ecc_mode is False:
        found.append(skip("ecc-uncorrected", "ECC is off: memory errors are not counted", index))
    else:
        found.append(not_read(gpu, "ecc_volatile_uncorrected", "ecc-uncorrected", "ECC errors"))
    repair, n = _memory_repair(gpu)
    return found + repair, judged + n


def _memory_repair(gpu: Gpu) -> Judged:
    """Row remapping (A100 and newer) or page retirement (older GPUs): a GPU has one of them,
    so the other's NotSupported is no gap."""
    index = or_none(gpu.index)
    found: list[Finding] = []
    judged = 0
    if given(gpu.remapped_rows_pending):
        judged += 1
        if gpu.remapped_rows_pending:
            found.append(
                fail(
                    "row-remap-pending",
                    "a memory row remap is pending: it takes effect only when the GPU is "
                    "reset; drain the GPU and reset it (or reboot the host)",
                    index,
                )
            )
        if gpu.remapped_rows_failure:
            found.append(
                fail(
                    "row-remap-failure",
                    "a memory row could not be remapped (the bank's spare rows are used "
                    "up): an RMA criterion in NVIDIA's memory error management; take the "
                    "GPU out of service",
                    index,
                )
            )
    if given(gpu.retired_pages_pending):
        judged += 1
        if gpu.retired_pages_pending:
            found.append(
                fail(
                    "retired-pages-pending",
                    "memory pages are pending retirement: they are retired only when the "
                    "GPU is reset; drain the GPU and reset it (or reboot the host)",
                    index,
                )
            )
    if not judged:
        found.append(not_read(gpu, "remapped_rows_pending", "row-remap-pending", "row remapping"))
    return found, judged


def _pcie(gpu: Gpu) -> Judged:
    """The generation drops when the GPU idles (power saving; nvidia-smi: "may be reduced
    when the GPU is not in use"), so it is judged from the reading under load. The width does
    not drop on a data-center GPU: an idle reading below the maximum is a warning, under load
    a failure."""
    index = or_none(gpu.index)
    if gpu.mig_mode:
        return [mig_skip(gpu, "pcie-link", "the PCIe link")], 0
    top_gen, top_width = or_none(gpu.pcie_max_gen), or_none(gpu.pcie_max_width)
    if (top_gen is None or top_width is None) and gpu.host_link == "c2c":
        return [], 0  # NVML read the host link as NVLink-C2C: no PCIe link to judge
    if top_gen is None or top_width is None:
        key = "pcie_max_gen" if top_gen is None else "pcie_max_width"
        return [not_read(gpu, key, "pcie-link", "the PCIe link's maximum")], 0
    loaded = given(gpu.pcie_gen_under_load)
    gen = or_default(gpu.pcie_gen_under_load, or_none(gpu.pcie_gen))
    width = or_default(gpu.pcie_width_under_load, or_none(gpu.pcie_width))
    if gen is None or width is None:
        return [not_read(gpu, "pcie_gen", "pcie-link", "the PCIe link")], 0
    link = (
        f"PCIe link at Gen{gen} x{width}, the maximum of this card in this slot is "
        f"Gen{top_gen} x{top_width}"
    )
    fix = "the link trained down (reseat the card, check the riser and the slot's BIOS setting)"
    found: list[Finding] = []
    if width < top_width:
        if given(gpu.pcie_width_under_load):
            found.append(fail("pcie-width", f"{link} under load: {fix}", index))
        else:
            found.append(
                warn("pcie-width", f"{link} at idle: {fix}, if it stays so under load", index)
            )
    if gen < top_gen:
        if loaded:
            found.append(fail("pcie-gen", f"{link} under load: {fix}", index))
        else:
            found.append(
                skip(
                    "pcie-gen",
                    f"PCIe Gen{gen} read at idle only, where GPUs lower the link speed",
                    index,
                )
            )
            return found, 1
    return found, 2


def _nvlink(gpu: Gpu, peers: int) -> Judged:
    """Every link of an SXM part must be up (a partial mesh halves the collectives' speed),
    and a part the product table gives NVLinks must show them: a GPU of such a model with
    0 links, or links NVML could not read, is never a pass. With no peer GPU in the container
    (a one-GPU VM of an HGX board) that is a skip saying so. A PCIe card's links exist only
    where a bridge is fitted: a partial set, or none beside peers on an NVL part, a warning."""
    index = or_none(gpu.index)
    if gpu.mig_mode:
        return [mig_skip(gpu, "nvlink-down", "the NVLink state")], 0
    total, active = or_none(gpu.nvlinks_total), or_none(gpu.nvlinks_active)
    product = _product(gpu)
    if product is not None and product.nvlinks:
        unseen = _nvlink_unseen(gpu, product, peers)
        if unseen is not None:
            return unseen
    if total is None or active is None:
        return [not_read(gpu, "nvlinks_total", "nvlink-down", "NVLink state")], 0
    if total == 0 or active == total:
        return [], 1
    fabric = bool(_FABRIC.fullmatch(normalise(name_of(gpu))))
    reading = f"{active} of {total} NVLinks active"
    if active == 0 and (not fabric or peers == 0):
        return [], 1  # no bridge fitted, or no peer GPU to link to
    if fabric:
        rule = (
            "every link of an SXM GPU must be up: a link is down (check the baseboard, then "
            "nvidia-smi nvlink -s)"
        )
        return [fail("nvlink-down", f"{reading}: {rule}", index)], 1
    return [warn("nvlink-down", f"{reading}: a bridge is missing or a link is down", index)], 1


def _product(gpu: Gpu) -> gpus_table.Product | None:
    mib = gpu.memory_total_mib
    return gpus_table.match(name_of(gpu), mib << 20 if isinstance(mib, int) else None)


def _nvlink_unseen(gpu: Gpu, product: gpus_table.Product, peers: int) -> Judged | None:
    """The finding when a part the table gives NVLinks does not show them all: unread, fewer
    links than it has, or none active; None when they are all there to judge."""
    total, active = or_none(gpu.nvlinks_total), or_none(gpu.nvlinks_active)
    expected = product.nvlinks
    if total is None or active is None:
        said = not_read(gpu, "nvlinks_total", "nvlink-visible", "NVLink state").message
        seen = f"NVLink not visible: {said}"
    elif active == 0 or total < expected:
        seen = f"NVLink not visible: NVML shows {active} active of {total} links"
    else:
        return None
    seen += f", where the {product.model} has {expected}"
    index = or_none(gpu.index)
    if peers == 0:
        return [skip("nvlink-visible", f"{seen}; one GPU in this container", index)], 0
    why = (
        f"{seen}, with {peers + 1} GPUs here: the fabric manager not running, a VM without "
        "NVLink passthrough, or the links down (nvidia-smi nvlink -s)"
    )
    if product.nvlink_board:
        return [fail("nvlink-visible", why, index)], 1
    return [warn("nvlink-visible", f"{why}; or no NVLink bridge fitted", index)], 1


def _compute_mode(gpu: Gpu) -> Judged:
    index = or_none(gpu.index)
    mode = or_none(gpu.compute_mode)
    if mode is None:
        return [not_read(gpu, "compute_mode", "compute-mode", "compute mode")], 0
    if mode == "PROHIBITED":
        return [
            fail(
                "compute-prohibited",
                "compute mode PROHIBITED: no process may use this GPU (nvidia-smi -c DEFAULT)",
                index,
            )
        ], 1
    others = gpu.processes or []
    if mode in EXCLUSIVE and or_none(gpu.processes) is None:
        what = f"compute mode {mode}: whether another process holds the GPU"
        return [not_read(gpu, "processes", "gpu-exclusive-busy", what)], 1
    if mode in EXCLUSIVE and others:
        pids = pid_list(others)
        return [
            fail(
                "gpu-exclusive-busy",
                f"compute mode {mode} and process {pids} already holds this GPU: no other "
                "process can create a context on it",
                index,
            )
        ], 1
    return [], 1


def _persistence(gpu: Gpu) -> Judged:
    mode = or_none(gpu.persistence_mode)
    if mode is None:
        return [not_read(gpu, "persistence_mode", "persistence-off", "persistence mode")], 0
    if mode:
        return [], 1
    message = (
        "persistence mode is off: the driver tears the GPU down when its last process exits, "
        "so every start pays the initialisation again (run nvidia-persistenced)"
    )
    return [warn("persistence-off", message, or_none(gpu.index))], 1


def _clocks(gpu: Gpu) -> Judged:
    """sw_power_cap alone is a GPU at its power limit, normal under a full GEMM."""
    index = or_none(gpu.index)
    reasons = or_none(gpu.clock_event_reasons)
    if reasons is None:
        what = "clock event reasons during the perf measurements"
        return [not_read(gpu, "clock_event_reasons", "clocks-hw-slowdown", what)], 0
    hw = [r for r in HW_SLOWDOWN if r in reasons]
    if hw:
        message = (
            f"clocks cut by {_shares(gpu, hw)} during the perf measurements: the hardware "
            "protected itself from heat or a power-supply brake (check cooling, fans and PSUs)"
        )
        return [fail("clocks-hw-slowdown", message, index)], 1
    if "sw_thermal_slowdown" in reasons:
        message = (
            f"clocks cut by {_shares(gpu, ['sw_thermal_slowdown'])} during the perf "
            "measurements: the GPU ran hot enough for the driver to slow it (check cooling "
            "and airflow)"
        )
        return [warn("clocks-thermal", message, index)], 1
    return [], 1


def _shares(gpu: Gpu, reasons: list[str]) -> str:
    """e.g. "hw_slowdown (in 12 of 40 samples)": the share where the sampler counted them."""
    counts, total = gpu.clock_event_counts or {}, gpu.clock_samples
    return ", ".join(
        f"{r} (in {counts[r]} of {total} samples)"
        if isinstance(counts.get(r), int) and isinstance(total, int) and total
        else r
        for r in reasons
    )


def _processes(gpu: Gpu) -> Judged:
    index = or_none(gpu.index)
    procs = or_none(gpu.processes)
    if procs is None:
        return [not_read(gpu, "processes", "other-processes", "other processes")], 0
    if not procs:
        return [], 1
    held = ", ".join(
        f"pid {or_none(p.pid)} ({p.name or '?'}, {or_default(p.used_mib, '?')} MiB)" for p in procs
    )
    message = (
        f"other processes hold memory on this GPU: {held}: they share its memory and "
        "compute with the job"
    )
    return [warn("other-processes", message, index)], 1


def _lost(gpu: Gpu) -> Judged:
    """NVML's "GPU is lost" or "GPU requires reset", to whatever was asked: the GPU cannot
    run the job. (Its other readings are then unread, and skipped.)"""
    index = or_none(gpu.index)
    found = []
    if gpu.gpu_lost:
        found.append(
            fail(
                "gpu-lost",
                f"NVML says the GPU is lost ({gpu.gpu_lost}): it fell off the bus or "
                "stopped answering; drain the node, look for Xid 79 in the host's kernel log, "
                "then reset or reseat the GPU",
                index,
            )
        )
    if gpu.gpu_reset_required:
        found.append(
            fail(
                "gpu-reset-required",
                f"NVML says the GPU requires a reset ({gpu.gpu_reset_required}): drain it "
                "and reset it (nvidia-smi -r), or reboot the host",
                index,
            )
        )
    return found, len(found)


def judge_gpu(gpu: Gpu, peers: int, run_seconds: Any = None) -> Judged:
    """Every rule over one GPU's readings: their findings, and how many readings they judged."""
    found, judged = counter_findings(gpu, run_seconds)
    rules: list[Callable[[Gpu], Judged]] = [
        _lost,
        _memory,
        _pcie,
        lambda g: _nvlink(g, peers),
        _compute_mode,
        _persistence,
        _clocks,
        _processes,
    ]
    for rule in rules:
        more, n = rule(gpu)
        found += more
        judged += n
    return found, judged


def pid_list(processes: Sequence[Process]) -> str:
    return ", ".join(str(or_none(p.pid)) for p in processes)
