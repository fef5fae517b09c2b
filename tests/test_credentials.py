"""Credentials in URLs never persist: refused where they would reach a Dockerfile, a build
argument or apt sources, and masked wherever imagekit prints a URL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.cli import main
from imagekit.errors import SpecError, UsageError
from imagekit.locks.pinned import load_cells
from imagekit.urls import has_credentials, mask, refuse_credentials

from .conftest import ROOT

TOKEN = "ghp_5ecretT0ken"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"https://ci:{TOKEN}@pypi.internal/simple", "https://ci:***@pypi.internal/simple"),
        (f"git+https://{TOKEN}@github.com/a/b", "git+https://***:***@github.com/a/b"),
        (f"see http://u:{TOKEN}@h/x and https://h/y", "see http://u:***@h/x and https://h/y"),
        ("https://pypi.org/simple", "https://pypi.org/simple"),
    ],
)
def test_mask(text: str, masked: str) -> None:
    assert mask(text) == masked and TOKEN not in mask(text)


def test_has_credentials_and_refusal() -> None:
    assert has_credentials(f"https://u:{TOKEN}@h/") and has_credentials("https://u@h/")
    assert not has_credentials("https://h/simple") and not has_credentials("not a url")
    with pytest.raises(UsageError) as caught:
        refuse_credentials(f"https://u:{TOKEN}@h/", "--torch-index", "a build argument")
    assert TOKEN not in str(caught.value) and "--index-url" in str(caught.value)


def test_a_requirement_url_with_a_token_is_refused_and_not_echoed(
    write_env: Callable[..., Path],
) -> None:
    folder = write_env(
        "matrix:\n  - cuda: cpu\n    torch: '2.13.0'\n    python: '3.11'\n    os: debian12\n"
        f"    flavor: slim\n    pip: ['mylib @ git+https://ci:{TOKEN}@git.example.com/ml/mylib']\n"
    )
    with pytest.raises(SpecError) as caught:
        load_cells([folder])
    (problem,) = caught.value.problems
    assert "committed Dockerfile and the image history" in problem and TOKEN not in problem


@pytest.mark.parametrize(
    "args",
    [
        ["build", "--dry-run", "--cuda", "12.6", "--torch-index", f"https://u:{TOKEN}@h/whl"],
        ["build", "--dry-run", "--cuda", "12.6", "--mirror", f"http://u:{TOKEN}@h/debian"],
        ["base", "bootstrap", "--suite", "bookworm", "--mirror", f"http://u:{TOKEN}@h/debian"],
    ],
)
def test_cli_refuses_credentials_where_they_would_persist(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "credentials" in err and TOKEN not in err
