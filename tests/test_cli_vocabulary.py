"""One CLI vocabulary (docs/cli.md): every command walked for help, lowercase choices taken
as typed, --out for folders and --json for reports; comma lists and repeated filters
alike; the commands the docs name exist; a dry run that says what the run does."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from imagekit.cli import cli, main
from imagekit.cli.params import CommaList, OutDir, OutFile

from .conftest import ROOT


def commands(
    command: click.Command = cli, path: tuple[str, ...] = ("imagekit",)
) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))


def options() -> Iterator[tuple[str, click.Option]]:
    for name, command in commands():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                yield name, param


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_every_command_and_option_has_help() -> None:
    missing = [name for name, command in commands() if not (command.help or "").strip()]
    missing += [
        f"{name} {param.opts[0]}" for name, param in options() if not (param.help or "").strip()
    ]
    assert missing == []


def test_every_choice_is_lowercase_and_taken_in_any_case() -> None:
    wrong = []
    for name, param in options():
        kind = param.type.item if isinstance(param.type, CommaList) else param.type
        if not isinstance(kind, click.Choice):
            continue
        if kind.case_sensitive or any(str(c) != str(c).lower() for c in kind.choices):
            wrong.append(f"{name} {param.opts[0]}")
    assert wrong == []


@pytest.mark.usefixtures("in_repo")
def test_a_choice_typed_in_capitals_is_the_lowercase_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lower = run(capsys, "list", "--json", "-", "--flavor", "slim", "--cuda", "12.8")
    upper = run(capsys, "list", "--json", "-", "--flavor", "SLIM", "--cuda", "12.8")
    assert lower == upper and lower[0] == 0
    code, out, _ = run(capsys, "compat", "show", "--platform", "LINUX/ARM64")
    assert code == 0 and out


def test_folders_are_out_and_reports_are_json() -> None:
    """A folder a command writes into is --out; a JSON report is --json FILE."""
    odd = []
    for name, param in options():
        if isinstance(param.type, OutDir) and param.opts != ["--out"]:
            odd.append(f"{name} {param.opts}")
        if re.search(r"-dir$|^--output|^--report", param.opts[0]):
            odd.append(f"{name} {param.opts}")
        if "--json" in param.opts and not isinstance(param.type, OutFile):
            odd.append(f"{name} --json is not a file")
    assert odd == []
    with_json = {name for name, param in options() if "--json" in param.opts}
    assert {"imagekit list", "imagekit test", "imagekit verify"} <= with_json


FILTERS = [
    ("--cuda", "12.8", "13.0"),
    ("--torch", "2.10", "2.11"),
    ("--python", "3.12", "3.13"),
    ("--os", "ubuntu24.04", "debian12"),
    ("--flavor", "nvidia", "slim"),
    ("--cell", "*cu128-*-slim", "*cu130-*-nvidia"),
]


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(("flag", "one", "two"), FILTERS)
def test_a_filter_takes_a_comma_list_and_repeats_alike(
    capsys: pytest.CaptureFixture[str], flag: str, one: str, two: str
) -> None:
    code, listed, _ = run(capsys, "list", "--json", "-", flag, f"{one},{two}")
    assert code == 0
    assert run(capsys, "list", "--json", "-", flag, one, flag, two) == (code, listed, "")
    assert run(capsys, "list", "--json", "-", flag, f"{one}, {two}")[1] == listed
    ids = {cell["id"] for cell in json.loads(listed)}
    apart = {
        cell["id"]
        for value in (one, two)
        for cell in json.loads(run(capsys, "list", "--json", "-", flag, value)[1])
    }
    assert ids == apart and len(ids) > 1


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize("value", ["12.8,", ",12.8", "12.8,,13.0"])
def test_an_empty_item_in_a_list_is_exit_2(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _, err = run(capsys, "list", "--cuda", value)
    assert code == 2 and "--cuda" in err and "an empty item" in err


@pytest.mark.usefixtures("in_repo")
def test_an_empty_value_asks_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """`--require "$REQUIRE"` with the variable empty (the workflow's CPU cells)."""
    assert run(capsys, "list", "--json", "-", "--cuda", "") == run(capsys, "list", "--json", "-")


@pytest.mark.usefixtures("in_repo")
def test_a_platform_list_repeats_too(capsys: pytest.CaptureFixture[str]) -> None:
    cell = ["build", "--cell", "*cu130-torch2.14.1-py3.12-ubuntu24.04-slim", "--dry-run", "--push"]
    joined = run(capsys, *cell, "--platform", "linux/arm64,linux/amd64")
    repeated = run(capsys, *cell, "--platform", "linux/arm64", "--platform", "linux/amd64")
    assert joined == repeated and joined[0] == 0, joined
    assert "--platform linux/amd64,linux/arm64" in joined[1]


@pytest.mark.usefixtures("in_repo")
def test_list_json_is_the_cells_matrix_printed_and_a_file_keeps_the_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "list", "--json", "-", "--cuda", "12.8")
    assert code == 0 and err == ""
    cells = json.loads(out)  # nothing but the JSON on stdout
    code, old, note = run(capsys, "matrix", "--format", "json", "--cuda", "12.8")
    assert code == 0 and json.loads(old) == cells and "imagekit list --json -" in note
    assert run(capsys, "matrix", "--cuda", "12.8")[1] == old  # bare: as before, with the note
    code, out, _ = run(capsys, "list", "--json", str(tmp_path / "cells.json"), "--cuda", "12.8")
    assert code == 0 and f"{len(cells)} cells" in out
    assert json.loads((tmp_path / "cells.json").read_text()) == cells
    shown = cli.commands["matrix"].get_help(click.Context(cli.commands["matrix"]))
    assert "--format [github|github-build|github-merge|bake]" in " ".join(shown.split())


