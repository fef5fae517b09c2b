"""Copy bandwidth between GPUs (peer to peer) and between pinned host memory and each GPU,
both ways: the perf probe's link measurements. It only measures; links.py judges the readings
against the topology. Standard library only; torch is passed in by the probe.

Where a copy is timed matters as much as how. Right after a GPU frees a large allocation the
bus is not settled: on an H200 (PCIe Gen5 x16) a host-to-device copy read 27.5 GB/s right
after 118 GiB were freed with `empty_cache()`, and 55.2 GB/s half a second later (issue 52).
The perf probe therefore times every copy before its memory test, each GPU (or pair) alone,
and the host copies in batches until two agree (HOST_CONDITIONS records how, in the
snapshot).

The same code times copies between CPU tensors (HostClock), which is how the tests run it
without a GPU; between GPUs it times with CUDA events on the stream that does the copy.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from imagekit.selfcheck.verdicts.cpulist import cpulist_of, cpus_of
from imagekit.selfcheck.verdicts.peaks import stable, until_stable

COPY_BYTES = 256 * 2**20  # big enough that launch overhead is noise (<1% at 400 GB/s)
COPY_REPEAT = 5
# Batches of host copies are timed until two in a row agree, within this budget per way.
HOST_SETTLE_BUDGET_S = 3.0
# How the host copies are timed, as the snapshot's `host_copies` records it
# (docs/host-snapshot.md): the perf probe writes these values, a recorded snapshot keeps them.
HOST_CONDITIONS = {
    "bytes": COPY_BYTES,
    "repeat": COPY_REPEAT,
    "pinned": True,
    "alone": True,
    "when": "before-memtest",
    "placed": "near-gpu",
}


class EventClock:
    """CUDA events on the current device's stream (torch copies between GPUs on the source
    GPU's stream, so the caller makes that device current)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def seconds(self, fn: Callable[[], Any]) -> float:
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3


class HostClock:
    """Wall time, for copies the host does itself (CPU tensors)."""

    def sync(self) -> None:
        pass

    def seconds(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


def clock_for(torch: Any, *tensors: Any) -> EventClock | HostClock:
    on_gpu = any(t.device.type == "cuda" for t in tensors)
    return EventClock(torch) if on_gpu else HostClock()


def copy_gbps(torch: Any, src: Any, dst: Any, repeat: int = COPY_REPEAT) -> float:
    """GB/s of `repeat` copies of src into dst, after a warm-up copy (which also enables peer
    access or maps pinned pages)."""
    clock = clock_for(torch, src, dst)
    dst.copy_(src, non_blocking=True)
    clock.sync()

    def batch() -> None:
        for _ in range(repeat):
            dst.copy_(src, non_blocking=True)

    seconds = clock.seconds(batch)
    return src.numel() * src.element_size() * repeat / seconds / 1e9


def measure_p2p(torch: Any, nbytes: int = COPY_BYTES) -> list[dict[str, Any]]:
    """Peer copy GB/s for every ordered pair of GPUs with peer access, one pair at a time."""
    count = torch.cuda.device_count()
    pairs = []
    for src in range(count):
        for dst in range(count):
            if src != dst and torch.cuda.can_device_access_peer(src, dst):
                rate = peer_gbps(torch, src, dst, nbytes)
                pairs.append({"src": src, "dst": dst, "gbps": round(rate, 1)})
    return pairs


def peer_gbps(torch: Any, src: int, dst: int, nbytes: int = COPY_BYTES) -> float:
    """GPU src -> GPU dst GB/s, copied on src's stream (torch's choice between GPUs)."""
    source = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{src}")
    target = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
    with torch.cuda.device(src):
        return copy_gbps(torch, source, target)


def settled_gbps(
    torch: Any, src: Any, dst: Any, budget_s: float = HOST_SETTLE_BUDGET_S
) -> tuple[float, bool]:
    """GB/s of src -> dst once two batches in a row agree (the faster of the two), and True;
    or the fastest batch seen when none agreed within `budget_s`, and False."""
    clock = clock_for(torch, src, dst)
    dst.copy_(src, non_blocking=True)  # maps the pinned pages, wakes the link
    clock.sync()
    nbytes = src.numel() * src.element_size() * COPY_REPEAT

    def batch() -> None:
        for _ in range(COPY_REPEAT):
            dst.copy_(src, non_blocking=True)

    timings = until_stable(lambda: clock.seconds(batch), budget_s, at_least=2)
    agreed = stable(timings)
    return nbytes / min(timings[-2:] if agreed else timings) / 1e9, agreed


def measure_host(
    torch: Any,
    index: int,
    near: str | None = None,
    keep: list[Any] | None = None,
    nbytes: int = COPY_BYTES,
) -> dict[str, Any]:
    """Pinned host -> device and device -> host GB/s on GPU `index` (torch's), one way after
    the other, each settled; `host_copy_settled` is False when either way never did.

    The pinned buffer is allocated by this thread bound to `near` (the GPU's CPUs as NVML
    gives them, a cpulist), so its pages land on the GPU's NUMA node, as Azure's check binds
    with numactl; `host_copy_cpus` records where, absent when it could not be bound. `keep`
    holds each GPU's buffer until all are measured: freed, torch's pinned cache would hand
    the same pages (on the first GPU's node) to the next GPU."""
    with bound_to(near) as cpus:
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        host.fill_(0)
    if keep is not None:
        keep.append(host)
    device = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
    with torch.cuda.device(index):
        h2d, h2d_agreed = settled_gbps(torch, host, device)
        d2h, d2h_agreed = settled_gbps(torch, device, host)
    return {
        "h2d_gbps": round(h2d, 1),
        "d2h_gbps": round(d2h, 1),
        "host_copy_settled": h2d_agreed and d2h_agreed,
        **({"host_copy_cpus": cpus} if cpus else {}),
    }


@contextlib.contextmanager
def bound_to(near: str | None) -> Iterator[str]:
    """This thread on the CPUs of `near` it may use, for the block; yields them as a cpulist,
    or "" where none could be (unread, malformed, outside this container's cpuset)."""
    try:
        allowed = os.sched_getaffinity(0)
        wanted = cpus_of(near or "") & allowed
    except (OSError, ValueError):
        wanted = set()
    if not wanted:
        yield ""
        return
    os.sched_setaffinity(0, wanted)
    try:
        yield cpulist_of(wanted)
    finally:
        os.sched_setaffinity(0, allowed)
