"""Whether a built image's files are the platform its config says, read from the files
themselves: BuildKit builds `--platform linux/arm64` on an amd64-only base with only a warning,
and the result's config says arm64 while every binary in it is x86-64 (FACTS 10).

Checked, where the image has them: the OS's shell, the venv's Python (else the OS's), the ELF
machine of the first native library of each large package (torch, the CUDA libraries,
onnxruntime, triton) and torch's wheel tag. A pure function over the image's files
(engine/image_files.py), so every case is table-tested without an engine.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from imagekit.engine.emulation import MACHINE
from imagekit.engine.image_files import ImageFiles, resolve

# ELF e_machine values (the System V ABI's registry), named as `uname -m` names machines
ELF_MACHINES = {
    3: "i386",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390x",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    243: "riscv64",
}
# A wheel platform tag's machine: manylinux_2_28_aarch64, linux_x86_64, manylinux2014_x86_64
_TAG_MACHINE = re.compile(r"_(x86_64|aarch64|i686|armv7l|ppc64le|ppc64|s390x|riscv64)$")
_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)
VENV = "/opt/venv"
# Large packages with native code: (folder under site-packages, what the report calls it).
# A cell's CUDA libraries live in /opt/imagekit/cuda, linked into site-packages: followed.
NATIVE = (
    ("torch", "torch's native code"),
    ("nvidia", "the CUDA libraries"),
    ("onnxruntime", "onnxruntime's native code"),
    ("triton", "triton's native code"),
)


@dataclass(frozen=True)
class Check:
    """One file whose machine was read: `found` and `expected` as `uname -m` names them."""

    what: str
    path: str
    found: str
    expected: str

    @property
    def ok(self) -> bool:
        return self.found == self.expected

    def as_dict(self) -> dict[str, object]:
        return {
            "what": self.what,
            "path": self.path,
            "found": self.found,
            "expected": self.expected,
            "ok": self.ok,
        }

    def problem(self) -> str:
        return f"{self.path} ({self.what}) is {self.found}, not {self.expected}"


@dataclass(frozen=True)
class Proof:
    platform: str
    checks: tuple[Check, ...]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and not self.failures

    def as_list(self) -> list[dict[str, object]]:
        return [c.as_dict() for c in self.checks]

    def problem(self, base: str = "the base") -> str:
        """Why the image is not its platform's, in one line ("" where it is); `base`: the
        image it was built from, for the fix."""
        if self.ok:
            return ""
        if not self.checks:
            return (
                f"the {self.platform} image has none of the files that prove its platform "
                "(/bin/sh, a Python, a native library), so it cannot be told from its config: "
                "check that its Dockerfile is imagekit's and current (`imagekit render --check`)"
            )
        return (
            f"the {self.platform} image's files are not {self.platform}'s: "
            + "; ".join(c.problem() for c in self.failures)
            + f". It was built on a base of another platform: build from a {base} that has "
            f"{self.platform} (`imagekit build --bootstrap-base` adds it to a Debian base, "
            f"`docker pull --platform {self.platform} {base}` fetches a registry base's), and "
            "never push or promote this image"
        )


def elf_machine(head: bytes) -> str | None:
    """An ELF file's machine from its first bytes (e_machine at 18, in the file's byte
    order); None where they are not an ELF header."""
    if len(head) < 20 or not head.startswith(b"\x7fELF"):
        return None
    order = "little" if head[5] == 1 else "big"
    number = int.from_bytes(head[18:20], order)
    return ELF_MACHINES.get(number, f"ELF machine {number}")


def wheel_machines(wheel: str) -> list[str]:
    """The machines a wheel's `Tag:` lines are built for (a pure-Python wheel: none)."""
    found: list[str] = []
    for line in wheel.splitlines():
        key, _, value = line.partition(":")
        if key.strip() != "Tag":
            continue
        platform = value.strip().rsplit("-", 1)[-1]
        for tag in platform.split("."):
            match = _TAG_MACHINE.search(tag)
            if match and match.group(1) not in found:
                found.append(match.group(1))
    return found


def prove(platform: str, files: ImageFiles, python: str) -> Proof:
    """What the image's own files say about their platform (`python`: the cell's, X.Y)."""
    expected = MACHINE[platform]
    checks = [*_binaries(files, expected), *_packages(files, expected, python)]
    return Proof(platform, tuple(checks))


def _binaries(files: ImageFiles, expected: str) -> list[Check]:
    checks = [_elf(files, "/bin/sh", "the OS's shell, /bin/sh", expected)]
    if files.entry(f"{VENV}/bin/python") is not None:
        checks.append(_elf(files, f"{VENV}/bin/python", "the venv's Python", expected))
    else:
        checks.append(_elf(files, "/usr/bin/python3", "the OS's Python", expected))
    return [c for c in checks if c is not None]


def _elf(files: ImageFiles, path: str, what: str, expected: str) -> Check | None:
    found = resolve(files, path)
    if found is None or found.kind != "file":
        return None
    machine = elf_machine(found.head) or "not an ELF file"
    return Check(what, found.path, machine, expected)


def _packages(files: ImageFiles, expected: str, python: str) -> list[Check]:
    site = f"{VENV}/lib/python{python}/site-packages"
    checks: list[Check] = []
    for folder, what in NATIVE:
        native = files.first_native(posixpath.join(site, folder))
        if native is not None:
            machine = elf_machine(native.head) or "not an ELF file"
            checks.append(Check(what, native.path, machine, expected))
    tag = _torch_tag(files, site, expected)
    return checks + ([tag] if tag else [])


def _torch_tag(files: ImageFiles, site: str, expected: str) -> Check | None:
    """torch's wheel tag, from its dist-info, named by its version: the PyTorch index's
    wheels as `torch/version.py` says it (`2.7.1+cpu`), PyPI's without the local part
    (`torch-2.7.1.dist-info`, where version.py says `2.7.1+cu126`)."""
    version_py = files.text(f"{site}/torch/version.py")
    match = _VERSION.search(version_py or "")
    if match is None:
        return None
    version = match.group(1)
    names = dict.fromkeys((version, version.split("+", 1)[0]))
    found = (
        (path, wheel)
        for name in names
        if (wheel := files.text(path := f"{site}/torch-{name}.dist-info/WHEEL")) is not None
    )
    path, wheel = next(found, ("", None))
    if wheel is None:
        return None
    machines = wheel_machines(wheel)
    found = expected if machines == [expected] else ", ".join(machines) or "no machine"
    return Check("torch's wheel tag", path, found, expected)
