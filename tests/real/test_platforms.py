"""linux/arm64 beside linux/amd64, for real (issues 39 and 49), from the state a user's
machine is in: the README's quickstart left `debian:bookworm-slim` for linux/amd64 alone.

One test walks the whole path, each step on what the last one made (one debootstrap, for
arm64): a build for linux/arm64 on that base is refused before anything runs (BuildKit itself
would only warn, and does: read from its output); `--bootstrap-base` adds arm64 to the same
name as one index, amd64's manifest kept; the arm64 OS stage is built locally, its files proven
arm64's and its Python run under QEMU; both platforms' OS stage pushed as one index (no SBOM in
that stage, said so), each platform's files read back from the registry; the base pushed and
locked per platform; the per-platform arch labels; and a hand-made base whose config says arm64
over x86-64 files, whose image the content check fails, built locally and pushed. The engines
that cannot hold an index refuse one before building anything."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from devkit.realengine import (
    DOCKER,
    REGISTRY,
    docker,
    engine_kind,
    imagekit,
    marked_ca_bundle,
    registry_get,
    require_exporter,
)
from imagekit.builder.log import StepLog
from imagekit.engine.docker import DockerEngine
from imagekit.engine.interface import BuildRequest

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ANY_MANIFEST = (
    "application/vnd.oci.image.manifest.v1+json,"
    "application/vnd.docker.distribution.manifest.v2+json"
)
BOTH = "linux/amd64,linux/arm64"
DEBIAN = "debian:bookworm-slim"


def project(root: Path, repository: str, base: str = "") -> Path:
    """A CPU cell of torch 2.7.1 for both platforms (amd64's torch from the cpu index,
    arm64's from PyPI), on the matrix's own Debian base or `base`; only its OS stage is
    built here."""
    (root / "envs").mkdir(parents=True)
    override = f", base: '{base}'" if base else ""
    (root / "envs" / "grace.yaml").write_text(
        f"registry: {REGISTRY}\nrepository: {repository}\n"
        "matrix:\n"
        "  - {cuda: cpu, torch: '2.7.1', python: '3.11', os: debian12, flavor: slim,\n"
        f"     compile: false, platform: [linux/amd64, linux/arm64]{override}}}\n"
    )
    return root


def run_build(root: Path, *more: str):  # type: ignore[no-untyped-def]
    return imagekit(
        "build", "--target", "os-base", "--ca-bundle", str(marked_ca_bundle(root)),
        "--progress", "plain", *more, cwd=root, timeout=1200,
    )  # fmt: skip


def build(root: Path, *more: str) -> dict:  # type: ignore[type-arg]
    result = run_build(root, *more)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (cell,) = (root / "reports").iterdir()
    return json.loads((cell / "build.json").read_text())  # type: ignore[no-any-return]


def machine(image: str, platform: str) -> str:
    return docker("run", "--rm", "--platform", platform, image, "uname", "-m").stdout.strip()


def python_machine(image: str, platform: str) -> str:
    code = "import platform; print(platform.machine())"
    return docker(
        "run", "--rm", "--platform", platform, image, "python3", "-c", code
    ).stdout.strip()


def platforms_of(image: str) -> dict[str, str]:
    """The platforms a local image holds, with each one's manifest digest (the engine's
    `?manifests=1` inspect, Docker 28 on the containerd store)."""
    api = DockerEngine(DOCKER).client.api
    url = api._url("/images/{0}/json", image)
    found = api._result(api._get(url, params={"manifests": "1"}), True)
    return {
        f"{m['ImageData']['Platform']['os']}/{m['ImageData']['Platform']['architecture']}": m["ID"]
        for m in found.get("Manifests") or []
        if m.get("Kind") == "image" and m.get("Available")
    }


def amd64_only_base(tmp_path: Path) -> str:
    """debian:bookworm-slim for linux/amd64 alone, as the quickstart leaves it (made where
    the engine lacked it: conftest.py debian_bookworm); its manifest's digest."""
    if engine_kind() != "containerd":
        return ""
    held = platforms_of(DEBIAN)
    assert list(held) == ["linux/amd64"], f"{DEBIAN} here holds {held}: not the quickstart's"
    return held["linux/amd64"]


