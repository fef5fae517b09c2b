"""Work is bounded before it is done: a block's product and the matrix's total are counted
before expansion, and excludes and overrides match and merge in time linear in their number
(counted, not timed: the index, the glob matcher and the merge agree with their plain
definitions on any input, and their work grows linearly)."""

from __future__ import annotations

import fnmatch
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from imagekit.errors import SpecError
from imagekit.locks.pinned import load_cells
from imagekit.matrix import cascade, match_index
from imagekit.matrix import expand as expand_mod
from imagekit.matrix.cascade import merge, merge_all
from imagekit.matrix.envfile import _SIMPLE_PIP, AXES, Match, Options
from imagekit.matrix.expand import MAX_BLOCK_CELLS, MAX_CELLS
from imagekit.matrix.load import load_spec
from imagekit.matrix.match_index import MatchIndex, bits, glob_match, matches

# generous bounds against a loaded CI machine; the target is well under a second
SECONDS = 5.0


def axis(prefix: str, n: int = 20) -> str:
    return json.dumps([f"{prefix}{i}" for i in range(n)])


@pytest.mark.alone  # timed: its limit assumes the CPUs to itself
def test_the_issues_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(
        f"matrix:\n  - cuda: {axis('12.')}\n    torch: {axis('2.', 20)}\n    python: {axis('3.')}\n"
        f"    os: {axis('os')}\n    flavor: [nvidia, slim]\n"
    )
    assert path.stat().st_size < 800
    started = time.monotonic()
    spec = load_spec([path])
    assert time.monotonic() - started < SECONDS
    (problem,) = spec.problems
    assert "matrix[0]" in str(problem) and "320,000 cells" in str(problem)
    assert f"at most {MAX_BLOCK_CELLS:,}" in str(problem) and not spec.cells


def test_the_matrix_total_is_capped_across_blocks_and_files(tmp_path: Path) -> None:
    block = f"  - {{cuda: {axis('12.', 10)}, torch: {axis('2.', 10)}, python: {axis('3.', 10)}, os: x, flavor: slim}}\n"
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.yaml").write_text("matrix:\n" + block * 2)
    spec = load_spec([tmp_path])
    assert len(spec.cells) == MAX_CELLS
    (problem,) = spec.problems
    assert "c.yaml" in str(problem) and f"at most {MAX_CELLS:,} cells in all" in str(problem)


@pytest.mark.alone  # timed: its limit assumes the CPUs to itself
@pytest.mark.parametrize("glob", [False, True])
def test_ten_thousand_excludes_load_fast(
    write_env, glob: bool, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    entry = "  - {{torch: '9.{i}.*'}}\n" if glob else "  - {{torch: '9.{i}.0'}}\n"
    folder = write_env(
        "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"
        "exclude:\n" + "".join(entry.format(i=i) for i in range(10_000))
    )
    started = time.monotonic()
    assert len(load_cells([folder])) == 1
    assert time.monotonic() - started < SECONDS
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) <= 25 and "10000 exclude entries match no cell" in warnings[0]


@pytest.mark.alone  # timed: its limit assumes the CPUs to itself
def test_a_block_over_the_limit_is_a_located_problem(write_env) -> None:  # type: ignore[no-untyped-def]
    folder = write_env(
        f"matrix:\n  - {{cuda: cpu, torch: '2.13.0', python: {axis('3.', 40)}, os: {axis('os', 40)}, flavor: slim}}\n"
    )
    started = time.monotonic()
    with pytest.raises(SpecError) as caught:
        load_cells([folder])
    assert time.monotonic() - started < SECONDS
    assert any("m.yaml:2: matrix[0]" in p and "1,600 cells" in p for p in caught.value.problems)


VALUES = ["12.6", "12.8", "2.7.1", "2.8.0", "3.11", "3.12", "slim", "nvidia", "debian12"]
PATTERN = st.sampled_from([*VALUES, "*", "2.7*", "3.1?", "[sn]*", "12.[68]", "x"])
MATCH = st.fixed_dictionaries(
    {}, optional={a: st.lists(PATTERN, min_size=1, max_size=3) for a in AXES}
)
CELL = st.fixed_dictionaries({a: st.sampled_from(VALUES) for a in AXES})


@settings(max_examples=300, deadline=None)
@given(raw=st.lists(MATCH, max_size=12), cells=st.lists(CELL, min_size=1, max_size=8))
def test_the_index_agrees_with_matching_one_by_one(
    raw: list[dict[str, list[str]]], cells: list[dict[str, str]]
) -> None:
    found = [Match(**m) for m in raw]
    values = {a: {c[a] for c in cells} for a in AXES}
    index = MatchIndex(found, values)
    for cell in cells:
        expected = [i for i, m in enumerate(found) if matches(m, cell)]
        assert list(bits(index.hits(cell))) == expected  # the same, in the same order


def test_the_index_made_on_demand_agrees_too() -> None:
    found = [Match(torch=["2.7*"]), Match(torch="2.?.1", os="deb*"), Match(flavor="[sn]*")]
    cell = {"cuda": "12.6", "torch": "2.7.1", "python": "3.11", "os": "debian12", "flavor": "slim"}
    assert list(bits(MatchIndex(found).hits(cell))) == [0, 1, 2]


