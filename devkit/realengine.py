"""Helpers that drive the real Docker engine, registry and containers, for tests and benches."""

from __future__ import annotations

import fcntl
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import IO, Any

import pytest
import zstandard

# The CLI of the engine under test (.ci/engines.sh env sets it), else Debian's.
DOCKER = os.environ.get("IMAGEKIT_DOCKER") or (
    "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
)
REGISTRY = "127.0.0.1:5000"
EPOCH = "1700000000"  # 2023-11-14T22:13:20+00:00
MARKER = "imagekit-ca-bundle-marker-3f9c1d"  # appended to the CA bundle given to builds
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"  # this machine's bundle (its proxy's CA)
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ANY_MANIFEST = f"{MANIFEST_V2},{OCI_MANIFEST}"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ROOT = Path(__file__).resolve().parent.parent  # the checkout: tests/data is copied from it


def wheelhouse() -> Path:
    path = Path(os.environ.get("IMAGEKIT_TEST_WHEELHOUSE", "/opt/wheels"))
    if not any(path.glob("torch-*-cp311-*.whl")):
        pytest.fail(f"no CPU torch wheel for CPython 3.11 in {path}; set IMAGEKIT_TEST_WHEELHOUSE")
    return path


def imagekit(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    # Test projects are no git checkouts: a fixed SOURCE_DATE_EPOCH gives every build of
    # them the same creation label, as a commit's time would.
    full_env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, **(env or {}), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "imagekit", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def docker(
    *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=check
    )


def image_config(ref: str, timeout: float = 300) -> dict:  # type: ignore[type-arg]
    """A local image's config as the engine stores it (`docker image inspect` leaves out
    BuildKit's own keys): streamed out of `docker save`, keeping only the small members
    (the layers go by), then found through the archive's manifest.json."""
    small: dict[str, bytes] = {}
    with subprocess.Popen([DOCKER, "save", ref], stdout=subprocess.PIPE) as save:
        assert save.stdout is not None
        with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
            for member in archive:
                if member.isfile() and member.size < 1 << 20:
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    small[member.name] = extracted.read()
        assert save.wait(timeout=timeout) == 0, f"docker save {ref} failed"
    (entry,) = json.loads(small["manifest.json"])
    return json.loads(small[entry["Config"]])  # type: ignore[no-any-return]


GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


def layer_tar(member: IO[bytes]) -> IO[bytes]:
    """A layer as `docker save` wrote it, as its tar stream: the containerd store writes each
    blob as it holds it (the zstd or gzip blobs a pushing build made and loaded, the plain tar
    of a layer built here), the classic store and Docker 20.10 plain tars."""
    head = member.read(4)
    rest = io.BufferedReader(_Prefixed(head, member))  # type: ignore[arg-type]
    if head.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=rest, mode="rb")  # type: ignore[return-value]
    if head == ZSTD_MAGIC:
        return zstandard.ZstdDecompressor().stream_reader(rest, read_across_frames=True)  # type: ignore[return-value]
    return rest  # type: ignore[return-value]


class _Prefixed(io.RawIOBase):
    """Bytes already read, then the rest of the stream."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head, self.stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.head[: len(buffer)] or self.stream.read(len(buffer))
        self.head = self.head[len(data) :] if self.head else b""
        buffer[: len(data)] = data
        return len(data)


def _strings_in_file(stream: IO[bytes], needles: list[str]) -> set[str]:
    """The needles in a file, read a MiB at a time (a needle across two reads is seen)."""
    wanted = {n: n.encode() for n in needles}
    keep = max((len(b) for b in wanted.values()), default=1) - 1
    found: set[str] = set()
    tail = b""
    while chunk := stream.read(1 << 20):
        window = tail + chunk
        found |= {n for n, b in wanted.items() if b in window}
        tail = window[-keep:] if keep else b""
    return found


def strings_in_saved_image(ref: str, needles: list[str]) -> tuple[set[str], list[str]]:
    """Which of `needles` are in the image `docker save` writes: in its config and manifests,
    and in the files of every layer however the engine stores it (layer_tar). Also the members
    over 64 KiB that read as neither JSON nor a layer: a scan that reads nothing of a layer
    would find nothing in it, so a caller asserts there are none. Streamed: images are GBs."""
    found: set[str] = set()
    unread: list[str] = []
    with subprocess.Popen([DOCKER, "save", ref], stdout=subprocess.PIPE) as save:
        assert save.stdout is not None
        with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
            for member in archive:
                stream = archive.extractfile(member) if member.isfile() else None
                if stream is None:
                    continue
                if member.size < 1 << 16:
                    data = stream.read()
                    found |= {n for n in needles if n.encode() in data}
                    if not data.lstrip().startswith((b"{", b"[")):
                        found |= _strings_in_layer(io.BytesIO(data), needles, member.name, [])
                    continue
                found |= _strings_in_layer(stream, needles, member.name, unread)
        assert save.wait(timeout=600) == 0, f"docker save {ref} failed"
    return found, unread


def _strings_in_layer(
    stream: IO[bytes], needles: list[str], name: str, unread: list[str]
) -> set[str]:
    found: set[str] = set()
    try:
        with tarfile.open(fileobj=layer_tar(stream), mode="r|") as layer:
            for inner in layer:
                content = layer.extractfile(inner) if inner.isfile() else None
                if content is not None:
                    found |= _strings_in_file(content, needles)
    except (tarfile.ReadError, OSError, EOFError, zstandard.ZstdError):
        unread.append(name)
    return found


INLINE_CACHE_KEY = "moby.buildkit.cache.v0"  # where BuildKit writes inline cache in a config


def registry_get(path: str, accept: str = MANIFEST_V2, registry: str = REGISTRY) -> bytes:
    """GET /v2/<path> from a local registry: a manifest, or a blob with accept="*/*"."""
    request = urllib.request.Request(f"http://{registry}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=120) as response:
        return bytes(response.read())


def image_manifest_digest(repo: str, reference: str) -> str:
    """The digest of the image's own manifest: the reference itself, or where it names an
    index (a push with provenance) the index's linux manifest."""
    accept = f"{ANY_MANIFEST},{OCI_INDEX}"
    found = dict(json.loads(registry_get(f"{repo}/manifests/{reference}", accept=accept)))
    if found.get("mediaType") != OCI_INDEX:
        return reference
    return str(next(m for m in found["manifests"] if m["platform"].get("os") == "linux")["digest"])


