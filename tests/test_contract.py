"""imagekit/contract: what the host and the image agree on, defined once and importable on
both sides. Its imports, the packages it keeps apart, the label keys, one GPU table, and the
reference parser on real references."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from imagekit.contract import exits, gpus, labels, tolerances
from imagekit.contract.refs import Reference, parse
from imagekit.errors import (
    CompatError,
    PushError,
    SelfCheckFailed,
    SpecError,
    StaleError,
    UsageError,
)

PACKAGE = Path(__file__).resolve().parents[1] / "imagekit"
DIGEST = "sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def files(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


def test_contract_imports_only_the_standard_library_and_itself() -> None:
    for path in files("contract"):
        for name in imported(path):
            top = name.split(".")[0]
            ok = name.startswith("imagekit.contract") or top in sys.stdlib_module_names
            assert ok, f"{path.name} imports {name}: contract/ runs in images, stdlib only"


@pytest.mark.parametrize(("package", "other"), [("runtime", "selfcheck"), ("selfcheck", "runtime")])
def test_runtime_and_selfcheck_do_not_import_each_other(package: str, other: str) -> None:
    for path in files(package):
        crossing = {n for n in imported(path) if n.startswith(f"imagekit.{other}")}
        assert not crossing, f"{package}/{path.name} imports {crossing}: share it via contract/"


def test_the_host_never_imports_the_selfcheck() -> None:
    """What the host and the image both need lives in contract/; the host's code (everything
    outside selfcheck/ and runtime/, which run in images) imports nothing of selfcheck/."""
    crossing = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in ("selfcheck", "runtime")
        for name in imported(path)
        if name.startswith("imagekit.selfcheck") or _imports_selfcheck_by_name(path)
    ]
    assert crossing == []


def _imports_selfcheck_by_name(path: Path) -> bool:
    """`from imagekit import selfcheck`: the package itself, by name."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "imagekit"
        and any(alias.name == "selfcheck" for alias in node.names)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


# The self-check's rooms, lowest first: a room may import the rooms below it, never one above.
# verdicts: pure decisions; readers: the host, NVML, logs and the snapshot's assembly;
# probes: code that measures (torch imported when they run); run: the registry, the process
# runner, the judge, the report. The doors (selfcheck/__main__.py, nodes_check.py,
# failures.py) are the module names other tools call; they only start run/ or probes/.
ROOMS = ("verdicts", "readers", "probes", "run")


@pytest.mark.parametrize("room", ROOMS)
def test_each_selfcheck_room_imports_only_the_rooms_below_it(room: str) -> None:
    above = ROOMS[ROOMS.index(room) + 1 :]
    doors = ("__main__", "nodes_check", "failures")
    upward = [
        f"{path.name} imports {name}"
        for path in files(f"selfcheck/{room}")
        for name in imported(path)
        if any(name.startswith(f"imagekit.selfcheck.{other}") for other in above + doors)
    ]
    assert upward == [], f"{room}/ may import only {ROOMS[: ROOMS.index(room)]} and contract/"


def test_every_selfcheck_module_lives_in_a_room_or_is_a_door() -> None:
    top = sorted(p.name for p in (PACKAGE / "selfcheck").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "failures.py", "nodes_check.py"]
    for door in ("__main__.py", "failures.py", "nodes_check.py"):
        lines = (PACKAGE / "selfcheck" / door).read_text().splitlines()
        assert len(lines) <= 20, f"{door} is a door: it starts run/ or probes/, no more"


def test_label_keys_are_written_only_in_contract_labels() -> None:
    where = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "contract" / "labels.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            literal = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if literal and node.value.startswith("io.imagekit."):  # type: ignore[attr-defined]
                where.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not where, f"label keys as literals (use contract/labels.py): {where}"


def test_label_keys_are_distinct_and_under_the_prefix() -> None:
    keys = {k: v for k, v in vars(labels).items() if k.isupper() and k != "PREFIX"}
    assert len(set(keys.values())) == len(keys)
    assert all(v.startswith(labels.PREFIX) for v in keys.values())
    # the wire format images already carry
    assert (labels.MIN_DRIVER, labels.RUN_OWNER) == (
        "io.imagekit.min-driver",
        "io.imagekit.run.owner",
    )


def test_errors_take_their_codes_from_contract_exits() -> None:
    assert (SpecError.exit_code, UsageError.exit_code) == (exits.USAGE, exits.USAGE) == (2, 2)
    assert (CompatError.exit_code, StaleError.exit_code, PushError.exit_code) == (3, 4, 7)
    assert SelfCheckFailed.exit_code == exits.SELFCHECK == 8
    assert (exits.CHECK_PASSED, exits.CHECK_FAILED, exits.CHECK_USAGE) == (0, 1, 2)


