"""Package locks (`imagekit lock --packages`): fingerprint, file format, groups, staleness,
the build context, groups.py --locked, the CLI's exit codes (a fake resolver: no network),
and once for real: uv resolving fake wheels from a local folder, pip and uv checking them."""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.builder import context
from imagekit.buildtime import groups, lockfile
from imagekit.cli import main
from imagekit.errors import StaleError, UsageError
from imagekit.locks import package_file, packages, resolving
from imagekit.locks.package_file import Pin
from imagekit.locks.pinned import load_cells
from imagekit.locks.resolving import ResolveError
from imagekit.matrix.cells import FeatureStep

from .conftest import ROOT

CELL = "imagekit-test-cpu-torch2.13.0-py3.11-debian12-slim"
H = {c: c * 64 for c in "abcdef"}
TORCH_PINS = {
    "torch==2.13.0": H["a"],
    "filelock==3.20.0": H["b"],
    "nvidia-nccl-cu12==2.27.5": H["c"],
}
FEATURE_PINS = {"onnx==1.19.1": H["d"], "filelock==3.20.0": H["b"], "numpy==2.3.4": H["e"]}


def cell():  # type: ignore[no-untyped-def]
    return {c.id: c for c in load_cells([ROOT / "tests" / "data" / "envs"])}[CELL]


def fake_resolver(
    requirements: Sequence[str],
    constraints: Sequence[str],
    index: str,
    wheelhouse: Path | None,
    python: str,
    platform: str,
) -> list[Pin]:
    pins = FEATURE_PINS if constraints else TORCH_PINS
    if constraints:
        assert set(constraints) == set(TORCH_PINS)  # the features resolve against torch's pins
    return [Pin(req, (digest,)) for req, digest in pins.items()]


def test_the_fingerprint_follows_every_input_and_nothing_else() -> None:
    base = packages.inputs_of(cell())
    assert package_file.fingerprint(base) == package_file.fingerprint(dict(reversed(base.items())))
    for key, value in [("python", "3.12"), ("torch-index", ""), ("os", "debian13")]:
        assert package_file.fingerprint({**base, key: value}) != package_file.fingerprint(base)
    assert base["torch"] == ["torch==2.13.0"]
    assert base["features"] == [["onnx>=1.16", "onnxscript>=0.1", "onnxruntime>=1.19"]]


def test_a_pins_name_is_normalized() -> None:
    assert Pin("Flash_Attn==2.8.3", ()).name == "flash-attn"
    assert Pin("nvidia.cuda-runtime-cu12==12.6.77", ()).name == "nvidia-cuda-runtime-cu12"


def test_pins_split_into_the_venv_groups_and_the_file_round_trips() -> None:
    lock = resolving.resolve(cell(), fake_resolver, "", None)
    names = {g: [p.requirement for p in pins] for g, pins in lock.groups.items()}
    assert names == {
        "cuda": ["nvidia-nccl-cu12==2.27.5"],
        "torch": ["filelock==3.20.0", "torch==2.13.0"],
        "features": ["numpy==2.3.4", "onnx==1.19.1"],  # filelock is torch's already
    }
    text = packages.render_text(lock)
    assert f"# fingerprint: {lock.fingerprint}" in text
    assert f"torch==2.13.0 \\\n    --hash=sha256:{H['a']}\n" in text
    assert packages.parse(text, CELL) == lock
    # the group files groups.py copies read back as the same pins
    files = packages.group_files(lock)
    assert groups._pins_from_requirements(files["torch"]) == names["torch"]


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace('"torch==2.13.0"', '"torch==2.14.0"'), "fingerprint"),
        (lambda t: t.replace(f"--hash=sha256:{H['a']}", ""), "needs sha256"),
        (lambda t: t.replace("# [cuda]\n", ""), "before any group"),
    ],
)
def test_a_damaged_lock_is_refused_with_the_fix(edit, why) -> None:  # type: ignore[no-untyped-def]
    text = packages.render_text(resolving.resolve(cell(), fake_resolver, "", None))
    with pytest.raises(UsageError, match=why) as info:
        packages.parse(edit(text), CELL)
    assert "imagekit lock --packages" in str(info.value)


