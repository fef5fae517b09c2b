"""The engine's registry reads and writes in one place: pushes, pulls and a tag's digest
through the daemon; a pushed image read back with oras (its manifest, its config's layers and
history, its files, one file of one layer) and a base's platforms. A push without --load
leaves nothing in the local image store, so the build's layer report and the SBOM it
attaches come from here.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import subprocess
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from imagekit import terminal
from imagekit.contract import refs
from imagekit.contract.refs import DIGEST
from imagekit.engine import scan_cache, tools
from imagekit.engine.docker_daemon import DockerConnection, split_ref
from imagekit.engine.image_files import LayerScan, TarIndex, member_path, scan_layer
from imagekit.engine.interface import Layer
from imagekit.errors import EngineError, ImagekitError, PushError
from imagekit.platforms import AMD64, PLATFORMS

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
# the layer media types BuildKit pushes, by how their bytes are compressed
GZIP_SUFFIXES = ("tar+gzip", "tar.gzip")
ZSTD_SUFFIXES = ("tar+zstd",)
# a layer read whole into memory: only small ones (the SBOM's layer is a few hundred KB)
MAX_LAYER_BYTES = 64 * 2**20
# a layer streamed (its files' heads read, the rest passed over): a multi-GB CUDA layer takes
# tens of seconds over loopback; a registry that stops sending fails here
LAYER_STREAM_SECONDS = 900.0
LAYER_STREAMS = 3  # layers read at once (decompressing releases the GIL)


@dataclass(frozen=True)
class PushedImage:
    digest: str  # the image manifest's (inside the index where provenance made one)
    layers: list[Layer]  # oldest first; `size` is the compressed size as pushed


def _oras(args: list[str], reference: str, what: str) -> bytes:
    result = tools.run(tools.ORAS, [*args, *tools.oras_http(reference), reference], what)
    if result.returncode != 0:
        raise ImagekitError(*tools.failed(tools.ORAS, f"{what} ({reference})", result))
    return result.stdout.encode("utf-8", "surrogateescape")


def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        found = json.loads(data)
    except ValueError:
        raise ImagekitError(f"{what}: the registry's answer is not JSON") from None
    if not isinstance(found, dict):
        raise ImagekitError(f"{what}: the registry's answer is not a JSON object")
    return found


def platform_manifest(index: dict[str, Any], arch: str = "amd64") -> str:
    """The image manifest of an index for linux/`arch` (attestation manifests, whose
    platform is unknown/unknown, are skipped); "" where it has none."""
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("os") == "linux" and platform.get("architecture") == arch:
            return str(entry.get("digest", ""))
    return ""


def layers_of(manifest: dict[str, Any], config: dict[str, Any]) -> list[Layer]:
    """The manifest's blobs joined with the config's diff IDs and the history entries that
    made a layer (an OCI config marks the others `empty_layer`)."""
    blobs = manifest.get("layers") or []
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    made = [h for h in config.get("history") or [] if not h.get("empty_layer")]
    if len(blobs) != len(diff_ids):
        raise ImagekitError(
            f"the pushed manifest has {len(blobs)} layers and its config {len(diff_ids)} "
            "diff IDs: not an image imagekit can read"
        )
    made = [{}] * (len(blobs) - len(made)) + made[-len(blobs) :] if blobs else []
    return [
        Layer(
            created_by=str(entry.get("created_by") or ""),
            size=int(blob.get("size") or 0),
            diff_id=str(diff_id),
            digest=str(blob.get("digest") or ""),
            media_type=str(blob.get("mediaType") or ""),
        )
        for blob, diff_id, entry in zip(blobs, diff_ids, made, strict=True)
    ]


def pushed_image(reference: str, arch: str = "amd64") -> PushedImage:
    """The image under `reference` (name@digest or a tag) as its registry holds it; of an
    index, its linux/`arch` image."""
    what = "reading the pushed image"
    top = _json(_oras(["manifest", "fetch"], reference, what), what)
    digest = refs.parse(reference).digest or ""
    if top.get("mediaType") in INDEX_TYPES or "manifests" in top:
        digest = platform_manifest(top, arch)
        if not digest:
            raise ImagekitError(f"{reference}: its index has no linux/{arch} image manifest")
        top = _json(_oras(["manifest", "fetch"], by_digest(reference, digest), what), what)
    config_digest = str((top.get("config") or {}).get("digest", ""))
    blob = _oras(["blob", "fetch", "--output", "-"], by_digest(reference, config_digest), what)
    if not digest:
        descriptor = _oras(["manifest", "fetch", "--descriptor"], reference, what)
        digest = str(_json(descriptor, what).get("digest", ""))
    return PushedImage(digest=digest, layers=layers_of(top, _json(blob, what)))


def platform_digests(reference: str) -> dict[str, str]:
    """The image manifest of each platform imagekit builds (PLATFORMS) in the image under
    `reference` (name@digest): an index's entries, attestations (unknown/unknown) and other
    platforms left out; a single image manifest is its config's platform."""
    what = "reading a base image's platforms"
    top = _json(_oras(["manifest", "fetch"], reference, what), what)
    if top.get("mediaType") in INDEX_TYPES or "manifests" in top:
        found = index_platforms(top)
    else:
        config_digest = str((top.get("config") or {}).get("digest", ""))
        blob = _oras(["blob", "fetch", "--output", "-"], by_digest(reference, config_digest), what)
        config = _json(blob, what)
        found = {f"{config.get('os')}/{config.get('architecture')}": refs.parse(reference).digest}
    mine = {p: str(found[p]) for p in PLATFORMS if p in found}
    bad = [p for p, digest in mine.items() if not DIGEST.fullmatch(digest)]
    if bad:
        raise ImagekitError(f"{reference}: the registry gives {bad[0]} no sha256 digest")
    return mine


