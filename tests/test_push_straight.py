"""`imagekit build --push` without --load: where BuildKit pushes, one build exports the image
straight to the registry (zstd by default), nothing is loaded, and the layer report and the
SBOM are read back from the registry (engine/image_registry.py). With --load, or on an engine
whose builder cannot push, the image is loaded and then pushed as before."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import zstandard

from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import plan
from imagekit.builder.build_report import CellReport, summary
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import QuietDisplay
from imagekit.builder.inputs import Inputs
from imagekit.builder.orchestrate import check_tools
from imagekit.builder.push_decisions import resolve_compression
from imagekit.engine import image_registry
from imagekit.engine.fake import ZSTD_LAYER, FakeEngine, FakeRegistry, FakeRunner
from imagekit.engine.interface import BuildRequest, Compression, ImageInfo, build_push_flags
from imagekit.errors import ImagekitError, UsageError
from imagekit.imagetest.image import checkable_image
from imagekit.locks.pinned import load_cells
from imagekit.supply import sbom

from .test_engine_unit import engine_with

ONE_CELL = """
defaults: {installer: uv, size_budget: 20GB}
matrix:
  - {cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}
"""
INPUTS = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
SBOM_STEP = "RUN /bin/sh -c python /run/imagekit/sbom_writer.py --out /opt/imagekit/sbom.cdx.json"


@pytest.fixture
def cells(write_env):  # type: ignore[no-untyped-def]
    return load_cells([write_env(ONE_CELL)])


def run(cells, tmp_path: Path, engine: FakeEngine, **opts: Any) -> CellReport:  # type: ignore[no-untyped-def]
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "reports", **opts)
    (report,) = Runner(engine, options, INPUTS, QuietDisplay()).run(plan(cells, options, INPUTS))
    return report


def sbom_engine(**more: Any) -> FakeEngine:
    """An engine whose images end with the SBOM's own layer, and carry the SBOM."""
    engine = FakeEngine(builder_pushes=True, files={sbom.PATH: b'{"bomFormat": "CycloneDX"}'})
    for key, value in more.items():
        setattr(engine, key, value)
    return engine


def with_sbom_layer(engine: FakeEngine, image_id: str) -> None:
    layers = engine.layers(image_id)
    engine.image_layers[image_id] = [*layers, replace(layers[0], created_by=SBOM_STEP, size=900)]


