"""The only part of imagekit that touches the outside world (Docker, BuildKit, registries).

`Engine` is the interface, in parts by what callers need (`BuildEngine`, `RunEngine`,
`RegistryEngine`, over the `ImageStore` both sides read); `DockerEngine` drives a real engine
(CLI for BuildKit builds, the Docker SDK for everything else) and engine/fake.py's fakes
record calls for unit tests, one per part (`FakeEngine`: all of them).
"""

from imagekit.engine.interface import (
    BuildEngine,
    BuildRequest,
    BuildResult,
    Engine,
    ImageInfo,
    ImageStore,
    Layer,
    RegistryEngine,
    RunEngine,
    RunResult,
)

__all__ = [
    "BuildEngine",
    "BuildRequest",
    "BuildResult",
    "Engine",
    "ImageInfo",
    "ImageStore",
    "Layer",
    "RegistryEngine",
    "RunEngine",
    "RunResult",
]