def index_platforms(index: dict[str, Any]) -> dict[str, str]:
    """An index's first image manifest of each platform, as os/architecture (a variant,
    arm64's v8, is not part of imagekit's platform names)."""
    found: dict[str, str] = {}
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        name = f"{platform.get('os')}/{platform.get('architecture')}"
        found.setdefault(name, str(entry.get("digest", "")))
    return found


def by_digest(reference: str, digest: str) -> str:
    """name@digest of the repository `reference` names."""
    return str(refs.parse(reference).by_digest(digest))


def layer_file(reference: str, layer: Layer, path: str) -> bytes | None:
    """One file of a pushed layer (a small one), read from its blob; None if it has none."""
    if layer.size > MAX_LAYER_BYTES:
        raise ImagekitError(f"{layer.digest}: {layer.size} bytes, too large to read whole")
    what = "reading a pushed layer"
    with tempfile.TemporaryDirectory(prefix="imagekit-layer-") as tmp:
        # to a file: the blob is binary, and tools.run reads a tool's output as text
        blob = Path(tmp) / "blob"
        _oras(["blob", "fetch", "--output", str(blob)], by_digest(reference, layer.digest), what)
        data = blob.read_bytes()
    return file_in_tar(decompress(data, layer.media_type), path)


def decompress(blob: bytes, media_type: str) -> bytes:
    """A whole (small) layer's tar, through the decompressor its media type names."""
    try:
        return _decompressing(io.BytesIO(blob), media_type).read()
    except (OSError, EOFError, zlib.error) as exc:
        kind = "gzip" if media_type.endswith(GZIP_SUFFIXES) else "zstd"
        raise ImagekitError(f"a {kind} layer that does not decompress: {exc}") from None


def file_in_tar(data: bytes, path: str) -> bytes | None:
    wanted = member_path(path)
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                if member_path(member.name) == wanted and member.isfile():
                    extracted = tar.extractfile(member)
                    return extracted.read() if extracted else None
    except tarfile.TarError as exc:
        raise ImagekitError(f"a pushed layer that is not a tar: {exc}") from None
    return None


def files(reference: str, layers: Sequence[Layer]) -> TarIndex:
    """The files of the pushed image whose `layers` (oldest first) `reference` names, read
    back from its registry: each layer's blob streamed through its decompressor and its tar
    read once (each file's first bytes kept), then stacked newest first, whiteouts applied.
    A layer this machine has read before, by its blob's digest, is not read again
    (engine/scan_cache.py). Nothing is loaded into the engine."""
    pool = ThreadPoolExecutor(max_workers=LAYER_STREAMS)
    try:
        scans = list(pool.map(lambda layer: _scan(reference, layer), layers))
    finally:  # on a failure, the layers not started are not read
        pool.shutdown(wait=True, cancel_futures=True)
    return TarIndex(reversed(scans))


def _scan(reference: str, layer: Layer) -> LayerScan:
    kept = scan_cache.load(layer.digest)
    if kept is not None:
        return kept
    with _blob_stream(by_digest(reference, layer.digest)) as raw:
        scan = scan_layer(_decompressing(raw, layer.media_type))
    scan_cache.store(layer.digest, scan)  # after the stream closed clean: a whole scan only
    return scan


