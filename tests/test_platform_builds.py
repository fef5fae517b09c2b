"""`imagekit build --platform` and `imagekit base bootstrap --platform` with the fake engine:
what each cell is built for, what an engine that cannot do it is told (exit 2), one report
per platform of a pushed index, and the OCI layout that holds a base of several platforms."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.builder import bases, oci_layout
from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import plan
from imagekit.builder.build_report import CellReport
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import QuietDisplay
from imagekit.builder.inputs import Inputs
from imagekit.builder.orchestrate import check_platforms
from imagekit.engine.fake import FakeEngine
from imagekit.engine.interface import BuildRequest, build_flags
from imagekit.errors import UsageError
from imagekit.locks.pinned import load_cells
from imagekit.platforms import AMD64, ARM64
from imagekit.supply import sbom

INPUTS = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
CELLS = """
defaults: {installer: uv, size_budget: 20GB}
matrix:
  - {cuda: cpu, torch: "2.7.1", python: "3.11", os: debian12, flavor: slim,
     platform: [linux/amd64, linux/arm64]}
  - {cuda: cpu, torch: "2.7.1", python: "3.11", os: debian13, flavor: slim, platform: linux/arm64}
  - {cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}
"""
SBOM_STEP = "RUN /bin/sh -c python /run/imagekit/sbom_writer.py --out /opt/imagekit/sbom.cdx.json"


@pytest.fixture
def cells(write_env):  # type: ignore[no-untyped-def]
    both, arm, amd = load_cells([write_env(CELLS)])  # CPU cells first, then by OS
    return {"both": both, "arm": arm, "amd": amd}


def options(tmp_path: Path, **more: Any) -> BuildOptions:
    return BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "reports", **more)


def test_a_cell_builds_this_hosts_platform_unless_asked(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    both, arm_only = cells["both"], cells["arm"]
    builds = plan([both, arm_only], options(tmp_path), INPUTS)
    assert [b.request.platforms for b in builds] == [(), (ARM64,)]  # () is this host's
    assert [b.platforms for b in builds] == [(AMD64,), (ARM64,)]
    (asked,) = plan([both], options(tmp_path, platforms=(AMD64, ARM64)), INPUTS)
    assert asked.request.platforms == (AMD64, ARM64)
    assert "--platform linux/amd64,linux/arm64" in " ".join(build_flags(asked.request))


def test_a_platform_the_cell_lacks_is_refused_naming_the_cell_and_the_fix(  # type: ignore[no-untyped-def]
    write_env, tmp_path: Path
) -> None:
    cell = load_cells([write_env(CELLS)])[-1]  # CUDA 12.6: amd64 alone
    with pytest.raises(UsageError) as info:
        plan([cell], options(tmp_path, platforms=(ARM64,)), INPUTS)
    text = str(info.value)
    assert f"cell {cell.id} (envs/m.yaml:" in text and "is built for linux/amd64" in text
    assert "add linux/arm64 to its `platform:`" in text
    assert "imagekit compat show --platform linux/arm64" in text


def test_the_torch_index_override_reaches_both_platforms(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    both = cells["both"]
    assert both.torch_index == "https://download.pytorch.org/whl/cpu"
    assert both.arm64_torch_index == ""  # PyPI's aarch64 wheel of 2.7.1 is the CPU build
    (build,) = plan([both], options(tmp_path, torch_index="http://mirror/simple"), INPUTS)
    assert dict(build.request.build_args) == {
        "TORCH_INDEX_URL": "http://mirror/simple",
        "TORCH_INDEX_URL_ARM64": "http://mirror/simple",
    }
    (plain,) = plan([cells["arm"]], options(tmp_path, torch_index=""), INPUTS)
    assert dict(plain.request.build_args) == {"TORCH_INDEX_URL": ""}  # one index: arm64's


@pytest.mark.parametrize(
    ("engine", "more", "needle"),
    [
        (FakeEngine(), {"push": True}, "--platform linux/arm64: linux/arm64: no emulation"),
        (
            FakeEngine(emulates=(AMD64, ARM64), builder_pushes=True, multi_platform=True),
            {},
            "add --push (without --load)",
        ),
        (
            FakeEngine(emulates=(AMD64, ARM64), builder_pushes=True, multi_platform=True),
            {"push": True, "load": True},
            "add --push (without --load)",
        ),
        (
            FakeEngine(emulates=(AMD64, ARM64), builder_pushes=False),
            {"push": True},
            "turn on the containerd image store",
        ),
        (
            FakeEngine(emulates=(AMD64, ARM64), builder_pushes=True, multi_platform=True),
            {"push": True},
            "",
        ),
    ],
)
def test_what_the_engine_cannot_build_is_refused_before_anything_runs(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, engine: FakeEngine, more: dict[str, Any], needle: str
) -> None:
    opts = options(tmp_path, platforms=(AMD64, ARM64), **more)
    builds = plan([cells["both"]], opts, INPUTS)
    if not needle:
        check_platforms(engine, builds, opts)
        return
    with pytest.raises(UsageError) as info:
        check_platforms(engine, builds, opts)
    assert info.value.exit_code == 2 and needle in str(info.value)
    assert engine.calls == []  # nothing built


def with_sbom_layer(engine: FakeEngine, image_id: str) -> None:
    layers = engine.layers(image_id)
    engine.image_layers[image_id] = [*layers, replace(layers[0], created_by=SBOM_STEP, size=900)]


def test_a_pushed_index_reports_and_attaches_an_sbom_per_platform(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(sbom, "attach", lambda ref, data: seen.append(ref) or f"{ref}-sbom")
    engine = FakeEngine(
        builder_pushes=True,
        multi_platform=True,
        emulates=(AMD64, ARM64),
        files={sbom.PATH: b"{}"},
    )
    engine.image_size = 4 * 10**9
    opts = options(tmp_path, platforms=(AMD64, ARM64), push=True, attach_sbom=True)
    builds = plan([cells["both"]], opts, INPUTS)
    index = "sha256:" + cells["both"].id.encode().hex()[:64].ljust(64, "3")
    arm = "sha256:" + (index + ARM64).encode().hex()[:64].ljust(64, "0")
    for image in (index, arm):
        with_sbom_layer(engine, image)
    (report,) = Runner(engine, opts, INPUTS, QuietDisplay()).run(builds)
    assert report.status == "built", report.error
    assert report.platforms == [AMD64, ARM64] and set(report.by_platform) == {AMD64, ARM64}
    assert report.by_platform[ARM64]["image_id"] == arm
    assert report.image_id == index and report.size_bytes == report.by_platform[AMD64]["size_bytes"]
    assert ("pushed_layers", f"{report.pushed[0]} {ARM64}") in engine.calls
    repo = report.pushed[0].split("@")[0]
    assert seen == [f"{repo}@{index}", f"{repo}@{arm}"]  # each platform's own image
    assert report.by_platform[ARM64]["sbom"] == [f"{repo}@{arm}-sbom"]
    saved = json.loads((tmp_path / "reports" / report.cell / "build.json").read_text())
    assert saved["platforms"] == [AMD64, ARM64] and set(saved["by_platform"]) == {AMD64, ARM64}


def test_one_platform_over_its_budget_fails_the_cell_naming_it(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = FakeEngine(builder_pushes=True, multi_platform=True, emulates=(AMD64, ARM64))
    index = "sha256:" + cells["both"].id.encode().hex()[:64].ljust(64, "3")
    arm = "sha256:" + (index + ARM64).encode().hex()[:64].ljust(64, "0")
    big = replace(engine.layers(index)[0], size=25 * 10**9)
    engine.image_layers[arm] = [big]
    opts = options(tmp_path, platforms=(AMD64, ARM64), push=True)
    (report,) = Runner(engine, opts, INPUTS, QuietDisplay()).run(
        plan([cells["both"]], opts, INPUTS)
    )
    assert report.status == "over-budget"
    assert report.error.startswith("the linux/arm64 image is 25.00 GB (compressed")


# -- bases of several platforms --------------------------------------------------------------
def rootfs(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "debian_version").write_text(f"12.0 {name}\n")
    return root


def test_the_oci_layout_holds_one_manifest_per_platform_under_one_name(tmp_path: Path) -> None:
    roots = {AMD64: rootfs(tmp_path, "amd64"), ARM64: rootfs(tmp_path, "arm64")}
    out = tmp_path / "layout"
    oci_layout.write(roots, "debian:bookworm-slim", out)
    blobs = out / "blobs" / "sha256"
    for blob in blobs.iterdir():  # every blob is named by its digest
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    top = json.loads((out / "index.json").read_text())
    (named,) = top["manifests"]
    name = named["annotations"]["io.containerd.image.name"]
    assert name == "docker.io/library/debian:bookworm-slim"  # as BuildKit looks it up
    inner = json.loads((blobs / named["digest"].split(":")[1]).read_text())
    platforms = [m["platform"] for m in inner["manifests"]]
    assert platforms == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux"},
    ]
    manifest = json.loads((blobs / inner["manifests"][1]["digest"].split(":")[1]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    assert config["architecture"] == "arm64" and config["config"]["Cmd"] == ["bash"]
    layer = manifest["layers"][0]
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]  # uncompressed: diff ID = digest
    with tarfile.open(blobs / layer["digest"].split(":")[1]) as tar:
        member = tar.getmember("./etc/debian_version")
    assert member.uname == "" and member.uid == os.getuid()  # owners by number


def test_bootstrap_of_several_platforms_loads_one_index(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def fake_debootstrap(
        suite: str,
        mirror: str,
        target: Path,
        variant: str = "",
        arch: str = "",
        include: tuple[str, ...] = (),
    ) -> None:
        made.append(arch)
        rootfs(target.parent, target.name)

    monkeypatch.setattr(bases, "debootstrap", fake_debootstrap)
    engine = FakeEngine(multi_platform=True, emulates=(AMD64, ARM64))
    assert bases.bootstrap(engine, "bookworm", "debian:bookworm-slim", platforms=(AMD64, ARM64))
    assert made == ["amd64", "arm64"]
    assert engine.calls == [("load", "docker.io/library/debian:bookworm-slim")]
    single = FakeEngine(emulates=(AMD64, ARM64))
    bases.bootstrap(single, "bookworm", "debian:bookworm-slim", platforms=(ARM64,))
    assert made[-1] == "arm64" and single.calls == [("import", "debian:bookworm-slim linux/arm64")]
    with pytest.raises(UsageError, match="cannot hold an image of several platforms"):
        bases.bootstrap(single, "bookworm", "debian:bookworm-slim", platforms=(AMD64, ARM64))
    with pytest.raises(UsageError, match="no emulation"):
        bases.bootstrap(FakeEngine(), "bookworm", "debian:bookworm-slim", platforms=(ARM64,))


def test_build_flags_name_no_platform_for_this_hosts_own() -> None:
    request = BuildRequest(context=Path("ctx"), dockerfile=Path("Dockerfile"))
    assert "--platform" not in build_flags(request)
    assert build_flags(replace(request, platforms=(ARM64,)))[-3:-1] == ["--platform", ARM64]


def test_the_report_of_one_platform_keeps_its_shape() -> None:
    report = CellReport(cell="x")
    assert report.platforms == [] and report.by_platform == {}
