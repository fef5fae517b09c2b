"""The CLI end to end through click (no subprocess): exit codes, messages, outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.cli import cli, main

from .conftest import ROOT


def run(*args: str) -> tuple[int, str]:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0), ""
    raise AssertionError("main() must always exit")


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_version_and_help_on_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0 and "imagekit, version 0.1.0" in result.output
    for name, command in cli.commands.items():
        subcommands = getattr(command, "commands", {name: command})
        for sub in subcommands:
            args = [name, "--help"] if sub == name else [name, sub, "--help"]
            result = runner.invoke(cli, args)
            assert result.exit_code == 0, args
            assert "Usage:" in result.output


@pytest.mark.usefixtures("in_repo")
def test_list_and_matrix_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("list", "--cuda", "13.0", "--torch", "2.11.0")
    out = capsys.readouterr().out
    assert code == 0 and "cu130-torch2.11.0-py3.13-ubuntu24.04-nvidia" in out and "4 cells" in out
    code, _ = run("list", "--json", "-", "--cuda", "12.6", "--os", "debian12")
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and [c["id"] for c in data] == [
        "pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim"
    ]
    assert data[0]["labels"]["io.imagekit.cuda"] == "12.6"


def test_bad_matrix_exits_2_and_names_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "m.yaml").write_text("matrix:\n  - cuda: 12.6\n    torchh: '2.7'\n")
    code, _ = run("render")
    err = capsys.readouterr().err
    assert code == 2
    assert "envs/m.yaml:2: matrix[0].cuda[0]: value 12.6" in err
    assert "envs/m.yaml:3: matrix[0].torchh: unknown key 'torchh'; did you mean 'torch'?" in err
    assert not (tmp_path / "dockerfiles").exists()  # nothing half-written


def test_render_then_check_then_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "m.yaml").write_text(
        "matrix:\n  - {cuda: '12.6', torch: '2.7.1', python: '3.11', os: debian12, flavor: slim}\n"
    )
    assert run("render")[0] == 0
    assert (
        "wrote dockerfiles/imagekit-cu126-torch2.7.1-py3.11-debian12-slim/Dockerfile"
        in capsys.readouterr().out
    )
    assert run("render", "--check")[0] == 0
    (tmp_path / "envs" / "m.yaml").write_text(
        "defaults: {pip: [rich]}\n"
        "matrix:\n  - {cuda: '12.6', torch: '2.7.1', python: '3.11', os: debian12, flavor: slim}\n"
    )
    code, _ = run("render", "--check")
    err = capsys.readouterr().err
    assert code == 4 and "+       rich" in err and "run `imagekit render`" in err


@pytest.mark.usefixtures("in_repo")
def test_filter_that_selects_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("list", "--cuda", "11.0")
    err = capsys.readouterr().err
    assert code == 2 and "--cuda 11.0 matches no cell (the matrix has " in err
    code, _ = run("list", "--cuda", "12.6", "--os", "debian12", "--flavor", "nvidia")
    assert code == 2 and "no cell matches all these filters together" in capsys.readouterr().err


@pytest.mark.usefixtures("in_repo")
def test_compat_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("compat", "show")[0] == 0
    out = capsys.readouterr().out
    assert "2.7.1   12.6" in out and "13.0  13.0.3" in out


def test_internal_error_writes_a_log_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import imagekit.cli.common as common

    def boom(*args: object, **kwargs: object) -> None:
        raise KeyError("unexpected")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(common, "load_cells", boom)
    code, _ = run("list")
    err = capsys.readouterr().err
    assert code == 70 and "internal error: KeyError" in err and "Traceback" not in err
    log = Path(err.split("are in ")[1].split(";")[0])
    assert "Traceback" in log.read_text() and "imagekit 0.1.0" in log.read_text()
    log.unlink()