@contextmanager
def _blob_stream(reference: str) -> Iterator[IO[bytes]]:
    """`oras blob fetch --output -` of one blob, as a stream, for the `with` body to read
    (a tar's end marker may come before the stream's end: the rest is not waited for). A
    fetch that fails, stops sending, or sends what does not read is said with its words."""
    args = ["blob", "fetch", *tools.oras_http(reference), "--output", "-", reference]
    command = [tools.find(tools.ORAS, "reading a pushed image's files"), *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    expired = threading.Event()
    timer = threading.Timer(LAYER_STREAM_SECONDS, lambda: (expired.set(), proc.kill()))
    timer.start()
    unreadable: Exception | None = None
    try:
        assert proc.stdout is not None
        yield proc.stdout
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        unreadable = exc
    finally:
        timer.cancel()
        if unreadable is not None:  # oras may have failed: its exit and words, not the tar's
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        early = proc.poll() is None
        if early:
            proc.kill()
        _, err = proc.communicate()
    if expired.is_set():
        raise ImagekitError(
            f"reading {reference}: not done after {LAYER_STREAM_SECONDS:.0f}s; check that the "
            "registry is reachable and answering (--load proves the image here, locally)"
        )
    if proc.returncode != 0 and not early:
        said = err.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise ImagekitError(
            f"reading {reference}: oras exited {proc.returncode}", *terminal.foreign(said)
        )
    if unreadable is not None:
        raise ImagekitError(f"reading {reference}: a layer that does not read: {unreadable}")


def _decompressing(raw: IO[bytes], media_type: str) -> IO[bytes]:
    """A layer blob's stream as its tar, through the decompressor its media type names (an
    uncompressed one as it is); errors are OSError, EOFError or zlib.error."""
    if media_type.endswith(GZIP_SUFFIXES):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if media_type.endswith(ZSTD_SUFFIXES):
        return _ZstdStream(raw)  # type: ignore[return-value]
    return raw


class _ZstdStream(io.RawIOBase):
    """A zstd stream's bytes, its errors as OSError (the tar reader's own kind)."""

    def __init__(self, raw: IO[bytes]) -> None:
        import zstandard

        self.error = zstandard.ZstdError
        self.reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.reader.read(len(buffer))
        except self.error as exc:
            raise OSError(f"zstd: {exc}") from None
        buffer[: len(data)] = data
        return len(data)


class DockerRegistry(DockerConnection):
    """The registry as DockerEngine reaches it (RegistryEngine): pushes and pulls and the tag's
    digest through the daemon, what was pushed read back with oras."""

    def pull(self, ref: str) -> None:
        import docker.errors

        try:
            self.client.images.pull(ref)
        except docker.errors.APIError as exc:
            raise EngineError(f"pulling {ref} failed: {exc.explanation or exc}") from None

    def push(self, ref: str) -> str:
        repo, tag = split_ref(ref)
        digest = ""
        try:
            for event in self.client.images.push(repo, tag=tag, stream=True, decode=True):
                if "error" in event:
                    raise PushError(push_failure(ref, str(event["error"])))
                digest = pushed_digest(event) or digest
            # The containerd store may report neither an aux record nor a digest line: the
            # registry then says what it holds under the tag.
            digest = digest or self._registry_digest_or_empty(ref)
        except PushError:
            raise
        except Exception as exc:  # connection refused, DNS, TLS: all mean "not pushed"
            raise PushError(push_failure(ref, f"{type(exc).__name__}: {exc}")) from None
        if not digest:
            raise PushError(push_failure(ref, "the registry returned no digest"))
        return f"{repo}@{digest}"

    def _registry_digest_or_empty(self, ref: str) -> str:
        import docker.errors

        try:
            return self.registry_digest(ref)
        except docker.errors.APIError:
            return ""

    def registry_digest(self, ref: str) -> str:
        return str(self.client.images.get_registry_data(ref).id)

    def registry_image_platforms(self, ref: str) -> tuple[str, ...]:
        """The daemon's look at the registry (`GET /distribution/{name}/json`): the
        platforms of the index, or of the one manifest, the tag names."""
        found = self.client.images.get_registry_data(ref).attrs.get("Platforms") or []
        names = [f"{p.get('os')}/{p.get('architecture')}" for p in found if isinstance(p, dict)]
        return tuple(dict.fromkeys(n for n in names if "unknown" not in n))

    def registry_platforms(self, ref: str, digest: str) -> dict[str, str]:
        """Read with oras, as pushed images are: the daemon's registry API says which
        platforms an index has, not their manifests' digests."""
        return platform_digests(str(refs.parse(ref).normalized().by_digest(digest)))

    def pushed_layers(self, ref: str, platform: str = AMD64) -> tuple[str, list[Layer]]:
        """The pushed image's manifest digest and layers for `platform`, read back from its
        registry."""
        image = pushed_image(ref, platform.rpartition("/")[2])
        return image.digest, image.layers

    def pushed_file(self, ref: str, layer: Layer, path: str) -> bytes | None:
        return layer_file(ref, layer, path)

    def pushed_files(self, ref: str, layers: Sequence[Layer]) -> TarIndex:
        return files(ref, layers)


_DIGEST_LINE = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


def pushed_digest(event: dict[str, Any]) -> str:
    """The manifest digest a push event reports: the aux record (classic store), or the
    status line `TAG: digest: sha256:... size: N` (both stores print it); "" if neither."""
    aux = event.get("aux") or {}
    if isinstance(aux, dict) and aux.get("Digest"):
        return str(aux["Digest"])
    match = _DIGEST_LINE.search(str(event.get("status") or ""))
    return match.group(1) if match else ""


def push_failure(ref: str, reason: str) -> str:
    registry = refs.parse(ref).registry or "docker.io"
    return (
        f"push of {ref} failed: {reason}. The local image {ref} is kept; check that the "
        f"registry {registry} is reachable and that you are logged in (`docker login {registry}`)"
    )