# QEMU keeps one CPU busy for minutes: in CI, beside the CUDA cells (scripts/test-beside.sh)
@pytest.mark.beside
def test_an_arm64_image_is_built_on_an_arm64_base_and_proven_arm64(tmp_path: Path) -> None:
    require_exporter()
    run = uuid.uuid4().hex[:8]
    amd64 = amd64_only_base(tmp_path)
    kept = f"imagekit-test/debian-amd64-{run}:bookworm"
    docker("tag", DEBIAN, kept)  # the engine is left as it was found (BuildKit's cache too)
    repository = f"imagekit-grace-{run}"
    root = project(tmp_path / "p", repository)
    try:
        refused_then_bootstrapped(root, amd64)
        local = build(root, "--platform", "linux/arm64")
        assert local["status"] == "built" and local["platforms"] == ["linux/arm64"]
        assert {c["found"] for c in local["content"]} == {"aarch64"}, local["content"]
        assert {c["what"] for c in local["content"]} == {
            "the OS's shell, /bin/sh",
            "the OS's Python",
        }
        # its layers measured, though BuildKit unpacks only the engine's own platform
        apt = next(x for x in local["layers"] if "apt-get install" in x["created_by"])
        assert apt["size_bytes"] > 10**6
        assert python_machine(local["tags"][0], "linux/arm64") == "aarch64"  # under QEMU
        docker("rmi", "-f", *local["tags"], check=False)
        pushed = pushed_index_of_both(root, repository)
        locks_each_platform_of_a_pushed_base(tmp_path, DEBIAN, run)
        each_platform_carries_its_own_archs(tmp_path, f"{REGISTRY}/{repository}@{pushed}", run)
        lying_base_fails_the_content_check(tmp_path, run)
    finally:
        docker("tag", kept, DEBIAN)
        docker("rmi", kept, check=False)


def refused_then_bootstrapped(root: Path, amd64: str) -> None:
    """On the amd64-only base, --platform linux/arm64 is refused before anything runs
    (BuildKit itself only warns: read from its own output); --bootstrap-base adds arm64 to
    the same name, amd64's manifest kept as it was."""
    refused = run_build(root, "--platform", "linux/arm64")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"base {DEBIAN} (on this engine) has linux/amd64, not linux/arm64" in refused.stderr
    assert "Fix: add --bootstrap-base" in refused.stderr
    assert not (root / "reports").exists()  # nothing built, nothing written
    warned = buildkit_warnings(root, "linux/arm64")
    assert warned == {"InvalidBaseImagePlatform", "LegacyKeyValueFormat"}
    made = build(root, "--platform", "linux/arm64", "--bootstrap-base")
    assert made["status"] == "built" and made["warnings"] == []
    held = platforms_of(DEBIAN)
    assert set(held) == {"linux/amd64", "linux/arm64"} and held["linux/amd64"] == amd64
    assert machine(DEBIAN, "linux/arm64") == "aarch64"
    docker("rmi", "-f", *made["tags"], check=False)
    for cell in (root / "reports").iterdir():
        (cell / "build.json").unlink()
        cell.rmdir()


def buildkit_warnings(root: Path, platform: str) -> set[str]:
    """The rules BuildKit warned about, as imagekit reads them from its output, building a
    Dockerfile of one legacy `ENV A b` line on the Debian base for `platform`."""
    folder = root / f"bare-{platform.replace('/', '-')}"
    folder.mkdir()
    (folder / "Dockerfile").write_text(f"FROM {DEBIAN}\nENV A b\n")
    steps = StepLog()
    request = BuildRequest(
        context=folder, dockerfile=folder / "Dockerfile", target="", platforms=(platform,)
    )
    DockerEngine(DOCKER).build(request, steps.feed)
    return {w.rule for w in steps.warnings}