def test_one_gpu_table_answers_both_questions() -> None:
    h100 = gpus.match("NVIDIA H100 80GB HBM3", 79 * 2**30)
    assert h100 is not None and (h100.model, h100.capability, h100.tbps) == (
        "H100 SXM",
        (9, 0),
        3.35,
    )
    # a MIG slice of it: the family row, its capability, and no whole-GPU peaks
    mig = gpus.match("NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    assert mig is not None and (mig.model, mig.capability, mig.has_peaks) == ("H100", (9, 0), False)
    # whole names only: an A10G is not an A10, a T400 no T4
    a10g = gpus.match("NVIDIA A10G")
    assert a10g is not None and a10g.model == "A10G" and not a10g.has_peaks
    assert gpus.match("NVIDIA T400") is None
    rtx = gpus.match("NVIDIA GeForce RTX 4090")
    assert rtx is not None and (rtx.capability, rtx.datacenter) == ((8, 9), False)
    # the memory decides where the name does not: GH200 96 GB vs 144 GB
    assert gpus.match("NVIDIA GH200 480GB", 95 * 2**30).model == "GH200 96GB"  # type: ignore[union-attr]
    assert gpus.match("NVIDIA GH200 480GB").model == "GH200"  # type: ignore[union-attr]


def test_the_ddp_checks_share_one_gradient_tolerance() -> None:
    from imagekit.selfcheck.probes import nodes as nodes_check

    assert nodes_check.GRAD_TOLERANCE == tolerances.DDP_GRAD_SPREAD
    assert tolerances.ONNX_VS_TORCH < tolerances.TENSORRT_VS_TORCH


# real references: Docker Hub official and user images, GHCR, a private registry with a port
# and a pin, localhost, NGC
@pytest.mark.parametrize(
    ("text", "reference"),
    [
        (
            "docker.io/library/debian:bookworm-slim",
            Reference("docker.io", "library/debian", "bookworm-slim"),
        ),
        ("debian:bookworm-slim", Reference(None, "debian", "bookworm-slim")),
        ("ghcr.io/team-a/train:1.0", Reference("ghcr.io", "team-a/train", "1.0")),
        (
            f"registry.example.com:5000/team/base:1@{DIGEST}",
            Reference("registry.example.com:5000", "team/base", "1", DIGEST),
        ),
        ("localhost/x", Reference("localhost", "x")),
        ("localhost:5000/x:y", Reference("localhost:5000", "x", "y")),
        (f"debian@{DIGEST}", Reference(None, "debian", None, DIGEST)),
        ("team/base:1", Reference(None, "team/base", "1")),  # Docker Hub: no dot, no port
        ("nvcr.io/nvidia/pytorch:25.09-py3", Reference("nvcr.io", "nvidia/pytorch", "25.09-py3")),
        ("[::1]:5000/x:1", Reference("[::1]:5000", "x", "1")),
    ],
)
def test_references_parse_and_round_trip(text: str, reference: Reference) -> None:
    assert parse(text) == reference
    assert str(reference) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Debian:12",  # uppercase name
        "team/Base:1",
        "x:",  # empty tag
        "x:-1",  # a tag cannot start with -
        "x:" + "t" * 129,  # 128 characters at most
        "a//b",
        "/x",
        "x/",
        "ghcr.io/",
        "-x.io/y",  # a hostname part cannot start with -
        "x.io:port/y",
        "x@sha256",
        "x y",
    ],
)
def test_invalid_references_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an image reference"):
        parse(text)


def test_reference_helpers() -> None:
    ref = parse(f"registry.example.com:5000/team/base:1@{DIGEST}")
    assert ref.name == "registry.example.com:5000/team/base"
    assert str(ref.without_tag()) == f"registry.example.com:5000/team/base@{DIGEST}"
    assert str(ref.without_digest()) == "registry.example.com:5000/team/base:1"
    assert str(parse("ghcr.io/a/b:1").with_tag("1-validated")) == "ghcr.io/a/b:1-validated"
    assert str(parse("ghcr.io/a/b:1").pinned(DIGEST)) == f"ghcr.io/a/b:1@{DIGEST}"
    assert str(parse("ghcr.io/a/b:1").by_digest(DIGEST)) == f"ghcr.io/a/b@{DIGEST}"
    assert str(parse(f"ghcr.io/a/b:1@{DIGEST}").by_digest("sha256:" + "e" * 64)).endswith(
        "b@sha256:" + "e" * 64
    )
