"""Engine interface and the plain data it takes and returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from imagekit.engine.image_files import ImageFiles
from imagekit.errors import EngineError
from imagekit.platforms import AMD64

# How layers are compressed on push. gzip at the default level is what every engine writes
# (`docker push`); anything else is written by BuildKit's image exporter (buildx).
MAX_LEVEL = {"gzip": 9, "estargz": 9, "zstd": 22}


@dataclass(frozen=True)
class Compression:
    kind: str = "gzip"
    level: int | None = None

    @property
    def default(self) -> bool:
        """gzip at the engine's level: a plain `docker push` of the loaded image."""
        return self.kind == "gzip" and self.level is None

    @property
    def auto(self) -> bool:
        """`--compression auto` (the CLI's default): zstd where the engine's builder writes
        the pushed layers, else gzip (resolved by `for_engine` once the engine is known)."""
        return self.kind == "auto"

    def for_engine(self, builder_writes_layers: bool) -> Compression:
        """auto resolved: zstd (every core, 1.5x+ faster pulls; Docker >= 23 and containerd
        >= 1.5 pull it) where BuildKit writes the pushed layers, else the engine's gzip."""
        if not self.auto:
            return self
        return Compression("zstd") if builder_writes_layers else Compression()

    def __str__(self) -> str:
        return self.kind if self.level is None else f"{self.kind}:{self.level}"

    def as_options(self) -> str:
        """As it was asked for on the command line (for messages)."""
        level = "" if self.level is None else f" --compression-level {self.level}"
        return f"--compression {self.kind}{level}"


@dataclass(frozen=True)
class BuildRequest:
    context: Path
    dockerfile: Path
    target: str = "runtime"
    build_args: tuple[tuple[str, str], ...] = ()
    secrets: tuple[tuple[str, Path], ...] = ()  # (id, file): mounted for one RUN, never a layer
    labels: tuple[tuple[str, str], ...] = ()  # build-time labels (created, revision)
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()  # registry/local cache export: buildx only
    no_cache: bool = False
    # RUN steps' network: "" = the engine's default; "host" reaches a mirror on 127.0.0.1
    network: str = ""
    # The compression of the push that follows the build (None: no push). An engine that
    # exports into a content store (the containerd image store) exports once in it.
    push_compression: Compression | None = None
    # SLSA provenance on the push (BuildKit's attestation, mode=min): only where the engine
    # can hold it (BuildEngine.attaches_provenance); local images carry none.
    provenance: bool = False
    # The platforms to build, one image each under one index; empty: the engine's own.
    platforms: tuple[str, ...] = ()


def is_inline_cache(spec: str) -> bool:
    """`--cache-to type=inline[,...]`: the cache metadata written into the image's config."""
    return spec.replace(" ", "").split(",", 1)[0] == "type=inline"


def inline_cache_as_build_arg(request: BuildRequest) -> BuildRequest:
    """Docker's built-in BuildKit (a CLI without buildx) has no --cache-to: there, inline
    cache is asked for with the BUILDKIT_INLINE_CACHE build argument."""
    if not any(is_inline_cache(spec) for spec in request.cache_to):
        return request
    rest = tuple(spec for spec in request.cache_to if not is_inline_cache(spec))
    args = (*request.build_args, ("BUILDKIT_INLINE_CACHE", "1"))
    return replace(request, cache_to=rest, build_args=args)


def build_flags(request: BuildRequest) -> list[str]:
    """The build command's flags and context for a request (pure: the dry-run prints the
    same, and the real engine runs them)."""
    args = ["-f", str(request.dockerfile)]
    if request.target:  # empty: the Dockerfile's last stage
        args += ["--target", request.target]
    for key, value in request.build_args:
        args += ["--build-arg", f"{key}={value}"]
    for secret_id, path in request.secrets:
        args += ["--secret", f"id={secret_id},src={path}"]
    for key, value in request.labels:
        args += ["--label", f"{key}={value}"]
    for ref in request.cache_from:
        args += ["--cache-from", ref]
    for ref in request.cache_to:
        args += ["--cache-to", ref]
    if request.no_cache:
        args.append("--no-cache")
    if request.network:
        args += ["--network", request.network]
    if request.platforms:
        args += ["--platform", ",".join(request.platforms)]
    return [*args, str(request.context)]


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    log: tuple[str, ...]


