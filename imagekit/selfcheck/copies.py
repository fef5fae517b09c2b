"""Copy bandwidth between GPUs (peer to peer) and from pinned host memory to each GPU: the
perf probe's link measurements. It only measures; links.py judges the readings against the
topology. Standard library only; torch is passed in by the probe.

The same code times copies between CPU tensors (HostClock), which is how the tests run it
without a GPU; between GPUs it times with CUDA events on the stream that does the copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

COPY_BYTES = 256 * 2**20  # big enough that launch overhead is noise (<1% at 400 GB/s)
COPY_REPEAT = 5


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


def measure_h2d(torch: Any, index: int, nbytes: int = COPY_BYTES) -> float:
    """Pinned host -> device GB/s on GPU `index`."""
    source = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    target = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
    with torch.cuda.device(index):
        return round(copy_gbps(torch, source, target), 1)