@pytest.fixture
def attached(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    seen: list[tuple[str, bytes]] = []

    def attach(ref: str, data: bytes) -> str:
        seen.append((ref, data))
        return ref.split("@")[0] + "@sha256:" + "5" * 64

    monkeypatch.setattr(sbom, "attach", attach)
    return seen


def test_a_push_without_load_is_one_build_that_buildkit_pushes_and_nothing_is_loaded(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, attached: list[tuple[str, bytes]]
) -> None:
    engine = sbom_engine()
    digest = "sha256:" + cells[0].id.encode().hex()[:64].ljust(64, "3")
    with_sbom_layer(engine, digest)
    report = run(
        cells, tmp_path, engine, push=True, compression=Compression("zstd"), attach_sbom=True
    )
    calls = [call for call, _ in engine.calls]
    assert "build_push" in calls and not {"build", "tag", "push", "push_compressed"} & set(calls)
    assert report.status == "built" and report.push_path == "builder" and report.tags == []
    assert report.pushed == [f"{t.rsplit(':', 1)[0]}@{digest}" for t in cells[0].tags]
    assert report.image_id == digest and report.sizes == "compressed"
    assert report.size_bytes == sum(x.size for x in engine.layers(digest))
    assert [x["size_bytes"] for x in report.layers][-1] == 900
    # the SBOM came out of its own layer in the registry, attached to the pushed digest once
    assert ("pushed_file", f"{report.pushed[0]} {sbom.PATH}") in engine.calls
    assert attached == [(report.pushed[0], b'{"bomFormat": "CycloneDX"}')]
    saved = json.loads((tmp_path / "reports" / cells[0].id / "build.json").read_text())
    assert saved["push_path"] == "builder" and saved["sizes"] == "compressed"
    assert f"sizes of {cells[0].id}: compressed, as pushed" in "\n".join(summary([report]))


def test_with_load_or_where_the_builder_cannot_push_the_image_is_loaded_then_pushed(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, attached: list[tuple[str, bytes]]
) -> None:
    loaded = run(cells, tmp_path, sbom_engine(), push=True, load=True)
    classic = sbom_engine(builder_pushes=False)
    engine_push = run(cells, tmp_path, classic, push=True)
    for report in (loaded, engine_push):
        assert "compressed, as pushed" not in "\n".join(summary([report]))
        assert report.status == "built" and report.push_path == "engine"
        assert report.sizes == "unpacked" and report.tags == list(cells[0].tags)
    assert [call for call, _ in classic.calls][:3] == ["build", "image_files", "tag"]
    assert "build_push" not in [call for call, _ in classic.calls]


def test_a_build_without_push_never_goes_straight_to_the_registry(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = sbom_engine()
    report = run(cells, tmp_path, engine)
    assert report.push_path == "" and "build_push" not in [c for c, _ in engine.calls]


def test_the_budget_of_a_pushed_image_is_judged_on_its_compressed_layers(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, attached: list[tuple[str, bytes]]
) -> None:
    engine = sbom_engine(image_size=30 * 10**9)
    report = run(cells, tmp_path, engine, push=True, attach_sbom=True)
    assert report.status == "over-budget"
    assert "(compressed, as pushed: it is in the registry; do not promote it)" in report.error
    assert attached == []  # an image over its budget gets no SBOM attached


def test_a_pushed_image_without_an_sbom_layer_fails_its_push(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, attached: list[tuple[str, bytes]]
) -> None:
    report = run(cells, tmp_path, sbom_engine(), push=True, attach_sbom=True)
    assert report.status == "push-failed"
    assert "has no layer with an SBOM at /opt/imagekit/sbom.cdx.json" in report.error
    skipped = run(cells, tmp_path, sbom_engine(), push=True)
    assert skipped.status == "built" and skipped.sbom == []


def test_a_failed_straight_build_leaves_no_tag_and_no_push(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = sbom_engine(fail_builds={cells[0].id})
    report = run(cells, tmp_path, engine, push=True)
    assert report.status == "failed" and report.pushed == [] and report.tags == []
    assert "ERROR: failed to build" in report.error
    assert not {"tag", "pushed_layers"} & {call for call, _ in engine.calls}


@pytest.mark.parametrize(
    ("asked", "push", "builder_pushes", "chosen"),
    [
        (Compression("auto"), True, True, Compression("zstd")),
        (Compression("auto"), True, False, Compression()),
        (Compression("auto"), False, True, Compression()),
        (Compression("gzip"), True, True, Compression()),
        (Compression("zstd", 3), True, False, Compression("zstd", 3)),
    ],
)
def test_auto_compression_is_zstd_where_buildkit_pushes_else_gzip(
    asked: Compression, push: bool, builder_pushes: bool, chosen: Compression
) -> None:
    options = BuildOptions(push=push, compression=asked)
    engine = FakeEngine(builder_pushes=builder_pushes)
    assert resolve_compression(engine, options).compression == chosen


def test_a_push_without_load_needs_oras_before_anything_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IMAGEKIT_ORAS", "/nonexistent/oras")
    engine = FakeEngine(builder_pushes=True)
    with pytest.raises(UsageError, match="--push without --load .* needs oras") as caught:
        check_tools(engine, BuildOptions(push=True))
    assert caught.value.exit_code == 2
    check_tools(engine, BuildOptions(push=True, load=True))  # loaded: read locally
    check_tools(FakeEngine(builder_pushes=False), BuildOptions(push=True))
    check_tools(engine, BuildOptions())
    assert engine.calls == []


@pytest.mark.parametrize(
    ("kind", "driver", "containerd_store", "pushes"),
    [
        ("buildkit", "", False, False),  # Docker 20.10's built-in BuildKit
        ("buildx", "docker", False, False),  # the classic store: `pushing with docker`, gzip
        ("buildx", "docker", True, True),
        ("buildx", "docker-container", False, True),
        ("buildx", "remote", False, True),
    ],
)
def test_which_builders_push_straight_from_buildkit(
    kind: str, driver: str, containerd_store: bool, pushes: bool
) -> None:
    assert engine_with(kind, driver, containerd_store).pushes_from_builder() is pushes


def test_the_straight_push_keeps_the_requests_cache_export_and_no_cache(tmp_path: Path) -> None:
    request = BuildRequest(
        context=tmp_path,
        dockerfile=tmp_path / "Dockerfile",
        cache_to=("type=registry,ref=r/c:cache,mode=max",),
        no_cache=True,
        provenance=True,
    )
    flags = build_push_flags(request, ["r/x:1", "r/x:2"], Compression("zstd"))
    assert flags[:4] == ["-t", "r/x:1", "-t", "r/x:2"]
    output = flags[flags.index("--output") + 1]
    assert output == (
        "type=image,push=true,store=false,compression=zstd,force-compression=true,"
        "oci-mediatypes=true"
    )
    assert "--provenance=mode=min" in flags and "--no-cache" in flags and "--load" not in flags
    assert flags[flags.index("--cache-to") + 1] == "type=registry,ref=r/c:cache,mode=max"


# -- reading the pushed image back (engine/image_registry.py) ----------------------------------
def config_with(history: list[dict[str, Any]], diff_ids: list[str]) -> dict[str, Any]:
    return {"rootfs": {"type": "layers", "diff_ids": diff_ids}, "history": history}


def test_layers_join_blobs_diff_ids_and_the_history_entries_that_made_a_layer() -> None:
    manifest = {
        "layers": [
            {"mediaType": ZSTD_LAYER, "digest": "sha256:" + "1" * 64, "size": 30},
            {"mediaType": ZSTD_LAYER, "digest": "sha256:" + "2" * 64, "size": 7},
        ]
    }
    history = [
        {"created_by": "debootstrap"},
        {"created_by": "ENV A=b", "empty_layer": True},
        {"created_by": "RUN apt-get install g++"},
        {"created_by": "LABEL x=y", "empty_layer": True},
    ]
    layers = image_registry.layers_of(manifest, config_with(history, ["sha256:a", "sha256:b"]))
    assert [(x.created_by, x.size, x.diff_id) for x in layers] == [
        ("debootstrap", 30, "sha256:a"),
        ("RUN apt-get install g++", 7, "sha256:b"),
    ]
    assert layers[1].digest == "sha256:" + "2" * 64 and layers[1].media_type == ZSTD_LAYER
    short = image_registry.layers_of(manifest, config_with(history[2:], ["sha256:a", "sha256:b"]))
    assert [x.created_by for x in short] == ["", "RUN apt-get install g++"]
    with pytest.raises(ImagekitError, match="2 layers and its config 1 diff IDs"):
        image_registry.layers_of(manifest, config_with(history, ["sha256:a"]))


def test_the_image_manifest_of_an_index_skips_the_attestation_manifest() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:att", "platform": {"os": "unknown", "architecture": "unknown"}},
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert image_registry.platform_manifest(index) == "sha256:amd"
    assert image_registry.platform_manifest(index, "arm64") == "sha256:arm"
    assert image_registry.platform_manifest({"manifests": index["manifests"][:1]}) == ""


def layer_tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("opt/"))
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize(
    ("media_type", "compress"),
    [
        ("application/vnd.oci.image.layer.v1.tar+gzip", gzip.compress),
        ("application/vnd.docker.image.rootfs.diff.tar.gzip", gzip.compress),
        (ZSTD_LAYER, lambda b: zstandard.ZstdCompressor().compress(b)),
        ("application/vnd.oci.image.layer.v1.tar", lambda b: b),
    ],
)
def test_one_file_comes_out_of_a_pushed_layer_in_each_compression(
    media_type: str, compress: Any
) -> None:
    tar = layer_tar({"opt/imagekit/sbom.cdx.json": b"{}", "opt/other": b"x"})
    data = image_registry.decompress(compress(tar), media_type)
    assert image_registry.file_in_tar(data, "/opt/imagekit/sbom.cdx.json") == b"{}"
    assert image_registry.file_in_tar(data, "/opt/imagekit/missing.json") is None


def test_a_broken_layer_is_an_error_naming_it_not_a_crash() -> None:
    with pytest.raises(ImagekitError, match="gzip layer that does not decompress"):
        image_registry.decompress(b"not gzip", "application/vnd.oci.image.layer.v1.tar+gzip")
    with pytest.raises(ImagekitError, match="zstd layer that does not decompress"):
        image_registry.decompress(b"not zstd at all", ZSTD_LAYER)
    with pytest.raises(ImagekitError, match="not a tar"):
        image_registry.file_in_tar(b"\x01" * 1024, "/x")


# -- imagekit test pulls what a push without --load left only in the registry ----------------
class AbsentUntilPulled(FakeRunner, FakeRegistry):
    def inspect(self, ref: str) -> ImageInfo | None:
        if ("pull", ref) not in self.calls:
            return None
        return ImageInfo(ref, 1, {"io.imagekit.cell": "c"}, {}, "1000:1000", (), ())


def test_imagekit_test_pulls_a_registry_image_the_engine_lacks() -> None:
    engine = AbsentUntilPulled()
    info = checkable_image(engine, "127.0.0.1:5000/team/train:tag")
    assert info.labels == {"io.imagekit.cell": "c"}
    assert engine.calls == [("pull", "127.0.0.1:5000/team/train:tag")]
    local = AbsentUntilPulled()
    with pytest.raises(UsageError, match="is not on this engine"):
        checkable_image(local, "train:tag")  # no registry: nothing to pull from
    assert local.calls == []