@dataclass(frozen=True)
class Layer:
    """One filesystem layer of an image, oldest first: `diff_id` is the digest of its
    uncompressed tar (RootFS.Layers), the same in every image that has the same bytes."""

    created_by: str
    size: int
    diff_id: str = ""
    # Read from the registry (a push without --load): the blob's digest, its media type and
    # its compressed size (`size` is then that size: the unpacked one is not in the image).
    digest: str = ""
    media_type: str = ""


def image_output(compression: Compression | None, push: bool = False) -> str:
    """`--output` for BuildKit's image exporter (https://docs.docker.com/build/exporters/
    image-registry/): layers in `compression`, or uncompressed (None: an image for the local
    content store only, which would otherwise compress every layer and unpack it again).
    force-compression recompresses layers BuildKit already holds in another compression;
    zstd and estargz layers need OCI media types (Docker's media types have no zstd)."""
    # store=false on a push: the local image stays the one the build made, not the pushed
    # index with its provenance, whose timestamps would give every push a new local ID
    attrs = ["type=image"] + (["push=true", "store=false"] if push else [])
    if compression is None:
        return ",".join([*attrs, "compression=uncompressed"])
    attrs.append(f"compression={compression.kind}")
    if compression.level is not None:
        attrs.append(f"compression-level={compression.level}")
    attrs.append("force-compression=true")
    if compression.kind != "gzip":
        attrs.append("oci-mediatypes=true")
    return ",".join(attrs)


def build_push_flags(
    request: BuildRequest, tags: Sequence[str], compression: Compression
) -> list[str]:
    """One build that BuildKit exports straight to the registry (`imagekit build --push`
    without --load): the layers compressed once, on every core, and never written to the
    engine's image store."""
    provenance = "--provenance=mode=min" if request.provenance else "--provenance=false"
    return [*output_flags(tags, compression), provenance, *build_flags(request)]


def output_flags(tags: Sequence[str], compression: Compression) -> list[str]:
    """Pushing `tags` with the chosen compression; buildx names the image after the -t tags."""
    tag_flags = [flag for tag in tags for flag in ("-t", tag)]
    return [*tag_flags, "--output", image_output(compression, push=True)]


def push_flags(request: BuildRequest, tags: Sequence[str], compression: Compression) -> list[str]:
    """A compressed push: the same build again, every step cached, exported and pushed by
    BuildKit (the build run already exported the cache: no --cache-to, but inline cache,
    which is part of the pushed image). Never --no-cache: a `build --no-cache` has just built
    every step, and the push must export that image, not build a second one."""
    inline = tuple(spec for spec in request.cache_to if is_inline_cache(spec))
    again = replace(request, cache_to=inline, no_cache=False)
    return build_push_flags(again, tags, compression)


@dataclass(frozen=True)
class ImageInfo:
    id: str
    size: int
    labels: dict[str, str]
    env: dict[str, str]
    user: str
    repo_digests: tuple[str, ...]
    tags: tuple[str, ...]
    architecture: str = ""  # amd64, arm64 (GOARCH); "" where the engine did not say


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str
    timed_out: bool = False
    notes: tuple[str, ...] = ()  # what the engine could not give (e.g. unlimited memlock)


@dataclass(frozen=True)
class RunOptions:
    shm_size: str | None = "8g"
    ipc_host: bool = False
    gpus: bool = False
    memlock_unlimited: bool = True
    env: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, str] = field(default_factory=dict)  # host path -> container path
    timeout: float = 600.0
    user: str | None = None
    entrypoint: Sequence[str] | None = None
    # Detached containers (`start`): found by name and label, reached by hostname and alias.
    name: str | None = None
    hostname: str | None = None
    network: str | None = None
    aliases: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    gpu_ids: tuple[str, ...] = ()  # with gpus: only these GPUs (one node's share of a host)


@dataclass(frozen=True)
class Started:
    id: str
    notes: tuple[str, ...] = ()  # what the engine could not give, as in RunResult


@dataclass(frozen=True)
class ContainerState:
    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    finished_at: float | None = None  # epoch seconds; orders which node failed first
    error: str = ""


@dataclass(frozen=True)
class Labelled:
    """A container or network found by label (leftovers of a run)."""

    kind: str  # "container" | "network"
    name: str
    labels: dict[str, str]


class SubnetTaken(EngineError):
    """The subnet asked for overlaps a network the engine has: try another one."""


LineSink = Callable[[str], None]


# The interface in parts, by what its callers need: a caller's type names only the parts it
# uses, and a unit test fakes only those (engine/fake.py). DockerEngine is every part.


