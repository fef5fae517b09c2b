"""A package lock's text: its records (Pin, PackageLock), writing it, reading it line by line,
and checking its pins against the cell (`verify`). packages.py resolves, reads and
checks locks on disk with these.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagekit.buildtime import team_install
from imagekit.buildtime.lockfile import GROUPS, HASH, LOCK_GROUPS, PIN, TEAM, is_cuda_library
from imagekit.contract.text import escape
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell
from imagekit.platforms import AMD64
from imagekit.urls import mask

FORMAT = 1


# The lock's input holding the source package's [project].dependencies; null where they are
# not static (setup.py, dynamic): the team's packages are then not locked (team_locked).
SOURCE_PACKAGE = "source-package"


def has_team(lock: PackageLock) -> bool:
    """Whether the lock holds a team group: the cell has team packages and all their
    requirements are known (a source package's dependencies that are not static are not:
    its lock keeps the stack's groups, and the team's step resolves under the stack)."""
    return TEAM in lock.inputs and lock.inputs.get(SOURCE_PACKAGE, ()) is not None


_HEADER = re.compile(r"^# (?P<key>[a-z-]+): (?P<value>.*)$")


_SECTION = re.compile(r"^# \[(?P<group>[a-z]+)\]$")


# What torch's resolution may put in the torch group besides the cell's own torch requirements
# (torch, torchvision, nvidia-ml-py): the Requires-Dist of torch, torchvision and triton
# wheels and theirs, Linux x86_64, torch 2.5 to 2.15 (from `uv pip compile` of each torch
# release with its torchvision for x86_64-manylinux_2_28; CUDA 13 builds add cuda-toolkit,
# cuda-bindings and cuda-pathfinder). The nvidia-* CUDA libraries go to the cuda group. A
# torch that comes to depend on more fails `imagekit lock --packages` naming the package:
# add it here after reading torch's metadata.
TORCH_DEPENDENCIES = frozenset(
    {
        "cuda-bindings", "cuda-pathfinder", "cuda-toolkit", "filelock", "fsspec", "jinja2",
        "markupsafe", "mpmath", "networkx", "numpy", "pillow", "setuptools", "sympy", "triton",
        "typing-extensions",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Pin:
    """`name==version` and the sha256 of each file that may be installed for it."""

    requirement: str
    hashes: tuple[str, ...]
    line: int = field(default=0, compare=False)  # where it starts in the lock file read

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)

    @property
    def version(self) -> str:
        return self.requirement.split("==", 1)[1]

    def text(self) -> str:
        return " \\\n".join([self.requirement, *(f"    --hash=sha256:{h}" for h in self.hashes)])


@dataclass(frozen=True)
class PackageLock:
    cell: str
    inputs: dict[str, object]
    resolved_with: dict[str, str] = field(default_factory=dict)
    groups: dict[str, tuple[Pin, ...]] = field(default_factory=dict)
    # The platform the lock is for (linux/amd64, linux/arm64): it names the file, and its
    # inputs' "platform" must be that platform's wheel tag (packages.py checks on reading)
    platform: str = AMD64

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.inputs)


def fingerprint(inputs: dict[str, object]) -> str:
    data = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def render_text(lock: PackageLock) -> str:
    lines = [
        f"# imagekit package lock of {lock.cell}: written by `imagekit lock --packages`.",
        "# Builds of this cell install exactly these files; edit the matrix, not this file.",
        f"# fingerprint: {lock.fingerprint}",
        f"# inputs: {json.dumps(lock.inputs, sort_keys=True)}",
        *(f"# {key}: {value}" for key, value in sorted(lock.resolved_with.items())),
    ]
    for group in LOCK_GROUPS:
        if group == TEAM and not has_team(lock):
            continue  # a lock without team packages reads as it did before the group
        lines.append(f"# [{group}]")
        lines.extend(pin.text() for pin in lock.groups.get(group, ()))
    return "\n".join(lines) + "\n"


def parse(text: str, cell_id: str, where: str = "", platform: str = AMD64) -> PackageLock:
    """The inverse of render_text (`platform`: the one the file's name says); a file it
    cannot read is a UsageError naming the fix.
    Strict: after the header only group lines, `name==version` pins with their
    `--hash=sha256:` entries (continued as the writer continues them) and blank lines; an
    option line (`--index-url`, `-r`, ...) or a comment inside a group is refused."""
    where = where or cell_id
    reader = _Reader(where)
    for number, raw in enumerate(text.split("\n"), 1):
        reader.line(number, raw)
    reader.end()
    return _lock_of(reader.header, reader.sections, cell_id, where, platform)


class _Reader:
    """A lock file read line by line: its header's keys, then each group's pins."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.header: dict[str, str] = {}
        self.sections: dict[str, list[Pin]] = {}
        self.current: list[Pin] | None = None  # the pins of the group being read
        # a pin whose hashes continue: its line, requirement, hashes so far, and group
        self.pending: tuple[int, str, list[str], list[Pin]] | None = None

    def line(self, number: int, raw: str) -> None:
        body, continues = _continued(raw)
        if self.pending is not None:
            self._hashes(number, raw, body, continues)
        elif section := _SECTION.match(raw):
            self._section(number, raw, section["group"])
        elif self.current is None:
            self._header(number, raw)
        elif raw.strip():  # blank lines inside a group are fine
            self._pin(number, raw, body, continues)

    def end(self) -> None:
        if self.pending is not None:
            start, requirement = self.pending[:2]
            raise _bad_line(self.where, start, requirement, "the file ends inside the pin's hashes")

    def _hashes(self, number: int, raw: str, body: str, continues: bool) -> None:
        """A continuation line of the pending pin: its hashes, indented."""
        assert self.pending is not None
        start, requirement, hashes, into = self.pending
        for word in body.split():
            hashes.append(_hash(word, self.where, number, raw))
        if body and not body[0].isspace():
            raise _bad_line(self.where, number, raw, "a pin's hashes continue on indented lines")
        if not continues:
            into.append(_finished(requirement, hashes, self.where, start))
            self.pending = None

    def _section(self, number: int, raw: str, group: str) -> None:
        if group not in LOCK_GROUPS or group in self.sections:
            why = (
                "a group twice"
                if group in self.sections
                else f"no group {group} (only {', '.join(LOCK_GROUPS)})"
            )
            raise _bad_line(self.where, number, raw, why)
        self.current = self.sections[group] = []

    def _header(self, number: int, raw: str) -> None:
        if match := _HEADER.match(raw):
            self.header[match["key"]] = match["value"]
        elif raw.strip() and not raw.startswith("#"):
            raise _bad_line(self.where, number, raw, "a requirement before any group")

    def _pin(self, number: int, raw: str, body: str, continues: bool) -> None:
        assert self.current is not None
        if raw.lstrip().startswith("-"):
            raise _bad_line(
                self.where, number, raw,
                "an option line: a lock holds pins only (an option would change where "
                "packages come from or what else is read)",
            )  # fmt: skip
        if raw.startswith("#"):
            raise _bad_line(
                self.where, number, raw, "a comment inside a group (the writer writes none)"
            )
        words = body.split()
        if not PIN.fullmatch(words[0]) or not _valid_version(words[0].split("==", 1)[1]):
            raise _bad_line(self.where, number, raw, "not `name==version --hash=sha256:...`")
        hashes = [_hash(word, self.where, number, raw) for word in words[1:]]
        if continues:
            self.pending = (number, words[0], hashes, self.current)
        else:
            self.current.append(_finished(words[0], hashes, self.where, number))


def _lock_of(
    header: dict[str, str], sections: dict[str, list[Pin]], cell_id: str, where: str, platform: str
) -> PackageLock:
    """The lock a file's header and groups make, its fingerprint checked against its inputs."""
    try:
        inputs = json.loads(header.pop("inputs"))
        stated = header.pop("fingerprint")
    except KeyError as exc:
        raise unreadable(where, f"no `# {exc.args[0]}:` line") from None
    except ValueError as exc:
        raise unreadable(where, str(exc)[:200]) from None
    except RecursionError:
        raise unreadable(where, "its inputs are nested too deeply") from None
    if not isinstance(inputs, dict):
        raise unreadable(where, "its inputs are not a JSON object")
    pins = {g: tuple(sections.get(g, ())) for g in LOCK_GROUPS if g != TEAM or TEAM in sections}
    lock = PackageLock(cell_id, inputs, header, pins, platform)
    if lock.fingerprint != stated:
        raise unreadable(where, "its fingerprint does not match its inputs (edited by hand?)")
    return lock


def _continued(raw: str) -> tuple[str, bool]:
    """A physical line without its trailing ` \\`, and whether the next line continues it."""
    stripped = raw.rstrip()
    if stripped.endswith("\\"):
        return stripped[:-1].rstrip(), True
    return stripped, False


def _hash(word: str, where: str, number: int, raw: str) -> str:
    match = HASH.fullmatch(word)
    if not match:
        raise _bad_line(where, number, raw, "after `name==version` only `--hash=sha256:<64 hex>`")
    return match["digest"]


def _finished(requirement: str, hashes: list[str], where: str, number: int) -> Pin:
    if not hashes:
        raise _bad_line(where, number, requirement, "every pin needs sha256 hashes")
    return Pin(requirement, tuple(hashes), number)


def _valid_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def unreadable(where: str, why: str) -> UsageError:
    return UsageError(f"{where}: not a valid package lock ({why}); run `imagekit lock --packages`")


def _bad_line(where: str, number: int, line: str, why: str) -> UsageError:
    """The file, the line's number and text (credentials masked, control characters escaped,
    cut at 120 characters), what is wrong, and the fix."""
    shown = escape(mask(line.strip()))[:120]  # escaped first: the cut keeps whole escapes short
    return UsageError(
        f"{where}:{number}: {shown}: {why}; not a valid package lock: regenerate it with "
        "`imagekit lock --packages`"
    )


def verify(lock: PackageLock, cell: Cell, where: str) -> None:
    """The pins against the cell (the fingerprint covers only the inputs):
    - torch and torchvision are pinned to the cell's versions (a local part such as +cu126
      must be the cell's variant), in the torch group; a torchvision the cell does not ask
      for is refused;
    - the cuda group holds only NVIDIA's CUDA library wheels (lockfile.is_cuda_library), and
      they are in no other group;
    - no package is pinned twice;
    - the torch group holds only the cell's torch requirements and what torch, torchvision
      and triton depend on (TORCH_DEPENDENCIES). That list is fixed in imagekit, not read
      from the lock (whose every byte a pull request controls) nor from an index (a check
      must work offline): an unrelated pin added there is refused. The features group's
      packages depend on the features and cannot be known without resolving: there only
      the group rules hold, and the diff is for review.
    Raises a UsageError naming the file, the line and the fix."""
    wanted = {canonicalize_name(Requirement(r).name): r for r in cell.torch_requirements}
    allowed = set(wanted) | TORCH_DEPENDENCIES
    seen: dict[str, int] = {}
    for group in GROUPS:
        for pin in lock.groups.get(group, ()):
            why = _misplaced(pin, group, allowed, seen)
            if why:
                raise _bad_line(where, pin.line, pin.requirement, why)
            seen[pin.name] = pin.line
    _verify_team(lock, seen, where)
    torch_pins = {p.name: p for p in lock.groups.get("torch", ())}
    for name in ("torch", "torchvision"):
        pin = torch_pins.get(name)
        if name not in wanted:
            continue  # a torchvision the cell does not ask for is refused above
        expected = wanted[name].split("==", 1)[1]  # the matrix pins them: torch==X
        if pin is None:
            raise unreadable(
                where, f"no {name} pin in the torch group; the cell asks for {wanted[name]}"
            )
        why = _version_mismatch(pin.version, expected, cell.variant)
        if why:
            raise _bad_line(where, pin.line, pin.requirement, f"{name}: {why}")


def _verify_team(lock: PackageLock, below: dict[str, int], where: str) -> None:
    """The team group is installed over the groups below: it may pin another version of
    their packages (numpy, a newer one), never of the stack (torch's family, a CUDA library
    a group below pins): the build constrains those, so such a pin is a lock made by hand."""
    seen: dict[str, int] = {}
    team = lock.groups.get(TEAM, ())
    if team and not has_team(lock):
        raise _bad_line(
            where, team[0].line, team[0].requirement,
            "a team group in a lock whose team packages are not locked (the source "
            "package's dependencies are not static; a lock made by hand?)",
        )  # fmt: skip
    for pin in team:
        name = pin.name
        why = ""
        if name in seen:
            why = f"{name} is pinned twice (first on line {seen[name]})"
        elif team_install.is_stack(name) and name in below:
            why = (
                f"{name} is the cell's stack (pinned on line {below[name]}): the team's "
                "packages install under it and never move it"
            )
        if why:
            raise _bad_line(where, pin.line, pin.requirement, why)
        seen[name] = pin.line


def _misplaced(pin: Pin, group: str, allowed: set[str], seen: dict[str, int]) -> str:
    name = pin.name
    if name in seen:
        return f"{name} is pinned twice (first on line {seen[name]})"
    cuda = is_cuda_library(pin.requirement)
    if group == "cuda" and not cuda:
        return "the cuda group holds only NVIDIA's CUDA library wheels (nvidia-*)"
    if group != "cuda" and cuda:
        return f"a CUDA library belongs in the cuda group, not the {group} group"
    if name in ("torch", "torchvision") and name not in allowed:
        return f"the cell asks for no {name}"
    if name in ("torch", "torchvision") and group != "torch":
        return f"{name} belongs in the torch group, not the {group} group"
    if group == "torch" and name not in allowed:
        return (
            f"{name} is neither one of the cell's torch requirements nor a package torch "
            "depends on: the torch group holds what torch's resolution brings, nothing added"
        )
    return ""


def _version_mismatch(pinned: str, expected: str, variant: str) -> str:
    """'' when `pinned` is `expected` (public part), its local part if any the variant."""
    version = Version(pinned)
    if version.public != Version(expected).public:
        return f"pinned {pinned}, the cell's is {expected}"
    if version.local is not None and version.local != variant:
        return f"pinned {pinned}: the local part +{version.local} is not the cell's {variant}"
    return ""
