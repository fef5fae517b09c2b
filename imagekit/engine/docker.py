"""The real engine: DockerEngine, assembled from its parts (builds, the image store,
containers, the registry), each in a module of its own over one connection.

Builds run the docker CLI (BuildKit), the rest the Docker SDK; nothing here contacts the
daemon until a method is called.
"""

from __future__ import annotations

from imagekit.engine.docker_build import DockerBuilds
from imagekit.engine.docker_containers import DockerContainers
from imagekit.engine.docker_images import DockerImages
from imagekit.engine.image_registry import DockerRegistry


class DockerEngine(DockerBuilds, DockerImages, DockerContainers, DockerRegistry):
    """Every part of the Engine interface (engine/interface.py) on one Docker engine."""

    def describe(self) -> str:
        self.client  # noqa: B018 - connects and checks the version
        b = self.builder
        how = "buildx" if b.kind == "buildx" else "DOCKER_BUILDKIT=1"
        store = "containerd image store" if self.containerd_store else "classic image store"
        return (
            f"Docker engine {self._server_version}, {store}; "
            f"builds with {b.cli} {b.cli_version} ({how})"
        )
