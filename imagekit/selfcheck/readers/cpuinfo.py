"""The CPU as /proc/cpuinfo describes it (model, flags, Arm implementer): the snapshot's `cpu`
key and what the int8 check chooses its scheme by. Keys not found are left out, never guessed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# /proc/cpuinfo keys: x86 `model name` and `flags`; aarch64 `Features`, `CPU implementer`
# and `CPU part` (no model name there).
ARM_PARTS = {  # (implementer, part) -> name; Linux arch/arm64/include/asm/cputype.h
    ("0x41", "0xd0c"): "Arm Neoverse N1",
    ("0x41", "0xd40"): "Arm Neoverse V1",
    ("0x41", "0xd49"): "Arm Neoverse N2",
    ("0x41", "0xd4f"): "Arm Neoverse V2",
}


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The snapshot's `cpu` dict from /proc/cpuinfo text: the first processor's model and
    flags. Keys not found are left out (not read), never guessed."""
    first: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and key not in first:
            first[key] = value.strip()
    cpu: dict[str, Any] = {}
    arm = (first.get("CPU implementer", "").lower(), first.get("CPU part", "").lower())
    model = first.get("model name") or ARM_PARTS.get(arm)
    if model is None and all(arm):
        model = f"Arm implementer {arm[0]} part {arm[1]}"
    if model:
        cpu["model"] = model
    flags = first.get("flags", first.get("Features"))
    if flags is not None:
        cpu["flags"] = flags.split()
    if arm[0]:
        cpu["implementer"] = arm[0]
    return cpu


def read_cpu(path: str = "/proc/cpuinfo") -> dict[str, Any]:
    try:
        return parse_cpuinfo(Path(path).read_text(errors="replace"))
    except OSError:
        return {}
