"""`imagekit render` touches only what it owns (docs/rendering.md): each file names its
matrix file, its cell and its digest; render writes and prunes only its own matrix's files,
and never deletes or overwrites another matrix's file or a person's edit."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from imagekit.cli import main
from imagekit.render import owned

CELL = '  - {cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}\n'
OTHER = '  - {cuda: cpu, torch: "2.13.0", python: "3.11", os: debian12, flavor: slim}\n'
STACK = "cu126-torch2.7.1-py3.11-debian12-slim"
CPU = "cpu-torch2.13.0-py3.11-debian12-slim"
GONE = "cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia"


def matrix(repository: str, *cells: str) -> str:
    return f"repository: {repository}\nmatrix:\n" + "".join(cells)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with two matrix files: a training image of two cells and an inference
    image of one, on the training image's first stack."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "training.yaml").write_text(matrix("team/train", CELL, OTHER))
    (tmp_path / "envs" / "serve.yaml").write_text(matrix("serve", CELL))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["render", *args])
    except SystemExit as exc:
        captured = capsys.readouterr()
        return int(exc.code or 0), captured.out, captured.err
    raise AssertionError("main() must always exit")


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / "dockerfiles").rglob("*"))
        if p.is_file()
    }


def test_same_stack_in_two_repositories_both_render(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys)
    assert code == 0
    assert set(files(repo)) == {
        f"dockerfiles/team-train-{STACK}/Dockerfile",
        f"dockerfiles/team-train-{CPU}/Dockerfile",
        f"dockerfiles/serve-{STACK}/Dockerfile",
    }
    assert f"  wrote dockerfiles/serve-{STACK}/Dockerfile" in out.splitlines()
    text = (repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile").read_text()
    first = text.splitlines()[0]
    assert first.startswith(f"# imagekit: matrix=envs/serve.yaml cell=serve-{STACK} sha256=")
    # the digest: the whole file with its own value written as zeros
    digest = first.rsplit("=", 1)[1]
    zeroed = text.replace(digest, "0" * 64, 1).encode()
    assert hashlib.sha256(zeroed).hexdigest() == digest
    assert run(capsys, "--check")[0] == 0


def test_rendering_one_matrix_leaves_the_others_files(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported bug: rendering a new matrix file deleted another's Dockerfiles."""
    (repo / "envs" / "serve.yaml").unlink()
    assert run(capsys)[0] == 0
    before = files(repo)
    (repo / "envs" / "serve.yaml").write_text(matrix("serve", CELL))
    code, out, _ = run(capsys, "--envs", "envs/serve.yaml")
    assert code == 0 and "removed" not in out
    after = files(repo)
    assert {k: after[k] for k in before} == before
    assert f"dockerfiles/serve-{STACK}/Dockerfile" in after
    assert run(capsys, "--envs", "envs/serve.yaml", "--check")[0] == 0
    assert run(capsys, "--check")[0] == 0


def test_an_edited_file_is_refused_and_nothing_is_written(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys)[0] == 0
    edited = repo / "dockerfiles" / f"team-train-{STACK}" / "Dockerfile"
    edited.write_text(edited.read_text() + "RUN echo mine\n")
    # a change to the matrix that would rewrite both of training's files
    (repo / "envs" / "training.yaml").write_text(
        "defaults:\n  pip: [tqdm]\n" + matrix("team/train", CELL, OTHER)
    )
    before = files(repo)
    code, _, err = run(capsys)
    assert code == 2
    assert f"dockerfiles/team-train-{STACK}/Dockerfile was edited by hand" in err
    assert "envs/training.yaml" in err and "git checkout" in err and "--out" in err
    assert files(repo) == before  # the other file was not rewritten either
    code, _, err = run(capsys, "--check")
    assert code == 4 and "+RUN echo mine" not in err and "-RUN echo mine" in err


def test_an_edited_ownership_line_is_drift(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys)[0] == 0
    path = repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile"
    text = path.read_text()
    path.write_text(text.replace("matrix=envs/serve.yaml", "matrix=envs/other.yaml", 1))
    found = owned.read(path.read_bytes())
    assert found.owner is not None and not found.intact
    code, _, err = run(capsys, "--check")
    assert code == 4 and "matrix=envs/other.yaml" in err
    assert run(capsys)[0] == 2  # an edit: render does not overwrite it