# -- 10,000 overrides ---------------------------------------------------------------------

N = 10_000
ONE_CELL = "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"
EVERY_FIELD = (
    "apt: [curl, git], build_apt: [gcc], pip: ['p{i}>=1.0', numpy], features: [onnx], "
    "profile: single-node, env: {{K{i}: v}}, size_budget: 9GB, installer: uv, "
    "torchvision: true, tf32: false, compile: true, venv_layers: split, "
    "base: 'r.io/b:1', source: ., source_default_ignore: true, inherit: {{apt: append}}"
)
# name -> (entries, one entry's text): the shapes a real file holds, as many as fit 1 MiB
SHAPES: dict[str, tuple[int, Callable[[int], str]]] = {
    "issue": (N, lambda i: f"  - match: {{torch: '9.{i}.0'}}\n    apt: [curl]\n"),
    "3 keys, globs, pip and env": (
        N,
        lambda i: (
            f"  - match: {{cuda: '12.*', torch: '9.{i}.*', python: '3.1?'}}\n"
            f"    pip: ['p{i}>=1']\n    env: {{V{i}: x}}\n"
        ),
    ),
    "5 keys, globs": (
        N,
        lambda i: (
            f"  - {{match: {{cuda: '[c1]*', torch: '2.{i}*', python: '3.1?', os: d*, "
            "flavor: slim}, installer: pip}\n"
        ),
    ),
    "every field": (
        3_000,
        lambda i: f"  - {{match: {{torch: '9.{i}.*', os: deb*}}, {EVERY_FIELD.format(i=i)}}}\n",
    ),
    "all match, pip appended": (
        N,
        lambda i: (
            f"  - {{match: {{os: 'deb*'}}, pip: ['p{i}'], env: {{V{i}: x}}, "
            "inherit: {pip: append}}\n"
        ),
    ),
}


