"""Matrix validation: every bad-input class gets a message with file, line, field, value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.errors import SpecError
from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat
from imagekit.matrix.completion import complete_all
from imagekit.matrix.load import load_spec
from imagekit.sizes import parse_size

GOOD_BLOCK = """
matrix:
  - cuda: "12.6"
    torch: "2.7.1"
    python: "3.11"
    os: debian12
    flavor: slim
"""

WriteEnv = Callable[..., Path]


def problems(folder: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_cells([folder])
    return info.value.problems


def test_good_file_gives_one_cell(write_env: WriteEnv) -> None:
    cells = load_cells([write_env(GOOD_BLOCK)])
    assert [c.id for c in cells] == ["imagekit-cu126-torch2.7.1-py3.11-debian12-slim"]


def test_unknown_key_has_did_you_mean_and_line(write_env: WriteEnv) -> None:
    folder = write_env("defaults:\n  pipp: [numpy]\n" + GOOD_BLOCK)
    (msg,) = problems(folder)
    assert msg.startswith("envs/m.yaml:2: defaults.pipp: unknown key 'pipp'; did you mean 'pip'?")
    assert "Valid keys:" in msg and "apt" in msg


def test_version_written_as_number_must_be_quoted(write_env: WriteEnv) -> None:
    folder = write_env(GOOD_BLOCK.replace('python: "3.11"', "python: 3.10"))
    (msg,) = problems(folder)
    assert "envs/m.yaml:4: matrix[0].python[0]" in msg
    assert 'quote it: "3.10"' in msg  # the digits the user wrote, not the float YAML made


def test_bad_flavor_lists_valid_values(write_env: WriteEnv) -> None:
    (msg,) = problems(write_env(GOOD_BLOCK.replace("flavor: slim", "flavor: nvdia")))
    assert "matrix[0].flavor[0]" in msg and "'nvdia'" in msg and "'nvidia' or 'slim'" in msg


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ('apt: ["curl\\nRUN rm -rf /"]', "apt[0]"),
        ("apt: ['curl \"x\"']", "apt[0]"),
        ("build_apt: ['gcc; rm -rf /']", "build_apt[0]"),
        ('pip: ["numpy\\nRUN evil"]', "pip[0]"),
        ('pip: ["--index-url http://evil"]', "pip[0]"),
        ('pip: ["numpy>>1"]', "pip[0]"),
        ('env: {GOOD: "a\\nRUN evil"}', "env.GOOD"),
        ('env: {"BAD KEY": "x"}', "env.BAD KEY"),
        ("env: {FLAG: true}", "env.FLAG"),
        ('base: "debian:12 AS evil"', "base"),
        ('size_budget: "twelve"', "size_budget"),
        ("features: [flash]", "features[0]"),
        ("profile: multinode", "profile"),
    ],
)
def test_values_that_could_break_a_line_are_rejected(
    write_env: WriteEnv, option: str, needle: str
) -> None:
    folder = write_env("defaults:\n  " + option + "\n" + GOOD_BLOCK)
    (msg,) = problems(folder)
    assert msg.startswith("envs/m.yaml:2: defaults.")
    assert needle in msg and "value" in msg


def test_quotes_in_env_values_are_allowed_and_escaped(write_env: WriteEnv) -> None:
    from imagekit.render.dockerfile import render

    folder = write_env("defaults:\n  env: {MSG: 'say \"hi\" $HOME'}\n" + GOOD_BLOCK)
    (cell,) = load_cells([folder])
    assert 'MSG="say \\"hi\\" \\$HOME"' in render(cell)


@pytest.mark.parametrize(
    ("axes", "expected"),
    [
        ({"torch": "2.3"}, "torch 2.3 is not in the compatibility data; known: 2.4.1"),
        (
            {"torch": "2.10.0", "python": "3.9"},
            "torch 2.10.0 has no wheels for Python 3.9; it has 3.10, 3.11, 3.12, 3.13, 3.14",
        ),
        (
            {"cuda": "13.0", "torch": "2.11.0", "os": "ubuntu20.04", "flavor": "nvidia"},
            "CUDA 13.0 does not support ubuntu20.04; it supports debian12, debian13, ubuntu22.04, "
            "ubuntu24.04",
        ),
        (
            {"cuda": "12.4", "torch": "2.7.1"},
            "torch 2.7.1 has no CUDA 12.4 build; it exists for CUDA 11.8, 12.6, 12.8",
        ),
        ({"flavor": "nvidia"}, "there are no nvidia/cuda images for debian12"),
        ({"python": "3.12"}, "needs installer uv"),
    ],
)
def test_combinations_that_do_not_exist_list_what_does(
    write_env: WriteEnv, axes: dict[str, str], expected: str
) -> None:
    block = {
        "cuda": "12.6",
        "torch": "2.7.1",
        "python": "3.11",
        "os": "debian12",
        "flavor": "slim",
        "installer": "pip",
    }
    block.update(axes)
    body = "\n".join(f'    {k}: "{v}"' for k, v in block.items())
    (msg,) = problems(write_env("matrix:\n  -" + body[3:] + "\n"))
    assert msg.startswith("envs/m.yaml:2: ")
    assert expected in msg


def test_every_problem_in_every_file_is_reported(write_env: WriteEnv) -> None:
    write_env("defaults:\n  aptt: [x]\n" + GOOD_BLOCK, name="a.yaml")
    folder = write_env(GOOD_BLOCK.replace('"2.7.1"', '"2.3"') + "tag: '{nope}'\n", name="b.yaml")
    found = problems(folder)
    assert len(found) == 3
    assert any(p.startswith("envs/a.yaml:2:") for p in found)
    assert any("envs/b.yaml" in p and "{nope}" in p for p in found)
    assert any("envs/b.yaml:2:" in p and "torch 2.3" in p for p in found)


def test_yaml_syntax_and_duplicate_keys(write_env: WriteEnv) -> None:
    (msg,) = problems(write_env("matrix: [\n"))
    assert msg.startswith("envs/m.yaml:") and "not valid YAML" in msg
    (msg,) = problems(write_env("registry: a\nregistry: b\n" + GOOD_BLOCK))
    assert msg == "envs/m.yaml:2: duplicate key 'registry'"


def test_missing_axis_and_duplicate_cell(write_env: WriteEnv) -> None:
    (msg,) = problems(write_env("matrix:\n  - cuda: '12.6'\n    torch: '2.7.1'\n"))
    assert "matrix[0]: no value for python, os, flavor" in msg
    folder = write_env(GOOD_BLOCK + GOOD_BLOCK.replace("matrix:\n", ""))
    (msg,) = problems(folder)
    assert (
        "cell imagekit-cu126-torch2.7.1-py3.11-debian12-slim is already defined at envs/m.yaml:2"
        in msg
    )
    assert "drop the combination from one of the blocks" in msg


def test_exclude_overrides_and_include(write_env: WriteEnv) -> None:
    folder = write_env("""
        defaults: {installer: uv, pip: [numpy]}
        matrix:
          - cuda: "12.6"
            torch: ["2.7.1", "2.8.0"]
            python: ["3.11", "3.12"]
            os: ubuntu24.04
            flavor: [nvidia, slim]
        exclude:
          - {torch: "2.8*", flavor: slim}
        include:
          - {cuda: cpu, torch: "2.13.0", python: "3.11", os: debian12, flavor: slim}
        overrides:
          - match: {flavor: nvidia}
            pip: [numpy, scipy]
            env: {EXTRA: "1"}
        """)
    cells = {c.id: c for c in load_cells([folder])}
    assert len(cells) == 7  # 8 - 2 excluded + 1 included
    assert "imagekit-cu126-torch2.8.0-py3.11-ubuntu24.04-slim" not in cells
    nvidia = cells["imagekit-cu126-torch2.8.0-py3.12-ubuntu24.04-nvidia"]
    assert nvidia.pip == ("numpy", "scipy") and ("EXTRA", "1") in nvidia.env
    assert cells["imagekit-cu126-torch2.7.1-py3.12-ubuntu24.04-slim"].pip == ("numpy",)
    assert cells["imagekit-cpu-torch2.13.0-py3.11-debian12-slim"].installer == "uv"


def test_profile_env_and_labels(write_env: WriteEnv) -> None:
    folder = write_env("defaults: {profile: multi-node-ethernet, tf32: false}\n" + GOOD_BLOCK)
    (cell,) = load_cells([folder])
    env = dict(cell.env)
    assert env["NCCL_IB_DISABLE"] == "1" and env["NVIDIA_TF32_OVERRIDE"] == "0"
    assert "OMP_NUM_THREADS" not in env  # computed at container start, never baked
    assert cell.label("io.imagekit.torch") == "2.7.1"
    assert cell.label("io.imagekit.profile") == "multi-node-ethernet"


def test_default_catalog_is_valid_and_covers_the_cuda_lines() -> None:
    cells = load_cells()
    assert {c.cuda for c in cells} == {"12.4", "12.6", "12.8", "13.0", "13.2"}
    assert {c.flavor for c in cells} == {"nvidia", "slim"}
    readme = [c for c in cells if c.id == "pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim"]
    assert readme and readme[0].torch_index is None  # torch 2.7.1's PyPI wheel is CUDA 12.6


def test_sizes() -> None:
    assert parse_size("12GB") == 12 * 10**9
    assert parse_size("1.5 GiB") == int(1.5 * 2**30)
    assert parse_size(1000) == 1000
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("12 parsecs")


def test_spec_loads_and_completes_separately(write_env: WriteEnv) -> None:
    spec = load_spec([write_env(GOOD_BLOCK)])
    assert spec.files == ("envs/m.yaml",) and spec.problems == ()
    (cell,) = complete_all(spec.cells, compat.load())
    assert cell.origin == "envs/m.yaml:2"


def test_an_exclude_or_override_that_selects_nothing_is_warned(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_env(
        GOOD_BLOCK
        + "exclude:\n  - {python: '3.1'}\n  - {flavor: slim, torch: '2.6*'}\n"
        + "overrides:\n  - match: {os: debain12}\n    apt: [curl]\n"
    )
    assert len(load_cells([folder])) == 1
    err = capsys.readouterr().err
    assert "envs/m.yaml:8: exclude[0] matches no cell of this file" in err
    assert "exclude[1] matches no cell" in err
    assert "overrides[0] matches no cell" in err


def test_problems_are_records_and_become_ci_annotations(
    write_env: WriteEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.cli import main

    folder = write_env("defaults:\n  pipp: [numpy]\n" + GOOD_BLOCK.replace('"3.11"', "3.10"))
    with pytest.raises(SpecError) as caught:
        load_cells([folder])
    first, second = caught.value.records
    assert (first.file, first.line, first.field) == ("envs/m.yaml", 2, "defaults.pipp")
    assert (second.line, second.field, second.value) == (7, "matrix[0].python[0]", "3.1")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    with pytest.raises(SystemExit):
        main(["list"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("::error file=envs/m.yaml,line=2::defaults.pipp: unknown key 'pipp'")
    assert out[1].startswith("::error file=envs/m.yaml,line=7::matrix[0].python[0]: YAML read")


def test_lists_replace_unless_a_layer_inherits_them(write_env: WriteEnv) -> None:
    folder = write_env(
        "defaults:\n  apt: [curl]\n  pip: [numpy<3]\n"
        "matrix:\n"
        "  - {cuda: '12.6', torch: '2.7.1', python: '3.11', os: debian12, flavor: slim,"
        " apt: [git], inherit: {apt: append}}\n"
        "  - {cuda: '12.6', torch: '2.7.1', python: '3.12', os: ubuntu24.04, flavor: slim,"
        " pip: [rich]}\n"
        "overrides:\n"
        "  - match: {python: '3.12'}\n    pip: [tqdm]\n    inherit: {pip: prepend}\n"
    )
    first, second = sorted(load_cells([folder]), key=lambda c: c.python)
    assert first.apt == ("curl", "git") and first.pip == ("numpy<3",)
    assert second.apt == ("curl",)  # the block did not name apt: the default stays
    assert second.pip == ("rich", "tqdm")  # the block replaced numpy; the override added tqdm


def test_built_in_defaults_are_the_first_layer(write_env: WriteEnv) -> None:
    (cell,) = load_cells([write_env(GOOD_BLOCK)])
    assert (cell.installer, cell.profile, cell.compile) == ("uv", "single-node", True)
    assert cell.size_budget == 20 * 10**9 and cell.source_default_ignore


def test_schema_and_compatibility_problems_are_shown_together(write_env: WriteEnv) -> None:
    folder = write_env(
        "matrix:\n"
        "  - {cuda: '12.6', torch: '2.7.1', python: '3.11', os: debian12, flavor: slim,"
        " pipp: [numpy]}\n"
        "  - {cuda: '12.4', torch: '2.7.1', python: '3.11', os: debian12, flavor: slim}\n"
    )
    found = problems(folder)
    assert len(found) == 2
    assert found[0].startswith("envs/m.yaml:2: matrix[0].pipp: unknown key 'pipp'")
    assert found[1].startswith("envs/m.yaml:3: cuda=12.4 torch=2.7.1")  # the next block's line
    assert "has no CUDA 12.4 build" in found[1]
