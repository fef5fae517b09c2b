"""Property test over the YAML loader and the renderer: any matrix file, hostile or broken,
ends in exit 0 or 2 (never 70) in bounded time, and every Dockerfile rendered from it
parses with BuildKit's own parser into imagekit's stages, with no instruction imagekit did
not write."""

from __future__ import annotations

import time
from pathlib import Path

import dockerfile
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.cli import main

ALLOWED = {"FROM", "ENV", "RUN", "ARG", "COPY", "LABEL", "USER", "WORKDIR", "ENTRYPOINT", "CMD"}
STAGES = {"os-base", "builder", "packages", "sbom-tool", "runtime"}
NASTY = st.sampled_from(
    ["\n", "\r", "\\", '"', "'", "$", "`", "&&", ";", " ", "\n# ", "\nRUN evil", "\u2028",
     "\x00", "{", "}", ":", "@", "/", "..", "-", "*", "\x85", "\t", "=", ",", "AS", "FROM x"]
)  # fmt: skip
TEXT = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(NASTY, st.text(max_size=4)), max_size=5).map("".join),
    st.sampled_from(["numpy<3", "curl", "12GB", "debian:bookworm-slim", "../app", "3.11"]),
)
VALUE = st.one_of(
    TEXT, st.integers(-5, 10**12), st.booleans(), st.none(), st.lists(TEXT, max_size=3)
)
FIELDS = {  # each: a valid value or a hostile one
    "apt": st.lists(st.one_of(st.sampled_from(["curl", "git"]), TEXT), max_size=3),
    "build_apt": st.lists(st.one_of(st.just("gcc"), TEXT), max_size=2),
    "pip": st.lists(st.one_of(st.sampled_from(["numpy<3", "rich==13.7.1"]), TEXT), max_size=3),
    "env": st.dictionaries(
        st.one_of(st.sampled_from(["A", "B_1"]), TEXT), st.one_of(TEXT, VALUE), max_size=3
    ),
    "size_budget": st.one_of(st.just("12GB"), VALUE),
    "tf32": st.one_of(st.booleans(), VALUE),
    "base": st.one_of(st.just("debian:bookworm-slim"), TEXT),
    "installer": st.sampled_from(["uv", "pip", "conda"]),
    "profile": st.sampled_from(["single-node", "multi-node-ib", "nope"]),
    "features": st.lists(st.sampled_from(["onnx", "onnx-tensorrt", "flash-attn", "x"])),
}
OPTIONS = st.lists(st.sampled_from(sorted(FIELDS)), max_size=2, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: FIELDS[n] for n in names})
)
VALID_AXES = st.sampled_from(
    [
        {"cuda": "cpu", "torch": "2.13.0", "python": "3.11", "os": "debian12", "flavor": "slim"},
        {"cuda": "12.6", "torch": "2.7.1", "python": "3.11", "os": "debian12", "flavor": "slim"},
        {"cuda": "13.0", "torch": "2.11.0", "python": "3.12", "os": "ubuntu24.04", "flavor": "nvidia"},
    ]
)  # fmt: skip
ANY_AXES = st.fixed_dictionaries(
    {
        "cuda": st.sampled_from(["cpu", "12.6", "13.0", "9.9"]),
        "torch": st.sampled_from(["2.13.0", "2.7.1", "2.11.0"]),
        "python": st.sampled_from(["3.11", "3.12", "3.13"]),
        "os": st.sampled_from(["debian12", "ubuntu24.04", "plan9"]),
        "flavor": st.sampled_from(["slim", "nvidia"]),
    }
)
AXES = st.one_of(VALID_AXES, VALID_AXES, ANY_AXES)  # mostly cells that exist, to render
DOC = st.fixed_dictionaries(
    {"matrix": st.lists(st.tuples(AXES, OPTIONS).map(lambda p: {**p[0], **p[1]}), max_size=2)},
    optional={
        "tag": st.one_of(st.just("{id}"), TEXT),
        "extra_tags": st.lists(st.one_of(st.just("{torch}-latest"), TEXT), max_size=2),
        "registry": st.one_of(st.just("ghcr.io/acme"), TEXT),
    },
)


@pytest.mark.slow
@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=DOC)
def test_any_matrix_renders_safely_or_is_refused(
    doc: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / f"w{time.monotonic_ns()}"
    (work / "envs").mkdir(parents=True)
    (work / "envs" / "m.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))
    monkeypatch.chdir(work)
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exited:
        main(["render", "--out", "out"])
    assert time.perf_counter() - started < 5.0  # one or two cells: well under a second here
    assert exited.value.code in (0, 2)
    for path in (work / "out").glob("*/Dockerfile") if exited.value.code == 0 else []:
        commands = dockerfile.parse_file(str(path))
        assert {c.cmd for c in commands} <= ALLOWED, path.read_text()
        froms = [c.value for c in commands if c.cmd == "FROM"]
        assert all(len(v) == 3 and v[1].upper() == "AS" and v[2] in STAGES for v in froms)
        assert froms[-1][2] == "runtime"