def test_a_lock_the_matrix_moved_away_from_is_stale_and_says_which_field(tmp_path: Path) -> None:
    this = cell()
    packages.write(tmp_path, resolving.resolve(this, fake_resolver, "", None))
    assert packages.stale([this], tmp_path, whole_matrix=True) == []
    moved = replace(this, torch_requirements=("torch==2.13.0", "torchvision==0.28.0"))
    (problem,) = packages.stale([moved], tmp_path, whole_matrix=False)
    assert "torch: locked" in problem and "torchvision==0.28.0" in problem
    assert "run `imagekit lock --packages`" in problem
    # a lock whose cell left the matrix: only a whole-matrix check can tell
    other = replace(this, id="imagekit-test-cpu-torch2.13.0-py3.12-debian12-slim")
    assert packages.stale([other], tmp_path, whole_matrix=False) == []
    (orphan,) = packages.stale([other], tmp_path, whole_matrix=True)
    assert f"no cell {CELL} in the matrix" in orphan
    with pytest.raises(StaleError):
        packages.raise_if_stale([moved], tmp_path, whole_matrix=False)
    single = replace(this, venv_layers="single")
    assert "one layer" in packages.stale([single], tmp_path, whole_matrix=False)[0]


def test_the_context_carries_the_cells_lock_and_an_empty_folder_otherwise(tmp_path: Path) -> None:
    locks = tmp_path / "packages.lock"
    packages.write(locks, resolving.resolve(cell(), fake_resolver, "", None))
    staged = context.stage(cell(), tmp_path / "ctx", locks=locks)
    locked = staged / "imagekit" / "locked"
    assert sorted(p.name for p in locked.iterdir()) == ["cuda.txt", "features.txt", "torch.txt"]
    assert f"--hash=sha256:{H['c']}" in (locked / "cuda.txt").read_text()
    bare = context.stage(replace(cell(), id="other"), tmp_path / "ctx2", locks=locks)
    assert list((bare / "imagekit" / "locked").iterdir()) == []


def test_groups_py_copies_a_staged_lock_and_resolves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = resolving.resolve(cell(), fake_resolver, "", None)
    locked = tmp_path / "locked"
    locked.mkdir()
    for group, text in packages.group_files(lock).items():
        (locked / f"{group}.txt").write_text(text)
    made_room: list[list[str]] = []
    monkeypatch.setattr(groups, "resolve", lambda *a: pytest.fail("resolved"))
    monkeypatch.setattr(groups, "make_room", lambda installer, pins: made_room.append(pins))
    out = tmp_path / "out"
    assert groups.main(["--installer", "pip", "--out", str(out), "--locked", str(locked),
                        "--torch", "torch==2.13.0"]) == 0  # fmt: skip
    for group in lockfile.GROUPS:
        assert (out / f"{group}.txt").read_text() == (locked / f"{group}.txt").read_text()
    assert sorted(made_room[0]) == sorted({*TORCH_PINS, *FEATURE_PINS})
    # an empty folder (an unlocked cell's context) resolves as before
    calls: list[object] = []
    monkeypatch.setattr(groups, "resolve", lambda *a: calls.append(a) or ["torch==2.13.0"])
    groups.main(["--installer", "pip", "--out", str(out), "--locked", str(tmp_path / "none"),
                 "--torch", "torch==2.13.0"])  # fmt: skip
    assert calls


