"""Install the team's packages under the cell's stack (runs inside the build, after the stack).

The team's packages (the matrix's `pip:`, its `requirements:` files, the `source_package`)
install into a venv that already holds the cell's stack: torch and its companions, the NVIDIA
CUDA libraries, and the venv's Python. They must never replace it, so this script pins
every stack package the venv holds to the version it holds (a constraints file) before it
runs the installer:

    python -B team_install.py [--locked DIR] [--source DIR] INSTALLER... -- REQUIREMENT...

INSTALLER is the installer's command (`/opt/venv/bin/pip install ...` or `uv pip install
--python /opt/venv/bin/python ...`); the constraints file is added to it. `--source DIR`
installs that folder as a package too. With `--locked DIR` holding this machine's team.txt
(a package lock, `imagekit lock --packages`), the locked pins are installed instead, with
their hashes and without resolving (--no-deps), then the source package without its
dependencies (the lock holds them).

When the installer fails, its output is followed by what imagekit makes of it: each line
where a package asks for a stack package, as
    imagekit: teamlib 1.0 asks for torch==2.8.0; this cell holds torch 2.13.0+cpu
and always the stack the cell holds, so the message never leaves the reader guessing.
Standard library only: it runs with the venv's Python (-B: it writes no bytecode).
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# The package lock's layout, which the host imports too: this script's copy in the build
# context has lockfile.py's lines in place of this import (lockfile.py says why).
from imagekit.buildtime.lockfile import LOCKED_FOLDERS, TEAM, is_cuda_library, normalize

# The stack: what a team's package may never move. torch's family, the NVIDIA CUDA library
# wheels (is_cuda_library: nvidia-ml-py is pure Python bindings, not one) and the CUDA 13
# wheels' toolkit packages. imagekit/locks/packages.py pins the same at lock time.
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "triton", "pytorch-triton"})
CUDA_PACKAGES = frozenset({"cuda-toolkit", "cuda-bindings", "cuda-pathfinder"})
TEAM_FILE = f"{TEAM}.txt"


def is_stack(name: str) -> bool:
    """Whether the (any-case) package name is part of the cell's stack."""
    name = normalize(name)
    return name in TORCH_FAMILY or name in CUDA_PACKAGES or is_cuda_library(name)


def held_stack() -> dict[str, str]:
    """The stack packages this Python's environment holds: normalized name -> version."""
    held = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and is_stack(name):
            held[normalize(name)] = dist.version
    return dict(sorted(held.items()))


def constraints_text(held: dict[str, str]) -> str:
    return "".join(f"{name}=={version}\n" for name, version in held.items())


def python_version() -> str:
    return platform.python_version()


# What the installers say when a package asks for something the constraints forbid:
#   pip: "teamlib 1.0 depends on torch==2.8.0", "The user requested torch==2.8.0"
#   uv:  "teamlib==1.0 depends on torch==2.8.0", "all versions of teamlib depend on
#        torch>=2.9", "you require torch==2.8.0"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_OP = r"(?:===|==|!=|~=|<=|>=|<|>)[^\s,;()]+"
_SPEC = rf"(?:\[[^\]]*\])?(?:{_OP}(?:,{_OP})*)?"
_DEPENDS = re.compile(
    rf"(?:all versions of |only )?(?P<who>{_NAME})(?:(?: |==)(?P<version>[0-9][^\s,]*))?"
    rf" depends? on (?P<dep>{_NAME})(?P<spec>{_SPEC})"
)
_REQUESTED = re.compile(
    rf"(?:The user requested|you require) (?P<dep>{_NAME})(?P<spec>{_SPEC})(?! \(constraint)"
)
# A package whose Requires-Python excludes the venv's: pip's and uv's words for it.
_PYTHON = (
    re.compile(
        rf"Package '(?P<who>{_NAME})' requires a different Python: \S+ not in '(?P<spec>[^']+)'"
    ),
    re.compile(
        rf"(?P<who>{_NAME})(?:==(?P<version>[0-9][^\s,]*))? requires Python (?P<spec>[^\s,]+)"
    ),
)


