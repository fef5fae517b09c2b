"""Package locks: each cell's resolved Python packages, pinned with hashes, beside images.lock.

`imagekit lock --packages` resolves, on this machine and with uv, what groups.py resolves
inside the build (torch's requirements, then the features' against those pins) and writes
`packages.lock/<cell>.txt` beside images.lock: the inputs it was resolved from, their
fingerprint, and the pins with every file's sha256, in the venv's layer groups
(groups.split). A build of a cell with a lock stages it into the context
(imagekit/locked/<group>.txt); groups.py then copies those files instead of resolving, and
the runtime's installs check every wheel against its hashes (pip turns hash checking on for
a file with hashes, and then requires one for every requirement; uv checks them).

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

from imagekit.build import groups
from imagekit.errors import ImagekitError, StaleError, UsageError
from imagekit.matrix.cells import Cell
from imagekit.paths import UnsafeFile, read_checked, write_atomic

DIRNAME = "packages.lock"
FORMAT = 1
# The platform the lock resolves for: glibc 2.28 covers every OS imagekit builds on
# (Debian 12: 2.36, Ubuntu 20.04: 2.31) and is what torch's wheels are tagged with.
PLATFORM = "x86_64-manylinux_2_28"
GROUPS = groups.GROUPS
_HEADER = re.compile(r"^# (?P<key>[a-z-]+): (?P<value>.*)$")
_SECTION = re.compile(r"^# \[(?P<group>[a-z]+)\]$")


class ResolveError(ImagekitError):
    """An index could not be reached, or the requirements cannot be resolved."""

    exit_code = 9


@dataclass(frozen=True)
class Pin:
    """`name==version` and the sha256 of each file that may be installed for it."""

    requirement: str
    hashes: tuple[str, ...]

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)

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
    """The inverse of render_text; a file it cannot read is a UsageError naming the fix."""
    where = where or cell_id
    header: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.replace("\\\n", " ").splitlines():
        section = _SECTION.match(line)
        if section:
            current = sections.setdefault(section["group"], [])
        elif (match := _HEADER.match(line)) and current is None:
            header[match["key"]] = match["value"]
        elif line.strip() and not line.startswith("#"):
            if current is None:
                raise _unreadable(where, f"a requirement before any group: {line[:80]}")
            current.append(line)
    try:
        inputs = json.loads(header.pop("inputs"))
        stated = header.pop("fingerprint")
        pins = {g: tuple(_pin(line) for line in sections.get(g, ())) for g in GROUPS}
    except KeyError as exc:
        raise _unreadable(where, f"no `# {exc.args[0]}:` line") from None
    except ValueError as exc:
        raise _unreadable(where, str(exc)[:200]) from None
    except RecursionError:
        raise _unreadable(where, "its inputs are nested too deeply") from None
    if not isinstance(inputs, dict):
        raise _unreadable(where, "its inputs are not a JSON object")
    lock = PackageLock(cell_id, inputs, header, pins)
    if lock.fingerprint != stated:
        raise _unreadable(where, "its fingerprint does not match its inputs (edited by hand?)")
    return lock


def _pin(line: str) -> Pin:
    words = line.split()
    if not words or "==" not in words[0] or any(not w.startswith("--hash=") for w in words[1:]):
        raise ValueError(f"not `name==version --hash=sha256:...`: {line[:80]}")
    hashes = tuple(w.removeprefix("--hash=sha256:") for w in words[1:])
    if not hashes or any(not re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes):
        raise ValueError(f"{words[0]}: every pin needs sha256 hashes")
    return Pin(words[0], hashes)


def _unreadable(where: str, why: str) -> UsageError:
    return UsageError(f"{where}: not a valid package lock ({why}); run `imagekit lock --packages`")


def read(folder: Path, cell_id: str) -> PackageLock | None:
    path = lock_path(folder, cell_id)
    data = read_checked(path, "package lock")
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(str(path), f"not UTF-8 text at byte {exc.start}") from None
    return parse(text, cell_id, str(path))


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
            locks.append(resolve(cell, resolver, index, wheelhouse))
        except ResolveError as exc:
            raise ResolveError(
                f"{cell.id}: its packages could not be resolved from "
                f"{torch_source(cell, index) or 'PyPI'}; nothing was "
                f"written. Fix: lock where the index is reachable, or resolve torch from a "
                f"wheelhouse (`imagekit lock --packages --torch-index none --wheelhouse DIR`)."
                f"\n{exc}"
            ) from None
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
        for key in sorted(set(current) | set(lock.inputs)):
            if current.get(key) != lock.inputs.get(key):
                locked = json.dumps(lock.inputs.get(key))[:200]
                problems.append(
                    f"{path}: {key}: locked {locked}, the matrix now "
                    f"says {json.dumps(current.get(key))}; run `imagekit lock --packages`"
                )
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
