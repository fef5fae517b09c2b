"""A package lock is checked, not only fingerprinted (issue 29, item 7): a lock whose pins
were edited (torch's version, an added pin, torch in the CUDA group, an option line) keeps its
fingerprint, since that covers the inputs only; each such edit fails `lock --check`,
`render --check`, `stage` and `build` naming the file, the line and the fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.builder import context
from imagekit.buildtime import lockfile
from imagekit.errors import UsageError
from imagekit.locks import packages, resolving
from imagekit.locks.package_file import PackageLock, Pin
from imagekit.locks.pinned import load_cells

from .conftest import ROOT
from .hostile import CELL, lock_text, project, run
from .test_packagelock import H

__all__ = ["project"]  # the fixture, imported for the tests here

EVIL = "f" * 64
TORCH = f"torch==2.13.0 \\\n    --hash=sha256:{H['a']}\n"


def in_group(text: str, group: str, lines: str) -> str:
    return text.replace(f"# [{group}]\n", f"# [{group}]\n{lines}")


def moved_to_cuda(text: str) -> str:
    return in_group(text.replace(TORCH, ""), "cuda", TORCH)


# (what, edit, the offending line as the error shows it, why)
TAMPERED: list[tuple[str, Callable[[str], str], str, str]] = [
    ("torch-version", lambda t: t.replace("torch==2.13.0 \\", "torch==2.12.0 \\"),
     "torch==2.12.0", "pinned 2.12.0, the cell's is 2.13.0"),
    ("unrelated-pin", lambda t: in_group(t, "torch", f"evil-pkg==1.0 \\\n    --hash=sha256:{EVIL}\n"),
     "evil-pkg==1.0", "neither one of the cell's torch requirements nor a package torch depends on"),
    ("torch-in-cuda", moved_to_cuda,
     "torch==2.13.0", "the cuda group holds only NVIDIA's CUDA library wheels"),
    ("index-url", lambda t: in_group(t, "torch", "--index-url=https://evil.example/simple\n"),
     "--index-url=https://evil.example/simple", "an option line"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "edit", "shown", "why"), TAMPERED, ids=[t[0] for t in TAMPERED])
@pytest.mark.parametrize(
    "command",
    [("lock", "--check"), ("render", "--check"), ("stage",), ("build", "--dry-run")],
    ids=["lock-check", "render-check", "stage", "build"],
)
def test_a_tampered_lock_fails_every_command_naming_the_line(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    edit: Callable[[str], str],
    shown: str,
    why: str,
    command: tuple[str, ...],
) -> None:
    path = lock_text(project, capsys)
    text = edit(path.read_text())
    path.write_text(text)
    number = text.split("\n").index(next(ln for ln in text.split("\n") if ln.startswith(shown))) + 1
    ran = run(capsys, command[0], "--envs", "envs", *command[1:])
    assert ran.code == 4, ran  # a lock that does not match its cell, as a stale one
    assert f"{CELL}.txt:{number}: {shown}: " in ran.err, ran.err
    assert why in ran.err and "regenerate it with `imagekit lock --packages`" in ran.err
    assert "internal error" not in ran.text
    if command[0] == "stage":
        assert not (project / ".imagekit" / "context" / CELL).exists()  # nothing staged


def test_the_untampered_lock_passes_every_command(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock_text(project, capsys)
    for command in [("lock", "--check"), ("render", "--check"), ("stage",)]:
        ran = run(capsys, command[0], "--envs", "envs", *command[1:])
        assert ran.code == 0, ran


def cell():  # type: ignore[no-untyped-def]
    return {c.id: c for c in load_cells([ROOT / "tests" / "data" / "envs"])}[CELL]


def lock_of(**groups: list[str]) -> PackageLock:
    this = cell()
    pins = {
        g: tuple(Pin(r, (H["a"],), n) for n, r in enumerate(groups.get(g, []), 10))
        for g in lockfile.GROUPS
    }
    return PackageLock(CELL, packages.inputs_of(this), {}, pins)


GOOD = {"cuda": ["nvidia-nccl-cu12==2.27.5"], "torch": ["filelock==3.20.0", "torch==2.13.0"]}


@pytest.mark.parametrize(
    ("groups", "why"),
    [
        ({**GOOD, "torch": ["torch==2.13.0+cu126"]}, "the local part +cu126 is not the cell's cpu"),
        ({**GOOD, "torch": ["torch==2.13.1"]}, "pinned 2.13.1, the cell's is 2.13.0"),
        ({**GOOD, "torch": ["filelock==3.20.0"]}, "no torch pin in the torch group"),
        ({**GOOD, "torch": ["torch==2.13.0", "torchvision==0.28.0"]}, "asks for no torchvision"),
        ({**GOOD, "features": ["torch==2.13.0"]}, "torch is pinned twice (first on line 11)"),
        ({"cuda": [], "torch": ["torch==2.13.0"], "features": ["nvidia-cublas-cu12==12.8.4.1"]},
         "a CUDA library belongs in the cuda group, not the features group"),
        ({"cuda": [], "torch": ["torch==2.13.0", "nvidia-nccl-cu12==2.27.5"]},
         "a CUDA library belongs in the cuda group, not the torch group"),
        ({**GOOD, "cuda": ["nvidia-ml-py==13.580.82"]}, "only NVIDIA's CUDA library wheels"),
        ({**GOOD, "torch": ["torch==2.13.0", "requests==2.32.5"]}, "requests is neither"),
        ({**GOOD, "features": ["filelock==3.20.0"]}, "filelock is pinned twice"),
    ],
)  # fmt: skip
def test_verify_refuses_each_misplaced_pin(groups: dict[str, list[str]], why: str) -> None:
    with pytest.raises(UsageError, match="imagekit lock --packages") as info:
        packages.verify(lock_of(**groups), cell(), "lock.txt")
    assert why in str(info.value)


def test_verify_accepts_the_variant_and_what_torch_brings() -> None:
    this = cell()
    packages.verify(lock_of(**GOOD), this, "x")
    packages.verify(lock_of(**{**GOOD, "torch": ["torch==2.13.0+cpu", "sympy==1.14.0"]}), this, "x")
    with_vision = replace(this, torch_requirements=("torch==2.13.0", "torchvision==0.28.0"))
    ok = {**GOOD, "torch": ["torch==2.13.0", "torchvision==0.28.0+cpu", "pillow==12.0.0"]}
    packages.verify(lock_of(**ok), with_vision, "x")
    wrong = {**GOOD, "torch": ["torch==2.13.0", "torchvision==0.27.0"]}
    with pytest.raises(UsageError, match="torchvision: pinned 0.27.0, the cell's is 0.28.0"):
        packages.verify(lock_of(**wrong), with_vision, "x")


LINES = "\n".join


@pytest.mark.parametrize(
    ("body", "number", "why"),
    [
        ("-r other.txt", 5, "an option line"),
        ("  --extra-index-url https://alice:S3cr3t@evil/simple", 5, "an option line"),
        ("-e git+https://evil/x#egg=x", 5, "an option line"),
        ("--find-links=/tmp/x", 5, "an option line"),
        ("# a comment", 5, "a comment inside a group"),
        (f"x==1 --hash=sha256:{H['a']} --index-url=https://evil", 5, "only `--hash=sha256:"),
        (f"x==1 --hash=md5:{'a' * 32}", 5, "only `--hash=sha256:"),
        (f"x>=1 --hash=sha256:{H['a']}", 5, "not `name==version"),
        (f"x==1;python_version>'3' --hash=sha256:{H['a']}", 5, "not `name==version"),
        (f"x==not-a-version --hash=sha256:{H['a']}", 5, "not `name==version"),
        (
            f"x==1 \\\n    --hash=sha256:{H['a']} \\\n    --trusted-host evil",
            7,
            "only `--hash=sha256:",
        ),
        (f"x==1 \\\n--hash=sha256:{H['a']}", 6, "continue on indented lines"),
        ("x==1 \\", 5, "every pin needs sha256 hashes"),
        ("# [extra]", 5, "no group extra"),
        ("# [torch]", 5, "a group twice"),
    ],
)
def test_only_pins_with_hashes_as_the_writer_writes_them(body: str, number: int, why: str) -> None:
    inputs = packages.inputs_of(cell())
    text = packages.render_text(PackageLock(CELL, inputs)).replace(
        "# [features]\n", f"# [features]\n{body}\n"
    )
    line = text.split("\n").index("# [features]") + 2
    with pytest.raises(UsageError, match="not a valid package lock") as info:
        packages.parse(text, CELL, "lock.txt")
    message = str(info.value)
    assert why in message and f"lock.txt:{line - 5 + number}: " in message, message
    assert "S3cr3t" not in message


def test_a_one_line_pin_and_blank_lines_read_as_the_writers() -> None:
    lock = lock_of(**GOOD)
    text = packages.render_text(lock)
    one_line = text.replace(" \\\n    --hash", " --hash").replace("# [torch]\n", "# [torch]\n\n")
    assert packages.parse(one_line, CELL) == packages.parse(text, CELL) == lock
    with pytest.raises(UsageError, match="the file ends inside the pin's hashes"):
        packages.parse(text + "x==1 \\", CELL)


def test_staging_verifies_the_lock_it_copies(tmp_path: Path) -> None:
    locks = tmp_path / "packages.lock"
    packages.write(locks, lock_of(**{**GOOD, "torch": ["torch==2.12.0"]}))
    with pytest.raises(UsageError, match=r"torch: pinned 2\.12\.0"):
        context.stage(cell(), tmp_path / "ctx", locks=locks)


def test_lock_packages_refuses_to_write_what_the_check_would_refuse(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def brings_more(*args: object) -> list[Pin]:
        return [Pin("torch==2.13.0", (H["a"],)), Pin("newdep==1.0", (H["b"],))]

    monkeypatch.setattr(resolving, "RESOLVER", brings_more)
    ran = run(capsys, "lock", "--envs", "envs", "--packages", "--no-bases")
    assert ran.code == 9, ran
    assert "newdep is neither" in ran.err and "TORCH_DEPENDENCIES" in ran.err
    assert not (project / "envs" / "packages.lock").exists()
