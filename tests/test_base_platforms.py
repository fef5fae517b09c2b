"""Issue 49 with the fake engine: a base is checked for every platform a build needs before
anything runs, --bootstrap-base adds what a Debian base lacks beside what it has, a built
image whose files are another platform's fails the cell (never tagged), BuildKit's warnings
reach the report and the summary, and a stage without an SBOM is pushed without one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from imagekit.builder import bases, oci_layout
from imagekit.builder.build_plan import plan
from imagekit.builder.build_report import raise_for_failures, summary
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import QuietDisplay
from imagekit.builder.log import StepLog
from imagekit.builder.preflight import bootstrap_missing, preflight
from imagekit.engine.docker_images import held_platforms
from imagekit.engine.fake import FakeEngine
from imagekit.engine.interface import BuildRequest, BuildResult, LineSink
from imagekit.errors import BuildError, EngineError, UsageError
from imagekit.locks.pinned import load_cells
from imagekit.platforms import AMD64, ARM64
from imagekit.supply import sbom

from .test_platform_builds import INPUTS, options

CELLS = """
defaults: {installer: uv, size_budget: 20GB}
matrix:
  - {cuda: cpu, torch: "2.7.1", python: "3.11", os: debian12, flavor: slim,
     platform: [linux/amd64, linux/arm64]}
