"""Pinned host copies, host to device and device to host, judged against the floor of each
GPU's host link (PCIe by generation and width, or a Grace superchip's NVLink-C2C share).
Pure and standard library only; links.py runs it in its check.
"""

from __future__ import annotations

from imagekit.contract.host_snapshot import Gpu, HostSnapshot
from imagekit.contract.records import given, or_none
from imagekit.selfcheck.verdicts import grace
from imagekit.selfcheck.verdicts.findings import Finding, fail, skip
from imagekit.selfcheck.verdicts.link_floors import FLOORS, Floor, by_index, num, pcie_link

# The two ways a pinned host copy goes: its name (the snapshot's key is `<name>_gbps`, its
# rules `<name>`, `<name>-bandwidth`, `<name>-link`) and its words.
HOST_WAYS = (("h2d", "host-to-device"), ("d2h", "device-to-host"))
# A snapshot without `host_copies` was written before the copies were timed apart from the
# memory test: its host-to-device figure may hold the wake of that test's free.
UNRECORDED_CONDITIONS = (
    "; measured by a self-check that recorded no copy conditions (before issue 52 it timed the "
    "copy right after its memory test freed the GPU's memory, which halves the figure on an "
    "H200): run the self-check again"
)


def h2d_findings(snapshot: HostSnapshot) -> list[Finding]:
    """Each GPU's pinned copies, host to device and device to host, against its host link's
    floor (PCIe by generation and width, or a Grace superchip's NVLink-C2C share)."""
    gpus = list(by_index(snapshot).values())
    if not gpus:
        return [skip("h2d", "no GPU in the snapshot")]
    note = "" if given(snapshot.host_copies) else UNRECORDED_CONDITIONS
    found = [_host_finding(g, way, note) for g in gpus for way in HOST_WAYS]
    return [f for f in found if f is not None]


def _host_finding(gpu: Gpu, way: tuple[str, str], note: str) -> Finding | None:
    way_name, words = way
    key = f"{way_name}_gbps"
    index, gbps = gpu.index, gbps_of(gpu, way_name)
    if not isinstance(gbps, (int, float)):
        # A snapshot from before device-to-host was measured (no conditions) has none.
        if key == "d2h_gbps" and note:
            return None
        return skip(way_name, f"{words} bandwidth not measured", index)
    limit = host_link_limit(gpu)
    if isinstance(limit, str):
        return skip(f"{way_name}-link", f"{words} {gbps:g} GB/s; {limit}", index)
    floor, need, what, why = limit
    if gbps >= need:
        return None
    if gpu.host_copy_settled is False:
        why += "; its timed batches never agreed"
    if not note and not given(gpu.host_copy_cpus) and not grace.is_c2c(gpu):
        why += "; the probe's pinned memory was not placed near this GPU (its CPUs unread)"
    return fail(
        f"{way_name}-bandwidth",
        f"{words} copy at {gbps:g} GB/s, below {num(need)} GB/s ({floor.fraction:.0%} of "
        f"{what} per direction; {floor.source}): {why}{note if key == 'h2d_gbps' else ''}",
        index,
    )


def gbps_of(gpu: Gpu, way_name: str) -> float | None:
    """The GPU's pinned copy one way (HOST_WAYS), None where it was not measured."""
    return or_none(gpu.h2d_gbps if way_name == "h2d" else gpu.d2h_gbps)


def host_link_limit(gpu: Gpu) -> tuple[Floor, float, str, str] | str:
    """The floor of a pinned host copy on this GPU's host link: (floor, GB/s needed, the
    link in words, what a shortfall means), or why there is none."""
    if grace.is_c2c(gpu):
        share, what = grace.c2c_gbps(gpu)
        floor = FLOORS["h2d-c2c"]
        why = (
            "memory pinned on another Grace, a process bound to the wrong NUMA node, or the "
            "C2C link degraded (a healthy GH200 copies 346 GB/s)"
        )
        return floor, floor.fraction * share, what, why
    link = pcie_link(gpu)
    if link is None:
        return "PCIe generation and width not read"
    gen = gpu.pcie_max_gen or gpu.pcie_gen
    floor = FLOORS["h2d-gen5"] if isinstance(gen, int) and gen >= 5 else FLOORS["h2d"]
    why = (
        "a downtrained link, a slot wired narrower, the IOMMU in the way, or memory pinned on "
        "the far socket"
    )
    return floor, floor.fraction * link.gbps, f"{link.what} = {num(link.gbps)} GB/s", why


def h2d_figure(gpu: Gpu) -> str:
    """e.g. "GPU 0: host-to-device 55.2 GB/s, device-to-host 53.1 GB/s over PCIe Gen5 x16
    (63 GB/s)"."""
    ways = f"host-to-device {gpu.h2d_gbps} GB/s"
    if isinstance(gpu.d2h_gbps, (int, float)):
        ways += f", device-to-host {gpu.d2h_gbps} GB/s"
    if grace.is_c2c(gpu):
        _, what = grace.c2c_gbps(gpu)
        return f"GPU {or_none(gpu.index)}: {ways} over {what}"
    link = pcie_link(gpu)
    over = f" over {link.what} ({num(link.gbps)} GB/s)" if link else ""
    return f"GPU {or_none(gpu.index)}: {ways}{over}"
