"""The image's SBOM (docs/sbom.md) beside the image: attached to a pushed image as an OCI
artifact that refers to it (oras attach: the registry's referrers API, or the referrers tag
schema `sha256-<digest>` where the registry has no such API, as registry 2.8), and read back
from a local image or from the registry for `imagekit sbom`.
"""

from __future__ import annotations

from typing import Any

from imagekit.contract import refs
from imagekit.engine import referrers
from imagekit.engine.interface import ImageStore
from imagekit.errors import EngineError, ImagekitError, UsageError
from imagekit.render.dockerfile import SBOM_PATH

PATH = SBOM_PATH  # in every image imagekit builds
MEDIA_TYPE = "application/vnd.cyclonedx+json"  # the artifact's type and its one layer's
FILE = "sbom.cdx.json"
WRITER = "sbom_writer.py"  # named in the history of the step that writes the SBOM
STAGES = ("runtime",)  # the stages whose image holds an SBOM (the runtime's own step writes it)


def in_stage(target: str) -> bool:
    """Whether an image built to `target` holds an SBOM (os-base, builder, packages: none)."""
    return target in STAGES


def attach(pushed: str, data: bytes) -> str:
    """Attach `data` to `pushed` (name@sha256:...); returns the artifact's reference."""
    return referrers.attach(pushed, data, FILE, MEDIA_TYPE, "the SBOM")


def from_registry(reference: str) -> bytes:
    """The newest SBOM attached to `reference` (a tag or a digest) in its registry."""
    found = referrers.referrers(reference, MEDIA_TYPE, "sbom")
    if not found:
        raise ImagekitError(
            f"{reference} has no SBOM attached in its registry (no {MEDIA_TYPE} referrer); "
            "`imagekit build --push` attaches one, or read the image's own with "
            f"`imagekit sbom {reference} --from image`"
        )
    newest = max(found, key=lambda r: (_created(r), str(r.get("digest"))))
    artifact = str(refs.parse(reference).by_digest(str(newest["digest"])))
    data = referrers.pull_file(artifact, FILE, "sbom")
    if data is None:
        raise ImagekitError(f"{artifact} is a {MEDIA_TYPE} artifact without {FILE}")
    return data


def _created(referrer: dict[str, Any]) -> str:
    return str((referrer.get("annotations") or {}).get("org.opencontainers.image.created", ""))


def from_image(engine: ImageStore, image: str) -> bytes | None:
    """The SBOM inside a local image; None where the engine does not have the image."""
    if engine.inspect(image) is None:
        return None
    data = engine.read_file(image, PATH)
    if data is None:
        raise UsageError(
            f"image {image} has no SBOM at {PATH}: it was built by an imagekit before SBOMs, "
            "or not by imagekit. Rebuild it with `imagekit build`"
        )
    return data


def read(engine: ImageStore, image: str, source: str) -> bytes:
    """`imagekit sbom`'s document: from the local image, the registry, or (auto) the local
    image where the engine has it, else the registry."""
    if source in ("image", "auto"):
        try:
            data = from_image(engine, image)
        except EngineError:
            if source == "image":
                raise
            data = None
        if data is not None:
            return data
        if source == "image":
            raise UsageError(f"image {image} is not on this engine; `docker pull` it first")
    return from_registry(image)