def test_another_matrixs_file_is_refused(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two files build one repository on one stack; rendered one at a time, neither may
    take the other's file."""
    assert run(capsys)[0] == 0
    (repo / "envs" / "serve.yaml").write_text(matrix("team/train", CELL))
    before = files(repo)
    code, _, err = run(capsys, "--envs", "envs/serve.yaml")
    assert code == 2
    assert f"dockerfiles/team-train-{STACK}/Dockerfile belongs to envs/training.yaml" in err
    assert "envs/serve.yaml renders the same cell" in err and "`repository:`" in err
    assert files(repo) == before
    # rendered together, the duplicate is the matrix's error, with the fix
    code, _, err = run(capsys)
    assert code == 2 and f"cell team-train-{STACK} is already defined at" in err
    assert "give one of the images its own `repository:`" in err


def test_a_cell_that_left_its_matrix_is_pruned(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys)[0] == 0
    (repo / "envs" / "training.yaml").write_text(matrix("team/train", CELL))
    code, _, err = run(capsys, "--check")
    assert code == 4 and f"dockerfiles/team-train-{CPU}/: its cell left envs/training.yaml" in err
    code, out, _ = run(capsys)
    assert code == 0
    assert f"  removed dockerfiles/team-train-{CPU}/ (its cell left envs/training.yaml)" in out
    assert not (repo / "dockerfiles" / f"team-train-{CPU}").exists()
    assert (repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile").is_file()


def test_an_edited_orphan_is_not_deleted(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys)[0] == 0
    orphan = repo / "dockerfiles" / f"team-train-{CPU}" / "Dockerfile"
    orphan.write_text(orphan.read_text().replace("FROM ", "FROM  ", 1))
    (repo / "envs" / "training.yaml").write_text(matrix("team/train", CELL))
    code, _, err = run(capsys)
    assert code == 2 and "render never deletes an edit" in err
    assert orphan.is_file()


def test_a_filtered_render_prunes_only_cells_that_left(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys)[0] == 0
    before = files(repo)
    code, out, _ = run(capsys, "--cuda", "cpu")
    assert code == 0 and files(repo) == before and "removed" not in out
    code, out, _ = run(capsys, "--cell", "cu126-*")  # the stack part alone matches
    assert code == 0 and files(repo) == before and "rendered 2 cells" in out
    # a cell that left goes, even in a filtered render; those filtered out stay
    (repo / "envs" / "training.yaml").write_text(matrix("team/train", CELL))
    code, out, _ = run(capsys, "--cell", "serve-*")
    assert code == 0 and f"removed dockerfiles/team-train-{CPU}/" in out
    assert (repo / "dockerfiles" / f"team-train-{STACK}" / "Dockerfile").is_file()


def test_files_without_an_ownership_line(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-written file is never deleted, nor overwritten unless it is exactly what
    render would write less its ownership line (then it is adopted)."""
    hand = repo / "dockerfiles" / "mine" / "Dockerfile"
    hand.parent.mkdir(parents=True)
    hand.write_text("FROM scratch\n")
    target = repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile"
    target.parent.mkdir()
    target.write_text("FROM scratch\n")
    code, _, err = run(capsys)
    assert code == 2 and f"{target.relative_to(repo)} has no `# imagekit:` ownership" in err
    assert not (repo / "dockerfiles" / f"team-train-{STACK}").exists()  # nothing written
    target.unlink()
    assert run(capsys)[0] == 0
    target.write_text(owned.unstamped(target.read_text()))
    code, out, _ = run(capsys)
    assert code == 0 and f"wrote dockerfiles/serve-{STACK}/Dockerfile" in out
    assert target.read_text().startswith("# imagekit: ")
    assert hand.read_text() == "FROM scratch\n"


def test_an_older_imagekits_files(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ids without the repository: an unedited file of a cell rendered now is replaced by
    its new folder; one that differs from that render, or whose cell left, is kept."""
    assert run(capsys)[0] == 0
    new = repo / "dockerfiles" / f"team-train-{STACK}" / "Dockerfile"
    old_text = owned.unstamped(new.read_text()).replace(f"team-train-{STACK}", STACK)
    assert old_text.startswith(f"# Rendered by imagekit for cell {STACK} (envs/training.yaml:")
    for name, text in [
        (STACK, old_text),
        (CPU, old_text.replace(STACK, CPU).replace("torch==2.7.1", "torch==2.13.0")),
        (GONE, old_text.replace(STACK, GONE)),
    ]:
        (repo / "dockerfiles" / name).mkdir()
        (repo / "dockerfiles" / name / "Dockerfile").write_text(text)
    code, _, err = run(capsys, "--check")
    assert code == 4 and f"dockerfiles/{STACK}/: rendered by an older imagekit" in err
    code, out, _ = run(capsys)
    assert code == 0
    assert (
        f"  removed dockerfiles/{STACK}/ (rendered by an older imagekit; now "
        f"dockerfiles/team-train-{STACK}/)" in out
    )
    assert f"  kept dockerfiles/{CPU}/ (an older imagekit rendered it" in out
    assert (
        f"  kept dockerfiles/{GONE}/ (an older imagekit rendered it for envs/training.yaml, which no longer defines its cell"
        in out
    )
    assert (repo / "dockerfiles" / CPU / "Dockerfile").is_file()
    assert not (repo / "dockerfiles" / STACK).exists()


def test_the_ownership_line_follows_a_syntax_directive(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """BuildKit reads `# syntax=` on the first line only: the ownership line goes second,
    and the file still verifies."""
    assert run(capsys, "--syntax", "docker/dockerfile:1.7")[0] == 0
    path = repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile"
    first, second = path.read_text().splitlines()[:2]
    assert first == "# syntax=docker/dockerfile:1.7" and second.startswith("# imagekit: ")
    assert owned.read(path.read_bytes()).intact
    assert run(capsys, "--syntax", "docker/dockerfile:1.7", "--check")[0] == 0
    assert run(capsys, "--check")[0] == 4  # without the directive, the files differ
    assert run(capsys)[0] == 0  # and render rewrites them: they are its own, unedited
    assert path.read_text().startswith("# imagekit: ")


def test_a_matrix_file_name_is_one_token_in_the_ownership_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "my envs").mkdir()
    (tmp_path / "my envs" / "serve é.yaml").write_text(matrix("serve", CELL))
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "--envs", "my envs")[0] == 0
    data = (tmp_path / "dockerfiles" / f"serve-{STACK}" / "Dockerfile").read_bytes()
    first = data.split(b"\n", 1)[0].decode()
    assert first.startswith("# imagekit: matrix=my\\x20envs/serve\\x20\\xe9.yaml cell=")
    found = owned.read(data)
    assert found.owner is not None and found.owner.matrix == "my envs/serve é.yaml"
    assert found.intact
    assert run(capsys, "--envs", "my envs", "--check")[0] == 0