def pushed_index_of_both(root: Path, repository: str) -> str:
    """Both platforms' OS stage pushed as one index, the SBOM attach on (the CLI's default)
    but none in this stage: pushed without, said so; each platform's files read back from
    the registry. Returns the index's digest."""
    for cell in (root / "reports").iterdir():
        (cell / "build.json").unlink()
    report = build(root, "--platform", BOTH, "--push")
    assert report["status"] == "built" and report["push_path"] == "builder"
    assert report["sbom_status"] == "not-in-stage" and report["sbom"] == []
    assert report["platforms"] == ["linux/amd64", "linux/arm64"]
    pushed = report["pushed"][0].split("@")[1]  # the index's digest
    index = json.loads(registry_get(f"{repository}/manifests/{pushed}", accept=OCI_INDEX))
    by_arch = {
        m["platform"]["architecture"]: m["digest"]
        for m in index["manifests"]
        if m["platform"].get("os") == "linux"
    }
    assert set(by_arch) == {"amd64", "arm64"}
    for platform, arch, uname in (
        ("linux/amd64", "amd64", "x86_64"),
        ("linux/arm64", "arm64", "aarch64"),
    ):
        entry = report["by_platform"][platform]
        assert entry["image_id"] == by_arch[arch]  # read back from the registry
        assert {c["found"] for c in entry["content"]} == {uname}, entry["content"]
        image = json.loads(
            registry_get(f"{repository}/manifests/{by_arch[arch]}", accept=ANY_MANIFEST)
        )
        config = json.loads(
            registry_get(f"{repository}/blobs/{image['config']['digest']}", accept="*/*")
        )
        assert config["architecture"] == arch
        assert entry["size_bytes"] == sum(layer["size"] for layer in image["layers"])
    return pushed


def lying_base_fails_the_content_check(tmp_path: Path, run: str) -> None:
    """A hand-made base whose config says arm64 over x86-64 files (the amd64 root imported
    with `--platform linux/arm64`): the base check cannot tell, the build runs its x86-64
    programs natively, and the content check fails the image, built locally (never tagged)
    and pushed straight (read back from the registry)."""
    lying = f"imagekit-test/lying-{run}:bookworm"
    container = docker("create", "--platform", "linux/amd64", DEBIAN, "true").stdout.strip()
    try:
        export = f"{DOCKER} export {container} | {DOCKER} import --platform linux/arm64 - {lying}"
        subprocess.run(["sh", "-c", export], check=True, capture_output=True, timeout=300)
    finally:
        docker("rm", "-f", container, check=False)
    root = project(tmp_path / "lying", f"imagekit-lying-{run}", lying)
    try:
        for more in ((), ("--push",)):
            result = run_build(root, "--platform", "linux/arm64", *more)
            assert result.returncode == 6, result.stdout[-3000:] + result.stderr[-3000:]
            (cell,) = (root / "reports").iterdir()
            report = json.loads((cell / "build.json").read_text())
            assert report["status"] == "wrong-platform" and report["tags"] == []
            assert (
                "/usr/bin/dash (the OS's shell, /bin/sh) is x86_64, not aarch64" in report["error"]
            )
            assert "wrong-platform" in result.stdout
        assert "(it is in the registry: do not promote it)" in report["error"]
        listed = docker("images", "--format", "{{.Repository}}").stdout
        assert f"imagekit-lying-{run}" not in listed  # never tagged here
    finally:
        docker("rmi", "-f", lying, check=False)


ROOT = Path(__file__).resolve().parents[2]
# A committed cell of both platforms whose torch wheels are built for other GPUs on each.
TWO_ARCH_CELL = "pytorch-train-cu130-torch2.14.1-py3.12-ubuntu24.04-slim"
AMD64_ARCHS = "7.5 8.0 8.6 9.0 10.0 12.0"
ARM64_ARCHS = "8.0 9.0 10.0 11.0 12.0"