def run(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    raise AssertionError("main() must always exit")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "tests" / "data", tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    monkeypatch.setattr(resolving, "RESOLVER", fake_resolver)
    assert run("render", "--envs", "envs") == 0
    return tmp_path / "p"


def test_lock_packages_writes_checks_and_render_check_notices_a_stale_lock(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "envs" / "packages.lock" / f"{CELL}.txt"
    assert run("lock", "--envs", "envs", "--packages", "--no-bases") == 0
    assert f"{path.relative_to(project)}: written" in capsys.readouterr().out
    assert packages.read(path.parent, CELL) is not None
    assert run("lock", "--envs", "envs", "--packages", "--no-bases") == 0
    assert "unchanged" in capsys.readouterr().out
    assert run("lock", "--envs", "envs", "--check") == 0
    assert run("render", "--envs", "envs", "--check") == 0
    matrix = project / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("features: [onnx-tensorrt]", "features: []"))
    assert run("render", "--envs", "envs") == 0  # the Dockerfile follows; the lock does not
    capsys.readouterr()
    assert run("render", "--envs", "envs", "--check") == 4
    err = capsys.readouterr().err
    assert f"{CELL}.txt: features: locked" in err and "imagekit lock --packages" in err
    assert run("lock", "--envs", "envs", "--check") == 4
    assert run("lock", "--envs", "envs", "--packages", "--no-bases") == 0
    assert run("render", "--envs", "envs", "--check") == 0


def test_an_unreachable_index_names_the_cell_and_the_fix_and_writes_nothing(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(*args: object) -> list[Pin]:
        raise ResolveError("error: Failed to fetch: `https://download.pytorch.org/whl/cpu/torch/`")

    monkeypatch.setattr(resolving, "RESOLVER", unreachable)
    assert run("lock", "--envs", "envs", "--packages", "--no-bases") == 9
    err = capsys.readouterr().err
    assert f"{CELL}: its packages could not be resolved from https://download.pytorch.org" in err
    assert "--torch-index none --wheelhouse DIR" in err and "nothing was written" in err
    assert not (project / "envs" / "packages.lock").exists()


def test_a_build_refuses_a_stale_lock_before_building(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("lock", "--envs", "envs", "--packages", "--no-bases") == 0
    matrix = project / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("features: [onnx-tensorrt]", "features: []"))
    capsys.readouterr()
    assert run("build", "--envs", "envs", "--dry-run") == 4
    assert "package locks do not match the matrix" in capsys.readouterr().err
    path = project / "envs" / "packages.lock" / f"{CELL}.txt"
    path.write_text(path.read_text().replace('"python": "3.11"', '"python": "3.12"'))
    # edited by hand: the fingerprint no longer fits its inputs
    assert run("build", "--envs", "envs", "--dry-run") == 4
    assert "not a valid package lock" in capsys.readouterr().err


# --- uv for real, against a folder of fake wheels (no network) ------------------------------


def fake_wheel(folder: Path, name: str, version: str, requires: Sequence[str] = ()) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    )
    files[f"{dist}.dist-info/RECORD"] = record + f"{dist}.dist-info/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for member, data in files.items():
            whl.writestr(member, data)
    return path


@pytest.mark.subprocess
def test_uv_resolves_a_hashed_lock_and_pip_and_uv_check_the_hashes(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fake_wheel(wheels, "torch", "9.0.0", ["dep-a>=1", "nvidia-fake-cu12==1.0"])
    fake_wheel(wheels, "torch", "9.1.0", ["dep-a>=1"])
    fake_wheel(wheels, "dep-a", "1.0")
    fake_wheel(wheels, "dep-a", "2.0")
    fake_wheel(wheels, "nvidia-fake-cu12", "1.0")
    fake_wheel(wheels, "feat", "3.0", ["dep-a>=1", "extra-b"])
    fake_wheel(wheels, "extra-b", "0.5")
    this = replace(
        cell(),
        torch_requirements=("torch==9.0.0",),
        feature_steps=(FeatureStep("feat", ("feat",), True),),
    )
    resolver = functools.partial(resolving.uv_resolver, extra=["--no-index"])
    lock = resolving.resolve(this, resolver, "", wheels)
    names = {g: [p.requirement for p in pins] for g, pins in lock.groups.items()}
    # torch's pins come first; the features resolve against them and add only their own
    assert names["cuda"] == ["nvidia-fake-cu12==1.0"]
    assert names["torch"] == ["dep-a==2.0", "torch==9.0.0"]
    assert names["features"] == ["extra-b==0.5", "feat==3.0"]
    digest = hashlib.sha256((wheels / "torch-9.0.0-py3-none-any.whl").read_bytes()).hexdigest()
    assert dict((p.requirement, p.hashes) for p in lock.groups["torch"])["torch==9.0.0"] == (
        digest,
    )
    text = packages.render_text(lock)
    assert packages.parse(text, this.id) == lock
    files = packages.group_files(lock)
    good = tmp_path / "torch.txt"
    good.write_text(files["torch"])
    bad = tmp_path / "bad.txt"
    bad.write_text(files["torch"].replace(digest, "0" * 64))
    uv = resolving.uv_binary()
    # the host's pip and uv settings (a constraint file, find-links) stay out of it
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    clean["PIP_CONFIG_FILE"] = os.devnull
    for installer in ("pip", "uv"):
        for requirements, ok in ((good, True), (bad, False)):
            target = tmp_path / f"{installer}-{requirements.stem}"
            if installer == "pip":
                command = [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--target",
                    str(target),
                ]
            else:
                command = [
                    uv,
                    "pip",
                    "install",
                    "--python",
                    sys.executable,
                    "--target",
                    str(target),
                ]
            result = subprocess.run(
                [*command, "--no-deps", "--no-index", "--find-links", str(wheels),
                 "-r", str(requirements)],
                capture_output=True, text=True, check=False, env=clean,
            )  # fmt: skip
            assert (result.returncode == 0) == ok, (installer, requirements, result.stderr)
            if not ok:
                assert "hash" in result.stderr.lower()
