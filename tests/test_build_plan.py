"""Build planning and orchestration against the recording fake engine (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import plan
from imagekit.builder.build_report import raise_for_failures, summary
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import QuietDisplay
from imagekit.builder.inputs import Inputs, resolve
from imagekit.builder.log import StepLog
from imagekit.engine.fake import FakeEngine
from imagekit.errors import BuildError, UsageError
from imagekit.locks.pinned import load_cells

from .conftest import ROOT

TWO_CELLS = """
defaults: {installer: pip, size_budget: 2GB}
matrix:
  - {cuda: cpu, torch: "2.13.0", python: "3.11", os: debian12, flavor: slim}
  - {cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}
"""


@pytest.fixture
def cells(write_env):  # type: ignore[no-untyped-def]
    return load_cells([write_env(TWO_CELLS)])


def run(cells, tmp_path: Path, engine: FakeEngine, **opts: object):  # type: ignore[no-untyped-def]
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "reports", **opts)  # type: ignore[arg-type]
    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    return Runner(engine, options, inputs, QuietDisplay()).run(plan(cells, options, inputs))


def test_tags_only_after_success_and_keep_going(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(fail_builds={cells[0].id})
    reports = run(cells, tmp_path, engine, keep_going=True)
    assert [r.status for r in reports] == ["failed", "built"]
    assert not any(ref.endswith("cpu-py3.11-debian12-slim") for ref in engine.tags)
    assert set(engine.tags) == set(cells[1].tags)
    text = "\n".join(summary(reports))
    assert cells[0].id in text and "no matching distribution" in text  # log tail in summary
    with pytest.raises(BuildError, match=cells[0].id):
        raise_for_failures(reports)
    saved = json.loads((tmp_path / "reports" / cells[1].id / "build.json").read_text())
    assert saved["status"] == "built" and saved["steps"][0]["seconds"] == 1.5


def test_without_keep_going_later_cells_are_not_attempted(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(fail_builds={cells[0].id})
    reports = run(cells, tmp_path, engine, jobs=1)
    assert [r.status for r in reports] == ["failed", "not-attempted"]
    assert ("build", cells[1].id) not in engine.calls
    with pytest.raises(BuildError, match=r"of 2 cells, 1 failed: .*; 1 not attempted: "):
        raise_for_failures(reports)
    assert summary(reports)[-1] == "0 built, 1 failed, 1 not attempted"


class OfflineEngine(FakeEngine):
    """No registry reachable; only debian:bookworm-slim is on the engine."""

    def inspect(self, ref: str):  # type: ignore[no-untyped-def]
        return super().inspect(ref) if ref.startswith("debian:") else None

    def registry_digest(self, ref: str) -> str:
        self.calls.append(("registry", ref))
        raise OSError("lookup registry-1.docker.io: no such host")


def test_cells_whose_bases_cannot_be_had_are_named_before_anything_builds() -> None:
    from imagekit.builder.preflight import preflight
    from imagekit.matrix.catalog import Filters, select

    cells = select(load_cells([ROOT / "envs"]), Filters(cuda=("12.6",)))
    engine = OfflineEngine()
    with pytest.raises(BuildError) as caught:
        preflight(engine, cells, bootstrap=False, keep_going=False)
    text = str(caught.value)
    assert "cannot be built here; nothing was built" in text
    assert "nvidia/cuda:" in text and "no such host" in text and "registry mirror" in text
    assert "--os debian12 --flavor slim --bootstrap-base" in text
    assert not any(call[0] == "build" for call in engine.calls)
    # each distinct base is asked once
    asked = [ref for kind, ref in engine.calls if kind == "registry"]
    assert len(asked) == len(set(asked))
    unbuildable = preflight(engine, cells, bootstrap=False, keep_going=True)
    debian = [c.id for c in cells if c.runtime_image.startswith("debian:")]
    assert debian and not set(debian) & set(unbuildable)
    assert len(unbuildable) == len(cells) - len(debian)


def test_a_debian_base_missing_here_is_bootstrappable() -> None:
    from imagekit.builder.preflight import preflight
    from imagekit.matrix.catalog import Filters, select

    class Bare(OfflineEngine):
        def inspect(self, ref: str):  # type: ignore[no-untyped-def]
            return None

    cells = select(load_cells([ROOT / "envs"]), Filters(cuda=("12.6",), os=("debian12",)))
    with pytest.raises(BuildError, match="add --bootstrap-base"):
        preflight(Bare(), cells, bootstrap=False, keep_going=False)
    assert preflight(Bare(), cells, bootstrap=True, keep_going=False) == {}


def test_size_budget_fails_the_cell_and_names_layers(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reports = run(cells, tmp_path, FakeEngine(image_size=3 * 10**9), push=True, keep_going=True)
    assert all(r.status == "over-budget" for r in reports)
    assert "over the cell's size_budget of 2.00 GB" in reports[0].error
    assert "COPY /opt/venv" in reports[0].error


def test_push_failure_keeps_local_image(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(push_error=True)
    reports = run(cells[:1], tmp_path, engine, push=True)
    assert reports[0].status == "push-failed" and "local image is kept" in reports[0].error
    assert set(engine.tags) == set(cells[0].tags)  # not untagged


def test_bad_paths_fail_before_any_build(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--wheelhouse .* is not a directory"):
        resolve(None, None, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no .whl files"):
        resolve(None, None, tmp_path / "empty")
    with pytest.raises(UsageError, match=r"CA bundle .*nope.pem \(from --ca-bundle\)"):
        resolve(tmp_path / "nope.pem", None, None)
    with pytest.raises(UsageError, match="is not a URL"):
        resolve(None, "ftp://x y", None)


def test_ca_bundle_found_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    (tmp_path / "pip.conf").write_text(f"[global]\ncert = {bundle}\n")
    assert resolve(None, None, None).ca_source.endswith("pip.conf [global] cert")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    found = resolve(None, None, None)
    assert found.ca_bundle == bundle and found.ca_source == "$REQUESTS_CA_BUNDLE"


def test_plan_is_pure_and_passes_secrets_not_args(cells, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inputs = Inputs(
        ca_bundle=tmp_path / "ca.pem",
        ca_source="x",
        index_url="https://u:p@m/simple",
        wheelhouse=None,
    )
    (planned, _) = plan(cells, BuildOptions(torch_index=""), inputs)
    request = planned.request
    assert ("ca", tmp_path / "ca.pem") in request.secrets
    assert any(i == "index" for i, _ in request.secrets)
    assert ("TORCH_INDEX_URL", "") in request.build_args
    # no inline cache unless --cache-to type=inline: it makes the image config unstable
    assert [k for k, _ in request.build_args] == ["TORCH_INDEX_URL"]
    assert "u:p@" not in planned.command()  # credentials never on a command line
    assert planned.tags == cells[0].tags


def test_step_log_parses_buildkit_plain_output() -> None:
    log = StepLog()
    for line in [
        "#1 [internal] load build definition from Dockerfile",
        "#1 DONE 0.0s",
        "#7 [builder 2/5] RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=ca pip install x",
        "#7 CACHED",
        "#9 [runtime 5/5] COPY source/ /workspace/",
        "#9 DONE 0.3s",
        "#10 [builder 3/5] RUN false",
        "#10 ERROR: process did not complete",
    ]:
        log.feed(line)
    steps = log.as_list()
    assert [s["step"] for s in steps] == [
        "[builder 2/5] RUN pip install x",
        "[runtime 5/5] COPY source/ /workspace/",
        "[builder 3/5] RUN false",
    ]
    assert steps[0]["cached"] and steps[1]["seconds"] == 0.3 and steps[2]["error"]
    assert not steps[1]["cached"]


def test_a_resolved_from_counts_as_cached() -> None:
    log = StepLog()
    for line in ["#5 [os-base 1/4] FROM docker.io/library/debian:bookworm-slim", "#5 DONE 0.0s"]:
        log.feed(line)
    assert log.as_list()[0]["cached"]  # a fully cached build reads 15/15, not 14/15


def test_default_readme_cell_dry_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.cli import main

    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as info:
        main(["build", "--cuda", "12.6", "--os", "debian12", "--dry-run", "--ca-bundle", __file__])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "cu126-torch2.7.1-py3.11-debian12-slim" in out and "--secret id=ca,src=" in out
    assert "--network" not in out  # the engine's default network unless asked


def test_network_host_reaches_the_build_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.cli import main

    monkeypatch.chdir(ROOT)
    args = ["build", "--cell", "cu126-torch2.7.1-py3.11-debian12-slim", "--dry-run"]
    with pytest.raises(SystemExit) as info:
        main([*args, "--network", "host", "--ca-bundle", __file__])
    assert info.value.code == 0
    assert " --network host " in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main([*args, "--network", "bridge2"])
    assert info.value.code == 2
    assert "'bridge2' is not one of 'default', 'host', 'none'" in capsys.readouterr().err


def test_target_packages_needs_a_packages_stage(
    write_env, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    """Only a cell with pip packages and build_apt has a packages stage. Asking for it of
    any other cell fails before any build, naming the cell and what to do instead."""
    from imagekit.cli import main

    write_env(
        """
        defaults: {installer: pip}
        matrix:
          - {cuda: cpu, torch: "2.13.0", python: "3.11", os: debian12, flavor: slim}
        overrides:
          - match: {python: "3.11"}
            pip: [crcmod]
            build_apt: [build-essential]
        """
    )
    args = ["build", "--dry-run", "--target", "packages", "--ca-bundle", __file__]
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 0
    assert " --target packages " in capsys.readouterr().out
    for envs, reason in [
        (
            ROOT / "envs",
            "pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim has no packages stage",
        ),  # pip only
        (
            ROOT / "tests/data/envs",
            "imagekit-test-cpu-torch2.13.0-py3.11-debian12-slim has no packages stage",
        ),
    ]:
        with pytest.raises(SystemExit) as info:
            main([*args, "--envs", str(envs), "--cell", "*-py3.11-debian12-slim"])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"--target packages: {reason}" in err
        assert "use --target builder or runtime" in err


# -- provenance labels: never from the clock -------------------------------------------------


def test_creation_time_comes_from_the_source_not_the_clock() -> None:
    from imagekit.builder.git_labels import source_date

    assert source_date("1700000000", "1600000000") == "2023-11-14T22:13:20+00:00"
    assert source_date(None, "1600000000") == "2020-09-13T12:26:40+00:00"
    assert source_date("", "") is None and source_date("soon", "") is None


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        ("git@github.com:acme/train.git", "https://github.com/acme/train"),
        ("https://github.com/acme/train.git", "https://github.com/acme/train"),
        (
            "https://ci:s3cret@gitlab.example.com/ml/images.git",
            "https://gitlab.example.com/ml/images",
        ),
        ("ssh://git@git.example.com:2222/ml/images.git", "https://git.example.com/ml/images"),
        ("/srv/repos/train", None),
        ("", None),
    ],
)
def test_source_label_from_the_git_remote_without_credentials(remote: str, url: str | None) -> None:
    from imagekit.builder.git_labels import source_url

    assert source_url({}, remote) == url
    assert source_url({"GITHUB_REPOSITORY": "acme/x"}, remote) == "https://github.com/acme/x"
