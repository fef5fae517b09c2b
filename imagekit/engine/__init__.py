"""The only part of imagekit that touches the outside world (Docker, BuildKit, registries).

`Engine` is the interface; `DockerEngine` drives a real engine (CLI for BuildKit builds,
the Docker SDK for everything else) and `FakeEngine` records calls for unit tests.
"""

from imagekit.engine.interface import (
    BuildRequest,
    BuildResult,
    Engine,
    ImageInfo,
    Layer,
    RunResult,
)

__all__ = ["BuildRequest", "BuildResult", "Engine", "ImageInfo", "Layer", "RunResult"]