@pytest.mark.usefixtures("in_repo")
def test_build_out_is_the_report_folder_and_report_dir_still_works(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import imagekit.builder.orchestrate as orchestrate

    seen: list[Path] = []
    monkeypatch.setattr(
        orchestrate, "run_build", lambda engine, cells, options, *_: seen.append(options.report_dir)
    )
    base = ["build", "--cuda", "12.8", "--flavor", "slim"]
    code, _, err = run(capsys, *base, "--out", str(tmp_path / "a"))
    assert code == 0 and err == ""
    code, _, err = run(capsys, *base, "--report-dir", str(tmp_path / "b"))
    assert code == 0 and "--report-dir is now --out" in err
    assert seen == [tmp_path / "a", tmp_path / "b"]
    code, _, err = run(capsys, *base, "--report-dir", "x", "--out", "y")
    assert code == 2 and "give --out alone" in err
    help_text = cli.commands["build"].get_help(click.Context(cli.commands["build"]))
    assert "--report-dir" not in help_text


def test_json_dash_prints_the_report_on_stdout_even_when_the_check_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from imagekit.cli.imagetest_cmd import json_through_file
    from imagekit.errors import SelfCheckFailed

    kwargs: dict[str, object] = {"json_path": Path("-")}
    with pytest.raises(SelfCheckFailed) as caught, json_through_file(kwargs) as people:
        path = kwargs["json_path"]
        assert isinstance(path, Path) and path.name == "report.json"
        path.write_text('{"ok": false}\n')
        people(["a line for people"])
        raise SelfCheckFailed("the self-check failed", ["the table"])
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": False}
    assert "a line for people" in err and "the table" in err
    assert caught.value.report == []  # printed already, on stderr


# -- the docs name only commands that exist ------------------------------------------------

CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
# a command where a shell would run one: first on a line or in a span, or after $ , sudo,
# a pipe, ;, &&, $( or a workflow's run: (not prose quoted in code: "rendered by imagekit for")
NAMED = re.compile(
    r"(?:^|`|[|;&(]|\$|sudo|run:)[ \t]*imagekit[ \t]+([a-z][a-z0-9-]*)"
    r"(?:[ \t]+([a-z][a-z0-9-]*))?",
    re.MULTILINE,
)


# the README's flow diagram names its steps as commands: `envs ─ render ─▶ dockerfiles`
STEP = re.compile(r"(?<!─)─ ([a-z][a-z-]*) ─▶")


def named_commands(text: str) -> set[str]:
    found = set()
    for block in CODE.findall(text):
        found.update(STEP.findall(block))
        for word, sub in NAMED.findall(block):
            command = cli.commands.get(word)
            if isinstance(command, click.Group) and sub:
                found.add(f"{word} {sub}")
            else:
                found.add(word)
    return found


def missing(words: set[str]) -> list[str]:
    absent = []
    for words_ in sorted(words):
        word, _, sub = words_.partition(" ")
        command = cli.commands.get(word)
        if command is None or (sub and sub not in getattr(command, "commands", {})):
            absent.append(words_)
    return absent


def test_the_scanner_finds_a_command_that_does_not_exist() -> None:
    text = "run `imagekit validate` then\n```\n$ imagekit compat shw\nimagekit build --push\n"
    text += "x=$(imagekit lst)\n# Rendered by imagekit for cell\n```"
    assert missing(named_commands(text)) == ["compat shw", "lst", "validate"]


@pytest.mark.parametrize(
    "doc",
    [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_command_the_docs_name_exists(doc: Path) -> None:
    assert missing(named_commands(doc.read_text(encoding="utf-8"))) == []


# -- the dry run says what the run does ------------------------------------------------------


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(
    "extra",
    [(), ("--load",), ("--no-provenance",), ("--load", "--compression", "gzip")],
    ids=["straight", "load", "no-provenance", "load-gzip"],
)
def test_a_dry_run_push_never_contradicts_its_provenance(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]
) -> None:
    """Each engine's commands carry the provenance its line says: no --provenance=false under
    'attached', no mode=min where there is none (issue 50: both were printed)."""
    args = ["build", "--cuda", "12.8", "--flavor", "slim", "--torch", "2.10", "--dry-run"]
    code, out, _ = run(capsys, *args, "--push", *extra)
    assert code == 0
    for group in re.split(r"\n  on |\n(?=\S)", out):
        pushes = [
            line
            for line in group.splitlines()
            if "push=true" in line  # the command that pushes (BuildKit's exporter)
        ]
        said = next((line for line in group.splitlines() if "provenance:" in line), "")
        if "attached" in said:
            assert pushes and all("--provenance=mode=min" in line for line in pushes), group
        elif said:
            assert all("--provenance=mode=min" not in line for line in pushes), group
    assert "provenance: attached" in out or "--no-provenance" in extra


@pytest.mark.usefixtures("in_repo")
def test_the_dry_run_asks_the_run_s_own_decisions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Change the run's provenance decision and the dry run follows: it has none of its own."""
    import imagekit.builder.dry_run as dry_run
    from imagekit.builder import push_decisions

    args = ["build", "--cuda", "12.8", "--flavor", "slim", "--torch", "2.10", "--dry-run"]
    monkeypatch.setattr(
        dry_run, "pushed_request", lambda request, options, engine: request
    )  # as if no engine could hold provenance
    code, out, _ = run(capsys, *args, "--push")
    assert code == 0 and "provenance: attached" not in out and "mode=min" not in out
    assert dry_run.pushed_request is not push_decisions.pushed_request
    monkeypatch.undo()
    assert dry_run.pushed_request is push_decisions.pushed_request