def each_platform_carries_its_own_archs(tmp_path: Path, os_base: str, run: str) -> None:
    """The committed Dockerfile's stages after runtime-common, as rendered, built by BuildKit
    for each platform: TARGETARCH picks runtime-arm64 for arm64, whose label and labels.json
    say arm64's archs; amd64's keep runtime-common's. runtime-common itself (a CUDA torch:
    GBs under QEMU) is stood in for by the pushed OS stage with the labels it would have."""
    rendered = (ROOT / "dockerfiles" / TWO_ARCH_CELL / "Dockerfile").read_text()
    tail = rendered[rendered.index("FROM runtime-common AS runtime-amd64") :]
    labels = json.dumps({"io.imagekit.archs": AMD64_ARCHS, "io.imagekit.cell": TWO_ARCH_CELL})
    (tmp_path / "archs").mkdir()
    (tmp_path / "archs" / "Dockerfile").write_text(
        f"FROM {os_base} AS runtime-common\n"
        "RUN mkdir -p /opt/venv/bin /etc/imagekit && ln -s /usr/bin/python3 /opt/venv/bin/python"
        f" && echo '{labels}' > /etc/imagekit/labels.json\n"
        f'LABEL io.imagekit.archs="{AMD64_ARCHS}"\n\n{tail}'
    )
    for platform, want in (("linux/amd64", AMD64_ARCHS), ("linux/arm64", ARM64_ARCHS)):
        tag = f"imagekit-test/archs-{run}:{platform.rpartition('/')[2]}"
        docker(
            "build", "-q", "--platform", platform, "-t", tag, str(tmp_path / "archs"), timeout=600
        )
        try:
            config = json.loads(docker("image", "inspect", tag).stdout)[0]["Config"]
            assert config["Labels"]["io.imagekit.archs"] == want
            copy = docker("run", "--rm", "--platform", platform, "--entrypoint", "cat", tag,
                          "/etc/imagekit/labels.json").stdout  # fmt: skip
            assert json.loads(copy) == {
                "io.imagekit.archs": want,
                "io.imagekit.cell": TWO_ARCH_CELL,
            }
        finally:
            docker("rmi", "-f", tag, check=False)


def locks_each_platform_of_a_pushed_base(tmp_path: Path, base: str, run: str) -> None:
    """`imagekit lock` pins the base's index and records each platform's manifest in it,
    read back from the registry by digest."""
    pushed = f"{REGISTRY}/imagekit-base-both-{run}:bookworm"
    docker("tag", base, pushed)
    try:
        docker("push", "-q", pushed)
        root = project(tmp_path / "locked", f"imagekit-grace-lock-{run}", pushed)
        result = imagekit("lock", cwd=root, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        lock = json.loads((root / "envs" / "images.lock").read_text())
        digest = lock["images"][pushed]
        name = pushed.split("/", 1)[1].split(":")[0]
        index = json.loads(registry_get(f"{name}/manifests/{digest}", accept=OCI_INDEX))
        want = {
            f"linux/{m['platform']['architecture']}": m["digest"]
            for m in index["manifests"]
            if m["platform"].get("os") == "linux"
        }
        assert lock["platforms"][pushed] == want
        assert set(want) == {"linux/amd64", "linux/arm64"}
    finally:
        docker("rmi", pushed, check=False)


@pytest.mark.compat
def test_an_engine_that_cannot_hold_an_index_refuses_one_before_building(
    tmp_path: Path,
) -> None:
    if engine_kind() == "containerd":
        pytest.skip("the containerd image store holds an index: the test above builds one")
    root = project(tmp_path / "p", "imagekit-grace-refused", "debian:bookworm-slim")
    result = imagekit(
        "build", "--target", "os-base", "--platform", BOTH, "--push", cwd=root, timeout=300
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"--platform {BOTH}:" in result.stderr
    assert "containerd image store" in result.stderr
    assert not (root / "reports").exists()  # nothing built, nothing written


@pytest.mark.compat
def test_an_engine_of_one_platform_per_name_refuses_a_base_it_cannot_extend(
    tmp_path: Path,
) -> None:
    """The classic store and Docker 20.10 hold one platform per name: a build for arm64 on
    the amd64-only base is refused (exit 2), --bootstrap-base too (it could only replace
    amd64), before anything runs. BuildKit's warnings read from buildx on the classic store;
    Docker 20.10's built-in BuildKit has no build checks, so none there."""
    kind = engine_kind()
    if kind == "containerd":
        pytest.skip("the containerd image store holds both: the test above adds arm64")
    amd64_only_base(tmp_path)
    root = project(tmp_path / "p", "imagekit-grace-one")
    for more in ((), ("--bootstrap-base",)):
        result = run_build(root, "--platform", "linux/arm64", *more)
        assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
        assert f"base {DEBIAN} (on this engine) has linux/amd64, not linux/arm64" in result.stderr
        assert "--bootstrap-base cannot add linux/arm64 beside it" in result.stderr
        assert not (root / "reports").exists()
    wanted = set() if kind == "builtin" else {"LegacyKeyValueFormat"}
    assert buildkit_warnings(root, "linux/amd64") == wanted
