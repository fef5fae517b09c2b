"""Package locks: each cell's resolved Python packages, pinned with hashes, beside images.lock.

`imagekit lock --packages` resolves, on this machine and with uv, what groups.py resolves
inside the build (torch's requirements, then the features' against those pins) and writes
`packages.lock/<cell>.txt` beside images.lock: the inputs it was resolved from, their
fingerprint, and the pins with every file's sha256, in the venv's layer groups
(groups.split). A build of a cell with a lock stages it into the context
(imagekit/locked/<group>.txt); groups.py then copies those files instead of resolving, and
the runtime's installs check every wheel against its hashes (pip turns hash checking on for
a file with hashes, and then requires one for every requirement; uv checks them).

The fingerprint covers only the inputs; the pins are checked against the cell wherever a lock
is read for use (`lock --check`, `render --check`, `stage`, `build`; see `verify`): hashes
prove a wheel is the one locked, not that the lock pins what the cell asks for.

Only cells whose venv is installed in layers (`venv_layers: split`) are locked: the others
compile against the builder's torch step by step. Your `pip:` packages are not part of it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagekit.build import groups
from imagekit.contract import exits
from imagekit.errors import ImagekitError, StaleError, UsageError, printable
from imagekit.matrix.cells import Cell
from imagekit.paths import UnsafeFile, read_checked, write_atomic
from imagekit.urls import mask

DIRNAME = "packages.lock"
FORMAT = 1
# The platform the lock resolves for: glibc 2.28 covers every OS imagekit builds on
# (Debian 12: 2.36, Ubuntu 20.04: 2.31) and is what torch's wheels are tagged with.
PLATFORM = "x86_64-manylinux_2_28"
GROUPS = groups.GROUPS
_HEADER = re.compile(r"^# (?P<key>[a-z-]+): (?P<value>.*)$")
_SECTION = re.compile(r"^# \[(?P<group>[a-z]+)\]$")
# A pin as the lock writer writes it: a PEP 508 name, `==`, a version (PEP 440 characters;
# packaging.version then parses it), then only `--hash=sha256:<64 hex>` entries.
_PIN = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>[A-Za-z0-9.+!_-]+)"
)
_HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")

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


class ResolveError(ImagekitError):
    """An index could not be reached, or the requirements cannot be resolved."""

    exit_code = exits.RESOLVE


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

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.inputs)


# requirements, constraints (pins), index ("" none), wheelhouse, Python -> pins with hashes
Resolver = Callable[[Sequence[str], Sequence[str], str, "Path | None", str], list[Pin]]


def default_dir(images_lock: Path) -> Path:
    return images_lock.parent / DIRNAME


def lock_path(folder: Path, cell_id: str) -> Path:
    return folder / f"{cell_id}.txt"


def lockable(cell: Cell) -> bool:
    return cell.venv_layers == "split"


def inputs_of(cell: Cell) -> dict[str, object]:
    """What the matrix says the cell's packages are resolved from: a change to any of these
    makes its lock stale."""
    return {
        "format": FORMAT,
        "python": cell.python,
        "os": cell.os,
        "platform": PLATFORM,
        "torch-index": cell.torch_index or "",
        "torch": list(cell.torch_requirements),
        "features": [list(step.requirements) for step in cell.feature_steps],
    }


def fingerprint(inputs: dict[str, object]) -> str:
    data = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


# --- the file -------------------------------------------------------------------------------


def render_text(lock: PackageLock) -> str:
    lines = [
        f"# imagekit package lock of {lock.cell}: written by `imagekit lock --packages`.",
        "# Builds of this cell install exactly these files; edit the matrix, not this file.",
        f"# fingerprint: {lock.fingerprint}",
        f"# inputs: {json.dumps(lock.inputs, sort_keys=True)}",
        *(f"# {key}: {value}" for key, value in sorted(lock.resolved_with.items())),
    ]
    for group in GROUPS:
        lines.append(f"# [{group}]")
        lines.extend(pin.text() for pin in lock.groups.get(group, ()))
    return "\n".join(lines) + "\n"


def parse(text: str, cell_id: str, where: str = "") -> PackageLock:
    """The inverse of render_text; a file it cannot read is a UsageError naming the fix.
    Strict: after the header only group lines, `name==version` pins with their
    `--hash=sha256:` entries (continued as the writer continues them) and blank lines; an
    option line (`--index-url`, `-r`, ...) or a comment inside a group is refused."""
    where = where or cell_id
    header: dict[str, str] = {}
    sections: dict[str, list[Pin]] = {}
    current: list[Pin] | None = None
    pending: tuple[int, str, list[str], list[Pin]] | None = None  # a pin whose hashes continue
    for number, raw in enumerate(text.split("\n"), 1):
        body, continues = _continued(raw)
        if pending is not None:
            start, requirement, hashes, into = pending
            for word in body.split():
                hashes.append(_hash(word, where, number, raw))
            if body and not body[0].isspace():
                raise _bad_line(where, number, raw, "a pin's hashes continue on indented lines")
            if not continues:
                into.append(_finished(requirement, hashes, where, start))
                pending = None
            continue
        if section := _SECTION.match(raw):
            group = section["group"]
            if group not in GROUPS or group in sections:
                why = (
                    "a group twice"
                    if group in sections
                    else f"no group {group} (only {', '.join(GROUPS)})"
                )
                raise _bad_line(where, number, raw, why)
            current = sections[group] = []
        elif current is None:
            if match := _HEADER.match(raw):
                header[match["key"]] = match["value"]
            elif raw.strip() and not raw.startswith("#"):
                raise _bad_line(where, number, raw, "a requirement before any group")
        elif not raw.strip():
            continue
        elif raw.lstrip().startswith("-"):
            raise _bad_line(
                where, number, raw,
                "an option line: a lock holds pins only (an option would change where "
                "packages come from or what else is read)",
            )  # fmt: skip
        elif raw.startswith("#"):
            raise _bad_line(where, number, raw, "a comment inside a group (the writer writes none)")
        else:
            words = body.split()
            if not _PIN.fullmatch(words[0]) or not _valid_version(words[0].split("==", 1)[1]):
                raise _bad_line(where, number, raw, "not `name==version --hash=sha256:...`")
            hashes = [_hash(word, where, number, raw) for word in words[1:]]
            if continues:
                pending = (number, words[0], hashes, current)
            else:
                current.append(_finished(words[0], hashes, where, number))
    if pending is not None:
        raise _bad_line(where, pending[0], pending[1], "the file ends inside the pin's hashes")
    try:
        inputs = json.loads(header.pop("inputs"))
        stated = header.pop("fingerprint")
    except KeyError as exc:
        raise _unreadable(where, f"no `# {exc.args[0]}:` line") from None
    except ValueError as exc:
        raise _unreadable(where, str(exc)[:200]) from None
    except RecursionError:
        raise _unreadable(where, "its inputs are nested too deeply") from None
    if not isinstance(inputs, dict):
        raise _unreadable(where, "its inputs are not a JSON object")
    pins = {g: tuple(sections.get(g, ())) for g in GROUPS}
    lock = PackageLock(cell_id, inputs, header, pins)
    if lock.fingerprint != stated:
        raise _unreadable(where, "its fingerprint does not match its inputs (edited by hand?)")
    return lock


def _continued(raw: str) -> tuple[str, bool]:
    """A physical line without its trailing ` \\`, and whether the next line continues it."""
    stripped = raw.rstrip()
    if stripped.endswith("\\"):
        return stripped[:-1].rstrip(), True
    return stripped, False


def _hash(word: str, where: str, number: int, raw: str) -> str:
    match = _HASH.fullmatch(word)
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


def _unreadable(where: str, why: str) -> UsageError:
    return UsageError(f"{where}: not a valid package lock ({why}); run `imagekit lock --packages`")


def _bad_line(where: str, number: int, line: str, why: str) -> UsageError:
    """The file, the line's number and text (credentials masked, control characters escaped,
    cut at 120 characters), what is wrong, and the fix."""
    shown = printable(mask(line.strip()))[:120]
    return UsageError(
        f"{where}:{number}: {shown}: {why}; not a valid package lock: regenerate it with "
        "`imagekit lock --packages`"
    )


def verify(lock: PackageLock, cell: Cell, where: str) -> None:
    """The pins against the cell (the fingerprint covers only the inputs):
    - torch and torchvision are pinned to the cell's versions (a local part such as +cu126
      must be the cell's variant), in the torch group; a torchvision the cell does not ask
      for is refused;
    - the cuda group holds only NVIDIA's CUDA library wheels (groups.is_cuda_library), and
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
    torch_pins = {p.name: p for p in lock.groups.get("torch", ())}
    for name in ("torch", "torchvision"):
        pin = torch_pins.get(name)
        if name not in wanted:
            continue  # a torchvision the cell does not ask for is refused above
        expected = wanted[name].split("==", 1)[1]  # the matrix pins them: torch==X
        if pin is None:
            raise _unreadable(
                where, f"no {name} pin in the torch group; the cell asks for {wanted[name]}"
            )
        why = _version_mismatch(pin.version, expected, cell.variant)
        if why:
            raise _bad_line(where, pin.line, pin.requirement, f"{name}: {why}")


