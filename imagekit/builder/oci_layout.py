"""One base image for several platforms, from root filesystems, without a registry.

`docker import` makes a one-platform image, and a second import under the same name replaces
the first. An OCI image layout (image-spec's image-layout.md) holds an index of one manifest
per platform; `docker load` of it on the containerd image store keeps them all under one name,
which is what BuildKit resolves `FROM debian:bookworm-slim` against for each platform it
builds. Each root filesystem becomes one uncompressed layer, as `docker import` makes it, with
the same config (LANG, CMD bash).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from imagekit.contract.refs import parse
from imagekit.engine.image_registry import index_platforms
from imagekit.errors import EngineError

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


def write(roots: Mapping[str, Path], tag: str, out: Path) -> None:
    """An OCI layout in `out` (empty) with one manifest per platform ("linux/arm64": rootfs)
    under one index named `tag`."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    manifests = [_manifest(platform, root, blobs) for platform, root in roots.items()]
    _write_index(out, blobs, manifests, tag)
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def _write_index(out: Path, blobs: Path, manifests: list[dict[str, Any]], tag: str) -> None:
    """index.json naming one index of `manifests` as `tag`."""
    inner = _blob(blobs, {"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}, INDEX)
    ref = parse(tag)
    inner["annotations"] = {
        # containerd's full name: the one BuildKit looks `FROM debian:...` up by
        "io.containerd.image.name": str(ref.without_digest().normalized()),
        "org.opencontainers.image.ref.name": ref.tag or "latest",
    }
    top = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [inner]}
    (out / "index.json").write_text(json.dumps(top))


def extend(layout: Path, roots: Mapping[str, Path], tag: str) -> None:
    """Add a manifest per platform of `roots` to the image `tag` of a saved OCI layout
    (`docker save` on the containerd store), beside the manifests it has: the layout then
    holds one index of them all under `tag`, for `docker load`."""
    blobs = layout / "blobs" / "sha256"
    kept = _platform_manifests(layout, tag)
    had = index_platforms({"manifests": kept})
    added = [_manifest(p, root, blobs) for p, root in roots.items() if p not in had]
    _write_index(layout, blobs, [*kept, *added], tag)
    (layout / "manifest.json").unlink(missing_ok=True)  # docker-archive's view of the old image


def _platform_manifests(layout: Path, tag: str) -> list[dict[str, Any]]:
    """The manifests of `tag` in a saved layout, each with its platform: an index's entries
    as they are (attestations too), a single manifest with the platform its config says."""
    try:
        top = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"`docker save` wrote no OCI image layout (index.json): {exc}") from None
    name = str(parse(tag).without_digest().normalized())
    entries = top.get("manifests") or []
    entry = next(
        (
            e
            for e in entries
            if (e.get("annotations") or {}).get("io.containerd.image.name") == name
        ),
        entries[0] if len(entries) == 1 else None,
    )
    if entry is None:
        raise EngineError(f"the saved image layout has no image named {name}")
    if entry.get("mediaType") == INDEX:
        # an index pulled for some platforms lists the others too, without their blobs:
        # those are not had (a platform added is written in their place)
        listed = _read_blob(layout, entry["digest"]).get("manifests") or []
        return [m for m in listed if _has_blob(layout, str(m.get("digest", "")))]
    config = _read_blob(layout, _read_blob(layout, entry["digest"])["config"]["digest"])
    platform = {"architecture": config["architecture"], "os": config["os"]}
    kept = {k: entry[k] for k in ("mediaType", "digest", "size")}
    return [{**kept, "platform": platform}]


def _read_blob(layout: Path, digest: str) -> dict[str, Any]:
    path = layout / "blobs" / "sha256" / digest.split(":", 1)[-1]
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise EngineError(
            f"the saved image layout lacks {digest} or it is not JSON: {exc}"
        ) from None


def _has_blob(layout: Path, digest: str) -> bool:
    return digest.startswith("sha256:") and (layout / "blobs" / "sha256" / digest[7:]).is_file()


def _manifest(platform: str, root: Path, blobs: Path) -> dict[str, Any]:
    os_name, arch = platform.split("/")
    layer = _layer(root, blobs)
    config = {
        "architecture": arch,
        "os": os_name,
        "config": {"Env": ["LANG=C.UTF-8"], "Cmd": ["bash"]},
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
        "history": [{"created_by": f"imagekit base bootstrap (debootstrap, {arch})"}],
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": _blob(blobs, config, CONFIG),
        "layers": [layer],
    }
    descriptor = _blob(blobs, manifest, MANIFEST)
    descriptor["platform"] = {"architecture": arch, "os": os_name}
    return descriptor


def _blob(blobs: Path, document: dict[str, Any], media_type: str) -> dict[str, Any]:
    data = json.dumps(document, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _layer(root: Path, blobs: Path) -> dict[str, Any]:
    """The root filesystem as one tar, owners by number only (as `tar --numeric-owner`
    writes them: this host's names for them are not the image's)."""
    partial = blobs / "layer.partial"
    with partial.open("wb") as raw:
        hashing = _Hashing(raw)
        with tarfile.open(fileobj=hashing, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.add(root, arcname=".", filter=_numeric_owner)
    digest = hashing.digest.hexdigest()
    partial.rename(blobs / digest)
    return {"mediaType": LAYER, "digest": f"sha256:{digest}", "size": hashing.size}


def _numeric_owner(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uname = member.gname = ""
    return member


class _Hashing(io.RawIOBase):
    """A write-only file that hashes and counts what passes through to `out`."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.digest, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.digest.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)
