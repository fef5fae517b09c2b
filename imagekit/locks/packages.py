"""Package locks: each cell's resolved Python packages, pinned with hashes, beside images.lock.

`imagekit lock --packages` resolves, on this machine and with uv, what groups.py resolves
inside the build (torch's requirements, then the features' against those pins) and writes
one lock per platform of the cell beside images.lock: `packages.lock/<cell>.txt` for
linux/amd64, `packages.lock/<cell>.linux-arm64.txt` for linux/arm64 (each resolved for its
platform's wheels, with its platform's torch index): the inputs it was resolved from, their
fingerprint, and the pins with every file's sha256, in the venv's layer groups
(groups.split). A build of a cell with a lock stages it into the context (amd64's as
imagekit/locked/<group>.txt, arm64's as imagekit/locked/linux-arm64/<group>.txt); groups.py,
running under the build's target architecture, copies its machine's files instead of
resolving, and the runtime's installs check every wheel against its hashes (pip turns hash
checking on for a file with hashes, and then requires one for every requirement; uv checks
them). A cell's locks go together: one of some of its platforms only is stale.

The fingerprint covers only the inputs; the pins are checked against the cell wherever a lock
is read for use (`lock --check`, `render --check`, `stage`, `build`; see `verify`): hashes
prove a wheel is the one locked, not that the lock pins what the cell asks for.

Only cells whose venv is installed in layers (`venv_layers: split`) are locked: the others
compile against the builder's torch step by step. The team's packages (`pip:`, the
`requirements:` files, the source package's [project].dependencies) are the lock's `team`
group, resolved last with the stack (torch's family and the CUDA libraries of the groups
above, team_install.is_stack) as constraints, as the build installs them; their inputs are
the lock's `team` and `source-package` keys (absent for a cell without them, so its lock
reads as before). A source package whose dependencies are not static (setup.py, dynamic)
leaves the team's packages unlocked: the lock holds the cuda, torch and features groups with
their hashes as ever, its inputs say `"source-package": null`, it has no team group, and the
build's team step resolves the team's packages and the source package under the stack's
constraints, without hashes (team_install.py, as for a cell without a lock).

resolving.py resolves the locks; here they are named, read, staged and checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from imagekit.buildtime.lockfile import LOCK_GROUPS, LOCKED_FOLDERS, TEAM
from imagekit.errors import StaleError, UsageError
from imagekit.locks.package_file import (
    FORMAT,
    PackageLock,
    has_team,
    parse,
    render_text,
    unreadable,
    verify,
)
from imagekit.matrix.cells import Cell
from imagekit.paths import UnsafeFile, read_checked, write_atomic
from imagekit.platforms import AMD64, ARM64, PLATFORMS

DIRNAME = "packages.lock"
# What each platform's lock resolves for (uv's --python-platform): glibc 2.28 covers every
# OS imagekit builds on (Debian 12: 2.36, Ubuntu 20.04: 2.31) and is what torch's wheels
# are tagged with, x86_64 and aarch64 alike.
PYTHON_PLATFORMS = {AMD64: "x86_64-manylinux_2_28", ARM64: "aarch64-manylinux_2_28"}
PLATFORM = PYTHON_PLATFORMS[AMD64]  # what every lock resolved for before arm64 had its own
# Each platform's lock file, after the cell's id: amd64's keeps the name it had before locks
# were per platform, so those locks stay valid.
SUFFIXES = {AMD64: ".txt", ARM64: ".linux-arm64.txt"}
# Where each platform's group files go in the build context's imagekit/locked/: amd64's at
# the top (a cell built for amd64 alone stages what it always did), arm64's in a folder of
# its own. groups.py, sbom_writer.py and team_install.py pick theirs by the machine they run
# on (`uname -m`): LOCKED_FOLDERS, by machine, is the one list.
STAGED = {AMD64: LOCKED_FOLDERS["x86_64"], ARM64: LOCKED_FOLDERS["aarch64"]}


def default_dir(images_lock: Path) -> Path:
    return images_lock.parent / DIRNAME


def lock_path(folder: Path, cell_id: str, platform: str = AMD64) -> Path:
    return folder / f"{cell_id}{SUFFIXES[platform]}"


def file_of(name: str) -> tuple[str, str]:
    """A lock file's name -> (cell id, platform); the longest suffix first (every name
    ends in .txt, amd64's)."""
    for platform, suffix in sorted(SUFFIXES.items(), key=lambda item: -len(item[1])):
        if name.endswith(suffix):
            return name[: -len(suffix)], platform
    raise ValueError(f"{name}: not a package lock's name")