def _misplaced(pin: Pin, group: str, allowed: set[str], seen: dict[str, int]) -> str:
    name = pin.name
    if name in seen:
        return f"{name} is pinned twice (first on line {seen[name]})"
    cuda = groups.is_cuda_library(pin.requirement)
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


def read(folder: Path, cell_id: str, cell: Cell | None = None) -> PackageLock | None:
    """The cell's lock, parsed; with `cell`, its pins verified against the cell."""
    path = lock_path(folder, cell_id)
    data = read_checked(path, "package lock")
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(str(path), f"not UTF-8 text at byte {exc.start}") from None
    lock = parse(text, cell_id, str(path))
    if cell is not None:
        verify(lock, cell, str(path))
    return lock


def write(folder: Path, lock: PackageLock) -> bool:
    return write_atomic(lock_path(folder, lock.cell), render_text(lock))


def group_files(lock: PackageLock) -> dict[str, str]:
    """The group files groups.py copies (cuda.txt, torch.txt, features.txt)."""
    return {g: "".join(p.text() + "\n" for p in lock.groups.get(g, ())) for g in GROUPS}


# --- resolving ------------------------------------------------------------------------------


def torch_source(cell: Cell, index: str | None) -> str:
    """The torch index a lock resolves from: `index`, None for the cell's own, "" for none."""
    return (cell.torch_index or "") if index is None else index


