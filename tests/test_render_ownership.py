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


def test_a_deleted_matrix_files_dockerfiles_are_removed(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A matrix file deleted from envs/: its intact files are drift, and render removes
    them; rendering a single file of that folder with --envs too."""
    assert run(capsys)[0] == 0
    (repo / "envs" / "serve.yaml").unlink()
    code, _, err = run(capsys, "--check")
    assert code == 4
    assert (
        f"dockerfiles/serve-{STACK}/: its matrix envs/serve.yaml is gone; `imagekit render` "
        "removes it" in err
    )
    code, _, err = run(capsys, "--envs", "envs/training.yaml", "--check")
    assert code == 4 and f"dockerfiles/serve-{STACK}/: its matrix envs/serve.yaml is gone" in err
    code, out, _ = run(capsys, "--envs", "envs/training.yaml")
    assert code == 0
    assert f"  removed dockerfiles/serve-{STACK}/ (its matrix envs/serve.yaml is gone)" in out
    assert not (repo / "dockerfiles" / f"serve-{STACK}").exists()
    assert (repo / "dockerfiles" / f"team-train-{STACK}" / "Dockerfile").is_file()
    assert run(capsys, "--check")[0] == 0


def test_a_deleted_matrix_files_edited_dockerfile_is_refused(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys)[0] == 0
    edited = repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile"
    edited.write_text(edited.read_text() + "RUN echo mine\n")
    (repo / "envs" / "serve.yaml").unlink()
    before = files(repo)
    code, _, err = run(capsys)
    assert code == 2 and f"dockerfiles/serve-{STACK}/Dockerfile was edited by hand" in err
    assert "its matrix envs/serve.yaml is gone, but render never deletes an edit" in err
    assert files(repo) == before


def test_a_deleted_matrix_file_elsewhere_is_not_this_renders(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a matrix file gone from a folder render reads: a render of other/ leaves the
    files of envs/serve.yaml, gone or not."""
    assert run(capsys)[0] == 0
    (repo / "other").mkdir()
    (repo / "other" / "cpu.yaml").write_text(matrix("cpu", OTHER))
    (repo / "envs" / "serve.yaml").unlink()
    before = files(repo)
    code, out, _ = run(capsys, "--envs", "other")
    assert code == 0 and "removed" not in out
    after = files(repo)
    assert {k: after[k] for k in before} == before
    assert run(capsys, "--envs", "other", "--check")[0] == 0


def test_without_git_a_deleted_matrix_files_dockerfiles_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported case: no .git, two matrix files, one deleted: not current, pruned."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "training.yaml").write_text(matrix("team/train", CELL))
    (tmp_path / "envs" / "infer.yaml").write_text(matrix("infer", CELL))
    monkeypatch.chdir(tmp_path)
    assert run(capsys)[0] == 0
    (tmp_path / "envs" / "infer.yaml").unlink()
    assert run(capsys, "--check")[0] == 4
    code, out, _ = run(capsys)
    assert code == 0
    assert f"  removed dockerfiles/infer-{STACK}/ (its matrix envs/infer.yaml is gone)" in out
    assert set(files(tmp_path)) == {f"dockerfiles/team-train-{STACK}/Dockerfile"}


def first_line(path: Path) -> str:
    return path.read_text().split("\n", 1)[0]


def claim(path: Path) -> str:
    """The ownership line less its digest (which covers the line below, and that names the
    matrix file as it was given on the command line)."""
    return first_line(path).split(" sha256=")[0]


def test_without_git_the_matrix_name_does_not_depend_on_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The root is the repository of the matrix files (without git, the folder above
    envs/), not the working directory nor --out: rendered from envs/, then from the root,
    the file is the same matrix's and is not refused."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "serve.yaml").write_text(matrix("serve", CELL))
    path = tmp_path / "dockerfiles" / f"serve-{STACK}" / "Dockerfile"
    monkeypatch.chdir(tmp_path / "envs")
    assert run(capsys, "--envs", ".", "--out", "../dockerfiles")[0] == 0
    assert claim(path) == f"# imagekit: matrix=envs/serve.yaml cell=serve-{STACK}"
    monkeypatch.chdir(tmp_path)
    assert run(capsys)[0] == 0
    assert claim(path) == f"# imagekit: matrix=envs/serve.yaml cell=serve-{STACK}"
    assert run(capsys, "--out", str(tmp_path / "dockerfiles"))[0] == 0
    assert claim(path) == f"# imagekit: matrix=envs/serve.yaml cell=serve-{STACK}"
    assert run(capsys, "--check")[0] == 0


def test_owners_are_compared_as_files(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose line names its matrix file by its absolute path is that matrix's own."""
    assert run(capsys)[0] == 0
    path = repo / "dockerfiles" / f"serve-{STACK}" / "Dockerfile"
    body = owned.unstamped(path.read_text())
    path.write_text(owned.stamp(body, str(repo / "envs" / "serve.yaml"), f"serve-{STACK}"))
    assert owned.read(path.read_bytes()).intact
    code, out, _ = run(capsys)
    assert code == 0 and f"  wrote dockerfiles/serve-{STACK}/Dockerfile" in out
    assert first_line(path).startswith("# imagekit: matrix=envs/serve.yaml ")


def test_a_builtin_matrix_is_named_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--envs builtin:training`: the line names `builtin:training`, not the install path."""
    monkeypatch.chdir(tmp_path)
    args = ("--envs", "builtin:training", "--cell", f"pytorch-train-{STACK}")
    assert run(capsys, *args)[0] == 0
    path = tmp_path / "dockerfiles" / f"pytorch-train-{STACK}" / "Dockerfile"
    assert first_line(path).startswith(
        f"# imagekit: matrix=builtin:training cell=pytorch-train-{STACK} sha256="
    )
    assert run(capsys, *args, "--check")[0] == 0


def test_an_intact_file_in_another_cells_folder_is_not_called_an_edit(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A person renamed (or copied) a folder: the file is intact, but names another cell."""
    assert run(capsys)[0] == 0
    serve = repo / "dockerfiles" / f"serve-{STACK}"
    (serve / "Dockerfile").unlink()
    serve.rmdir()
    (repo / "dockerfiles" / f"team-train-{CPU}").rename(serve)
    before = files(repo)
    code, _, err = run(capsys)
    assert code == 2 and "edited by hand" not in err
    assert (
        f"dockerfiles/serve-{STACK}/Dockerfile is imagekit's file for cell team-train-{CPU} of "
        "envs/training.yaml (its ownership line, intact), but it is in folder "
        f"serve-{STACK}/: the folder was renamed or copied by hand" in " ".join(err.split())
    )
    assert f"Move it back to dockerfiles/team-train-{CPU}/" in " ".join(err.split())
    assert files(repo) == before


def test_a_file_is_the_same_bytes_from_whichever_folder_render_runs(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys)[0] == 0
    from_root = files(repo)
    monkeypatch.chdir(repo / "envs")
    code, out, err = run(capsys, "--envs", ".", "--out", "../dockerfiles", "--check")
    assert code == 0, out + err
    assert files(repo) == from_root
    second = next(iter(from_root.values())).decode().splitlines()[1]
    assert "(envs/" in second  # the matrix file named from the repository's root
