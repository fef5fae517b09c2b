"""`source:`: where it may be, what is copied, and that no host file or credential leaks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imagekit.matrix.source import SourceError, checked, copy_source


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "envs").mkdir()
    app = root / "app"
    (app / "pkg").mkdir(parents=True)
    (app / "train.py").write_text("print('train')\n")
    (app / "pkg" / "model.py").write_text("W = 1\n")
    return root


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("../../../../etc", "outside the repository"),
        ("/", "outside the repository"),
        ("../app/train.py", "is not a directory"),
        ("../missing", "does not exist"),
    ],
)
def test_source_must_be_a_folder_inside_the_repository(repo: Path, source: str, words: str) -> None:
    with pytest.raises(SourceError, match=words):
        checked(repo / "envs", source, default_ignore=True)


def test_a_link_out_of_the_folder_is_refused_with_its_path(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa_host"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (repo / "app" / "pkg" / "creds").symlink_to(secret)
    with pytest.raises(SourceError, match=r"pkg/creds is a symbolic link to .*id_rsa_host"):
        checked(repo / "envs", "../app", default_ignore=True)


def test_links_inside_are_copied_as_links_and_secrets_stay_out(repo: Path, tmp_path: Path) -> None:
    app = repo / "app"
    (app / "latest.py").symlink_to("train.py")
    (app / "dangling").symlink_to("pkg/gone.py")  # inside, even if missing: harmless
    for name in (".env", ".env.prod", "id_ed25519", "server.pem", "pkg/.env"):
        (app / name).write_text("secret\n")
    (app / ".git").mkdir()
    (app / ".git" / "config").write_text("[remote]\n")
    (app / "data").mkdir()
    (app / "data" / "big.bin").write_text("x")
    (app / "data" / "keep.txt").write_text("x")
    (app / ".dockerignore").write_text("# comments\ndata/\n!data/keep.txt\n*.log\n")
    (app / "run.log").write_text("log\n")
    source = checked(repo / "envs", "../app", default_ignore=True)
    dest = tmp_path / "staged"
    copy_source(source, dest, default_ignore=True)
    copied = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    assert copied == [
        ".dockerignore",
        "dangling",
        "data",
        "data/keep.txt",
        "latest.py",
        "pkg",
        "pkg/model.py",
        "train.py",
    ]
    assert os.readlink(dest / "latest.py") == "train.py"  # a link, not a copy


def test_the_default_ignore_list_can_be_turned_off(repo: Path, tmp_path: Path) -> None:
    (repo / "app" / ".env").write_text("TOKEN=x\n")
    dest = tmp_path / "staged"
    copy_source(repo / "app", dest, default_ignore=False)
    assert (dest / ".env").is_file()


def test_without_git_the_folder_above_envs_is_the_repository(tmp_path: Path) -> None:
    (tmp_path / "p" / "envs").mkdir(parents=True)
    (tmp_path / "p" / "app").mkdir()
    (tmp_path / "elsewhere").mkdir()
    assert checked(tmp_path / "p" / "envs", "../app", True) == (tmp_path / "p" / "app").resolve()
    with pytest.raises(SourceError, match="outside the repository"):
        checked(tmp_path / "p" / "envs", "../../elsewhere", True)