def lockable(cell: Cell) -> bool:
    return cell.venv_layers == "split"


def team_locked(cell: Cell) -> bool:
    """Whether the cell's lock holds a team group: it has team packages, and a source
    package's dependencies (if it has one) are static."""
    return cell.team_packages and cell.source_dependencies is not None


def not_locked_why(cell: Cell) -> str:
    """Why lock --packages leaves an unlockable cell alone, for its note."""
    return "its venv is one layer: it compiles"


def team_not_locked_note(cell: Cell) -> str:
    """The note of a locked cell whose team packages stay unlocked (team_locked)."""
    return (
        f"{cell.id}: the team's packages are not locked (its source package's dependencies "
        "are not static: setup.py, or dynamic in pyproject.toml; list them in "
        "[project].dependencies to lock them): the build installs them under the stack's "
        "constraints without hashes; cuda, torch and features are locked"
    )


def cell_torch_index(cell: Cell, platform: str = AMD64) -> str:
    """Where the cell's torch comes from on `platform` ("" for PyPI): arm64's where it is
    not amd64's (Cell.arm64_torch_index), else the cell's one index."""
    if platform == ARM64 and cell.arm64_torch_index is not None:
        return cell.arm64_torch_index
    return cell.torch_index or ""


def inputs_of(cell: Cell, platform: str = AMD64) -> dict[str, object]:
    """What the matrix says the cell's packages are resolved from on `platform`: a change to
    any of these makes its lock stale. amd64's are what they were before arm64 had a lock."""
    return {
        "format": FORMAT,
        "python": cell.python,
        "os": cell.os,
        "platform": PYTHON_PLATFORMS[platform],
        "torch-index": cell_torch_index(cell, platform),
        "torch": list(cell.torch_requirements),
        "features": [list(step.requirements) for step in cell.feature_steps],
        **team_inputs(cell),
    }


def team_inputs(cell: Cell) -> dict[str, object]:
    """The team's packages as the lock's inputs; none for a cell without them (its lock's
    fingerprint is then what it was before the team group existed)."""
    if not cell.team_packages:
        return {}
    inputs: dict[str, object] = {"team": list(cell.team_requirements)}
    if cell.source_package:
        deps = cell.source_dependencies
        inputs["source-package"] = list(deps) if deps is not None else None
    return inputs


def team_requirements(cell: Cell) -> list[str]:
    """What the team group resolves: the team's requirements, then the source package's."""
    found = list(cell.team_requirements)
    found += [d for d in cell.source_dependencies or () if d not in found]
    return found


def read(
    folder: Path, cell_id: str, cell: Cell | None = None, platform: str = AMD64
) -> PackageLock | None:
    """The cell's lock of `platform`, parsed, its inputs' platform checked against the
    file's name; with `cell`, its pins verified against the cell."""
    path = lock_path(folder, cell_id, platform)
    data = read_checked(path, "package lock")
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise unreadable(str(path), f"not UTF-8 text at byte {exc.start}") from None
    lock = parse(text, cell_id, str(path), platform)
    _check_platform(lock, path)
    if cell is not None:
        verify(lock, cell, str(path))
    return lock


def _check_platform(lock: PackageLock, path: Path) -> None:
    """The fingerprint covers the inputs, not the file's name: another platform's lock
    copied under this name keeps a valid fingerprint and would install the wrong wheels."""
    wanted = PYTHON_PLATFORMS[lock.platform]
    found = lock.inputs.get("platform")
    if found != wanted:
        raise UsageError(
            f"{path}: platform: {json.dumps(found)[:100]}, but this file is the "
            f"{lock.platform} lock (its name says so), resolved for {json.dumps(wanted)} "
            "(another platform's lock copied or edited?); not a valid package lock: "
            "regenerate it with `imagekit lock --packages`"
        )


def read_all(folder: Path, cell: Cell) -> dict[str, PackageLock]:
    """The cell's lock of each of its platforms, verified; {} for an unlocked cell. Locks of
    some of its platforms only are refused: the build of the others would resolve."""
    if not lockable(cell):
        return {}
    locks = {p: lock for p in cell.platforms if (lock := read(folder, cell.id, cell, p))}
    missing = [p for p in cell.platforms if p not in locks]
    if locks and missing:
        raise StaleError(*stale_message([_missing(folder, cell, p, locks) for p in missing]))
    return locks