def diagnose(output: str, held: dict[str, str], python: str) -> list[str]:
    """The lines that name who asked for what of the stack, from the installer's output."""
    found: list[str] = []
    for match in _DEPENDS.finditer(output):
        dep = normalize(match["dep"])
        if dep in held and match["spec"]:
            who = match["who"] + (f" {match['version']}" if match["version"] else "")
            found.append(_conflict(who, dep, match["spec"], held[dep]))
    for match in _REQUESTED.finditer(output):
        dep = normalize(match["dep"])
        if dep in held and match["spec"] and match["spec"] != f"=={held[dep]}":
            found.append(_conflict("your requirement", dep, match["spec"], held[dep]))
    for pattern in _PYTHON:
        for match in pattern.finditer(output):
            version = match.groupdict().get("version")
            who = match["who"] + (f" {version}" if version else "")
            spec = match["spec"].replace(" ", "")
            found.append(f"imagekit: {who} asks for Python{spec}; this cell holds Python {python}")
    return list(dict.fromkeys(found))


def _conflict(who: str, dep: str, spec: str, held: str) -> str:
    return f"imagekit: {who} asks for {dep}{spec}; this cell holds {dep} {held}"


# The installers' words for a resolution that cannot succeed (not a download or a build).
_UNRESOLVABLE = ("ResolutionImpossible", "No solution found", "requires a different Python")


def summary(held: dict[str, str], python: str, output: str) -> str:
    stack = ", ".join(f"{n} {v}" for n, v in held.items()) or "no torch"
    stack += f"; Python {python}"
    if not any(words in output for words in _UNRESOLVABLE):
        return (
            "imagekit: installing the team's packages failed (the installer's output is "
            f"above); this cell holds {stack}"
        )
    return (
        f"imagekit: the team's packages cannot be installed under this cell's stack ({stack}): "
        "imagekit never replaces it. Fix: relax the requirement named above, or build the "
        "packages in a cell whose torch, CUDA and Python they accept"
    )


def run(command: list[str], held: dict[str, str], python: str) -> int:
    """Run the installer, its output shown as it comes; on failure, the diagnosis."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        sys.stdout.write(line)
        seen.append(line)
    code = process.wait()
    if code:
        sys.stdout.flush()
        output = "".join(seen)
        for line in [*diagnose(output, held, python), summary(held, python, output)]:
            print(line, file=sys.stderr)
    return code


def locked_team(locked: Path | None, machine: str) -> Path | None:
    """This machine's team.txt of a staged lock, if there is one."""
    if locked is None or machine not in LOCKED_FOLDERS:
        return None
    path = locked / LOCKED_FOLDERS[machine] / TEAM_FILE
    return path if path.is_file() else None


def parse_args(argv: list[str]) -> tuple[dict[str, Path], list[str], list[str]]:
    """(options, installer command, requirements): options first, then the installer's
    words up to `--`, then the requirements."""
    options: dict[str, Path] = {}
    while argv and argv[0] in ("--locked", "--source"):
        if len(argv) < 2:
            raise SystemExit(f"team_install.py: {argv[0]} needs a folder")
        options[argv[0][2:]] = Path(argv[1])
        argv = argv[2:]
    if "--" not in argv or argv.index("--") == 0:
        raise SystemExit(
            "usage: team_install.py [--locked DIR] [--source DIR] INSTALLER... -- REQ..."
        )
    cut = argv.index("--")
    return options, argv[:cut], argv[cut + 1 :]


def main(argv: list[str] | None = None) -> int:
    options, installer, requirements = parse_args(list(sys.argv[1:] if argv is None else argv))
    held, python = held_stack(), python_version()
    # absolute: a bare folder name would be read as a package's name on the index
    source = [str(options["source"].resolve())] if "source" in options else []
    with tempfile.TemporaryDirectory(prefix="imagekit-team-") as tmp:
        constraints = Path(tmp) / "stack-constraints.txt"
        constraints.write_text(constraints_text(held))
        pinned = [*installer, "--constraint", str(constraints)]
        team = locked_team(options.get("locked"), platform.machine())
        if team is None:
            if not requirements and not source:
                return 0
            return run([*pinned, *requirements, *source], held, python)
        print(f"imagekit: installing the team's locked packages ({team}), resolving nothing")
        code = run([*pinned, "--no-deps", "--require-hashes", "-r", str(team)], held, python)
        if code or not source:
            return code
        return run([*pinned, "--no-deps", *source], held, python)


if __name__ == "__main__":
    sys.exit(main())