def resolve(
    cell: Cell, resolver: Resolver, index: str | None, wheelhouse: Path | None
) -> PackageLock:
    """The cell's pins, resolved as groups.py does: torch first, then the features against
    torch's pins. `index`: None for the cell's own torch index, "" for none."""
    used = torch_source(cell, index)
    torch = resolver(cell.torch_requirements, [], used, wheelhouse, cell.python)
    feature_reqs = [r for step in cell.feature_steps for r in step.requirements]
    features = []
    if feature_reqs:
        constraints = [p.requirement for p in torch]
        features = resolver(feature_reqs, constraints, used, wheelhouse, cell.python)
    by_requirement = {p.requirement: p for p in [*features, *torch]}
    split = groups.split([p.requirement for p in torch], [p.requirement for p in features])
    return PackageLock(
        cell=cell.id,
        inputs=inputs_of(cell),
        resolved_with={
            "resolved-from": (used or "PyPI") + (" + --wheelhouse" if wheelhouse else ""),
        },
        groups={g: tuple(by_requirement[r] for r in split[g]) for g in GROUPS},
    )


def uv_binary() -> str:
    """The uv that imagekit depends on, else one on PATH."""
    try:
        import uv  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if not found:
        raise UsageError(
            "`imagekit lock --packages` resolves with uv, which is not installed: "
            "`pip install uv` (imagekit depends on it; an install with --no-deps lacks it)"
        )
    return found


def uv_resolver(
    requirements: Sequence[str],
    constraints: Sequence[str],
    index: str,
    wheelhouse: Path | None,
    python: str,
    extra: Sequence[str] = (),
) -> list[Pin]:
    """`uv pip compile --generate-hashes` for the cell's Python on Linux x86_64."""
    with tempfile.TemporaryDirectory(prefix="imagekit-lock-") as tmp:
        wanted = Path(tmp) / "requirements.in"
        wanted.write_text("".join(f"{r}\n" for r in requirements))
        command = [
            uv_binary(), "pip", "compile", "--generate-hashes", "--no-header", "--no-annotate",
            "--quiet", "--python-version", python, "--python-platform", PLATFORM,
            "--no-config", *extra,
        ]  # fmt: skip
        if index:
            command += ["--extra-index-url", index]
        if wheelhouse:
            command += ["--find-links", str(wheelhouse)]
        if constraints:
            pinned = Path(tmp) / "constraints.txt"
            pinned.write_text("".join(f"{c}\n" for c in constraints))
            command += ["--constraint", str(pinned)]
        out = Path(tmp) / "pins.txt"
        result = subprocess.run(
            [*command, "-o", str(out), str(wanted)], capture_output=True, text=True, check=False
        )
        if result.returncode:
            raise ResolveError(result.stderr.strip()[-2000:] or f"uv exited {result.returncode}")
        return pins_from_compile(out.read_text())


