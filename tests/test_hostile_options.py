"""Every CLI option whose value lands in a Dockerfile, a plan, a tag, a bake or CI file, a
pip.conf or a launch file is checked against the grammar of where it lands (exit 2 naming the
option and the value), so no value can start a line of its own there."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.cli import params
from imagekit.matrix.ref_checks import check_tag

from .hostile import project, run, user_error

__all__ = ["project"]

EVIL = "x\nFROM evil"
BUILD = ["build", "--envs", "envs", "--dry-run"]
LAUNCH = [
    "launch",
    "--envs",
    "envs",
    "--scheduler",
    "slurm",
    "--nodes",
    "1",
    "--gpus-per-node",
    "1",
]


def test_the_issues_tag_suffix_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run(capsys, *BUILD, "--tag-suffix", EVIL)
    user_error(ran, "--tag-suffix", repr(EVIL))
    assert not any(line.startswith("FROM evil") for line in ran.text.splitlines())


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (
            [*BUILD, "--tag-suffix", "-ok", "--index-url", "https://h/simple\n[global]"],
            "--index-url",
        ),
        ([*BUILD, "--index-url", "https://h/sim ple"], "--index-url"),
        ([*BUILD, "--index-url", "ftp://h/simple"], "--index-url"),
        ([*BUILD, "--torch-index", "https://h/whl\nRUN evil"], "--torch-index"),
        ([*BUILD, "--torch-index", "https://h/wh'l"], "--torch-index"),
        ([*BUILD, "--mirror", "http://deb\ndeb http://evil"], "--mirror"),
        ([*BUILD, "--cache-from", "a b"], "--cache-from"),
        ([*BUILD, "--cache-to", "type=registry,ref=x\nmode=max"], "--cache-to"),
        (["lock", "--envs", "envs", "--torch-index", "x\ny"], "--torch-index"),
        (["render", "--envs", "envs", "--syntax", f"docker/dockerfile:1\n{EVIL}"], "--syntax"),
        (["matrix", "--envs", "envs", "--format", "github", "--gpu-runner", EVIL], "--gpu-runner"),
        (
            ["matrix", "--envs", "envs", "--format", "github", "--arm64-runner", EVIL],
            "--arm64-runner",
        ),
        (["compat", "refresh", "--torch", "2.7\n"], "--torch"),
        (["compat", "refresh", "--index", "https://h/\nx"], "--index"),
        (["base", "bootstrap", "--suite", "bookworm\nevil"], "--suite"),
        (["base", "bootstrap", "--mirror", "http://h/ debian"], "--mirror"),
        (["base", "bootstrap", "--tag", "debian:bookworm\nevil"], "--tag"),
        (["test", "img", "--env", "A=1\nB=2"], "--env"),
        (["test", "img", "--env", "A-B=1"], "--env"),
        ([*LAUNCH, "--env", "NCCL_DEBUG=INFO\nrm -rf /", "--", "t.py"], "--env"),
        ([*LAUNCH, "--image", f"a:1\n{EVIL}", "--", "t.py"], "--image"),
    ],
)
def test_a_value_that_would_break_out_where_it_lands_is_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str
) -> None:
    ran = run(capsys, *args)
    user_error(ran, option, "Invalid value")
    assert not any(
        line.startswith(("FROM evil", "RUN evil", "rm -rf")) for line in ran.text.splitlines()
    )


def test_a_suffix_that_makes_a_tag_too_long_names_the_cell(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = project / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace('["{id}-latest"]', '["{id}-latest-{id}"]'))
    ran = run(capsys, *BUILD, "--tag-suffix", "-" + "x" * 63)
    user_error(ran, "--tag-suffix", "shorter", "cpu-torch2.13.0-py3.11-debian12-slim")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(suffix=st.text(max_size=80))
def test_any_tag_suffix_is_refused_or_makes_valid_tags_only(
    project: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    ran = run(capsys, *BUILD, "--tag-suffix", suffix)
    if ran.code == 2:
        assert "--tag-suffix" in ran.err and "internal error" not in ran.err
        return
    assert ran.code == 0, ran
    lines = ran.out.splitlines()
    assert len(lines) == 3  # CA bundle, the cell, its command: nothing of the suffix's own
    tags = lines[2].split("# then tag ", 1)[1].split(", ")
    for ref in tags:
        assert ref.endswith(suffix)
        check_tag(ref.rsplit(":", 1)[1])


CHECKED = [
    params.TAG_SUFFIX,
    params.URL,
    params.URL_OR_NONE,
    params.IMAGE_REF,
    params.CACHE_SPEC,
    params.RUNNER_LABEL,
    params.ARM64_RUNNER_LABEL,
    params.DEBIAN_SUITE,
    params.TORCH_VERSION,
    params.ENV,
]


@pytest.mark.parametrize("kind", CHECKED, ids=[k.name for k in CHECKED])
@settings(max_examples=300, deadline=None)
@given(
    value=st.text(max_size=60) | st.from_regex(r"https?://[a-z]+/[ -~\n\r]{0,20}", fullmatch=True)
)
def test_no_checked_option_accepts_a_line_break_or_a_control_character(
    kind: params.Checked, value: str
) -> None:
    try:
        accepted = kind.convert(value, None, None)
    except click.BadParameter as exc:
        assert "\n" not in exc.message.split(":", 1)[0]  # the value is shown as repr
        return
    assert accepted == value
    assert not params.CONTROL.search(value) and "\n" not in value and "\r" not in value


@pytest.mark.parametrize(
    ("label", "why"),
    [
        ("ubuntu-latest", "does not build linux/arm64 natively"),  # x86-64: QEMU again
        ("ubuntu-24.04", "does not build linux/arm64 natively"),
        ("Ubuntu-22.04", "does not build linux/arm64 natively"),  # labels ignore case
        ("ubuntu-slim", "does not build linux/arm64 natively"),
        ("windows-11-arm", "does not build linux/arm64 natively"),  # no Linux containers
        ("macos-15", "does not build linux/arm64 natively"),
        ("", "a runs-on label is"),
        ("arm runner", "e.g. ubuntu-24.04-arm"),
        ("-arm", "a runs-on label is"),
        ("${{ secrets.TOKEN }}", "a runs-on label is"),
        ("arm64\nruns-on: evil", "a runs-on label is"),
        ("a" * 101, "characters"),
    ],
)
def test_an_arm64_runner_that_cannot_build_arm64_natively_is_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str], label: str, why: str
) -> None:
    ran = run(
        capsys, "matrix", "--envs", "envs", "--format", "github-build", "--arm64-runner", label
    )
    user_error(ran, "--arm64-runner", "Invalid value", why)
    assert "evil" not in ran.out  # nothing printed: the option is checked first


@pytest.mark.parametrize("label", ["ubuntu-24.04-arm", "ubuntu-22.04-arm", "gh200", "linux.arm64"])
def test_an_arm64_runner_label_is_taken_as_it_is(
    project: Path, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    ran = run(capsys, "matrix", "--envs", "envs", "--format", "github", "--arm64-runner", label)
    assert ran.code == 0, ran