def manifest(repo: str, reference: str) -> dict:  # type: ignore[type-arg]
    """An image's manifest in the local registry (Docker's or OCI's media type); where the
    reference names an index (a push with provenance), its linux image manifest."""
    digest = image_manifest_digest(repo, reference)
    return dict(json.loads(registry_get(f"{repo}/manifests/{digest}", accept=ANY_MANIFEST)))


def layer_sizes(repo: str, tag: str) -> dict[str, int]:
    """The layers of an image in the local registry: digest -> compressed size, in order."""
    return {layer["digest"]: int(layer["size"]) for layer in manifest(repo, tag)["layers"]}


def prune_build_cache() -> None:
    """All of BuildKit's cache: the next build starts cold. Never beside other test processes
    (engine_shared): their builds would start cold too, and this test would prove nothing."""
    if engine_shared():
        pytest.fail(f"this test empties BuildKit's cache: not with {SHARED_ENV}=1")
    docker("builder", "prune", "-af", check=False, timeout=600)


def free_cache_mounts() -> None:
    """The installers' cache mounts emptied (GBs of wheels), where no other test process
    builds on this engine (engine_shared); there the phase's last test empties the cache."""
    if not engine_shared():
        docker(
            "builder", "prune", "-f", "--filter", "type=exec.cachemount", check=False, timeout=600
        )


def engine_kind() -> str:
    """The engine under test: "containerd" (buildx exporting into the containerd image
    store), "classic" (buildx loading into the classic store) or "builtin" (a pre-23 CLI's
    own BuildKit, Docker 20.10)."""
    from imagekit.engine.docker import DockerEngine

    engine = DockerEngine(DOCKER)
    if engine.builder.kind == "buildkit":
        return "builtin"
    return "containerd" if engine.exports_to_content_store() else "classic"


def require_exporter() -> None:
    """Skip unless BuildKit's image exporter serves builds (layer compression, cache export)."""
    if engine_kind() != "containerd":
        pytest.skip(
            "needs buildx exporting into the containerd image store "
            "(the default engine: bash .ci/engines.sh start containerd)"
        )


DEBIAN = "debian:bookworm-slim"  # the test cell's base, as `imagekit base bootstrap` names it
# Root filesystems bootstrapped in this run, kept for the next engine's phase (scripts/test-all.sh
# empties the folder when it starts): one debootstrap per OS and platform, not per engine.
BASES = Path(os.environ.get("IMAGEKIT_TEST_BASES", "/var/tmp/imagekit-test-bases"))
_made: dict[str, str] = {}  # how this session made a base it found missing


