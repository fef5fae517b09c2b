"""Hostile and broken matrix files: each is a clear error (exit 2, file and line) in well
under a second, never a crash (exit 70), and nothing is written. The one-pass load gives
the careful three-pass load's data, lines and messages on any input."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.matrix import yaml_fast, yamlsrc
from imagekit.matrix.yaml_located import MAX_BYTES, YamlSyntaxError
from imagekit.matrix.yamlsrc import load

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
    # read as a date, then refused by datetime; and a float that is not one (a crash before)
    "bad-date": ("a: 2001-13-45\n", "month must be in 1..12"),
    "bad-float": ("a: !!float abc\n", "could not convert string to float"),
    # a container made of a word: as a key it was unhashable (exit 70 before)
    "map-key": ("matrix:\n  - cuda: cpu\n    !!map torch: x\n", "tag:yaml.org,2002:map on a"),
    "set-value": ("a: !!set x\n", "tag:yaml.org,2002:set on a plain value"),
    "seq-key-late-error": ("!!seq !!int : \n", "not valid YAML: did not find expected key"),
    "one-line-reason": ("matrix:\n  - cuda: [a\n    torch: x\n", "at line 3, column 10, while"),
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


# -- the one-pass load and the careful load agree -------------------------------------------


def _outcome(load_text: Any, text: str) -> tuple[Any, ...]:
    try:
        located = load_text(text, "m.yaml")
    except YamlSyntaxError as exc:
        return ("error", str(exc))
    return ("ok", repr(located.data), located.data, located.lines)


def assert_same_as_careful(text: str) -> None:
    """The fast pass gives the careful path's result, or leaves the file to it."""
    careful = _outcome(yamlsrc._careful, text)
    try:
        fast = _outcome(yaml_fast.fast, text)
    except yaml_fast.Unusual:
        return
    assert fast == careful


ALIAS_CHAIN = "a: &a [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1 or ''}]\n" for i in range(1, 80))
PLENTY = "a: [" + ", ".join(["1"] * 100_001) + "]\n"  # past the value cap without an alias
OVERRIDES = "o:\n" + "".join(
    f"  - {{match: {{torch: '9.{i}.*'}}, apt: [a]}}\n" for i in range(3000)
)
SNIPPETS = [
    "",
    "---\n",
    "~\n",
    "a: 1.50\nb: 3.10\nc: .inf\nd: 0x1F\ne: 1_000\nf: 2001-12-14\ng: !!binary aGk=\n",
    "- 1\n- 'x'\n- ! x\n- !!str 3\n- ! 3\n- true\n- null\n- ''\n-\n",
    "{1: a, 1.0: b}\n",
    "{~: a, '': b}\n",
    "a:\n- 1\n- 2\nb:\n  - c: d\n    e: [f, {g: h}]\n",
    "[a: b, c]\n",
    "a: !!set {x, y}\nb: !!omap [{x: 1}]\nc: !t {d: 1}\n",
    "a: &x\n  b: 1\nc: *x\n",
    "a: &x [1, 2]\nb: [*x, *x]\n",
    "k: &k key\n*k : v\n",
    "base: &b {x: [1, 2], y: 1}\nc:\n  <<: *b\n  x: [3]\n",
    "base: &b {x: [1, 2], y: 1}\nc:\n  x: [3]\n  <<: *b\n",
    "c:\n  <<: {a: 1}\n  <<: {a: 2, b: 3}\n",
    "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: [*a, *b]\n  x: 3\n",
    "- &a {x: 1}\n- <<: *a\n  y: 2\n- {<<: *a, x: 3}\n",
    "'<<': 1\n!!merge a: {b: 1}\n",
    "a: {<<: [1]}\n",
    "a: &x\n  b: *x\n",
    "a: *u\n",
    "a: &x 1\nb: &x 2\n",
    "? [a]\n: 1\n",
    "---\na: 1\n---\nb: 2\n",
    "a: [1, 2\n",
    "a: b: c\n",
    "a: 'x\n",
    "a: \x01\n",
    "a: " + "[" * 64 + "]" * 64,
    "a: " + "[" * 65 + "]" * 65,
    ALIAS_CHAIN,
    CASES["alias-bomb"][0],
    CASES["alias-bomb"][0] + "z: [\n",
    PLENTY,
    PLENTY + "b: [1\n",
    PLENTY + "b: &z 1\n",
    PLENTY + "---\nb: 1\n",
    OVERRIDES,
    OVERRIDES + "  - [\n",
    OVERRIDES + "a: " + "[" * 70 + "\n",
]


@pytest.mark.parametrize("text", SNIPPETS, ids=range(len(SNIPPETS)))
def test_the_one_pass_load_agrees_with_the_careful_one(text: str) -> None:
    assert_same_as_careful(text)


FRAGMENTS = ["a", "<<", "1", "1.5", "~", "'q'", "&x ", "&y ", "*x", "*y", "!!str ", "! ", ": "]
FRAGMENTS += ["- ", "[", "]", "{", "}", ", ", "\n", "\n  ", "\n- ", "? ", "---\n", "2001-13-45"]
FRAGMENTS += ["!!map ", "!!seq ", "!!set "]


@settings(max_examples=1_000, deadline=None)
@given(text=st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_the_one_pass_load_agrees_on_any_fragments(text: str) -> None:
    assert_same_as_careful(text)


ROOT = Path(__file__).resolve().parent.parent
USUAL = [p.read_text() for p in sorted((ROOT / "envs").glob("*.yaml"))]


FAST = [*SNIPPETS[:5], *SNIPPETS[6:16], *SNIPPETS[17:19]]  # not errors, merges of one mapping


@pytest.mark.parametrize("text", [*USUAL, OVERRIDES, *FAST])
def test_usual_files_take_the_one_pass(text: str) -> None:
    """Not left to the careful path: the agreement above is not a fallback's."""
    assert yaml_fast.fast(text, "m.yaml").data == yamlsrc._careful(text, "m.yaml").data


def test_a_large_file_that_fails_late_is_not_composed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A syntax error on the last line of 1 MiB, or the value cap, is reported from the one
    pass (and the token check): no second parse builds the whole tree only to fail."""
    monkeypatch.setattr(yaml, "compose", lambda *a, **k: pytest.fail("composed"))
    for text, words in [(OVERRIDES + "  - [\n", "not valid YAML"), (PLENTY, "values after")]:
        path = tmp_path / "m.yaml"
        path.write_text(text)
        with pytest.raises(YamlSyntaxError, match=words):
            load(path)
