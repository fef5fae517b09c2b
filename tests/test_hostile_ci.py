"""What goes to CI is escaped by its rules: a workflow command's message as @actions/core's
escapeData, its properties as escapeProperty, and a file name with a line break can start no
line of its own, under GITHUB_ACTIONS=true or not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagekit.errors import Problem, escape_data, escape_property

from .hostile import project, run

__all__ = ["project"]


def unescape(text: str) -> str:
    for escaped, raw in (("%2C", ","), ("%3A", ":"), ("%0A", "\n"), ("%0D", "\r"), ("%25", "%")):
        text = text.replace(escaped, raw)
    return text


def test_escaping_matches_the_toolkit() -> None:
    # @actions/core src/command.ts: escapeData and escapeProperty
    assert escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


@given(file=st.text(min_size=1), message=st.text(), line=st.integers(1, 10**6))
def test_an_annotation_is_one_command_whose_values_round_trip(
    file: str, message: str, line: int
) -> None:
    text = Problem(message=message, file=file, line=line).annotation()
    assert "\n" not in text and "\r" not in text
    head, sep, data = text[len("::error ") :].partition("::")
    assert sep and text.startswith("::error file=")
    props = dict(p.split("=", 1) for p in head.split(","))  # no property splits another
    assert set(props) == {"file", "line"}
    assert unescape(props["file"]) == file and props["line"] == str(line)
    assert unescape(data) == message


def test_a_matrix_file_named_to_inject_a_command_injects_none(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    envs = project / "envs"
    name = "b\n::notice title=INJECTED::x\n.yaml"
    shutil.copy(envs / "cpu.yaml", envs / name)
    (envs / name).write_text((envs / name).read_text().replace("torch: ", "torch: [", 1))
    ran = run(capsys, "list", "--envs", "envs")
    assert ran.code == 2
    lines = ran.out.splitlines() + ran.err.splitlines()
    assert not any(line.lstrip().startswith("::notice") for line in lines), ran
    assert any(line.startswith("::error file=") for line in ran.out.splitlines())
    assert "INJECTED" in ran.text  # shown, escaped, on the error's own line
