"""Before `imagekit build` builds anything: the selection's target and tags checked, the base
images this engine cannot have found (what would make them buildable said), and the
bootstrappable ones made with debootstrap."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit import terminal
from imagekit.builder import bases as base
from imagekit.contract.refs import parse
from imagekit.engine.interface import Engine
from imagekit.errors import BuildError, UsageError
from imagekit.matrix.cells import Cell
from imagekit.matrix.ref_checks import check_tag


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
    engine: Engine, cells: Sequence[Cell], bootstrap: bool, keep_going: bool
) -> dict[str, str]:
    """Before building anything: which cells' base images cannot be had here, and what would
    make them buildable. Without --keep-going that stops the run; with it, the other cells
    build and these are reported as not attempted."""
    suites = base.bootstrappable()
    can_bootstrap = set(suites) if bootstrap else set()
    missing = base.unavailable_bases(engine, base.bases_of(cells), can_bootstrap)
    unbuildable = {}
    for cell in cells:
        refs = [base.unpinned(r) for r in (cell.runtime_image, cell.builder_image) if r]
        lacking = [r for r in refs if r in missing]
        if lacking:
            unbuildable[cell.id] = "; ".join(
                f"base {r}: {missing[r]}. Fix: {base.fixes_for(r, suites)}" for r in lacking
            )
    if unbuildable and not keep_going:
        raise BuildError(*_unbuildable_message(cells, unbuildable, missing, suites))
    return unbuildable


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


def bootstrap_missing(engine: Engine, cells: Sequence[Cell], mirror: str) -> None:
    suites = base.bootstrappable()
    for ref in base.bases_of(cells):
        if ref in suites and engine.inspect(ref) is None:
            terminal.echo(f"bootstrapping {ref} from {mirror} (debootstrap {suites[ref]})")
            base.bootstrap(engine, suites[ref], ref, mirror)
