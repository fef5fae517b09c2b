"""Can this GPU run the code compiled into torch? Pure functions over plain data.

NVIDIA's binary compatibility rules (CUDA C++ Programming Guide, "Binary Compatibility" and
"Application Compatibility"; NVCC docs, "GPU Feature List"):
- SASS (cubin) for sm_XY runs on every GPU of the same major X with minor >= Y:
  sm_80 code runs on sm_86 and sm_89, never on sm_90.
- Arch-specific SASS, sm_XYa (e.g. sm_90a, sm_100a), runs only on exactly compute capability X.Y.
- Family-specific SASS, sm_XYf (CUDA 12.9+, e.g. sm_100f), runs on the same major with minor >= Y.
- PTX, compute_XY, is JIT-compiled by the driver for any GPU of capability >= X.Y;
  compute_XYa only for exactly X.Y, compute_XYf for the same major with minor >= Y.
  JIT needs a driver at least as new as the toolkit that wrote the PTX.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ENTRY = re.compile(r"(sm|compute)_(\d+)([af]?)")


@dataclass(frozen=True)
class ArchEntry:
    kind: str  # "sm" (SASS) or "compute" (PTX)
    major: int
    minor: int
    variant: str  # "", "a" (arch-specific) or "f" (family-specific)

    @property
    def text(self) -> str:
        return f"{self.kind}_{self.major}{self.minor}{self.variant}"


@dataclass(frozen=True)
class ArchVerdict:
    runs: bool
    via: str  # the entry that serves this GPU, "" when none
    jit: bool  # True when only PTX serves it (the driver compiles at first use)
    reason: str


def parse_entry(entry: str) -> ArchEntry | None:
    """'sm_89' -> (sm, 8, 9, ''); 'sm_100' -> (sm, 10, 0); 'compute_120a' -> (compute, 12, 0, a).
    The last digit is the minor. Anything else (a future spelling) gives None."""
    match = _ENTRY.fullmatch(entry.strip().lower())
    if not match or len(match.group(2)) < 2:
        return None
    digits = match.group(2)
    return ArchEntry(match.group(1), int(digits[:-1]), int(digits[-1]), match.group(3))


def serves(entry: ArchEntry, capability: tuple[int, int]) -> bool:
    """Whether code of `entry` runs on a GPU of `capability` (SASS directly, PTX through JIT)."""
    major, minor = capability
    if entry.variant == "a":
        return (entry.major, entry.minor) == capability
    if entry.variant == "f" or entry.kind == "sm":
        return entry.major == major and minor >= entry.minor
    return (major, minor) >= (entry.major, entry.minor)  # plain PTX: any newer GPU


def arch_verdict(capability: tuple[int, int], arch_list: list[str]) -> ArchVerdict:
    """Does torch's arch list (torch.cuda.get_arch_list()) cover a GPU of `capability`?
    SASS is preferred over PTX; an unparsable entry is ignored, never a crash."""
    gpu = f"sm_{capability[0]}{capability[1]}"
    entries = [e for e in map(parse_entry, arch_list) if e is not None]
    sass = [e for e in entries if e.kind == "sm" and serves(e, capability)]
    if sass:
        best = max(sass, key=lambda e: (e.minor, e.variant == "a"))
        return ArchVerdict(True, best.text, False, f"{gpu} runs the {best.text} code")
    ptx = [e for e in entries if e.kind == "compute" and serves(e, capability)]
    if ptx:
        best = max(ptx, key=lambda e: (e.major, e.minor))
        return ArchVerdict(
            True,
            best.text,
            True,
            f"{gpu} has no SASS in this build; the driver JIT-compiles {best.text} PTX at "
            "first use (slow start, and it needs a driver as new as the toolkit)",
        )
    listed = " ".join(arch_list) or "(an empty list)"
    return ArchVerdict(
        False,
        "",
        False,
        f"this GPU is {gpu}; torch is compiled for {listed}, none of which runs on it "
        "(use a wheel variant whose arch list covers it)",
    )
