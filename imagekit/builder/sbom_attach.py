"""The image's SBOM, read from the built or pushed image and attached to its pushed digest."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit.builder.build_plan import PlannedBuild
from imagekit.builder.build_report import CellReport
from imagekit.engine.image_registry import by_digest
from imagekit.engine.interface import BuildRegistryEngine, Layer
from imagekit.errors import ImagekitError, PushError
from imagekit.supply import sbom


def attach_loaded(engine: BuildRegistryEngine, image: str, report: CellReport) -> list[str]:
    """The SBOM of the loaded image, attached to each pushed reference."""
    data = engine.read_file(image, sbom.PATH)
    if data is None:
        raise PushError(
            f"{report.cell}: the built image has no SBOM at {sbom.PATH} to attach; "
            "check that its Dockerfile is current (`imagekit render --check`)"
        )
    return [sbom.attach(ref, data) for ref in dict.fromkeys(report.pushed)]


def attach_pushed(
    engine: BuildRegistryEngine,
    build: PlannedBuild,
    report: CellReport,
    layers: Sequence[Layer],
    platform: str,
    image_id: str,
) -> None:
    """The SBOM of one platform's image, attached to that image (of one platform: to
    each pushed reference, as before)."""
    try:
        data = pushed_sbom(engine, report.pushed[0], layers, report)
        several = len(build.platforms) > 1
        targets = [by_digest(report.pushed[0], image_id)] if several else report.pushed
        attached = [sbom.attach(ref, data) for ref in dict.fromkeys(targets)]
    except ImagekitError:
        report.status = "push-failed"
        raise
    report.sbom += attached
    if several:
        report.by_platform[platform]["sbom"] = attached


def pushed_sbom(
    engine: BuildRegistryEngine, ref: str, layers: Sequence[Layer], report: CellReport
) -> bytes:
    """The SBOM from its own small layer in the registry (the step that wrote it)."""
    for layer in reversed(layers):
        if sbom.WRITER in layer.created_by:
            data = engine.pushed_file(ref, layer, sbom.PATH)
            if data is not None:
                return data
    raise PushError(
        f"{report.cell}: the pushed image has no layer with an SBOM at {sbom.PATH} to "
        "attach; check that its Dockerfile is current (`imagekit render --check`)"
    )
