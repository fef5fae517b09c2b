"""A recording engine for unit tests of planning and orchestration (no Docker)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.engine.interface import (
    BuildRequest,
    BuildResult,
    Compression,
    ImageInfo,
    Layer,
    LineSink,
    RunOptions,
    RunResult,
)
from imagekit.errors import BuildError, PushError, UsageError


@dataclass
class FakeEngine:
    fail_builds: set[str] = field(default_factory=set)  # context folder names that fail
    image_size: int = 10**9
    push_error: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    # image ID -> its layers; images not in it get a shared base layer plus their own
    image_layers: dict[str, list[Layer]] = field(default_factory=dict)
    refuse: tuple[str, ...] = ()  # what check_support refuses (UsageError), e.g. "zstd"

    def describe(self) -> str:
        return "fake engine"

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildResult:
        name = request.context.name
        self.calls.append(("build", name))
        on_line("#5 [runtime 1/2] COPY --from=builder /opt/venv /opt/venv")
        if name in self.fail_builds:
            on_line("#5 ERROR: process did not complete successfully")
            raise BuildError(f"ERROR: failed to build {name}\nno matching distribution")
        on_line("#5 DONE 1.5s")
        return BuildResult(image_id=f"sha256:{name}", log=())

    def tag(self, image_id: str, ref: str) -> None:
        self.calls.append(("tag", ref))
        self.tags[ref] = image_id

    def untag(self, ref: str) -> None:
        self.calls.append(("untag", ref))
        self.tags.pop(ref, None)

    def inspect(self, ref: str) -> ImageInfo | None:
        return ImageInfo(ref, self.image_size, {}, {}, "1000:1000", (), ())

    def layers(self, ref: str) -> list[Layer]:
        if ref in self.image_layers:
            return list(self.image_layers[ref])
        own = "sha256:" + ref.rsplit(":", 1)[-1].encode().hex()[:64].ljust(64, "0")
        return [
            Layer("RUN apt-get install python3", 10**8, "sha256:" + "b" * 64),
            Layer("COPY /opt/venv /opt/venv # buildkit", self.image_size - 10**8, own),
        ]

    def check_support(self, cache_to: Sequence[str], compression: Compression) -> None:
        self.calls.append(("check_support", str(compression)))
        if compression.kind in self.refuse or (cache_to and "cache-to" in self.refuse):
            raise UsageError(f"--compression {compression.kind}: refused by the fake engine")

    def push_compressed(
        self, request: BuildRequest, tags: Sequence[str], compression: Compression
    ) -> list[str]:
        self.calls.append(("push_compressed", f"{','.join(tags)} {compression}"))
        if self.push_error:
            raise PushError(f"push of {tags[0]} failed: refused. The local image is kept")
        return [t.rsplit(":", 1)[0] + "@sha256:" + "2" * 64 for t in tags]

    def push(self, ref: str) -> str:
        self.calls.append(("push", ref))
        if self.push_error:
            raise PushError(f"push of {ref} failed: connection refused. The local image is kept")
        return ref.rsplit(":", 1)[0] + "@sha256:" + "0" * 64

    def run(self, image: str, command: Sequence[str], options: RunOptions) -> RunResult:
        self.calls.append(("run", image))
        return RunResult(exit_code=0, output="")

    def registry_digest(self, ref: str) -> str:
        return "sha256:" + "1" * 64

    def has_gpu_runtime(self) -> bool:
        return False

    def import_rootfs(self, rootfs: Path, tag: str) -> str:
        self.calls.append(("import", tag))
        self.tags[tag] = f"sha256:{tag}"
        return self.tags[tag]

    def stamp(self, image: str, ref: str, labels: dict[str, str]) -> None:
        self.calls.append(("stamp", ref))
        self.tags[ref] = image

    def stop_all(self) -> None:
        self.calls.append(("stop_all", ""))