"""
DEBIAN = "debian:bookworm-slim"
# buildx 0.29's own lines after a build on an amd64-only base for arm64, colors and all
WARNED = [
    "#11 DONE 0.0s",
    "",
    " \x1b[33m2 warnings found (use docker --debug to expand):",
    '\x1b[0m - LegacyKeyValueFormat: "ENV key=value" should be used instead of legacy '
    '"ENV key value" format (line 3)',
    " - InvalidBaseImagePlatform: Base image debian:bookworm-slim was pulled with platform "
    '"linux/amd64", expected "linux/arm64" for current build (line 11)',
]


@pytest.fixture
def cell(write_env):  # type: ignore[no-untyped-def]
    (both,) = load_cells([write_env(CELLS)])
    return both


def engine(**more: Any) -> FakeEngine:
    return FakeEngine(emulates=(AMD64, ARM64), multi_platform=True, **more)


# -- BuildKit's warnings ---------------------------------------------------------------------
def test_buildkits_warnings_are_read_from_its_output() -> None:
    steps = StepLog()
    for line in WARNED:
        steps.feed(line)
    assert steps.warnings_as_list() == [
        {
            "rule": "LegacyKeyValueFormat",
            "message": '"ENV key=value" should be used instead of legacy "ENV key value" format',
            "line": 3,
        },
        {
            "rule": "InvalidBaseImagePlatform",
            "message": "Base image debian:bookworm-slim was pulled with platform "
            '"linux/amd64", expected "linux/arm64" for current build',
            "line": 11,
        },
    ]


def test_a_dash_line_of_a_step_is_no_warning() -> None:
    steps = StepLog()
    for line in [
        "#8 [os-base 4/5] RUN apt-get install",
        "#8 1.2 - Foo: not a warning",
        "#8 DONE 1.0s",
    ]:
        steps.feed(line)
    assert steps.warnings == [] and steps.as_list()[0]["seconds"] == 1.0


class Warned(FakeEngine):
    """Builds that end with BuildKit's warnings (`lines`: WARNED's, or some of them)."""

    lines: tuple[str, ...] = tuple(WARNED)

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildResult:
        result = super().build(request, on_line)
        for line in self.lines:
            on_line(line)
        return result


def test_warnings_reach_the_report_and_the_summary(cell, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fake = Warned()
    fake.lines = tuple(WARNED[:4])  # the LegacyKeyValueFormat one alone
    opts = options(tmp_path)
    (report,) = Runner(fake, opts, INPUTS, QuietDisplay()).run(plan([cell], opts, INPUTS))
    assert report.status == "built"
    assert [w["rule"] for w in report.warnings] == ["LegacyKeyValueFormat"]
    text = "\n".join(summary([report]))
    assert f"{cell.id}: BuildKit warned LegacyKeyValueFormat: " in text
    assert "(Dockerfile line 3)" in text
    saved = json.loads((tmp_path / "reports" / cell.id / "build.json").read_text())
    assert saved["warnings"] == report.warnings


def test_the_wrong_base_platform_warning_fails_the_cell_untagged(cell, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fake = Warned(emulates=(AMD64, ARM64))
    opts = options(tmp_path, platforms=(ARM64,))
    (report,) = Runner(fake, opts, INPUTS, QuietDisplay()).run(plan([cell], opts, INPUTS))
    assert report.status == "wrong-platform" and report.tags == [] and fake.tags == {}
    assert (
        "BuildKit built on a base of another platform (InvalidBaseImagePlatform: " in report.error
    )
    assert "a base that has linux/arm64" in report.error
    with pytest.raises(BuildError, match="1 failed"):
        raise_for_failures([report])


# -- the built image's files -----------------------------------------------------------------
def test_a_local_image_whose_files_are_another_platforms_is_never_tagged(  # type: ignore[no-untyped-def]
    cell, tmp_path: Path
) -> None:
    fake = engine(content_of={ARM64: AMD64})
    opts = options(tmp_path, platforms=(ARM64,), push=True)
    (report,) = Runner(fake, opts, INPUTS, QuietDisplay()).run(plan([cell], opts, INPUTS))
    assert report.status == "wrong-platform"
    assert "/usr/bin/dash (the OS's shell, /bin/sh) is x86_64, not aarch64" in report.error
    assert fake.tags == {} and not any(c[0] in ("tag", "push") for c in fake.calls)
    assert report.content[0]["found"] == "x86_64" and report.content[0]["expected"] == "aarch64"
    assert ("image_files", f"sha256:{cell.id} {ARM64}") in fake.calls  # the built image, arm64's


def test_a_local_image_of_its_platform_carries_its_proof(cell, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    opts = options(tmp_path, platforms=(ARM64,))
    (report,) = Runner(engine(), opts, INPUTS, QuietDisplay()).run(plan([cell], opts, INPUTS))
    assert report.status == "built", report.error
    assert {c["found"] for c in report.content} == {"aarch64"} and len(report.content) == 4


def test_a_pushed_index_is_proven_per_platform_from_the_registry(  # type: ignore[no-untyped-def]
    cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attached: list[str] = []
    monkeypatch.setattr(sbom, "attach", lambda ref, data: attached.append(ref) or ref)
    fake = engine(builder_pushes=True, content_of={ARM64: AMD64})
    opts = options(tmp_path, platforms=(AMD64, ARM64), push=True, attach_sbom=True)
    (report,) = Runner(fake, opts, INPUTS, QuietDisplay()).run(plan([cell], opts, INPUTS))
    assert report.status == "wrong-platform" and "(it is in the registry: do not promote it)" in (
        report.error
    )
    assert {c["found"] for c in report.by_platform[AMD64]["content"]} == {"x86_64"}  # type: ignore[union-attr]
    arm = report.by_platform[ARM64]["content"]
    assert {c["ok"] for c in arm} == {False}  # type: ignore[union-attr]
    assert attached == []  # an image that is not its platform's gets no SBOM
    assert sum(c[0] == "pushed_files" for c in fake.calls) == 2


# -- a stage without an SBOM -----------------------------------------------------------------
@pytest.mark.parametrize("builder_pushes", [True, False])
@pytest.mark.parametrize("target", ["os-base", "builder"])
def test_a_stage_without_an_sbom_is_pushed_without_one(  # type: ignore[no-untyped-def]
    cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, builder_pushes: bool
) -> None:
    attached: list[str] = []
    monkeypatch.setattr(sbom, "attach", lambda ref, data: attached.append(ref) or ref)
    fake = engine(builder_pushes=builder_pushes)
    platforms = (AMD64, ARM64) if builder_pushes else (AMD64,)
    opts = options(tmp_path, target=target, push=True, attach_sbom=True, platforms=platforms)
    (report,) = Runner(fake, opts, INPUTS, QuietDisplay()).run(plan([cell], opts, INPUTS))
    assert report.status == "built", report.error
    assert report.sbom_status == "not-in-stage" and report.sbom == [] and attached == []
    assert not any(c[0] in ("read_file", "pushed_file") for c in fake.calls)
    assert "pushed without an SBOM: " in "\n".join(summary([report]))


def test_the_runtime_stage_says_its_sbom_was_attached_or_turned_off(  # type: ignore[no-untyped-def]
    cell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sbom, "attach", lambda ref, data: ref + "-sbom")
    fake = engine(files={sbom.PATH: b"{}"})
    on = options(tmp_path, push=True, attach_sbom=True)
    (report,) = Runner(fake, on, INPUTS, QuietDisplay()).run(plan([cell], on, INPUTS))
    assert report.sbom_status == "attached" and report.sbom
    off = options(tmp_path, push=True)
    (report,) = Runner(fake, off, INPUTS, QuietDisplay()).run(plan([cell], off, INPUTS))
    assert report.sbom_status == "off" and report.sbom == []
    local = options(tmp_path)
    (report,) = Runner(fake, local, INPUTS, QuietDisplay()).run(plan([cell], local, INPUTS))
    assert report.sbom_status == ""


# -- the base, checked for every platform before anything runs -------------------------------
def needs(cell, *platforms: str) -> dict[str, tuple[str, ...]]:  # type: ignore[no-untyped-def]
    return {cell.id: platforms}


def test_a_local_base_lacking_a_platform_is_refused_naming_what_it_has(cell) -> None:  # type: ignore[no-untyped-def]
    fake = engine(local_platforms={DEBIAN: (AMD64,)})
    with pytest.raises(UsageError) as info:
        preflight(fake, [cell], False, False, needs(cell, ARM64))
    text = str(info.value)
    assert info.value.exit_code == 2
    assert f"base {DEBIAN} (on this engine) has linux/amd64, not linux/arm64" in text
    assert "Fix: add --bootstrap-base (debootstraps linux/arm64 into debian:bookworm-slim" in text
    assert "keeping linux/amd64" in text and not any(c[0] == "build" for c in fake.calls)
    assert text.endswith(f"Cells that need them: {cell.id}")
    assert preflight(fake, [cell], False, False, needs(cell, AMD64)) == {}


def test_with_bootstrap_base_the_lacking_platform_is_added_beside_the_others(  # type: ignore[no-untyped-def]
    cell, monkeypatch: pytest.MonkeyPatch
) -> None:
    added: list[tuple[str, tuple[str, ...]]] = []
    monkeypatch.setattr(
        bases,
        "add_platforms",
        lambda e, suite, tag, platforms, mirror: added.append((tag, tuple(platforms))),
    )
    monkeypatch.setattr(bases, "bootstrap", lambda *a, **k: pytest.fail("not missing"))
    fake = engine(local_platforms={DEBIAN: (AMD64,)})
    assert preflight(fake, [cell], True, False, needs(cell, AMD64, ARM64)) == {}
    bootstrap_missing(fake, [cell], bases.DEFAULT_MIRROR, needs(cell, AMD64, ARM64))
    assert added == [(DEBIAN, (ARM64,))]


def test_a_missing_base_is_bootstrapped_for_every_platform_its_cells_need(  # type: ignore[no-untyped-def]
    cell, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[str, tuple[str, ...]]] = []
    monkeypatch.setattr(
        bases, "bootstrap", lambda e, suite, tag, mirror, platforms: made.append((tag, platforms))
    )

    class Bare(FakeEngine):
        def inspect(self, ref: str):  # type: ignore[no-untyped-def]
            return None

    bare = Bare(emulates=(AMD64, ARM64), multi_platform=True)
    bootstrap_missing(bare, [cell], bases.DEFAULT_MIRROR, needs(cell, ARM64))
    bootstrap_missing(bare, [cell], bases.DEFAULT_MIRROR, needs(cell, AMD64))
    bootstrap_missing(bare, [cell], bases.DEFAULT_MIRROR, needs(cell, AMD64, ARM64))
    assert made == [(DEBIAN, (ARM64,)), (DEBIAN, (AMD64,)), (DEBIAN, (AMD64, ARM64))]


def test_an_engine_of_one_platform_per_name_cannot_add_one(cell) -> None:  # type: ignore[no-untyped-def]
    classic = FakeEngine(emulates=(AMD64, ARM64), local_platforms={DEBIAN: (AMD64,)})
    for bootstrap in (False, True):
        with pytest.raises(UsageError) as info:
            preflight(classic, [cell], bootstrap, False, needs(cell, ARM64))
        text = str(info.value)
        assert "--bootstrap-base cannot add linux/arm64 beside it" in text
        assert "containerd image store" in text and f"docker rmi {DEBIAN}" in text


def test_a_registry_base_lacking_a_platform_is_refused(cell) -> None:  # type: ignore[no-untyped-def]
    class Remote(FakeEngine):
        def inspect(self, ref: str):  # type: ignore[no-untyped-def]
            return None

    fake = Remote(emulates=(AMD64, ARM64), base_platforms={DEBIAN: (AMD64,)})
    with pytest.raises(UsageError) as info:
        preflight(fake, [cell], False, False, needs(cell, ARM64))
    assert f"base {DEBIAN} (in its registry) has linux/amd64, not linux/arm64" in str(info.value)
    assert "a `base:` override naming an image that has linux/arm64" in str(info.value)
    unsaid = Remote(emulates=(AMD64, ARM64), base_platforms={DEBIAN: ()})
    assert preflight(unsaid, [cell], False, False, needs(cell, ARM64)) == {}  # not known: built


@pytest.mark.parametrize(
    ("attrs", "platforms"),
    [
        ({"Os": "linux", "Architecture": "amd64"}, ("linux/amd64",)),  # classic store, 20.10
        (
            {
                "Os": "linux",
                "Architecture": "amd64",
                "Manifests": [
                    {
                        "Kind": "image",
                        "Available": True,
                        "ImageData": {"Platform": {"os": "linux", "architecture": "amd64"}},
                    },
                    {
                        "Kind": "image",
                        "Available": False,
                        "ImageData": {"Platform": {"os": "linux", "architecture": "arm64"}},
                    },
                    {"Kind": "attestation", "Available": True},
                ],
            },
            ("linux/amd64",),  # an index pulled for amd64 alone
        ),
        (
            {
                "Manifests": [
                    {
                        "Kind": "image",
                        "Available": True,
                        "ImageData": {"Platform": {"os": "linux", "architecture": "arm64"}},
                    },
                    {
                        "Kind": "image",
                        "Available": True,
                        "ImageData": {"Platform": {"os": "linux", "architecture": "amd64"}},
                    },
                ]
            },
            ("linux/arm64", "linux/amd64"),
        ),
    ],
)
def test_the_platforms_a_local_image_holds(
    attrs: dict[str, Any], platforms: tuple[str, ...]
) -> None:
    assert held_platforms(attrs) == platforms


# -- a saved base extended with another platform ---------------------------------------------
def saved_single(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """What `docker save` of a one-platform import writes on the containerd store."""
    root = tmp_path / "amd64"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "debian_version").write_text("12.0\n")
    layout = tmp_path / "saved"
    oci_layout.write({AMD64: root}, DEBIAN, layout)
    top = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    inner = json.loads((blobs / top["manifests"][0]["digest"].split(":")[1]).read_text())
    manifest = {k: v for k, v in inner["manifests"][0].items() if k != "platform"}
    named = {**manifest, "annotations": top["manifests"][0]["annotations"]}
    (layout / "index.json").write_text(json.dumps({**top, "manifests": [named]}))
    (layout / "manifest.json").write_text("[]")
    return layout, manifest


def test_a_saved_base_keeps_its_manifest_beside_the_added_platform(tmp_path: Path) -> None:
    layout, kept = saved_single(tmp_path)
    arm = tmp_path / "arm64"
    (arm / "etc").mkdir(parents=True)
    oci_layout.extend(layout, {ARM64: arm}, DEBIAN)
    top = json.loads((layout / "index.json").read_text())
    (named,) = top["manifests"]
    assert (
        named["annotations"]["io.containerd.image.name"] == "docker.io/library/debian:bookworm-slim"
    )
    inner = json.loads((layout / "blobs" / "sha256" / named["digest"].split(":")[1]).read_text())
    amd, added = inner["manifests"]
    assert amd == {**kept, "platform": {"architecture": "amd64", "os": "linux"}}  # byte for byte
    assert added["platform"] == {"architecture": "arm64", "os": "linux"}
    assert not (layout / "manifest.json").exists()
    again = tmp_path / "again"
    layout.rename(again)
    oci_layout.extend(again, {ARM64: arm}, DEBIAN)  # a platform it has is not added twice
    inner = json.loads(
        (
            again
            / "blobs"
            / "sha256"
            / json.loads((again / "index.json").read_text())["manifests"][0]["digest"].split(":")[1]
        ).read_text()
    )
    assert [m["platform"]["architecture"] for m in inner["manifests"]] == ["amd64", "arm64"]


def test_a_saved_layout_without_the_image_is_an_engine_error(tmp_path: Path) -> None:
    layout, _ = saved_single(tmp_path)
    with pytest.raises(EngineError, match="has no image named docker.io/library/ubuntu:24.04"):
        (layout / "index.json").write_text(json.dumps({"manifests": [{}, {}]}))
        oci_layout.extend(layout, {}, "ubuntu:24.04")


def test_a_base_pinned_by_digest_is_checked_by_its_digest(cell) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    pinned = f"{DEBIAN}@sha256:{'e' * 64}"
    fake = engine(local_platforms={DEBIAN: (AMD64,), pinned: (AMD64, ARM64)})
    on_pin = replace(cell, runtime_image=pinned, builder_image=pinned)
    assert preflight(fake, [on_pin], False, False, needs(on_pin, ARM64)) == {}
    with pytest.raises(UsageError, match="has linux/amd64, not linux/arm64"):
        preflight(fake, [cell], False, False, needs(cell, ARM64))  # its tag's image lacks it


def test_an_engine_older_than_the_manifest_list_says_nothing_it_cannot_know() -> None:
    attrs = {"Os": "linux", "Architecture": "amd64"}  # a containerd store before API 1.48
    assert held_platforms(attrs, containerd_store=True) == ()
    assert bases.BaseFound("local", ()).lacks((ARM64,)) == []  # not known: BuildKit's word


def test_a_saved_index_that_lists_a_platform_without_its_blob_gets_it_added(tmp_path: Path) -> None:
    layout, kept = saved_single(tmp_path)
    blobs = layout / "blobs" / "sha256"
    absent = {"mediaType": kept["mediaType"], "digest": "sha256:" + "0" * 64, "size": 1,
              "platform": {"architecture": "arm64", "os": "linux"}}  # fmt: skip
    listed = {"schemaVersion": 2, "mediaType": oci_layout.INDEX,
              "manifests": [{**kept, "platform": {"architecture": "amd64", "os": "linux"}}, absent]}  # fmt: skip
    data = json.dumps(listed).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    top = json.loads((layout / "index.json").read_text())
    top["manifests"][0].update(
        mediaType=oci_layout.INDEX, digest=f"sha256:{digest}", size=len(data)
    )
    (layout / "index.json").write_text(json.dumps(top))
    arm = tmp_path / "arm64"
    (arm / "etc").mkdir(parents=True)
    oci_layout.extend(layout, {ARM64: arm}, DEBIAN)
    named = json.loads((layout / "index.json").read_text())["manifests"][0]
    inner = json.loads((blobs / named["digest"].split(":")[1]).read_text())
    digests = [m["digest"] for m in inner["manifests"]]
    assert absent["digest"] not in digests and len(digests) == 2
    assert all((blobs / d.split(":")[1]).is_file() for d in digests)


def test_no_daemon_is_said_as_such_not_as_a_missing_base(cell) -> None:  # type: ignore[no-untyped-def]
    class NoDaemon(FakeEngine):
        def inspect(self, ref: str):  # type: ignore[no-untyped-def]
            return None

        def registry_digest(self, ref: str) -> str:
            raise EngineError("cannot reach the Docker daemon: is it running?")

    with pytest.raises(EngineError, match="cannot reach the Docker daemon") as info:
        preflight(NoDaemon(), [cell], False, False)
    assert info.value.exit_code == 5
