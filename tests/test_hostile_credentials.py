"""Credentials stay out of every message and file: masking runs to the last @ of a URL's
authority, and a crash log masks its argv, its environment and the traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagekit.builder import orchestrate
from imagekit.urls import mask, mask_environment

from .hostile import project, run

__all__ = ["project"]

SECRET = "S3cr3t"
USER = st.text(
    st.characters(blacklist_characters="/?#@:", blacklist_categories=("Z", "C")), min_size=1
)
PASSWORD = st.text(st.characters(blacklist_characters="/?#", blacklist_categories=("Z", "C")))


@given(user=USER, password=PASSWORD)
def test_mask_keeps_the_user_and_hides_the_whole_password(user: str, password: str) -> None:
    assert mask(f"see https://{user}:{password}@host.example/whl now") == (
        f"see https://{user}:***@host.example/whl now"
    )


def test_the_issues_examples() -> None:
    assert mask("https://alice:p@ss@host/whl") == "https://alice:***@host/whl"
    assert mask("https://TOKEN@host/simple") == "https://***:***@host/simple"
    assert mask("https://host/a@b?x=@y") == "https://host/a@b?x=@y"  # no userinfo: untouched


def test_the_torch_index_refusal_prints_no_part_of_the_password(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run(
        capsys,
        "build",
        "--envs",
        "envs",
        "--dry-run",
        "--torch-index",
        "https://alice:p@ss@host/whl",
    )
    assert ran.code == 2 and "alice:***@host" in ran.err and "ss@host" not in ran.err


def test_environment_masking() -> None:
    masked = mask_environment(
        {
            "GITHUB_TOKEN": "ghp_x",
            "PIP_INDEX_URL": f"https://u:{SECRET}@h/s",
            "AWS_SECRET_ACCESS_KEY": "k",
            "HOME": "/root",
        }
    )
    assert masked == {
        "AWS_SECRET_ACCESS_KEY": "***",
        "GITHUB_TOKEN": "***",
        "HOME": "/root",
        "PIP_INDEX_URL": "https://u:***@h/s",
    }


def test_a_crash_log_holds_no_credential(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    def crash(*args: object) -> None:
        raise RuntimeError(f"boom at https://alice:{SECRET}@host/simple")

    monkeypatch.setattr(orchestrate, "run_build", crash)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("IMAGEKIT_INDEX_URL", f"https://bob:{SECRET}@env.example/simple")
    monkeypatch.setenv("GITHUB_TOKEN", f"ghp_{SECRET}")
    monkeypatch.setattr(
        "sys.argv", ["imagekit", "build", "--index-url", f"https://alice:p@{SECRET}@host/simple"]
    )
    ran = run(
        capsys,
        "build",
        "--envs",
        "envs",
        "--dry-run",
        "--index-url",
        f"https://alice:p@{SECRET}@host/simple",
    )
    assert ran.code == 70 and SECRET not in ran.text
    (log,) = tmp_path.glob("imagekit-crash-*.log")
    text = log.read_text()
    assert SECRET not in text
    assert "https://alice:***@host/simple" in text and "https://bob:***@env.example" in text
    assert "GITHUB_TOKEN=***" in text and "RuntimeError" in text