class ImageStore(Protocol):
    """The images the engine holds, read: what every side asks of one."""

    def inspect(self, ref: str) -> ImageInfo | None: ...

    def read_file(self, image: str, path: str) -> bytes | None: ...


class BuildEngine(ImageStore, Protocol):
    """Building images, and what the engine's builder can do."""

    def describe(self) -> str: ...

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildResult: ...

    def tag(self, image_id: str, ref: str) -> None: ...

    def untag(self, ref: str) -> None: ...

    # The platforms (os/arch) the local image `ref` holds with their content; None where
    # the engine has no image of that name.
    def image_platforms(self, ref: str) -> tuple[str, ...] | None: ...

    # The files of the local image `image` (of `platform`, where it holds several), read
    # without running it: engine/image_files.py's ImageFiles, open while the `with` lasts.
    def image_files(self, image: str, platform: str = "") -> AbstractContextManager[ImageFiles]: ...

    def layers(self, ref: str) -> list[Layer]: ...

    def check_support(self, cache_to: Sequence[str], compression: Compression) -> None: ...

    def pushes_as_stored(self, compression: Compression) -> bool: ...

    def attaches_provenance(self) -> bool: ...

    def pushes_from_builder(self) -> bool: ...

    def holds_multi_platform(self) -> bool: ...

    def emulation_problem(self, platform: str) -> str | None: ...

    def push_compressed(
        self, request: BuildRequest, tags: Sequence[str], compression: Compression
    ) -> list[str]: ...

    def build_push(
        self,
        request: BuildRequest,
        tags: Sequence[str],
        compression: Compression,
        on_line: LineSink,
    ) -> list[str]: ...

    def import_rootfs(self, rootfs: Path, tag: str, platform: str = "") -> str: ...

    def load_layout(self, layout: Path) -> None: ...

    # `docker save` of `ref` unpacked into the folder `layout` (an OCI image layout on the
    # containerd store, which bases.add_platforms extends).
    def save_layout(self, ref: str, layout: Path) -> None: ...

    # Stops the builds under way (Ctrl-C).
    def stop_all(self) -> None: ...


class RunEngine(ImageStore, Protocol):
    """Running images: one container to its end, or detached ones on a network of their own."""

    def has_gpu_runtime(self) -> bool: ...

    def run(self, image: str, command: Sequence[str], options: RunOptions) -> RunResult: ...

    def stamp(self, image: str, ref: str, labels: dict[str, str]) -> None: ...

    def create_network(self, name: str, subnet: str, labels: dict[str, str]) -> None: ...

    def remove_network(self, name: str) -> None: ...

    def start(self, image: str, command: Sequence[str], options: RunOptions) -> Started: ...

    def state(self, container: str) -> ContainerState | None: ...

    def logs(self, container: str) -> str: ...

    def remove(self, container: str) -> None: ...

    def labelled(self, key: str) -> list[Labelled]: ...


class RegistryEngine(Protocol):
    """The registry, through the engine: pushes and pulls, and what it holds, read."""

    def push(self, ref: str) -> str: ...

    def pull(self, ref: str) -> None: ...

    def registry_digest(self, ref: str) -> str: ...

    # The platforms the registry's image `ref` has (its index's, or its one manifest's).
    def registry_image_platforms(self, ref: str) -> tuple[str, ...]: ...

    # The image manifest of each platform imagekit builds (PLATFORMS) in the registry's
    # image `ref` at `digest` (an index: its entries; one manifest: its config's platform).
    def registry_platforms(self, ref: str, digest: str) -> dict[str, str]: ...

    def pushed_layers(self, ref: str, platform: str = AMD64) -> tuple[str, list[Layer]]: ...

    def pushed_file(self, ref: str, layer: Layer, path: str) -> bytes | None: ...

    # The files of the pushed image `ref` (name@digest) whose layers are `layers`, read back
    # from its registry.
    def pushed_files(self, ref: str, layers: Sequence[Layer]) -> ImageFiles: ...


class BuildRegistryEngine(BuildEngine, RegistryEngine, Protocol):
    """A build run's: it builds, pushes, and reads bases and what it pushed in the registry."""


class RunRegistryEngine(RunEngine, RegistryEngine, Protocol):
    """`imagekit test`'s: it pulls an image it lacks, runs it, and pins --attest's digest."""


class Engine(BuildEngine, RunEngine, RegistryEngine, Protocol):
    """Every part: what DockerEngine is, made once where a command starts."""
