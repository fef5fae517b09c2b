"""The Linux cpulist form ("0-71", "0-35,72-107") that the NUMA layout and NVML's CPU
affinity are written in: parsed, written, and made from NVML's bitmask words. Pure."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence

# NVML's cpuSet is an array of C unsigned longs (nvmlDeviceGetCpuAffinity in nvml.h).
WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


def cpulist(masks: Sequence[int], word_bits: int = WORD_BITS) -> str:
    """The CPUs set in bitmask words (word i holds CPUs i*word_bits and up, lowest bit
    first), as a Linux cpulist: "0-71", "0-35,72-107", "5"; "" where none is set."""
    return cpulist_of(
        word * word_bits + bit
        for word, mask in enumerate(masks)
        for bit in range(word_bits)
        if int(mask) >> bit & 1
    )


def cpus_of(cpulist_text: str) -> set[int]:
    """The CPU numbers a Linux cpulist names ("0-55,112-167" -> {0, ..., 167}); ValueError if
    malformed."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in cpulist_text.split(","))):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise ValueError(f"{part!r} runs backwards")
        out.update(range(first, last + 1))
    return out


def cpulist_of(cpus: Iterable[int]) -> str:
    """CPU numbers as a Linux cpulist: {0, 1, 2, 5} -> "0-2,5"."""
    return ",".join(_span(first, last) for first, last in _runs(sorted(cpus)))


def _runs(cpus: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending CPU numbers as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for cpu in cpus:
        if runs and runs[-1][1] == cpu - 1:
            runs[-1] = (runs[-1][0], cpu)
        else:
            runs.append((cpu, cpu))
    return runs


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"
