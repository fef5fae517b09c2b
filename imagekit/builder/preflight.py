"""Before `imagekit build` builds anything: the selection's target and tags checked, the base
images this engine cannot have found (what would make them buildable said), and the
bootstrappable ones made with debootstrap."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imagekit import terminal
from imagekit.builder import bases as base
from imagekit.builder.build_plan import platforms_for
from imagekit.contract.refs import parse
from imagekit.engine.interface import BuildEngine, BuildRegistryEngine
from imagekit.errors import BuildError, UsageError
from imagekit.matrix.cells import Cell
from imagekit.matrix.ref_checks import check_tag
from imagekit.platforms import PLATFORMS


def check_target(cells: Sequence[Cell], target: str) -> None:
    """Only cells that build pip packages with `build_apt` have a `packages` stage (the rest
    install them in the runtime); say so before building any."""
    without = [c.id for c in cells if target == "packages" and c.pip_stage != "packages"]
    if without:
        raise UsageError(
            f"--target packages: {', '.join(without)} has no packages stage (only cells with "
            "both `pip:` and `build_apt:` build their pip packages there; the others install "
            "them in the runtime stage); use --target builder or runtime, or select only "
            "cells with `build_apt:`"
        )


def check_tag_suffix(cells: Sequence[Cell], suffix: str) -> None:
    """Every tag with the suffix must still be a Docker tag (at most 128 characters)."""
    for cell in cells:
        for ref in cell.tags:
            try:
                check_tag(f"{parse(ref).tag}{suffix}")
            except ValueError as exc:
                raise UsageError(
                    f"--tag-suffix {suffix!r}: {cell.id}'s tag {ref} with it: {exc}; "
                    "use a shorter suffix"
                ) from None


def preflight(
    engine: BuildRegistryEngine,
    cells: Sequence[Cell],
    bootstrap: bool,
    keep_going: bool,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, str]:
    """Before building anything: which cells' base images cannot be had here, or lack a
    platform a cell is built for (`platforms`: each cell's, by id; default: what a build
    without --platform makes), and what would make them buildable. A base lacking a
    platform is refused (exit 2): BuildKit would build on another platform's base and give
    an image whose config says one platform over another's files. Without --keep-going a
    missing base stops the run; with it, the other cells build and these are reported as not
    attempted. --bootstrap-base makes what is missing of the Debian bases (bootstrap_missing)."""
    suites = base.bootstrappable()
    can_bootstrap = set(suites) if bootstrap else set()
    pinned = {base.unpinned(r): r for c in cells for r in base.base_refs(c) if "@" in r}
    found = base.find_bases(engine, base.bases_of(cells), can_bootstrap, pinned)
    needs = platforms_of(cells, platforms)
    missing = {
        ref: f.why for ref, f in found.items() if f.where == "missing" and ref not in can_bootstrap
    }
    lacking = {
        ref: line
        for ref, f in sorted(found.items())
        if (line := _lacking(engine, ref, f, needs[ref], can_bootstrap))
    }
    if lacking:
        on = [
            c.id
            for c in cells
            if any(found[r].lacks(_wanted(c, platforms)) for r in _unpinned(c) if r in lacking)
        ]
        raise UsageError(*lacking.values(), f"Cells that need them: {', '.join(on)}")
    unbuildable = {}
    for cell in cells:
        gone = [r for r in _unpinned(cell) if r in missing]
        if gone:
            unbuildable[cell.id] = "; ".join(
                f"base {r}: {missing[r]}. Fix: {base.fixes_for(r, suites)}" for r in gone
            )
    if unbuildable and not keep_going:
        raise BuildError(*_unbuildable_message(cells, unbuildable, missing, suites))
    return unbuildable


def _unpinned(cell: Cell) -> list[str]:
    return [base.unpinned(r) for r in base.base_refs(cell)]


def _wanted(cell: Cell, platforms: Mapping[str, tuple[str, ...]] | None) -> tuple[str, ...]:
    """The platforms this run builds of `cell`."""
    return platforms[cell.id] if platforms else platforms_for(cell, ())


def platforms_of(
    cells: Sequence[Cell], platforms: Mapping[str, tuple[str, ...]] | None = None
) -> dict[str, tuple[str, ...]]:
    """Each base's platforms that some cell using it is built for, in PLATFORMS' order."""
    needs: dict[str, set[str]] = {}
    for cell in cells:
        for ref in _unpinned(cell):
            needs.setdefault(ref, set()).update(_wanted(cell, platforms))
    return {ref: tuple(sorted(p, key=_order)) for ref, p in needs.items()}


def _order(platform: str) -> tuple[int, str]:
    return (PLATFORMS.index(platform) if platform in PLATFORMS else len(PLATFORMS), platform)


def _lacking(
    engine: BuildEngine,
    ref: str,
    found: base.BaseFound,
    needed: tuple[str, ...],
    bootstrap: set[str],
) -> str:
    """Why `ref` cannot serve every platform its cells are built for ("" where it can, or
    where --bootstrap-base adds what it lacks)."""
    lacks = found.lacks(needed) if found.where != "missing" else []
    if not lacks:
        return ""
    where = "on this engine" if found.where == "local" else "in its registry"
    has = ", ".join(found.platforms)
    head = (
        f"base {ref} ({where}) has {has}, not {', '.join(lacks)}, which its cells are built "
        f"for: BuildKit would build them on {has} files under a {lacks[0]} config; nothing "
        "was built"
    )
    debian = found.where == "local" and ref in base.bootstrappable()
    if debian and not engine.holds_multi_platform():
        return (
            f"{head}; --bootstrap-base cannot add {', '.join(lacks)} beside it: "
            f"{engine.describe()} holds one platform per image name. Fix: turn on the "
            'containerd image store (dockerd\'s {"features": {"containerd-snapshotter": true}}), '
            f"or build {', '.join(lacks)} on its own after `docker rmi {ref}` (--bootstrap-base "
            "then makes it for that platform alone)"
        )
    if debian and ref in bootstrap:
        return ""  # bootstrap_missing adds them beside the ones it has
    if debian:
        fix = (
            f"add --bootstrap-base (debootstraps {', '.join(lacks)} into {ref} as one image "
            f"index, keeping {has})"
        )
    elif found.where == "local" and engine.holds_multi_platform():
        fix = (
            f"`docker pull --platform {lacks[0]} {ref}` where its registry has it, or a "
            f"`base:` override naming an image that has {', '.join(lacks)}"
        )
    elif found.where == "local":
        fix = (
            f"a `base:` override naming an image that has {', '.join(lacks)} ({engine.describe()} "
            f"holds one platform per name: `docker pull --platform {lacks[0]} {ref}` would "
            f"replace its {has})"
        )
    else:
        fix = (
            f"a `base:` override naming an image that has {', '.join(lacks)}, or leave "
            f"{', '.join(lacks)} out of the cells' `platform:`"
        )
    return f"{head}. Fix: {fix}"


def _unbuildable_message(
    cells: Sequence[Cell], unbuildable: dict[str, str], missing: dict[str, str], suites: dict
) -> list[str]:  # type: ignore[type-arg]
    lines = [
        f"{len(unbuildable)} of {len(cells)} cells cannot be built here; nothing was built.",
        "Base images this engine does not have and cannot get:",
        *(f"  {ref}: {why}" for ref, why in sorted(missing.items())),
        "To make them available: "
        + "; ".join(dict.fromkeys(base.fixes_for(ref, suites) for ref in sorted(missing))),
        f"Cells that need them: {', '.join(unbuildable)}",
    ]
    buildable = [c.id for c in cells if c.id not in unbuildable]
    if buildable:
        lines.append(f"Buildable here: {', '.join(buildable)}")
    lines.append("(--keep-going builds the others and reports these as not attempted)")
    return lines


def bootstrap_missing(
    engine: BuildEngine,
    cells: Sequence[Cell],
    mirror: str,
    platforms: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """The Debian bases the cells need, made with debootstrap for each platform they are
    built for: a missing one for all of them, one this engine has for those it lacks (added
    beside the ones it has, as one index)."""
    suites = base.bootstrappable()
    for ref, needed in platforms_of(cells, platforms).items():
        if ref not in suites:
            continue
        had = engine.image_platforms(ref)
        if had is None:
            said = f"debootstrap {suites[ref]}, {', '.join(needed)}"
            terminal.echo(f"bootstrapping {ref} from {mirror} ({said})")
            base.bootstrap(engine, suites[ref], ref, mirror, needed)
        elif lacks := base.BaseFound("local", had).lacks(needed):
            terminal.echo(
                f"bootstrapping {', '.join(lacks)} of {ref} from {mirror} (debootstrap "
                f"{suites[ref]}; keeping {', '.join(had)})"
            )
            base.add_platforms(engine, suites[ref], ref, lacks, mirror)
