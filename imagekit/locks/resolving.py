"""Resolving a cell's package locks with uv: torch's pins, the features' against them, the team's.

`imagekit lock --packages` (lock_cells) resolves every lockable cell for each of its
platforms and writes the locks packages.py reads and checks.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from imagekit import terminal
from imagekit.buildtime import groups, team_install
from imagekit.buildtime.lockfile import GROUPS
from imagekit.contract import exits
from imagekit.errors import ImagekitError, UsageError
from imagekit.locks.package_file import PackageLock, Pin, parse, render_text, verify
from imagekit.locks.packages import (
    PLATFORM,
    PYTHON_PLATFORMS,
    cell_torch_index,
    inputs_of,
    lock_path,
    lockable,
    not_locked_why,
    team_locked,
    team_not_locked_note,
    team_requirements,
    write,
)
from imagekit.matrix.cells import Cell
from imagekit.platforms import AMD64


class ResolveError(ImagekitError):
    """An index could not be reached, or the requirements cannot be resolved."""

    exit_code = exits.RESOLVE


class TeamConflict(ResolveError):
    """The team's packages ask for another stack than the cell's (says who and what)."""


# requirements, constraints (pins), index ("" none), wheelhouse, Python, platform (uv's
# --python-platform, a PYTHON_PLATFORMS value) -> pins with hashes
Resolver = Callable[[Sequence[str], Sequence[str], str, "Path | None", str, str], list[Pin]]


def torch_source(cell: Cell, index: str | None, platform: str = AMD64) -> str:
    """The torch index a lock resolves from: `index`, None for the cell's own on `platform`
    (as the build's TORCH_INDEX_URL and TORCH_INDEX_URL_ARM64), "" for none. --torch-index
    stands for both platforms' index, as `build --torch-index` does."""
    return cell_torch_index(cell, platform) if index is None else index


def resolve(
    cell: Cell,
    resolver: Resolver,
    index: str | None,
    wheelhouse: Path | None,
    platform: str = AMD64,
) -> PackageLock:
    """The cell's pins on `platform`, resolved as groups.py does there: torch first, then the
    features against torch's pins. `index`: None for the cell's own torch index, "" for none."""
    used = torch_source(cell, index, platform)
    tag = PYTHON_PLATFORMS[platform]
    torch = resolver(cell.torch_requirements, [], used, wheelhouse, cell.python, tag)
    feature_reqs = [r for step in cell.feature_steps for r in step.requirements]
    features = []
    if feature_reqs:
        constraints = [p.requirement for p in torch]
        features = resolver(feature_reqs, constraints, used, wheelhouse, cell.python, tag)
    by_requirement = {p.requirement: p for p in [*features, *torch]}
    split = groups.split([p.requirement for p in torch], [p.requirement for p in features])
    layered = {g: tuple(by_requirement[r] for r in split[g]) for g in GROUPS}
    if team_locked(cell):
        layered["team"] = _team_pins(cell, resolver, [*torch, *features], used, wheelhouse, tag)
    return PackageLock(
        cell=cell.id,
        inputs=inputs_of(cell, platform),
        resolved_with={
            "resolved-from": (used or "PyPI") + (" + --wheelhouse" if wheelhouse else ""),
        },
        groups=layered,
        platform=platform,
    )


def _team_pins(
    cell: Cell,
    resolver: Resolver,
    below: list[Pin],
    index: str,
    wheelhouse: Path | None,
    tag: str,
) -> tuple[Pin, ...]:
    """The team group: the team's requirements resolved with the stack pinned (as
    team_install.py pins it in the build), less what the groups below already pin alike.
    A pin of another version than below is kept: the team's step installs it over them."""
    stack = [p.requirement for p in below if team_install.is_stack(p.name)]
    try:
        resolved = resolver(team_requirements(cell), stack, index, wheelhouse, cell.python, tag)
    except ResolveError as exc:
        held = {p.name: p.version for p in below if team_install.is_stack(p.name)}
        named = team_install.diagnose("\n".join(exc.lines), held, cell.python)
        raise TeamConflict(
            f"{cell.id}: the team's packages could not be resolved under the cell's stack "
            f"({', '.join(f'{n} {v}' for n, v in held.items())}; Python {cell.python}); "
            "nothing was written. Fix: relax the requirement named below, or lock them in a "
            "cell whose stack they accept.",
            *named,
            *exc.lines,
        ) from None
    already = {p.requirement for p in below}
    return tuple(sorted((p for p in resolved if p.requirement not in already), key=_by_name))


def _by_name(pin: Pin) -> str:
    return pin.name


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
    platform: str = PLATFORM,
    extra: Sequence[str] = (),
) -> list[Pin]:
    """`uv pip compile --generate-hashes` for the cell's Python on `platform` (a
    PYTHON_PLATFORMS value: Linux x86_64 or aarch64)."""
    with tempfile.TemporaryDirectory(prefix="imagekit-lock-") as tmp:
        wanted = Path(tmp) / "requirements.in"
        wanted.write_text("".join(f"{r}\n" for r in requirements))
        command = [
            uv_binary(), "pip", "compile", "--generate-hashes", "--no-header", "--no-annotate",
            "--quiet", "--python-version", python, "--python-platform", platform,
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
    where = f"the lock resolved for {cell.id}{_on(cell, lock.platform)}"
    try:
        verify(parse(text, cell.id, platform=lock.platform), cell, where)
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
    """Resolve every lockable cell for each of its platforms, then write them all; one
    failure writes nothing."""
    locks, notes = [], []
    for cell in cells:
        if not lockable(cell):
            notes.append(f"{cell.id}: packages not locked ({not_locked_why(cell)})")
            continue
        if cell.team_packages and not team_locked(cell):
            notes.append(team_not_locked_note(cell))
        for platform in cell.platforms:
            lock = _resolved(cell, resolver, index, wheelhouse, platform)
            _verify_resolved(lock, cell)
            locks.append(lock)
    for lock in locks:
        changed = write(folder, lock)
        path = lock_path(folder, lock.cell, lock.platform)
        notes.append(f"{path}: {'written' if changed else 'unchanged'}")
    return notes


def _resolved(
    cell: Cell, resolver: Resolver, index: str | None, wheelhouse: Path | None, platform: str
) -> PackageLock:
    try:
        return resolve(cell, resolver, index, wheelhouse, platform)
    except TeamConflict:
        raise
    except ResolveError as exc:
        raise ResolveError(
            f"{cell.id}{_on(cell, platform)}: its packages could not be resolved from "
            f"{torch_source(cell, index, platform) or 'PyPI'}; nothing was "
            f"written. Fix: lock where the index is reachable, or resolve torch from a "
            f"wheelhouse (`imagekit lock --packages --torch-index none --wheelhouse DIR`).",
            *exc.lines,
        ) from None


def _on(cell: Cell, platform: str) -> str:
    """' (linux/arm64)' in messages about a cell of several platforms (or another than
    amd64); '' for a cell built for amd64 alone, whose messages read as they always did."""
    return "" if cell.platforms == (AMD64,) else f" ({platform})"
