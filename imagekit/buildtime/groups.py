"""Resolve a cell's packages once, then install them as layers (runs in the builder stage).

The runtime's venv arrives in layers ordered by how rarely they change and how widely they
are shared: the NVIDIA CUDA libraries (the same nvidia-* wheels for every Python and for every
torch that pins the same versions), torch with everything it needs, then the features. To
install each group in its own RUN, the versions must be known first: this script resolves
torch's requirements, then the features' against those pins, with the cell's installer
(`uv pip compile`, or pip's `install --dry-run --report`), and writes one pinned
requirements file per group: cuda.txt, torch.txt, features.txt.

With `--locked DIR` holding a package lock's group files (`imagekit lock --packages`,
staged into the build context), it resolves nothing: it copies them, hashes and all. A lock
is per platform: amd64's group files are DIR's own, arm64's are in DIR/linux-arm64; this
script takes those of the machine it runs on (the build's target: under QEMU too, since
uname answers for the emulated machine) and refuses to build a lock of another machine only.

Usage: python groups.py --installer uv|pip --out DIR [--index URL] [--locked DIR]
                        --torch REQ... [--feature REQ...]
Standard library only: it runs with the venv's Python before anything is installed in it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

# The package lock's layout, which the host imports too: this script's copy in the build
# context has lockfile.py's lines in place of this import (lockfile.py says why).
from imagekit.buildtime.lockfile import (
    CUDA_PARTS,
    GROUPS,
    LOCKED_FOLDERS,
    cuda_part,
    is_cuda_library,
    normalize,
    pin_name,
)

UV = "/opt/uv/bin/uv"
PYTHON = "/opt/venv/bin/python"
WHEELHOUSE = "/wheelhouse"


def resolve(
    installer: str, requirements: list[str], index: str, constraints: Path | None
) -> list[str]:
    """Exact `name==version` pins for `requirements` (and their dependencies)."""
    with tempfile.TemporaryDirectory() as tmp:
        wanted = Path(tmp) / "requirements.in"
        wanted.write_text("\n".join(requirements) + "\n")
        extra = ["--extra-index-url", index] if index else []
        extra += ["--constraint", str(constraints)] if constraints else []
        if installer == "uv":
            out = Path(tmp) / "pins.txt"
            _run(
                [
                    UV,
                    "pip",
                    "compile",
                    "--python",
                    PYTHON,
                    "--find-links",
                    WHEELHOUSE,
                    "--no-header",
                    "--no-annotate",
                    "--quiet",
                    *extra,
                    "-o",
                    str(out),
                    str(wanted),
                ]
            )
            return _pins_from_requirements(out.read_text())
        report = Path(tmp) / "report.json"
        _run(
            [
                PYTHON,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--find-links",
                WHEELHOUSE,
                *extra,
                "--report",
                str(report),
                "-r",
                str(wanted),
            ]
        )
        return _pins_from_report(json.loads(report.read_text()))


def _run(command: list[str]) -> None:
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode:
        sys.exit(f"imagekit: resolving the packages failed: {' '.join(command)}\n{result.stdout}")


def requirement_lines(text: str) -> list[str]:
    """The requirements of a requirements file (uv pip compile's): each with its --hash lines
    (they continue it), without comments; option lines (--index-url ...) left out."""
    lines = (line.split("#", 1)[0].strip() for line in text.replace("\\\n", " ").splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def _pins_from_requirements(text: str) -> list[str]:
    return [line.split(";", 1)[0].split()[0] for line in requirement_lines(text) if "==" in line]


def _pins_from_report(report: dict[str, object]) -> list[str]:
    items = report.get("install", [])
    assert isinstance(items, list)
    return [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items]


def split(torch_pins: list[str], feature_pins: list[str]) -> dict[str, list[str]]:
    """The groups, in layer order: each pin in exactly one, the earliest that needs it."""
    torch_names = {pin_name(p) for p in torch_pins}
    features = [p for p in feature_pins if pin_name(p) not in torch_names]
    everything = torch_pins + features
    return {
        "cuda": sorted(p for p in everything if is_cuda_library(p)),
        "torch": sorted(p for p in torch_pins if not is_cuda_library(p)),
        "features": sorted(p for p in features if not is_cuda_library(p)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--installer", choices=["uv", "pip"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--index", default="")
    parser.add_argument("--torch", action="append", default=[], required=True)
    parser.add_argument("--feature", action="append", default=[])
    parser.add_argument("--locked", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    mine = locked_for(args.locked, platform.machine()) if args.locked else None
    if mine is not None:
        return copy_locked(args.installer, mine, args.out)
    torch_pins = resolve(args.installer, args.torch, args.index, None)
    (args.out / "torch-resolved.txt").write_text("\n".join(torch_pins) + "\n")
    feature_pins = []
    if args.feature:
        constraints = args.out / "torch-resolved.txt"
        feature_pins = resolve(args.installer, args.feature, args.index, constraints)
    groups = split(torch_pins, feature_pins)
    for name, pins in groups.items():
        (args.out / f"{name}.txt").write_text("".join(f"{p}\n" for p in pins))
    write_cuda_parts(args.out)
    (args.out / "torch-resolved.txt").unlink()
    make_room(args.installer, [p for pins in groups.values() for p in pins])
    return 0


def locked_for(locked: Path, machine: str) -> Path | None:
    """The staged lock's folder of group files for `machine`; None where nothing is staged
    (an unlocked cell: resolve). A lock staged for other machines only stops the build: the
    host checks that a cell's every platform is locked, so this is a context made by hand,
    and resolving here would install what no lock pins."""
    staged = {
        m: locked / f for m, f in LOCKED_FOLDERS.items() if (locked / f / "torch.txt").is_file()
    }
    if machine in staged:
        return staged[machine]
    if staged:
        sys.exit(
            f"imagekit: the package lock staged in {locked} is for {', '.join(staged)}, not this "
            f"build's machine {machine}: run `imagekit lock --packages` for every platform of "
            "the cell and build again"
        )
    return None


def copy_locked(installer: str, locked: Path, out: Path) -> int:
    """The lock's group files, as they are: the runtime checks every wheel's hash."""
    pins = []
    for name in GROUPS:
        text = (locked / f"{name}.txt").read_text()
        (out / f"{name}.txt").write_text(text)
        pins += _pins_from_requirements(text)
    write_cuda_parts(out)
    print(f"imagekit: installing the locked packages ({len(pins)} pins), resolving nothing")
    make_room(installer, pins)
    return 0


def write_cuda_parts(out: Path) -> None:
    """cuda.txt again as the parts the runtime installs, one layer each (lockfile.CUDA_PARTS):
    cuda-1.txt, cuda-2.txt, ...; each entry as it is, hashes and all; a part may be empty."""
    parts: list[list[str]] = [[] for _ in CUDA_PARTS]
    for entry in requirement_lines((out / "cuda.txt").read_text()):
        parts[cuda_part(entry)].append(entry)
    for number, entries in enumerate(parts, 1):
        (out / f"cuda-{number}.txt").write_text("".join(f"{e}\n" for e in entries))


def make_room(installer: str, pins: list[str]) -> None:
    """Remove from the bare venv what a group brings in another version (setuptools, from
    ensurepip): a layer that deletes files records whiteouts stamped with the build's time."""
    wanted = {pin_name(p): p.split("==")[1] for p in pins}
    stale = [
        d.metadata["Name"]
        for d in importlib.metadata.distributions()
        if wanted.get(normalize(d.metadata["Name"]), d.version) != d.version
    ]
    if not stale:
        return
    if installer == "uv":
        _run([UV, "pip", "uninstall", "--python", PYTHON, *stale])
    else:
        _run([PYTHON, "-m", "pip", "uninstall", "--yes", *stale])


if __name__ == "__main__":
    sys.exit(main())
