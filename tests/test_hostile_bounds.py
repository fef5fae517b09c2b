"""Work is bounded before it is done: a block's product and the matrix's total are counted
before expansion, and excludes and overrides match in time linear in their number (the
index agrees with the plain definition on any input)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.errors import SpecError
from imagekit.matrix.catalog import load_cells
from imagekit.matrix.envfile import AXES, Match
from imagekit.matrix.expand import MAX_BLOCK_CELLS, MAX_CELLS, MatchIndex, bits, matches
from imagekit.matrix.load import load_spec

# generous bounds against a loaded CI machine; the target is well under a second
SECONDS = 5.0


def axis(prefix: str, n: int = 20) -> str:
    return json.dumps([f"{prefix}{i}" for i in range(n)])


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
