"""Recording engines for unit tests (no Docker): a fake of each part of the Engine interface
(FakeBuilder, FakeRunner, FakeRegistry, over the FakeStore they share) and FakeEngine, all of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from imagekit import terminal
from imagekit.engine.emulation import MACHINE, host_platform
from imagekit.engine.image_files import Entry, ImageFiles, LayerScan, TarIndex
from imagekit.engine.interface import (
    BuildRequest,
    BuildResult,
    Compression,
    ContainerState,
    ImageInfo,
    Labelled,
    Layer,
    LineSink,
    RunOptions,
    RunResult,
    Started,
)
from imagekit.errors import BuildError, PushError, UsageError
from imagekit.platforms import AMD64, PLATFORMS

ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


@dataclass
class FakeStore:
    """The images a fake engine holds (ImageStore), and what every fake part shares: the
    calls made of it, in order, and whether its registry refuses pushes."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    image_size: int = 10**9
    tags: dict[str, str] = field(default_factory=dict)
    # image ID -> its layers; images not in it get a shared base layer plus their own
    image_layers: dict[str, list[Layer]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # path -> bytes, in every image
    # what the files of each platform's image are built for (image_files, pushed_files):
    # absent, the platform's own; e.g. {ARM64: AMD64} models an arm64 config over x86-64 files
    content_of: dict[str, str] = field(default_factory=dict)
    push_error: bool = False  # every push fails (the engine's own and BuildKit's)

    def inspect(self, ref: str) -> ImageInfo | None:
        return ImageInfo(ref, self.image_size, {}, {}, "1000:1000", (), ())

    def read_file(self, image: str, path: str) -> bytes | None:
        self.calls.append(("read_file", f"{image} {path}"))
        return self.files.get(path)

    def layers(self, ref: str) -> list[Layer]:
        if ref in self.image_layers:
            return list(self.image_layers[ref])
        own = "sha256:" + ref.rsplit(":", 1)[-1].encode().hex()[:64].ljust(64, "0")
        return [
            Layer("RUN apt-get install python3", 10**8, "sha256:" + "b" * 64),
            Layer("COPY /opt/venv /opt/venv # buildkit", self.image_size - 10**8, own),
        ]

    def _files(self, platform: str) -> ImageFiles:
        """A Debian root with a venv and torch, built for `content_of` (else `platform`)."""
        return fake_root(self.content_of.get(platform, platform))


@dataclass
class FakeBuilder(FakeStore):
    """Builds that succeed at once (BuildEngine), unless told to fail or crash."""

    fail_builds: set[str] = field(default_factory=set)  # context folder names that fail
    # context folder names whose build raises a bug (not an ImagekitError) in the engine
    crash_builds: set[str] = field(default_factory=set)
    refuse: tuple[str, ...] = ()  # what check_support refuses (UsageError), e.g. "zstd"
    # True: builds export into a content store in the push's compression (the containerd
    # image store), so every push is the engine's own push of the image as stored.
    content_store: bool = False
    provenance: bool = False  # whether a push can carry a provenance attestation
    # True: BuildKit pushes straight to the registry (buildx's image exporter), so a push
    # without --load builds and pushes in one go and nothing is loaded
    builder_pushes: bool = False
    multi_platform: bool = False  # holds an image of several platforms under one name
    emulates: tuple[str, ...] = (AMD64,)  # platforms its containers run
    # base ref -> the platforms the engine holds of it (image_platforms); absent: both
    local_platforms: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        return "fake engine"

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildResult:
        self.calls.append(("build", request.context.name))
        return self._steps(request, on_line)

    def _steps(self, request: BuildRequest, on_line: LineSink) -> BuildResult:
        name = request.context.name
        on_line("#5 [runtime 1/2] COPY --from=builder /opt/venv /opt/venv")
        if name in self.crash_builds:
            raise KeyError(f"a bug in the engine while building {name}")
        if name in self.fail_builds:
            on_line("#5 ERROR: process did not complete successfully")
            raise BuildError(
                "docker build failed; its last lines:",
                *terminal.foreign([f"ERROR: failed to build {name}", "no matching distribution"]),
            )
        on_line("#5 DONE 1.5s")
        return BuildResult(image_id=f"sha256:{name}", log=())

    def tag(self, image_id: str, ref: str) -> None:
        self.calls.append(("tag", ref))
        self.tags[ref] = image_id

    def untag(self, ref: str) -> None:
        self.calls.append(("untag", ref))
        self.tags.pop(ref, None)

    def image_platforms(self, ref: str) -> tuple[str, ...] | None:
        if self.inspect(ref) is None:
            return None
        return self.local_platforms.get(ref, PLATFORMS)

    def image_files(self, image: str, platform: str = "") -> AbstractContextManager[ImageFiles]:
        self.calls.append(("image_files", f"{image} {platform}".strip()))
        return nullcontext(self._files(platform or host_platform() or AMD64))

    def check_support(self, cache_to: Sequence[str], compression: Compression) -> None:
        self.calls.append(("check_support", str(compression)))
        if compression.kind in self.refuse or (cache_to and "cache-to" in self.refuse):
            raise UsageError(f"--compression {compression.kind}: refused by the fake engine")

    def pushes_from_builder(self) -> bool:
        return self.builder_pushes

    def build_push(
        self,
        request: BuildRequest,
        tags: Sequence[str],
        compression: Compression,
        on_line: LineSink,
    ) -> list[str]:
        provenance = " provenance" if request.provenance else ""
        on = f" {','.join(request.platforms)}" if request.platforms else ""
        self.calls.append(("build_push", f"{','.join(tags)} {compression}{provenance}{on}"))
        self._steps(request, on_line)  # the same lines and failures as a local build
        if self.push_error:
            raise PushError(f"push of {tags[0]} failed: refused")
        digest = "sha256:" + request.context.name.encode().hex()[:64].ljust(64, "3")
        return [t.rsplit(":", 1)[0] + "@" + digest for t in tags]

    def pushes_as_stored(self, compression: Compression) -> bool:
        return compression.default or self.content_store

    def attaches_provenance(self) -> bool:
        return self.provenance

    def push_compressed(
        self, request: BuildRequest, tags: Sequence[str], compression: Compression
    ) -> list[str]:
        provenance = " provenance" if request.provenance else ""
        self.calls.append(("push_compressed", f"{','.join(tags)} {compression}{provenance}"))
        if self.push_error:
            raise PushError(f"push of {tags[0]} failed: refused. The local image is kept")
        return [t.rsplit(":", 1)[0] + "@sha256:" + "2" * 64 for t in tags]

    def import_rootfs(self, rootfs: Path, tag: str, platform: str = "") -> str:
        self.calls.append(("import", f"{tag} {platform}".strip()))
        self.tags[tag] = f"sha256:{tag}"
        return self.tags[tag]

    def save_layout(self, ref: str, layout: Path) -> None:
        self.calls.append(("save", ref))
        raise NotImplementedError("the fake engine saves no image; tests monkeypatch it")

    def load_layout(self, layout: Path) -> None:
        index = json.loads((layout / "index.json").read_text())
        name = index["manifests"][0]["annotations"]["io.containerd.image.name"]
        self.calls.append(("load", name))
        self.tags[name] = index["manifests"][0]["digest"]

    def holds_multi_platform(self) -> bool:
        return self.multi_platform

    def emulation_problem(self, platform: str) -> str | None:
        return None if platform in self.emulates else f"{platform}: no emulation (fake)"

    def stop_all(self) -> None:
        self.calls.append(("stop_all", ""))


@dataclass
class FakeRunner(FakeStore):
    """Containers that exit 0 at once (RunEngine), and the networks made for them."""

    # Detached containers and networks, by name: what a leak test looks at.
    containers: dict[str, RunOptions] = field(default_factory=dict)
    networks: dict[str, dict[str, str]] = field(default_factory=dict)

    def run(self, image: str, command: Sequence[str], options: RunOptions) -> RunResult:
        self.calls.append(("run", image))
        return RunResult(exit_code=0, output="")

    def has_gpu_runtime(self) -> bool:
        return False

    def stamp(self, image: str, ref: str, labels: dict[str, str]) -> None:
        self.calls.append(("stamp", ref))
        self.tags[ref] = image

    def create_network(self, name: str, subnet: str, labels: dict[str, str]) -> None:
        self.calls.append(("create_network", f"{name} {subnet}"))
        self.networks[name] = dict(labels)

    def remove_network(self, name: str) -> None:
        self.calls.append(("remove_network", name))
        self.networks.pop(name, None)

    def start(self, image: str, command: Sequence[str], options: RunOptions) -> Started:
        name = options.name or f"fake-{len(self.containers)}"
        self.calls.append(("start", name))
        self.containers[name] = options
        return Started(id=name)

    def state(self, container: str) -> ContainerState | None:
        """Every container exits 0 at once; subclasses script other outcomes."""
        return ContainerState(running=False, exit_code=0) if container in self.containers else None

    def logs(self, container: str) -> str:
        return ""

    def remove(self, container: str) -> None:
        self.calls.append(("remove", container))
        self.containers.pop(container, None)

    def labelled(self, key: str) -> list[Labelled]:
        found = [
            Labelled("container", name, dict(o.labels))
            for name, o in self.containers.items()
            if key in o.labels
        ]
        found += [Labelled("network", n, dict(lb)) for n, lb in self.networks.items() if key in lb]
        return found


@dataclass
class FakeRegistry(FakeStore):
    """A registry that holds every image asked for (RegistryEngine): pushes answer a digest,
    a base has both platforms unless told otherwise."""

    # base ref -> the platforms its registry's index has (registry_platforms); absent: both
    base_platforms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pushed_platform: dict[str, str] = field(default_factory=dict)  # manifest digest -> platform

    def push(self, ref: str) -> str:
        self.calls.append(("push", ref))
        if self.push_error:
            raise PushError(f"push of {ref} failed: connection refused. The local image is kept")
        return ref.rsplit(":", 1)[0] + "@sha256:" + "0" * 64

    def pull(self, ref: str) -> None:
        self.calls.append(("pull", ref))

    def registry_digest(self, ref: str) -> str:
        return "sha256:" + "1" * 64

    def registry_image_platforms(self, ref: str) -> tuple[str, ...]:
        self.registry_digest(ref)  # an engine that reaches no registry raises there
        return self.base_platforms.get(ref, PLATFORMS)

    def registry_platforms(self, ref: str, digest: str) -> dict[str, str]:
        """Each platform of `base_platforms[ref]` (both where it is not there), with a
        manifest digest of its own."""
        self.calls.append(("registry_platforms", f"{ref}@{digest}"))
        return {
            p: "sha256:" + hashlib.sha256(f"{digest} {p}".encode()).hexdigest()
            for p in self.base_platforms.get(ref, PLATFORMS)
        }

    def pushed_layers(self, ref: str, platform: str = AMD64) -> tuple[str, list[Layer]]:
        self.calls.append(("pushed_layers", ref if platform == AMD64 else f"{ref} {platform}"))
        digest = ref.rsplit("@", 1)[-1]
        if platform != AMD64:  # another platform's manifest, another image
            digest = "sha256:" + (digest + platform).encode().hex()[:64].ljust(64, "0")
        self.pushed_platform[digest] = platform
        layers = [
            replace(x, digest="sha256:" + f"{i:064x}", media_type=ZSTD_LAYER)
            for i, x in enumerate(self.layers(digest))
        ]
        return digest, layers

    def pushed_file(self, ref: str, layer: Layer, path: str) -> bytes | None:
        self.calls.append(("pushed_file", f"{ref} {path}"))
        return self.files.get(path)

    def pushed_files(self, ref: str, layers: Sequence[Layer]) -> ImageFiles:
        self.calls.append(("pushed_files", ref))
        return self._files(self.pushed_platform.get(ref.rsplit("@", 1)[-1], AMD64))


@dataclass
class FakeEngine(FakeBuilder, FakeRunner, FakeRegistry):
    """Every part (Engine): what a test of a whole command's run takes."""


ELF_MACHINE = {AMD64: 62, "linux/arm64": 183}


def elf_head(platform: str) -> bytes:
    """The first bytes of a little-endian 64-bit ELF shared library built for `platform`."""
    machine = ELF_MACHINE[platform].to_bytes(2, "little")
    return b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00" + machine + bytes(44)


def fake_root(platform: str, python: str = "3.11") -> TarIndex:
    """The files the platform proof reads, as a cell's runtime image has them, built for
    `platform`: Debian's /bin -> usr/bin, the venv's Python a link to the OS's, torch."""
    arch = MACHINE[platform]
    site = f"/opt/venv/lib/python{python}/site-packages"
    elf = elf_head(platform)
    entries = [
        Entry("/bin", "link", target="usr/bin"),
        Entry("/usr/bin/sh", "link", target="dash"),
        Entry("/usr/bin/dash", "file", size=125640, head=elf),
        Entry(f"/usr/bin/python{python}", "file", size=6_000_000, head=elf),
        Entry("/opt/venv/bin/python", "link", target=f"/usr/bin/python{python}"),
        Entry(f"{site}/torch/version.py", "file", size=40, text="__version__ = '2.13.0+cpu'\n"),
        Entry(f"{site}/torch/lib/libc10.so", "file", size=10**6, head=elf),
        Entry(
            f"{site}/torch-2.13.0+cpu.dist-info/WHEEL",
            "file",
            size=100,
            text=f"Wheel-Version: 1.0\nTag: cp311-cp311-linux_{arch}\n",
        ),
    ]
    return TarIndex([LayerScan({e.path: e for e in entries}, set(), set())])
