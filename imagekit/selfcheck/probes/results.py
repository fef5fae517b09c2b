"""The small helpers the probes share (what a probe returns is contract/checks.py's
CheckResult). Standard library only."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from imagekit.contract import labels as label
from imagekit.contract.checks import ENV_FAULT


def fault(name: str) -> bool:
    """Fault injection for the runner's own tests ($IMAGEKIT_SELFCHECK_FAULT=ddp-hang,...)."""
    return name in os.environ.get(ENV_FAULT, "").split(",")


def features(promise: dict[str, str]) -> set[str]:
    return set(filter(None, promise.get(label.FEATURES, "").split(",")))


def timed(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - start) / repeat


def bus_bandwidth(algbw: float, world: int) -> float:
    """nccl-tests' bus bandwidth from the data per second (algbw): what each link of a ring
    all-reduce carried, 2(n-1)/n of it, comparable across world sizes."""
    return algbw * 2 * (world - 1) / world


def gather(torch: Any, dist: Any, tensor: Any, world: int) -> list[Any]:
    """Every rank's copy of `tensor`, on every rank."""
    out = [torch.zeros_like(tensor) for _ in range(world)]
    dist.all_gather(out, tensor)
    return out


def max_difference(vectors: list[Any]) -> float:
    """How far the copies are from the first one (0 where the ranks agree)."""
    return max(float((v - vectors[0]).abs().max()) for v in vectors)


def device_of(torch: Any) -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync_of(torch: Any, device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


# Each element of the checked all-reduce is (its position mod this) + rank + 1: the sum is
# exact in fp32 for any world size NCCL runs (under 2**24 / 251 ranks).
PATTERN_PERIOD = 251


# The checked all-reduce fills and compares in slices of this many elements (64 MiB of
# fp32): beside the message itself it needs a few slices, never a second message.
CHECK_SLICE = 16 * 2**20


def checked_sum(
    torch: Any, dist: Any, rank: int, world: int, device: str, nbytes: int, group: Any = None
) -> str:
    """One all-reduce of values every rank can compute, compared element by element with
    their sum (nccl-tests -c): "" when all are right, else how many were wrong on this rank,
    and the first."""
    count = nbytes // 4
    tensor = torch.empty(count, dtype=torch.float32, device=device)
    for start in range(0, count, CHECK_SLICE):
        part = tensor[start : start + CHECK_SLICE]
        part.copy_(pattern(torch, start, part.numel(), device)).add_(rank + 1)
    dist.all_reduce(tensor, group=group)
    if fault("allreduce-wrong") and rank == world - 1:
        tensor[count // 2] += 1  # one element off, on the last rank only
    wrong, first = 0, ""
    for start in range(0, count, CHECK_SLICE):
        part = tensor[start : start + CHECK_SLICE]
        want = pattern(torch, start, part.numel(), device).float()
        want.mul_(world).add_(world * (world + 1) // 2)
        bad = part.ne(want)
        found = int(bad.sum())
        if found and not first:
            at = int(bad.to(torch.uint8).argmax())
            first = f"first at {start + at}: {part[at].item():g}, expected {want[at].item():g}"
        wrong += found
    if not wrong:
        return ""
    return (
        f"rank {rank}: the all-reduce of {nbytes / 2**20:g} MiB gave {wrong} wrong of {count} "
        f"elements ({first})"
    )


def pattern(torch: Any, start: int, count: int, device: str) -> Any:
    """(position mod PATTERN_PERIOD) for positions start .. start+count-1, as int32 (exact at
    any message size): every sum of world of them plus world(world+1)/2 is an integer fp32
    holds exactly."""
    positions = torch.arange(start, start + count, dtype=torch.int32, device=device)
    return positions.remainder_(PATTERN_PERIOD)