def _missing(folder: Path, cell: Cell, platform: str, locked: Iterable[str]) -> str:
    return (
        f"{lock_path(folder, cell.id, platform)}: missing: {cell.id} is built for "
        f"{', '.join(cell.platforms)}, and only {', '.join(locked)} is locked; run "
        "`imagekit lock --packages` (it locks every platform of the cell)"
    )


def write(folder: Path, lock: PackageLock) -> bool:
    return write_atomic(lock_path(folder, lock.cell, lock.platform), render_text(lock))


def group_files(lock: PackageLock) -> dict[str, str]:
    """The group files groups.py copies (cuda.txt, torch.txt, features.txt), and the team's
    that team_install.py installs (team.txt, for a lock that has the group)."""
    return {
        g: "".join(p.text() + "\n" for p in lock.groups.get(g, ()))
        for g in LOCK_GROUPS
        if g != TEAM or has_team(lock)
    }


def staged_files(locks: dict[str, PackageLock]) -> dict[str, str]:
    """Each platform's group files by their path under the context's imagekit/locked/:
    amd64's at the top, arm64's under linux-arm64/ (STAGED)."""
    files = {}
    for platform in PLATFORMS:
        if platform in locks:
            folder = STAGED[platform]
            for group, text in group_files(locks[platform]).items():
                files[f"{folder}/{group}.txt" if folder else f"{group}.txt"] = text
    return files


# --- checking -------------------------------------------------------------------------------


def stale(cells: Sequence[Cell], folder: Path, whole_matrix: bool) -> list[str]:
    """Each lock that no longer matches its cell: field, locked value, current value; a
    platform of a locked cell without its lock; a lock of a platform the cell is not built
    for."""
    problems = []
    for cell in cells:
        problems += _cell_problems(cell, folder)
    if whole_matrix and folder.is_dir():
        ids = {c.id for c in cells}
        for path in sorted(folder.glob("*.txt")):
            cell_id = file_of(path.name)[0]
            if cell_id not in ids:
                problems.append(f"{path}: no cell {cell_id} in the matrix any more; delete it")
    return problems


def _cell_problems(cell: Cell, folder: Path) -> list[str]:
    problems: list[str] = []
    present = set()  # the platforms with a lock file, valid or not
    for platform in PLATFORMS:
        try:
            lock = read(folder, cell.id, platform=platform)
        except UnsafeFile:
            raise  # refused unread (exit 2), not a lock that fell behind
        except UsageError as exc:
            problems.append(str(exc))
            present.add(platform)
            continue
        if lock is not None:
            present.add(platform)
            problems += _lock_problems(lock, cell, lock_path(folder, cell.id, platform))
    locked = [p for p in cell.platforms if p in present]
    if locked and lockable(cell):
        problems += [_missing(folder, cell, p, locked) for p in cell.platforms if p not in locked]
    return problems


def _lock_problems(lock: PackageLock, cell: Cell, path: Path) -> list[str]:
    if lock.platform not in cell.platforms:
        return [
            f"{path}: {cell.id} is not built for {lock.platform} (its `platform`: "
            f"{', '.join(cell.platforms)}); delete the lock"
        ]
    if cell.venv_layers != "split":
        return [
            f"{path}: {cell.id} installs its venv in one layer, which a lock cannot pin; "
            "delete the lock"
        ]
    current = inputs_of(cell, lock.platform)
    moved = [
        k for k in sorted(set(current) | set(lock.inputs)) if current.get(k) != lock.inputs.get(k)
    ]
    problems = [
        f"{path}: {key}: locked {json.dumps(lock.inputs.get(key))[:200]}, the matrix now "
        f"says {json.dumps(current.get(key))}; run `imagekit lock --packages`"
        for key in moved
    ]
    if not moved:  # pins are checked against the matrix the lock was made from
        try:
            verify(lock, cell, str(path))
        except UsageError as exc:
            problems.append(str(exc))
    return problems


def stale_message(problems: Sequence[str]) -> list[str]:
    return ["package locks do not match the matrix:", *(f"  {p}" for p in problems)]


def raise_if_stale(cells: Sequence[Cell], folder: Path, whole_matrix: bool) -> None:
    problems = stale(cells, folder, whole_matrix)
    if problems:
        raise StaleError(*stale_message(problems))
