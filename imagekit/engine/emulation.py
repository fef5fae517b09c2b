"""Which platforms this host runs: its own, and the ones QEMU runs through binfmt_misc.

A build for another platform runs each RUN step's programs under QEMU user emulation; the
kernel hands a foreign ELF binary to the interpreter registered in binfmt_misc. For that to
work inside a container, the registration needs the F flag (the kernel opens the
interpreter when it is registered, so the container's root need not hold it). Everything
here is a pure function over the host's machine name and the registrations' text, so each
host kind is table-tested.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from imagekit.platforms import AMD64, ARM64

# uname -m, Debian's architecture, and the ELF header bytes a registration matches
MACHINE = {AMD64: "x86_64", ARM64: "aarch64"}
DEBIAN_ARCH = {AMD64: "amd64", ARM64: "arm64"}
_ELF_MAGIC = {
    AMD64: "7f454c4602010100000000000000000002003e00",
    ARM64: "7f454c460201010000000000000000000200b700",
}
BINFMT = Path("/proc/sys/fs/binfmt_misc")
FIX = {
    ARM64: "register QEMU for arm64 with the F flag: `sudo apt-get install qemu-user-static "
    "binfmt-support` on Debian or Ubuntu (then `sudo update-binfmts --enable qemu-aarch64`), "
    "or `docker run --privileged --rm tonistiigi/binfmt --install arm64` (Debian 12's QEMU 7.2 "
    "runs torch but crashes onnxruntime; 11.1 runs both: `sudo bash .ci/engines.sh qemu` in "
    "imagekit's checkout)",
    AMD64: "register QEMU for amd64 with the F flag: `sudo apt-get install qemu-user-static "
    "binfmt-support`, or `docker run --privileged --rm tonistiigi/binfmt --install amd64`",
}


def host_platform(machine: str | None = None) -> str | None:
    """linux/amd64 for x86_64, linux/arm64 for aarch64; None for any other machine."""
    machine = machine or os.uname().machine
    return next((p for p, m in MACHINE.items() if m == machine), None)


def is_foreign(architecture: str) -> bool:
    """An image architecture (GOARCH: amd64, arm64) that is not this host's: its programs
    run under QEMU here; "" (not said) is not foreign."""
    own = DEBIAN_ARCH.get(host_platform() or "", "")
    return bool(architecture) and architecture != own


def read_binfmt(root: Path = BINFMT) -> dict[str, str]:
    """Each registration's text by name; empty where binfmt_misc is not mounted."""
    entries: dict[str, str] = {}
    try:
        names = [p for p in root.iterdir() if p.name not in ("register", "status")]
    except OSError:
        return entries
    for path in names:
        try:
            entries[path.name] = path.read_text()
        except OSError:
            continue
    return entries


def emulation_problem(platform: str, machine: str, entries: Mapping[str, str]) -> str | None:
    """Why this host cannot run `platform`'s programs in a container, or None where it can:
    natively, or through an enabled registration with the F flag for its ELF magic."""
    if host_platform(machine) == platform:
        return None
    magic = _ELF_MAGIC.get(platform)
    if magic is None:
        return f"{platform} is not a platform imagekit builds"
    seen_without_f = ""
    for name, fields in _registrations(magic, entries):
        if "F" in fields.get("flags", ""):
            return None
        seen_without_f = name
    if seen_without_f:
        return (
            f"{platform} on this {machine} host: binfmt_misc's {seen_without_f} runs it without "
            "the F flag, so containers cannot reach its interpreter; " + FIX[platform]
        )
    where = "no binfmt_misc registration" if entries else "binfmt_misc is not mounted or empty"
    return f"{platform} on this {machine} host needs QEMU user emulation ({where}); {FIX[platform]}"


def interpreter(platform: str, entries: Mapping[str, str]) -> str:
    """The program binfmt_misc runs `platform`'s ELF binaries with, in containers too (its
    enabled registration with the F flag); "" where there is none."""
    runs = (
        fields.get("interpreter", "")
        for _, fields in _registrations(_ELF_MAGIC.get(platform, ""), entries)
        if "F" in fields.get("flags", "")
    )
    return next(runs, "")


def _registrations(magic: str, entries: Mapping[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """The enabled registrations for ELF binaries of `magic`, by name, with their fields."""
    for name, text in entries.items():
        fields = _fields(text)
        if magic and fields.get("magic", "").lower() == magic and "enabled" in fields:
            yield name, fields


def _fields(text: str) -> dict[str, str]:
    """`enabled`, `interpreter /usr/...`, `flags: PF`, `magic 7f45...` as a mapping."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        found[key.rstrip(":")] = value.strip()
    return found