def debian_base() -> str:
    """debian:bookworm-slim on the engine under test, for this host's platform; how it came:
    "engine" (it was there: a user's machine after the quickstart), "bootstrap" (`imagekit
    base bootstrap`, the real path, its root filesystem then kept under BASES) or "kept"
    (that root filesystem imported as bootstrap imports one: `docker import`, CMD and LANG).
    One pytest process at a time makes it: in CI the `beside` tests run in processes of
    their own beside the real phase's (scripts/test-all.sh)."""
    BASES.mkdir(parents=True, exist_ok=True)
    with (BASES / "bases.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return _debian_base_locked()


def _debian_base_locked() -> str:
    if docker("image", "inspect", DEBIAN, check=False).returncode == 0:
        return _made.get(DEBIAN, "engine")
    kept = BASES / "bookworm-host.tar"
    if kept.is_file():
        from imagekit.engine.docker_build import IMPORT_CHANGES

        docker("import", *IMPORT_CHANGES, str(kept), DEBIAN, timeout=300)
        _made[DEBIAN] = "kept"
    else:
        made = imagekit("base", "bootstrap", "--suite", "bookworm", cwd=Path.cwd())
        assert made.returncode == 0, made.stderr[-3000:]
        keep_root_filesystem(DEBIAN, kept)
        _made[DEBIAN] = "bootstrap"
    return _made[DEBIAN]


def keep_root_filesystem(image: str, dest: Path) -> None:
    """The image's files as a tar (`docker export` of a container never started, less the
    /.dockerenv the engine adds), written whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    container = docker("create", image, "true").stdout.strip()
    part = dest.with_suffix(".part")
    try:
        with subprocess.Popen([DOCKER, "export", container], stdout=subprocess.PIPE) as export:
            assert export.stdout is not None
            with (
                tarfile.open(fileobj=export.stdout, mode="r|") as source,
                tarfile.open(part, "w") as out,
            ):
                for member in source:
                    if member.name.lstrip("./") == ".dockerenv":
                        continue
                    out.addfile(member, source.extractfile(member) if member.isfile() else None)
            assert export.wait(timeout=300) == 0, f"docker export of {image} failed"
        part.rename(dest)
    finally:
        part.unlink(missing_ok=True)
        docker("rm", "-f", container, check=False)


def require_engine() -> None:
    if docker("info", check=False).returncode != 0:
        pytest.fail("no Docker engine: run `bash .ci/setup-host.sh` (installs and starts dockerd)")


# Set where other pytest processes build on the same engine at once (scripts/test-beside.sh).
SHARED_ENV = "IMAGEKIT_TEST_SHARED_ENGINE"


def engine_shared() -> bool:
    """Whether other test processes build on this engine now. Then no test may prune any of
    BuildKit's cache: on Docker 28.5's containerd store, `docker builder prune` of the cache
    mounts alone (8 kB) left every build's steps uncached after it, those of an image with no
    cache mount too (2026-11-29), and a test that builds twice failed between its builds."""
    return os.environ.get(SHARED_ENV) == "1"


# The image repositories this process's tests build (make_project, made): tests/real/
# conftest.py removes their images after each test file (forget_made).
MADE: set[str] = set()
TITLE = "org.opencontainers.image.title"  # the repository name, a label of every built image


def made(repository: str) -> str:
    """Note that this process's tests build images named `repository`."""
    MADE.add(repository)
    return repository


def forget_made(keep: tuple[str, ...] = ()) -> None:
    """Every image of the repositories this process built (tagged, or left untagged when a
    rebuild moved its tag: found by the title label), but the images `keep` names. Another
    process's tests (scripts/test-beside.sh) build under names of their own, never here."""
    kept = set(docker("image", "inspect", "--format", "{{.Id}}", *keep, check=False).stdout.split())
    listed = docker("image", "ls", "--no-trunc", "--format", "{{.Repository}} {{.ID}}").stdout
    rows = [line.split() for line in listed.splitlines()]
    found = {image for name, image in rows if base_name(name) in MADE}
    untagged = sorted({image for name, image in rows if name == "<none>"})
    if untagged:  # by the label (a stage's target may lack it)
        titles = f'{{{{.Id}}}} {{{{index .Config.Labels "{TITLE}"}}}}'
        shown = docker("image", "inspect", "--format", titles, *untagged, check=False).stdout
        found |= {
            i for i, _, title in (ln.partition(" ") for ln in shown.splitlines()) if title in MADE
        }
    if gone := sorted(found - kept):
        docker("rmi", "-f", *gone, check=False, timeout=300)


def base_name(repository: str) -> str:
    """`127.0.0.1:5000/imagekit-test` -> `imagekit-test`."""
    return repository.rpartition("/")[2]


def make_project(
    dest: Path, registry: str = REGISTRY, repository: str = "imagekit-test", extra: str = ""
) -> Path:
    """A copy of tests/data (matrix + app source) with its own registry/repository, whose
    images are removed after the test file (forget_made)."""
    made(repository)
    shutil.copytree(
        ROOT / "tests" / "data", dest, ignore=shutil.ignore_patterns(".imagekit", "reports")
    )
    matrix = dest / "envs" / "cpu.yaml"
    text = matrix.read_text().replace("registry: 127.0.0.1:5000", f"registry: {registry}")
    matrix.write_text(
        text.replace("repository: imagekit-test", f"repository: {repository}") + extra
    )
    return dest


def marked_ca_bundle(dest: Path) -> Path:
    host = Path(os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or HOST_CA)
    bundle = dest / "ca-marked.pem"
    bundle.write_text(host.read_text() + f"\n# {MARKER}\n")
    return bundle


def build_args(bundle: Path, *more: str) -> list[str]:
    return [
        "build",
        "--envs",
        "envs",
        "--wheelhouse",
        str(wheelhouse()),
        "--torch-index",
        "none",
        "--ca-bundle",
        str(bundle),
        "--progress",
        "plain",
        *more,
    ]
