"""Helpers for tests that drive the real Docker engine, registry and containers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest

from .conftest import ROOT

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
    """All of BuildKit's cache: the next build starts cold."""
    docker("builder", "prune", "-af", check=False, timeout=600)


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


def require_engine() -> None:
    if docker("info", check=False).returncode != 0:
        pytest.fail("no Docker engine: run `bash .ci/setup-host.sh` (installs and starts dockerd)")


def make_project(
    dest: Path, registry: str = REGISTRY, repository: str = "imagekit-test", extra: str = ""
) -> Path:
    """A copy of tests/data (matrix + app source) with its own registry/repository."""
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
