"""DockerEngine's image store: tags, an image's metadata, platforms, layers and files, read
through the Docker SDK (and its raw API where the SDK cannot ask).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tarfile
from collections.abc import Sequence
from typing import Any

from imagekit.engine import emulation
from imagekit.engine.docker_daemon import DockerConnection, split_ref
from imagekit.engine.interface import ImageInfo, Layer
from imagekit.engine.local_files import LocalFiles
from imagekit.errors import EngineError


class DockerImages(DockerConnection):
    """The images the engine holds (ImageStore's part of DockerEngine, and BuildEngine's
    questions about a local image)."""

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        self.client.images.get(image_id).tag(repo, tag)

    def untag(self, ref: str) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.ImageNotFound):
            self.client.images.remove(ref, noprune=True)

    def inspect(self, ref: str) -> ImageInfo | None:
        import docker.errors

        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        config = image.attrs.get("Config") or {}
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        return ImageInfo(
            id=image.id,
            size=int(image.attrs.get("Size", 0)),
            labels=dict(config.get("Labels") or {}),
            env=env,
            user=str(config.get("User") or ""),
            repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
            tags=tuple(image.tags),
            architecture=str(image.attrs.get("Architecture") or ""),
        )

    def image_platforms(self, ref: str) -> tuple[str, ...] | None:
        """The local image's platforms: on the containerd store each manifest whose content
        is here (`?manifests=1`, API 1.48 on: an index pulled for one platform lists the
        others unavailable), else the image's one os/architecture."""
        import docker.errors

        api = self.client.api  # first: no daemon is the daemon hint, not a missing image
        if self.builder.kind == "buildx" and self.builder.driver != "docker":
            return None  # a builder of its own never reads the engine's images
        try:
            if self.containerd_store:
                url = api._url("/images/{0}/json", ref)
                attrs = api._result(api._get(url, params={"manifests": "1"}), True)
            else:
                attrs = api.inspect_image(ref)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"inspecting {ref}: {exc.explanation or exc}") from None
        return held_platforms(attrs, self.containerd_store)

    def image_files(self, image: str, platform: str = "") -> LocalFiles:
        return LocalFiles(self.client, image, platform)

    def read_file(self, image: str, path: str) -> bytes | None:
        """One file of the image, read from a container that is created and never started;
        None where the image has no such file."""
        import docker.errors

        container = self.client.containers.create(image, command=["true"], entrypoint=[])
        try:
            stream, _ = container.get_archive(path)
            return file_from_tar(b"".join(stream))
        except docker.errors.NotFound:
            return None
        finally:
            container.remove(force=True)

    def layers(self, ref: str) -> list[Layer]:
        image = self.client.images.get(ref)
        diff_ids = list((image.attrs.get("RootFS") or {}).get("Layers") or [])
        arch = str(image.attrs.get("Architecture") or "")
        if self.containerd_store and emulation.is_foreign(arch):
            return align_layers(diff_ids, self._history(ref, arch))
        return align_layers(diff_ids, image.history())

    def _history(self, ref: str, arch: str) -> list[dict[str, Any]]:
        """An image of another platform's history: the containerd store counts its layers'
        sizes only when asked for that platform (the API's `platform`, 1.48 on; the SDK's
        history() cannot ask), and only once they are unpacked, which BuildKit's export does
        for the engine's own platform alone: a container created (never started) unpacks
        them, as the first `docker run` would."""
        container = self.client.containers.create(ref, platform=f"linux/{arch}")
        container.remove(force=True)
        api = self.client.api
        platform = json.dumps({"os": "linux", "architecture": arch})
        url = api._url("/images/{0}/history", ref)
        return list(api._result(api._get(url, params={"platform": platform}), True))


def held_platforms(attrs: dict[str, Any], containerd_store: bool = False) -> tuple[str, ...]:
    """An image inspect's platforms (os/architecture): its available image manifests where
    the containerd store lists them (attestations and absent platforms left out), else its
    own; none (not known) on a containerd store whose API predates the list (1.48), where
    an index's other platforms cannot be told from absent ones."""
    manifests = attrs.get("Manifests")
    if containerd_store and not isinstance(manifests, list):
        return ()
    if isinstance(manifests, list) and manifests:
        names = [
            f"{platform.get('os')}/{platform.get('architecture')}"
            for m in manifests
            if isinstance(m, dict) and m.get("Kind") == "image" and m.get("Available")
            for platform in [(m.get("ImageData") or {}).get("Platform") or {}]
        ]
        return tuple(dict.fromkeys(names))
    return (f"{attrs.get('Os') or 'linux'}/{attrs.get('Architecture') or 'unknown'}",)


_METADATA_ONLY = re.compile(
    r"^(/bin/sh -c #\(nop\) )?(ENV|LABEL|CMD|ENTRYPOINT|USER|EXPOSE|ARG|STOPSIGNAL|HEALTHCHECK|"
    r"SHELL|VOLUME|ONBUILD|MAINTAINER)\b"
)


def align_layers(diff_ids: Sequence[str], history: Sequence[dict[str, Any]]) -> list[Layer]:
    """The image's layers, oldest first: RootFS diff IDs joined with `docker history`.

    History (newest first from the API) also has entries that made no layer (ENV, LABEL...);
    the API does not say which, only their size 0. Entries with bytes made a layer; of the
    empty ones, those that can change files (RUN, COPY, ADD, WORKDIR) are taken next, the
    latest first, until there is one entry per diff ID. A layer no entry accounts for keeps
    its diff ID with size 0 and no instruction."""
    entries = [(str(h.get("CreatedBy") or ""), int(h.get("Size") or 0)) for h in reversed(history)]
    chosen = {i for i, (_, size) in enumerate(entries) if size > 0}
    for i in reversed(range(len(entries))):
        if len(chosen) >= len(diff_ids):
            break
        if i not in chosen and not _METADATA_ONLY.match(entries[i][0].strip()):
            chosen.add(i)
    picked = [entries[i] for i in sorted(chosen)][-len(diff_ids) :] if diff_ids else []
    missing = len(diff_ids) - len(picked)
    picked = [("", 0)] * missing + picked
    return [
        Layer(created_by=created_by, size=size, diff_id=diff_id)
        for diff_id, (created_by, size) in zip(diff_ids, picked, strict=True)
    ]


def file_from_tar(data: bytes) -> bytes | None:
    """The one regular file of the tar the engine's archive endpoint returns for a path."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                return handle.read() if handle else None
    return None
