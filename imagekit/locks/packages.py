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

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from imagekit import terminal
from imagekit.buildtime import groups
from imagekit.contract import exits
from imagekit.errors import ImagekitError, StaleError, UsageError
from imagekit.locks.package_file import (
    FORMAT,
    GROUPS,
    PackageLock,
    Pin,
    parse,
    render_text,
    unreadable,
    verify,
)
from imagekit.matrix.cells import Cell
from imagekit.paths import UnsafeFile, read_checked, write_atomic

DIRNAME = "packages.lock"
# The platform the lock resolves for: glibc 2.28 covers every OS imagekit builds on
# (Debian 12: 2.36, Ubuntu 20.04: 2.31) and is what torch's wheels are tagged with.
PLATFORM = "x86_64-manylinux_2_28"


class ResolveError(ImagekitError):
    """An index could not be reached, or the requirements cannot be resolved."""

    exit_code = exits.RESOLVE


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


def read(folder: Path, cell_id: str, cell: Cell | None = None) -> PackageLock | None:
    """The cell's lock, parsed; with `cell`, its pins verified against the cell."""
    path = lock_path(folder, cell_id)
    data = read_checked(path, "package lock")
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise unreadable(str(path), f"not UTF-8 text at byte {exc.start}") from None
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
            tail = terminal.split(result.stderr.strip())[-30:]
            raise ResolveError(
                f"uv pip compile exited {result.returncode}:", *terminal.foreign(tail)
            )
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
            *exc.lines,
            "Nothing was written. If torch now depends on that package, add its name "
            "to TORCH_DEPENDENCIES in imagekit/locks/packages.py after reading torch's "
            "metadata.",
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
                f"wheelhouse (`imagekit lock --packages --torch-index none --wheelhouse DIR`).",
                *exc.lines,
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


def stale_message(problems: Sequence[str]) -> list[str]:
    return ["package locks do not match the matrix:", *(f"  {p}" for p in problems)]


def raise_if_stale(cells: Sequence[Cell], folder: Path, whole_matrix: bool) -> None:
    problems = stale(cells, folder, whole_matrix)
    if problems:
        raise StaleError(*stale_message(problems))
