"""What a run costs and how it pushes: layers shared between cells, push time, layer
compression (command lines for both builders, and the refusals), against the fake engine
and DockerEngine's pure parts (no daemon, no process)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import plan
from imagekit.builder.build_report import CellReport, share_layers, summary
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import QuietDisplay
from imagekit.builder.inputs import Inputs
from imagekit.engine.discover import Builder, buildx_driver, unsupported
from imagekit.engine.docker_images import align_layers
from imagekit.engine.fake import FakeEngine
from imagekit.engine.interface import BuildRequest, Compression, Layer, output_flags
from imagekit.errors import UsageError
from imagekit.locks.pinned import load_cells

from .conftest import ROOT
from .test_engine_unit import engine_with

THREE_CELLS = """
defaults: {installer: uv, size_budget: 20GB}
matrix:
  - {cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}
  - {cuda: "12.6", torch: "2.7.1", python: "3.12", os: debian12, flavor: slim}
  - {cuda: "12.8", torch: "2.7.1", python: "3.12", os: debian12, flavor: slim}
"""
GB = 10**9
BASE, CUDA126, CUDA128 = ("sha256:" + c * 64 for c in "abc")


@pytest.fixture
def cells(write_env):  # type: ignore[no-untyped-def]
    return load_cells([write_env(THREE_CELLS)])


def run(cells, tmp_path: Path, engine: FakeEngine, **opts: Any) -> list[CellReport]:  # type: ignore[no-untyped-def]
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "reports", **opts)
    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    return Runner(engine, options, inputs, QuietDisplay()).run(plan(cells, options, inputs))


def saved(tmp_path: Path, cell_id: str) -> dict[str, Any]:
    return json.loads((tmp_path / "reports" / cell_id / "build.json").read_text())


def matrix_engine(cells) -> FakeEngine:  # type: ignore[no-untyped-def]
    """OS base shared by all; the CUDA 12.6 libraries shared by the two 12.6 cells; a venv
    layer of each cell's own."""
    own = ["sha256:" + str(i) * 64 for i in range(3)]
    layers = {
        f"sha256:{cells[0].id}": [
            Layer("debootstrap", GB // 10, BASE),
            Layer("COPY /opt/imagekit/cuda", 3 * GB, CUDA126),
            Layer("COPY /opt/venv", 2 * GB, own[0]),
        ],
        f"sha256:{cells[1].id}": [
            Layer("debootstrap", GB // 10, BASE),
            Layer("COPY /opt/imagekit/cuda", 3 * GB, CUDA126),
            Layer("COPY /opt/venv", 2 * GB, own[1]),
        ],
        f"sha256:{cells[2].id}": [
            Layer("debootstrap", GB // 10, BASE),
            Layer("COPY /opt/imagekit/cuda", 4 * GB, CUDA128),
            Layer("COPY /opt/venv", 2 * GB, own[2]),
        ],
    }
    return FakeEngine(image_layers=layers)


def test_layers_shared_between_cells_reach_build_json_and_the_summary(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    reports = run(cells, tmp_path, matrix_engine(cells))
    assert [r.status for r in reports] == ["built"] * 3
    first, second, third = (saved(tmp_path, c.id) for c in cells)
    assert [x["diff_id"] for x in first["layers"]] == [BASE, CUDA126, "sha256:" + "0" * 64]
    assert first["layers"][0]["shared_with"] == [cells[1].id, cells[2].id]
    assert first["layers"][1]["shared_with"] == [cells[1].id]
    assert first["layers"][2]["shared_with"] == []
    assert first["layers"][1]["created_by"] == "COPY /opt/imagekit/cuda"
    # the first cell holding a layer pays for it; later ones share it
    assert (first["unique_bytes"], first["shared_bytes"]) == (51 * GB // 10, 0)
    assert (second["unique_bytes"], second["shared_bytes"]) == (2 * GB, 31 * GB // 10)
    assert (third["unique_bytes"], third["shared_bytes"]) == (6 * GB, GB // 10)
    text = "\n".join(summary(reports))
    header = text.splitlines()[0].split()
    assert header == ["CELL", "STATUS", "TIME", "SIZE", "UNIQUE", "SHARED", "PUSH", "CACHED"]
    row = next(line for line in text.splitlines() if line.startswith(cells[1].id)).split()
    assert row[5:9] == ["2.00", "GB", "3.10", "GB"]  # unique, shared (size: 5.10 GB)
    # the matrix cost: 16.3 GB of layers, 13.1 GB stored (the unique sizes' sum)
    assert "matrix cost: 3 images, 16.30 GB of layers; 13.10 GB to store and push" in text
    assert "(3.20 GB shared)" in text


def test_failed_cells_share_nothing_and_are_left_out_of_the_cost(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = matrix_engine(cells)
    engine.fail_builds = {cells[0].id}
    reports = run(cells, tmp_path, engine, keep_going=True)
    assert reports[0].layers == [] and reports[0].unique_bytes == 0
    # the first built cell now pays for the CUDA 12.6 layer
    assert (reports[1].unique_bytes, reports[1].shared_bytes) == (51 * GB // 10, 0)
    assert reports[1].layers[1]["shared_with"] == []
    assert "matrix cost: 2 images" in "\n".join(summary(reports))


def test_share_layers_counts_a_layer_once_within_an_image() -> None:
    twice = CellReport(cell="a")
    twice.layers = [
        {"diff_id": BASE, "size_bytes": 5, "created_by": "x"},
        {"diff_id": BASE, "size_bytes": 5, "created_by": "y"},
        {"diff_id": "", "size_bytes": 0, "created_by": "unknown"},
    ]
    share_layers([twice])
    assert (twice.unique_bytes, twice.shared_bytes) == (5, 5)
    assert twice.layers[0]["shared_with"] == []


def test_push_time_and_compression_are_reported(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine()
    reports = run(cells[:1], tmp_path, engine, push=True)
    report = saved(tmp_path, cells[0].id)
    assert report["push_compression"] == "gzip" and report["push_seconds"] >= 0
    assert [c for c in engine.calls if c[0] == "push"] == [("push", t) for t in cells[0].tags]
    assert "PUSH" in summary(reports)[0] and " 0s " in summary(reports)[1]
    not_pushed = run(cells[:1], tmp_path, FakeEngine())
    assert not_pushed[0].push_compression == "" and "  - " in "\n".join(summary(not_pushed))


def test_zstd_push_goes_through_buildkit_not_the_engine_push(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = FakeEngine()
    zstd = Compression("zstd", 19)
    reports = run(cells[:1], tmp_path, engine, push=True, compression=zstd)
    assert not any(c[0] == "push" for c in engine.calls)
    assert ("push_compressed", f"{','.join(cells[0].tags)} zstd:19") in engine.calls
    assert reports[0].push_compression == "zstd:19"
    assert len(reports[0].pushed) == len(cells[0].tags)
    failing = run(cells[:1], tmp_path, FakeEngine(push_error=True), push=True, compression=zstd)
    assert failing[0].status == "push-failed" and "local image is kept" in failing[0].error


def test_on_a_content_store_every_compression_is_the_engine_push_of_the_image_as_built(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = FakeEngine(content_store=True)
    options = BuildOptions(
        work_dir=tmp_path / ".imagekit", push=True, compression=Compression("zstd", 3)
    )
    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    (build,) = plan(cells[:1], options, inputs)
    assert build.request.push_compression == Compression("zstd", 3)
    reports = run(cells[:1], tmp_path, engine, push=True, compression=Compression("zstd", 3))
    assert [c for c in engine.calls if c[0].startswith("push")] == [
        ("push", t) for t in cells[0].tags
    ]
    assert reports[0].push_compression == "zstd:3" and reports[0].status == "built"
    local = plan(cells[:1], BuildOptions(work_dir=tmp_path / ".imagekit"), inputs)
    assert local[0].request.push_compression is None


def test_a_bug_in_a_build_thread_fails_the_cell_and_the_run(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    engine = FakeEngine(crash_builds={cells[0].id})
    with pytest.raises(KeyError, match="a bug in the engine"):
        run(cells[:2], tmp_path, engine, jobs=2, keep_going=True)
    report = saved(tmp_path, cells[0].id)
    assert report["status"] == "failed"
    assert (
        report["error"]
        == f"internal error: KeyError: 'a bug in the engine while building {cells[0].id}'"
    )
    assert report["tags"] == [] and saved(tmp_path, cells[1].id)["status"] == "built"


def test_the_image_size_is_the_sum_of_its_layers(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = matrix_engine(cells)
    engine.image_size = 1  # what a store says of the whole image is not what is reported
    reports = run(cells, tmp_path, engine)
    assert [r.size_bytes for r in reports] == [
        GB // 10 + 5 * GB,
        GB // 10 + 5 * GB,
        GB // 10 + 6 * GB,
    ]


# -- the command lines ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compression", "output"),
    [
        (
            Compression("zstd", 19),
            "type=image,push=true,store=false,compression=zstd,compression-level=19,"
            "force-compression=true,oci-mediatypes=true",
        ),
        (
            Compression("estargz"),
            "type=image,push=true,store=false,compression=estargz,force-compression=true,oci-mediatypes=true",
        ),
        (
            Compression("gzip", 9),
            "type=image,push=true,store=false,compression=gzip,compression-level=9,force-compression=true",
        ),
    ],
)
def test_buildx_push_command_line(tmp_path: Path, compression: Compression, output: str) -> None:
    request = BuildRequest(
        context=tmp_path,
        dockerfile=tmp_path / "Dockerfile",
        cache_from=("type=registry,ref=r:c",),
        cache_to=("type=registry,ref=r:c,mode=max",),
        no_cache=True,
    )
    tags = ["r/a:1", "r/a:1-latest"]
    args = engine_with("buildx", "docker-container").push_args(
        request, tags, compression, tmp_path / "m.json"
    )
    assert args[:4] == ["/usr/bin/docker", "buildx", "build", "--progress=plain"]
    assert args[args.index("--output") + 1] == output
    assert args[args.index("--metadata-file") + 1] == str(tmp_path / "m.json")
    assert [args[i + 1] for i, a in enumerate(args) if a == "-t"] == tags
    assert "--load" not in args and "--cache-to" not in args  # the build exported the cache
    assert "--cache-from" in args and args[-1] == str(tmp_path)
    assert "--no-cache" not in args  # exports what `build --no-cache` just built
    assert output_flags(tags, compression)[-1] == output


def test_builtin_buildkit_refuses_compression_and_cache_export_with_the_fix() -> None:
    engine = engine_with("buildkit")  # this machine's Docker 20.10 without buildx
    with pytest.raises(UsageError) as caught:
        engine.check_support(("type=registry,ref=r:c,mode=max",), Compression("zstd", 3))
    text = str(caught.value)
    assert "--compression zstd --compression-level 3: /usr/bin/docker 27.0.0 builds with " in text
    assert "--cache-to type=registry,ref=r:c,mode=max:" in text
    assert "install the buildx plugin" in text and "--compression gzip without a level" in text
    with pytest.raises(UsageError, match="--compression gzip --compression-level 6: "):
        engine.check_support((), Compression("gzip", 6))
    engine.check_support((), Compression())  # the default needs nothing


def test_buildx_drivers_and_what_they_can_export() -> None:
    container = Builder("docker", "buildx", "0.17.1", "docker-container")
    assert unsupported(container, ("type=registry,ref=r",), Compression("estargz"), False) == []
    docker_driver = Builder("docker", "buildx", "0.17.1", "docker")
    problems = unsupported(docker_driver, ("type=inline", "type=gha"), Compression("zstd"), False)
    assert len(problems) == 2 and "docker driver" in problems[0]
    assert problems[0].startswith("--cache-to type=gha: ")
    assert "docker buildx create --use --driver docker-container" in problems[1]
    assert unsupported(docker_driver, (), Compression("zstd"), containerd_store=True) == []
    builtin = Builder("docker", "buildkit", "20.10.24", "")
    assert unsupported(builtin, ("type=inline",), Compression(), False) == []  # the build arg
    (problem,) = unsupported(builtin, ("type=inline", "type=local,dest=d"), Compression(), False)
    assert problem.startswith("--cache-to type=local,dest=d: ") and "type=inline" in problem


def test_the_docker_drivers_containerd_store_is_read_from_the_engine() -> None:
    class Client:
        def info(self) -> dict[str, Any]:
            return {"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}

    engine = engine_with("buildx", "docker", containerd_store=None)
    engine._client = Client()
    engine.check_support((), Compression("zstd"))


def test_buildx_driver_is_read_from_buildx_inspect(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from imagekit.engine import discover

    out = "Name:          builder\nDriver:        docker-container\nLast Activity: x\n"
    monkeypatch.setattr(
        discover, "_run", lambda args: subprocess.CompletedProcess(args, 0, out, "")
    )
    assert buildx_driver("docker") == "docker-container"


# -- the CLI -------------------------------------------------------------------------------


def cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from imagekit.cli import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


CELL = "cu126-torch2.7.1-py3.11-debian12-slim"


@pytest.mark.usefixtures("in_repo")
def test_compression_options_checked_before_anything(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["build", "--cell", CELL, "--dry-run", "--ca-bundle", __file__]
    code, _, err = cli(*base, "--compression", "zstd", capsys=capsys)
    assert code == 2 and "--compression zstd: layers are compressed when they are pushed" in err
    assert "add --push" in err
    code, _, err = cli(*base, "--push", "--compression-level", "12", capsys=capsys)
    assert code == 2 and "--compression-level 12: a level needs a compression" in err
    assert "add --compression zstd or --compression gzip" in err
    code, _, err = cli(
        *base, "--push", "--compression", "gzip", "--compression-level", "12", capsys=capsys
    )
    assert code == 2 and "--compression-level 12: gzip takes 0-9" in err
    code, _, err = cli(*base, "--push", "--compression", "lz4", capsys=capsys)
    assert code == 2 and "'lz4' is not one of 'auto', 'zstd', 'gzip', 'estargz'" in err
    code, out, _ = cli(
        *base, "--push", "--load", "--compression", "zstd", "--compression-level", "22",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0
    push = next(line for line in out.splitlines() if line.strip().startswith("push:"))
    assert "docker buildx build " in push and "compression=zstd,compression-level=22" in push
    # what cannot take zstd says so, as the real run would refuse it before building
    assert "refused before anything builds: --compression zstd" in out
    code, out, _ = cli(*base, "--push", "--load", "--compression", "gzip", capsys=capsys)
    assert code == 0 and "push: docker push " in out


@pytest.mark.usefixtures("in_repo")
def test_a_dry_run_refuses_several_platforms_as_the_run_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The dry run's refusal is the real run's own message (push_decisions.index_problem)."""
    two = "pytorch-train-cu130-torch2.14.1-py3.12-ubuntu24.04-slim"
    base = ["build", "--cell", two, "--dry-run", "--ca-bundle", __file__, "--push"]
    platforms = ["--platform", "linux/amd64,linux/arm64"]
    code, out, _ = cli(*base, "--load", *platforms, capsys=capsys)
    assert code == 0
    assert "refused before anything builds: --platform linux/amd64,linux/arm64: an image of " \
        "several platforms is one index" in out  # fmt: skip
    code, out, _ = cli(*base, *platforms, capsys=capsys)
    assert code == 0 and "build and push in one, nothing loaded" in out
    assert "this engine cannot build and push an image of several platforms" in out


def test_build_refuses_what_the_engine_cannot_do_before_building(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path
) -> None:
    """run_build asks the engine it is given (the CLI's one DockerEngine; here the fake) what
    it supports before the preflight and any build: a refusal is a usage error (exit 2).
    DockerEngine's own refusals and their fixes: test_builtin_buildkit_refuses_..."""
    from imagekit.builder.build_options import BuildRun
    from imagekit.builder.orchestrate import run_build

    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "r", push=True)
    engine = FakeEngine(refuse=("estargz", "cache-to"))
    estargz = replace(options, compression=Compression("estargz"))
    with pytest.raises(UsageError, match="--compression estargz: refused") as caught:
        run_build(engine, cells, estargz, inputs, BuildRun())
    assert caught.value.exit_code == 2
    with pytest.raises(UsageError):
        run_build(
            engine, cells, replace(options, cache_to=("type=registry,ref=r:c",)), inputs, BuildRun()
        )
    assert [call for call, _ in engine.calls] == ["check_support", "check_support"]
    assert not (tmp_path / ".imagekit").exists()  # nothing staged, nothing built


def test_a_dry_run_leaves_the_engine_alone(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.builder.build_options import BuildRun
    from imagekit.builder.orchestrate import run_build

    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "r")
    engine = FakeEngine(refuse=("gzip",))  # would refuse even the default, were it asked
    run_build(engine, cells, options, inputs, BuildRun(dry_run=True))
    assert engine.calls == []
    out = capsys.readouterr().out
    assert all(cell.id in out for cell in cells)


def test_run_build_builds_every_cell_on_the_engine_it_is_given(  # type: ignore[no-untyped-def]
    cells, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import imagekit.builder.git_labels as git_labels
    from imagekit.builder.build_options import BuildRun
    from imagekit.builder.orchestrate import run_build

    monkeypatch.setattr(git_labels, "git_output", lambda *args: "")  # no git for the labels

    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "r")
    engine = FakeEngine()
    run_build(engine, cells, options, inputs, BuildRun(progress="quiet"))
    assert engine.calls[0][0] == "check_support"
    assert [name for call, name in engine.calls if call == "build"] == [c.id for c in cells]
    assert "3 built" in capsys.readouterr().out


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


# -- layers from the engine's own answers ----------------------------------------------------


def test_align_layers_joins_diff_ids_and_history() -> None:
    """`docker history` of a BuildKit image, newest first: instructions that made no layer
    have size 0, and so does a RUN that only made a directory (it still made a layer)."""
    history = [
        {"CreatedBy": 'ENTRYPOINT ["/entrypoint.sh"]', "Size": 0},
        {"CreatedBy": "LABEL io.imagekit.cell=x", "Size": 0},
        {"CreatedBy": "COPY /opt/venv /opt/venv # buildkit", "Size": 2000},
        {"CreatedBy": "RUN /bin/sh -c mkdir /workspace # buildkit", "Size": 0},
        {"CreatedBy": "ENV PATH=/opt/venv/bin:/usr/bin", "Size": 0},
        {"CreatedBy": "RUN /bin/sh -c apt-get install -y python3 # buildkit", "Size": 300},
        {"CreatedBy": '/bin/sh -c #(nop)  CMD ["bash"]', "Size": 0},
        {"CreatedBy": "", "Size": 100},  # docker import of the base
    ]
    ids = ["sha256:1", "sha256:2", "sha256:3", "sha256:4"]
    layers = align_layers(ids, history)
    assert [(x.diff_id, x.size) for x in layers] == [
        ("sha256:1", 100),
        ("sha256:2", 300),
        ("sha256:3", 0),
        ("sha256:4", 2000),
    ]
    assert layers[2].created_by.startswith("RUN /bin/sh -c mkdir")
    # an image whose history says less than its RootFS keeps every diff ID
    short = align_layers(["sha256:0", *ids], history)
    assert short[0].diff_id == "sha256:0" and short[0].created_by == ""
    assert align_layers([], history) == []


@pytest.mark.usefixtures("in_repo")
def test_a_dry_run_push_without_load_is_one_build_that_buildkit_pushes_in_zstd(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["build", "--cell", CELL, "--dry-run", "--ca-bundle", __file__, "--push"]
    code, out, _ = cli(*base, capsys=capsys)
    assert code == 0
    lines = [line.strip() for line in out.splitlines()]
    assert lines.count("compression: zstd") == 1 and lines.count("compression: gzip") == 2
    one = next(line for line in lines if line.startswith("build and push in one"))
    assert "push=true,store=false,compression=zstd,force-compression=true" in one
    assert "--load" not in one and "--target runtime" in one
    tag = one.split(" -t ", 1)[1].split()[0]
    assert lines.count(f"push: docker push {tag}") == 2  # where BuildKit does not push
    code, out, _ = cli(*base, "--load", "--compression", "gzip", capsys=capsys)
    assert code == 0 and "build and push in one" not in out and "compression: zstd" not in out
    assert "push: docker push " in out