@pytest.mark.alone  # timed: its limit assumes the CPUs to itself
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_ten_thousand_overrides_load_fast(
    write_env, shape: str, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    count, entry = SHAPES[shape]
    folder = write_env(ONE_CELL + "overrides:\n" + "".join(entry(i) for i in range(count)))
    assert (folder / "m.yaml").stat().st_size < 1 << 20  # under the size cap
    started = time.monotonic()
    (cell,) = load_cells([folder])
    assert time.monotonic() - started < SECONDS
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) <= 25  # 10,000 unused overrides are one note and 20 lines
    options = load_spec([folder]).cells[0].options
    if shape == "all match, pip appended":
        assert options.pip == [f"p{i}" for i in range(N)]  # in order, each once
        assert options.env == {f"V{i}": "x" for i in range(N)}
    if shape == "5 keys, globs":  # '2.1*' and '2.13*' select torch 2.13.0
        assert options.installer == "pip" and cell.installer == "pip"


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _work(write_env, monkeypatch: pytest.MonkeyPatch, n: int) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The matching and merging done for a 10-cell block and `n` overrides of mixed shapes,
    a quarter of which select every cell."""
    globs = _count_calls(monkeypatch, match_index, "glob_match")
    regexes = _count_calls(monkeypatch, fnmatch, "fnmatchcase")
    layers = _count_calls(monkeypatch, cascade._Fold, "add")
    indexes: list[MatchIndex] = []
    monkeypatch.setattr(
        expand_mod, "MatchIndex", lambda *a: indexes.append(MatchIndex(*a)) or indexes[-1]
    )
    entries = [
        "  - {match: {torch: '9.%d.*'}, apt: [a]}\n",
        "  - {match: {python: '3.1?', cuda: '*%d'}, pip: [p]}\n",
        "  - {match: {os: debian12, torch: '2.%d'}, installer: pip}\n",
        "  - {match: {flavor: 's*'}, env: {V%d: x}, pip: [q], inherit: {pip: append}}\n",
    ]
    pythons = "['3.10', '3.11', '3.12', '3.13', '3.14']"
    text = (
        f"matrix:\n  - {{cuda: cpu, torch: '2.13.0', python: {pythons}, "
        "os: [debian12, ubuntu24.04], flavor: slim}\noverrides:\n"
    )
    text += "".join(entries[i % 4] % i for i in range(n))
    spec = load_spec([write_env(text)])
    assert len(spec.cells) == 10
    return {
        "globs": globs[0],
        "regexes": regexes[0],
        "layers": layers[0],
        "index": sum(i.work for i in indexes),
    }


def test_matching_and_merging_grow_linearly(write_env, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    small = _work(write_env, monkeypatch, 400)
    monkeypatch.undo()
    large = _work(write_env, monkeypatch, 1_600)
    assert small["regexes"] == 0  # no pattern here has [: none is compiled
    for what in ("globs", "layers", "index"):
        assert 0 < large[what] <= 4 * small[what] + 50, what  # 4x the entries: 4x the work
    # the 10 cells share the merge of the overrides that select them all: not 10 merges
    assert large["layers"] < 2 * 1_600 / 4 + 50


@pytest.mark.alone  # timed: its limit assumes the CPUs to itself
def test_glob_tries_are_counted_before_they_are_made(write_env) -> None:  # type: ignore[no-untyped-def]
    pythons = json.dumps([f"3.{i}" for i in range(1_000)])
    folder = write_env(
        f"matrix:\n  - {{cuda: cpu, torch: '2.13.0', python: {pythons}, os: debian12, flavor: slim}}\n"
        "exclude:\n" + "".join(f"  - {{python: '?.{i}?'}}\n" for i in range(300))
    )
    started = time.monotonic()
    spec = load_spec([folder])
    assert time.monotonic() - started < SECONDS
    (problem,) = spec.problems
    assert str(problem).startswith("envs/m.yaml:3: exclude: its globs would be tried 300,000")
    assert f"at most {expand_mod.MAX_GLOB_TRIES:,}" in str(problem) and not spec.cells


@pytest.mark.alone  # timed: its limit assumes the CPUs to itself
def test_regex_globs_are_counted_before_they_are_compiled(write_env) -> None:  # type: ignore[no-untyped-def]
    # distinct [set] globs are a regex each: 47,500 took 2.5 s and overflowed fnmatch's cache
    entry = "  - {{torch: '[2]*{i}', cuda: '[1]*{i}', python: '[3]*{i}', os: '[d]*{i}', flavor: '[s]*{i}'}}\n"
    folder = write_env(
        "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"
        "overrides:\n"
        + "".join(f"  - match: {entry[4:].format(i=i).strip()}\n    apt: [x]\n" for i in range(500))
        + "exclude:\n"
        + "".join(entry.format(i=i) for i in range(500))
    )
    started = time.monotonic()
    spec = load_spec([folder])
    assert time.monotonic() - started < SECONDS
    assert [p.field for p in spec.problems] == ["exclude", "overrides"] and not spec.cells
    assert "2,500 distinct globs with a [set]" in str(spec.problems[0])
    assert f"at most {expand_mod.MAX_REGEX_GLOBS:,}" in str(spec.problems[1])


def test_a_few_regex_globs_still_match() -> None:
    assert match_index.needs_regex("[23].*") and match_index.needs_regex("*1?2*")
    assert not match_index.needs_regex("2.7*") and not match_index.needs_regex("3.1?")


# -- the fast paths agree with their plain definitions ------------------------------------


def plain_merge(base: Options, top: Options) -> Options:
    """`merge` as it was: one layer at a time, validated again."""
    values = base.model_dump(exclude_none=True)
    values.pop("inherit", None)
    rules = top.inherit or {}
    for key, value in top.model_dump(exclude_none=True, exclude={"inherit"}).items():
        below = values.get(key)
        if key == "env":
            values[key] = {**(below or {}), **value}
        elif rules.get(key) in ("append", "prepend") and below:
            first, then = (below, value) if rules[key] == "append" else (value, below)
            values[key] = list(dict.fromkeys([*first, *then]))
        else:
            values[key] = value
    return Options(**{k: v for k, v in values.items() if k in Options.model_fields})


PACKAGES = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4)
LAYER = st.builds(
    Options,
    apt=st.none() | PACKAGES,
    pip=st.none() | PACKAGES,
    features=st.none() | st.lists(st.sampled_from(["onnx", "flash-attn"]), max_size=3),
    env=st.none() | st.dictionaries(st.sampled_from(["A", "B", "C"]), st.sampled_from(["1", "2"])),
    installer=st.none() | st.sampled_from(["uv", "pip"]),
    tf32=st.none() | st.booleans(),
    inherit=st.none()
    | st.dictionaries(
        st.sampled_from(["apt", "pip", "features"]),
        st.sampled_from(["append", "prepend", "replace"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(layers=st.lists(LAYER, min_size=1, max_size=8))
def test_merging_in_one_pass_equals_merging_one_at_a_time(layers: list[Options]) -> None:
    expected = functools.reduce(plain_merge, layers[1:], plain_merge(Options(), layers[0]))
    folded = merge_all([cascade.layer_of(o) for o in [Options(), *layers]])
    assert folded == expected and folded.model_fields_set == expected.model_fields_set
    assert merge(layers[0], layers[-1]) == plain_merge(layers[0], layers[-1])


@settings(max_examples=2_000, deadline=None)
@given(
    value=st.text(alphabet="ab.1-[]!", max_size=8),
    pattern=st.text(alphabet="ab.1-*?[]!", max_size=8),
)
def test_the_glob_matcher_agrees_with_fnmatch(value: str, pattern: str) -> None:
    assert glob_match(value, pattern) == fnmatch.fnmatchcase(value, pattern)


@settings(max_examples=200, deadline=None)
@given(requirement=st.from_regex(_SIMPLE_PIP, fullmatch=True))
def test_every_requirement_the_quick_check_passes_is_pep_508(requirement: str) -> None:
    Requirement(requirement)  # raises if not
