"""Hostile and broken matrix files: each is a clear error (exit 2, file and line) in well
under a second, never a crash (exit 70), and nothing is written."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.matrix.yamlsrc import MAX_BYTES, YamlSyntaxError, load

BOMB = "\n".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['x'] * 9)}]"
    for prev, name in zip([None, *"abcdefghi"], "abcdefghij", strict=True)
)
CASES = {
    "alias-bomb": (BOMB, "values after expanding aliases"),
    "deep": ("a: " + "[" * 600 + "]" * 600, "nested more than 64 levels"),
    "cycle": ("a: &x\n  b: *x\n", "a cycle"),
    "python-tag": ('x: !!python/object:os.system "ls"\n', "use plain YAML values"),
    "unknown-tag": ("x: !secret token\n", "use plain YAML values"),
    "not-yaml": ("a: [1, 2\n", "not valid YAML"),
    "duplicate": ("a: 1\na: 2\n", "duplicate key 'a'"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_yaml_is_a_located_error_in_well_under_a_second(tmp_path: Path, name: str) -> None:
    text, words = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(YamlSyntaxError, match=words) as caught:
        load(path)
    assert time.perf_counter() - started < 1.0
    assert str(caught.value).startswith(f"{path}:")


def test_non_utf8_and_oversized_files(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"registry: ok\nrepository: caf\xe9\n")
    with pytest.raises(YamlSyntaxError, match=r"latin.yaml:2: not UTF-8 text \(byte 0xe9"):
        load(latin)
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * (MAX_BYTES // 10 + 1))
    with pytest.raises(YamlSyntaxError, match="a matrix file may be at most"):
        load(big)


def test_merge_keys_are_supported_and_explicit_keys_win(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "base: &base\n  installer: pip\n  apt: [curl]\nmore: &more\n  apt: [git]\n  tf32: true\n"
        "cell:\n  <<: [*base, *more]\n  installer: uv\n"
    )
    cell = load(path).data["cell"]
    assert cell == {"installer": "uv", "apt": ["curl"], "tf32": True}  # first merge wins


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["alias-bomb", "python-tag", "deep"])
def test_the_cli_exits_2_not_70(tmp_path: Path, name: str) -> None:
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "m.yaml").write_text(CASES[name][0])
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "render", "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr and "envs/m.yaml:" in result.stderr
    assert not (tmp_path / "out").exists()