def pins_from_compile(text: str) -> list[Pin]:
    """`uv pip compile --generate-hashes` output -> pins (markers dropped: one platform)."""
    pins = []
    for line in groups.requirement_lines(text):
        words = line.split()
        requirement = words[0].split(";", 1)[0]
        hashes = tuple(
            w.removeprefix("--hash=sha256:") for w in words if w.startswith("--hash=sha256:")
        )
        pins.append(Pin(requirement, hashes))
    return pins


RESOLVER: Resolver = uv_resolver  # tests put a fake one here


def _verify_resolved(lock: PackageLock, cell: Cell) -> None:
    """A lock is checked before it is written, so `lock --check` never refuses what
    `lock --packages` wrote: a torch that comes to depend on a package imagekit does not know
    fails here, naming it."""
    text = render_text(lock)
    try:
        verify(parse(text, cell.id), cell, f"the lock resolved for {cell.id}")
    except UsageError as exc:
        raise ResolveError(
            f"{exc}\nNothing was written. If torch now depends on that package, add its name "
            "to TORCH_DEPENDENCIES in imagekit/build/packagelock.py after reading torch's "
            "metadata."
        ) from None


def lock_cells(
    cells: Sequence[Cell],
    folder: Path,
    resolver: Resolver,
    index: str | None,
    wheelhouse: Path | None,
) -> list[str]:
    """Resolve every lockable cell, then write them all; one failure writes nothing."""
    locks, notes = [], []
    for cell in cells:
        if not lockable(cell):
            notes.append(f"{cell.id}: packages not locked (its venv is one layer: it compiles)")
            continue
        try:
            lock = resolve(cell, resolver, index, wheelhouse)
        except ResolveError as exc:
            raise ResolveError(
                f"{cell.id}: its packages could not be resolved from "
                f"{torch_source(cell, index) or 'PyPI'}; nothing was "
                f"written. Fix: lock where the index is reachable, or resolve torch from a "
                f"wheelhouse (`imagekit lock --packages --torch-index none --wheelhouse DIR`)."
                f"\n{exc}"
            ) from None
        _verify_resolved(lock, cell)
        locks.append(lock)
    for lock in locks:
        changed = write(folder, lock)
        notes.append(f"{lock_path(folder, lock.cell)}: {'written' if changed else 'unchanged'}")
    return notes


# --- checking -------------------------------------------------------------------------------


def stale(cells: Sequence[Cell], folder: Path, whole_matrix: bool) -> list[str]:
    """Each lock that no longer matches its cell: field, locked value, current value."""
    problems = []
    ids = {c.id for c in cells}
    for cell in cells:
        path = lock_path(folder, cell.id)
        try:
            lock = read(folder, cell.id)
        except UnsafeFile:
            raise  # refused unread (exit 2), not a lock that fell behind
        except UsageError as exc:
            problems.append(str(exc))
            continue
        if lock is None:
            continue
        if not lockable(cell):
            problems.append(
                f"{path}: {cell.id} installs its venv in one layer, which a lock cannot pin; "
                "delete the lock"
            )
            continue
        current = inputs_of(cell)
        moved = [
            k
            for k in sorted(set(current) | set(lock.inputs))
            if current.get(k) != lock.inputs.get(k)
        ]
        for key in moved:
            locked = json.dumps(lock.inputs.get(key))[:200]
            problems.append(
                f"{path}: {key}: locked {locked}, the matrix now "
                f"says {json.dumps(current.get(key))}; run `imagekit lock --packages`"
            )
        if not moved:  # pins are checked against the matrix the lock was made from
            try:
                verify(lock, cell, str(path))
            except UsageError as exc:
                problems.append(str(exc))
    if whole_matrix and folder.is_dir():
        for path in sorted(folder.glob("*.txt")):
            if path.stem not in ids:
                problems.append(f"{path}: no cell {path.stem} in the matrix any more; delete it")
    return problems


def stale_message(problems: Sequence[str]) -> str:
    return "package locks do not match the matrix:\n" + "".join(f"  {p}\n" for p in problems)


def raise_if_stale(cells: Sequence[Cell], folder: Path, whole_matrix: bool) -> None:
    problems = stale(cells, folder, whole_matrix)
    if problems:
        raise StaleError(stale_message(problems))
