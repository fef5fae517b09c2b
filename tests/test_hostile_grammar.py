"""Values accepted are valid where they land: registry and repository by the OCI reference
grammar (so every tag they make passes imagekit's own reference check), driver versions as
NVIDIA writes them, real arch names (sm_90a), and a --lock that must exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.errors import SpecError, UsageError
from imagekit.locks.pinned import load_cells
from imagekit.matrix.compat_show import parse_host
from imagekit.matrix.ref_checks import check_image_ref

from .hostile import project, run, user_error

__all__ = ["project"]

CELL = "  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"


@pytest.mark.parametrize(
    ("registry", "ok"),
    [
        ("..", False),
        (".", False),
        ("-host", False),
        ("host-", False),
        ("a..b", False),
        ("ghcr.io/Org", False),
        ("host:port", False),
        ("ghcr.io/org", True),
        ("localhost:5000", True),
        ("registry.example.com:443/team/sub", True),
        ("127.0.0.1:5000", True),
    ],
)
def test_a_registry_is_checked_by_the_reference_grammar(
    write_env,
    registry: str,
    ok: bool,  # type: ignore[no-untyped-def]
) -> None:
    folder = write_env(f"registry: '{registry}'\nmatrix:\n{CELL}")
    if ok:
        (cell,) = load_cells([folder])
        assert all(check_image_ref(tag) for tag in cell.tags)
    else:
        with pytest.raises(SpecError) as caught:
            load_cells([folder])
        assert "registry" in caught.value.problems[0] and "OCI" in caught.value.problems[0]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    registry=st.from_regex(r"[a-zA-Z0-9.:/_-]{1,20}", fullmatch=True),
    repository=st.from_regex(r"[a-z0-9./_-]{1,20}", fullmatch=True),
)
def test_any_accepted_registry_and_repository_make_valid_references(
    write_env,
    registry: str,
    repository: str,  # type: ignore[no-untyped-def]
) -> None:
    folder = write_env(f"registry: '{registry}'\nrepository: '{repository}'\nmatrix:\n{CELL}")
    try:
        (cell,) = load_cells([folder])
    except SpecError as exc:
        assert any(("registry" in p or "repository" in p) for p in exc.problems), exc.problems
        return
    for tag in cell.tags:
        check_image_ref(tag)


@pytest.mark.parametrize(
    "driver", ["-1", "1", "535", "535.", ".104", "535.104.05.1", "v535.104", "535,104"]
)
def test_a_driver_that_nvidia_smi_would_not_print_is_refused(driver: str) -> None:
    with pytest.raises(UsageError, match="--driver"):
        parse_host(driver, None)


@pytest.mark.parametrize(
    ("gpu", "capability"),
    [
        ("sm_90a", (9, 0)),
        ("sm_100f", (10, 0)),
        ("sm_120a", (12, 0)),
        ("compute_90", (9, 0)),
        ("9.0", (9, 0)),
        ("H100", (9, 0)),
    ],
)
def test_real_arch_names_are_understood(gpu: str, capability: tuple[int, int]) -> None:
    assert parse_host("580.95.05", gpu).capability == capability


@pytest.mark.parametrize("gpu", ["sm_90x", "sm_", "-1", "sm_9999"])
def test_a_made_up_arch_is_refused(gpu: str) -> None:
    with pytest.raises(UsageError, match="--gpu"):
        parse_host(None, gpu)


@pytest.mark.parametrize(
    "command", [("list",), ("render", "--check"), ("build", "--dry-run"), ("stage",)]
)
def test_a_lock_that_does_not_exist_is_an_error_not_an_unpinned_build(
    project: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    ran = run(capsys, command[0], "--envs", "envs", "--lock", "envs/images.lokc", *command[1:])
    user_error(ran, "--lock", "images.lokc")


def test_lock_may_make_its_lock_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "lock", "--envs", "envs", "--lock", "envs/new.lock", "--check").code == 0
