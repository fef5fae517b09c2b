"""The locks per platform (issue 39): a cell built for linux/arm64 too gets a second package
lock, `<cell>.linux-arm64.txt`, resolved for aarch64 with arm64's torch index; check,
staleness, staging and groups.py's choice by machine; a lock made for one platform under the
other's name refused. images.lock records each platform's manifest of a multi-platform base;
a cell whose locked base lacks its platform is refused with the fix. A fake resolver and the
fake engine: no network, no Docker."""

from __future__ import annotations

import ast
import functools
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from imagekit.builder import bases, context
from imagekit.buildtime import groups, lockfile, sbom_writer, team_install
from imagekit.cli import main
from imagekit.engine import image_registry
from imagekit.engine.docker import DockerEngine
from imagekit.engine.fake import FakeEngine, FakeRegistry
from imagekit.errors import ImagekitError, StaleError, UsageError
from imagekit.locks import images, package_file, packages, resolving
from imagekit.locks.package_file import Pin
from imagekit.locks.pinned import load_cells
from imagekit.platforms import AMD64, ARM64
from imagekit.render.dockerfile import LAYER_EPOCH

from .conftest import ROOT
from .hostile import run, user_error
from .test_packagelock import CELL, H

ARM = {c: str(i) * 64 for i, c in enumerate("abcdef", 1)}  # arm64's wheels: other files
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
X86, AARCH64 = "x86_64-manylinux_2_28", "aarch64-manylinux_2_28"


@dataclass
class Resolver:
    """Pins of either platform, each with its own hashes; records (platform, index, step)."""

    torch: str = "2.13.0"
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(
        self,
        requirements: Sequence[str],
        constraints: Sequence[str],
        index: str,
        wheelhouse: Path | None,
        python: str,
        platform: str,
    ) -> list[Pin]:
        self.calls.append((platform, index, "features" if constraints else "torch"))
        digest = H if platform == X86 else ARM
        if constraints:
            return [Pin("onnx==1.19.1", (digest["d"],)), Pin("numpy==2.3.4", (digest["e"],))]
        return [
            Pin(f"torch=={self.torch}", (digest["a"],)),
            Pin("filelock==3.20.0", (digest["b"],)),
        ]


def amd64_cell():  # type: ignore[no-untyped-def]
    return {c.id: c for c in load_cells([ROOT / "tests" / "data" / "envs"])}[CELL]


def both_cell():  # type: ignore[no-untyped-def]
    """The test cell built for both platforms, arm64's torch from PyPI (as torch 2.7.1's CPU
    cell: PyPI's aarch64 wheel is the CPU build)."""
    return replace(amd64_cell(), platforms=(AMD64, ARM64), arm64_torch_index="")


# --- package locks: resolving and writing ---------------------------------------------------


def test_a_cell_of_both_platforms_gets_two_locks_arm64s_for_aarch64_from_its_index(
    tmp_path: Path,
) -> None:
    resolver = Resolver()
    notes = resolving.lock_cells([both_cell()], tmp_path, resolver, None, None)
    amd64, arm64 = tmp_path / f"{CELL}.txt", tmp_path / f"{CELL}.linux-arm64.txt"
    assert notes == [f"{amd64}: written", f"{arm64}: written"]
    assert resolver.calls == [
        (X86, CPU_INDEX, "torch"), (X86, CPU_INDEX, "features"),
        (AARCH64, "", "torch"), (AARCH64, "", "features"),
    ]  # fmt: skip
    lock = packages.read(tmp_path, CELL, both_cell(), ARM64)
    assert lock is not None and lock.platform == ARM64
    assert lock.inputs["platform"] == AARCH64 and lock.inputs["torch-index"] == ""
    assert lock.resolved_with == {"resolved-from": "PyPI"}
    assert f"--hash=sha256:{ARM['a']}" in arm64.read_text() and H["a"] not in arm64.read_text()
    # amd64's lock is the one a cell of amd64 alone has: locks made before arm64 stay valid
    alone = tmp_path / "alone"
    resolving.lock_cells([amd64_cell()], alone, Resolver(), None, None)
    assert amd64.read_bytes() == (alone / f"{CELL}.txt").read_bytes()
    assert sorted(p.name for p in alone.iterdir()) == [f"{CELL}.txt"]
    assert json.loads(amd64.read_text().split("# inputs: ")[1].split("\n")[0])["platform"] == X86


def test_torch_index_stands_for_both_platforms_and_an_arm64_only_cell_has_one_lock(
    tmp_path: Path,
) -> None:
    resolver = Resolver()
    resolving.lock_cells([both_cell()], tmp_path, resolver, "", None)  # --torch-index none
    assert {index for _, index, _ in resolver.calls} == {""}
    only = replace(amd64_cell(), platforms=(ARM64,), torch_index=CPU_INDEX)
    resolver = Resolver()
    resolving.lock_cells([only], tmp_path / "arm", resolver, None, None)
    assert {(p, i) for p, i, _ in resolver.calls} == {(AARCH64, CPU_INDEX)}
    assert sorted(p.name for p in (tmp_path / "arm").iterdir()) == [f"{CELL}.linux-arm64.txt"]


def test_an_arm64_resolution_that_fails_names_the_cell_its_platform_and_writes_nothing(
    tmp_path: Path,
) -> None:
    def fails_on_arm64(*args: object) -> list[Pin]:
        if args[5] == AARCH64:
            raise resolving.ResolveError("error: no aarch64 wheel")
        return Resolver()(*args)  # type: ignore[arg-type]

    with pytest.raises(resolving.ResolveError) as info:
        resolving.lock_cells([both_cell()], tmp_path, fails_on_arm64, None, None)
    assert f"{CELL} (linux/arm64): its packages could not be resolved from PyPI" in str(info.value)
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_a_lock_files_name_gives_its_cell_and_platform() -> None:
    assert packages.file_of(f"{CELL}.txt") == (CELL, AMD64)
    assert packages.file_of(f"{CELL}.linux-arm64.txt") == (CELL, ARM64)
    assert packages.lock_path(Path("l"), CELL, ARM64) == Path("l") / f"{CELL}.linux-arm64.txt"


# --- package locks: checking ----------------------------------------------------------------


def locked_both(folder: Path) -> None:
    resolving.lock_cells([both_cell()], folder, Resolver(), None, None)


def test_each_platforms_lock_is_checked_and_a_missing_one_is_stale(tmp_path: Path) -> None:
    locked_both(tmp_path)
    both = both_cell()
    assert packages.stale([both], tmp_path, whole_matrix=True) == []
    arm64 = tmp_path / f"{CELL}.linux-arm64.txt"
    # arm64's index moved: only arm64's lock is stale, naming the field and both values
    moved = replace(both, arm64_torch_index="https://download.pytorch.org/whl/cu128")
    (problem,) = packages.stale([moved], tmp_path, whole_matrix=False)
    assert problem.startswith(f'{arm64}: torch-index: locked "", the matrix now says')
    assert "run `imagekit lock --packages`" in problem
    # built for arm64 with amd64's lock only: missing, with the fix
    arm64.unlink()
    (problem,) = packages.stale([both], tmp_path, whole_matrix=False)
    assert problem == (
        f"{arm64}: missing: {CELL} is built for linux/amd64, linux/arm64, and only linux/amd64 "
        "is locked; run `imagekit lock --packages` (it locks every platform of the cell)"
    )
    with pytest.raises(StaleError, match="missing"):
        packages.raise_if_stale([both], tmp_path, whole_matrix=False)
    # the same lock is all a cell of amd64 alone needs
    assert packages.stale([amd64_cell()], tmp_path, whole_matrix=True) == []


def test_a_lock_of_a_platform_the_cell_dropped_and_of_a_gone_cell_are_named(
    tmp_path: Path,
) -> None:
    locked_both(tmp_path)
    (problem,) = packages.stale([amd64_cell()], tmp_path, whole_matrix=False)
    assert f"{CELL}.linux-arm64.txt: {CELL} is not built for linux/arm64" in problem
    assert "delete the lock" in problem
    other = replace(amd64_cell(), id="cpu-torch2.13.0-py3.12-debian12-slim")
    orphans = packages.stale([other], tmp_path, whole_matrix=True)
    assert orphans == [
        f"{tmp_path / name}: no cell {CELL} in the matrix any more; delete it"
        for name in (f"{CELL}.linux-arm64.txt", f"{CELL}.txt")
    ]


@pytest.mark.parametrize(("platform", "source"), [(ARM64, AMD64), (AMD64, ARM64)])
def test_a_lock_copied_under_the_other_platforms_name_is_refused(
    tmp_path: Path, platform: str, source: str
) -> None:
    """Its fingerprint is valid (it covers the inputs, not the file's name), so only the
    platform field tells: named, with its value and the fix."""
    locked_both(tmp_path)
    path = packages.lock_path(tmp_path, CELL, platform)
    shutil.copy(packages.lock_path(tmp_path, CELL, source), path)
    wrong = packages.PYTHON_PLATFORMS[source]
    with pytest.raises(UsageError) as info:
        packages.read(tmp_path, CELL, both_cell(), platform)
    message = str(info.value)
    assert message.startswith(f'{path}: platform: "{wrong}", but this file is the ')
    assert (
        f"{platform} lock" in message and "regenerate it with `imagekit lock --packages`" in message
    )
    (problem,) = packages.stale([both_cell()], tmp_path, whole_matrix=True)
    assert problem == message


# --- package locks: staging and groups.py inside the build ----------------------------------


def test_staging_puts_arm64s_group_files_in_their_own_folder(tmp_path: Path) -> None:
    locked_both(tmp_path / "locks")
    staged = context.stage(both_cell(), tmp_path / "ctx", locks=tmp_path / "locks")
    locked = staged / "imagekit" / "locked"
    files = sorted(str(p.relative_to(locked)) for p in locked.rglob("*"))
    assert files == [
        "cuda.txt", "features.txt", "linux-arm64", "linux-arm64/cuda.txt",
        "linux-arm64/features.txt", "linux-arm64/torch.txt", "torch.txt",
    ]  # fmt: skip
    assert f"--hash=sha256:{H['a']}" in (locked / "torch.txt").read_text()
    assert f"--hash=sha256:{ARM['a']}" in (locked / "linux-arm64" / "torch.txt").read_text()
    assert {p.stat().st_mtime for p in locked.rglob("*")} == {LAYER_EPOCH}


def test_an_amd64_cells_staging_is_what_it_always_was(tmp_path: Path) -> None:
    resolving.lock_cells([amd64_cell()], tmp_path / "locks", Resolver(), None, None)
    lock = packages.read(tmp_path / "locks", CELL)
    assert lock is not None
    locked = context.stage(amd64_cell(), tmp_path / "ctx", locks=tmp_path / "locks")
    locked = locked / "imagekit" / "locked"
    assert {p.name: p.read_text() for p in locked.iterdir()} == {
        f"{group}.txt": text for group, text in packages.group_files(lock).items()
    }


def test_staging_refuses_a_cell_locked_for_one_of_its_platforms(tmp_path: Path) -> None:
    locked_both(tmp_path / "locks")
    (tmp_path / "locks" / f"{CELL}.linux-arm64.txt").unlink()
    with pytest.raises(StaleError, match=r"linux-arm64\.txt: missing"):
        context.stage(both_cell(), tmp_path / "ctx", locks=tmp_path / "locks")


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    locked_both(tmp_path / "locks")
    return context.stage(both_cell(), tmp_path / "ctx", locks=tmp_path / "locks") / "imagekit"


def run_groups(
    monkeypatch: pytest.MonkeyPatch, locked: Path, machine: str, out: Path
) -> list[object]:
    """groups.py's main on `machine`; what it resolved (nothing where it copied a lock)."""
    resolved: list[object] = []
    monkeypatch.setattr(groups.platform, "machine", lambda: machine)
    monkeypatch.setattr(groups, "resolve", lambda *a: resolved.append(a) or ["torch==2.13.0"])
    monkeypatch.setattr(groups, "make_room", lambda installer, pins: None)
    groups.main(["--installer", "pip", "--out", str(out), "--locked", str(locked),
                 "--torch", "torch==2.13.0"])  # fmt: skip
    return resolved


@pytest.mark.parametrize(("machine", "folder"), [("x86_64", ""), ("aarch64", "linux-arm64")])
def test_groups_py_copies_the_lock_of_the_machine_it_runs_on(
    staged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, machine: str, folder: str
) -> None:
    out = tmp_path / "out"
    assert run_groups(monkeypatch, staged / "locked", machine, out) == []
    for group in lockfile.GROUPS:
        mine = staged / "locked" / folder / f"{group}.txt"
        assert (out / f"{group}.txt").read_text() == mine.read_text()
    digest = H if machine == "x86_64" else ARM
    assert f"--hash=sha256:{digest['a']}" in (out / "torch.txt").read_text()


def test_groups_py_stops_where_the_lock_is_another_machines_only(
    staged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.rmtree(staged / "locked" / "linux-arm64")
    with pytest.raises(SystemExit) as info:
        run_groups(monkeypatch, staged / "locked", "aarch64", tmp_path / "out")
    assert "is for x86_64, not this build's machine aarch64" in str(info.value.code)
    assert "imagekit lock --packages" in str(info.value.code)
    with pytest.raises(SystemExit, match="not this build's machine ppc64le"):
        run_groups(monkeypatch, staged / "locked", "ppc64le", tmp_path / "out")
    # nothing staged (an unlocked cell): it resolves, on any machine
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_groups(monkeypatch, empty, "aarch64", tmp_path / "out2")


def test_the_host_and_the_build_scripts_share_one_lock_layout() -> None:
    """buildtime/lockfile.py defines the lock's groups, its pins' grammar and each machine's
    staged folder once: the host's names and the scripts' are its very objects."""
    machines = {"x86_64": AMD64, "aarch64": ARM64}
    assert {machines[m]: f for m, f in lockfile.LOCKED_FOLDERS.items()} == packages.STAGED
    for name in ("GROUPS", "LOCK_GROUPS", "TEAM", "PIN", "HASH"):
        assert getattr(package_file, name) is getattr(lockfile, name)
    assert lockfile.GROUPS is lockfile.GROUPS and lockfile.LOCK_GROUPS is lockfile.LOCK_GROUPS
    for script in (groups, sbom_writer, team_install):
        assert script.LOCKED_FOLDERS is lockfile.LOCKED_FOLDERS
        assert script.normalize is lockfile.normalize
    assert (sbom_writer.PIN, sbom_writer.HASH) == (lockfile.PIN, lockfile.HASH)
    assert sbom_writer.LOCK_GROUPS is lockfile.LOCK_GROUPS and groups.GROUPS is lockfile.GROUPS
    assert groups.is_cuda_library is team_install.is_cuda_library is lockfile.is_cuda_library


def top_level_names(text: str) -> set[str]:
    """What a module's own statements bind at its top level (its imports left out)."""
    names = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


@pytest.mark.parametrize("name", ["groups.py", "sbom_writer.py", "team_install.py"])
def test_the_context_copy_of_each_script_carries_the_lock_layout(name: str) -> None:
    """Each script runs alone in the build (bind-mounted by itself): the context's copy has
    lockfile.py's lines where it imported it, no import of imagekit, and no definition of its
    own that would shadow one of lockfile.py's; run, it holds lockfile.py's values."""
    source = (ROOT / "imagekit" / "buildtime" / name).read_text()
    layout = (ROOT / "imagekit" / "buildtime" / "lockfile.py").read_text()
    text = context.script_text(name)
    assert "import annotations\n\nimport re\n" in layout
    assert layout.split("import annotations\n\n", 1)[1] in text
    assert "from imagekit" in source and "imagekit." not in text.replace("buildtime/", "")
    assert top_level_names(source).isdisjoint(top_level_names(layout))
    namespace: dict[str, object] = {"__name__": "context_copy"}
    exec(compile(text, name, "exec"), namespace)  # imagekit's own file, its main() not run
    assert top_level_names(layout) <= namespace.keys()
    for each in ("GROUPS", "LOCK_GROUPS", "LOCKED_FOLDERS", "NOT_CUDA_LIBRARIES"):
        assert namespace[each] == getattr(lockfile, each)
    assert namespace["PIN"].pattern == lockfile.PIN.pattern  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name",
    ["nvidia-cublas-cu12", "nvidia_cudnn_cu12", "nvidia-ml-py", "NVIDIA-NCCL-CU12", "numpy"],
)
def test_the_build_scripts_agree_on_what_a_cuda_library_is(name: str) -> None:
    """The CUDA libraries groups.py layers apart are ones team_install.py holds as the stack."""
    assert team_install.is_stack(name) == groups.is_cuda_library(f"{name}==1.0")


def test_the_sbom_takes_the_hashes_of_its_machines_lock(staged: Path) -> None:
    locked = staged / "locked"
    for machine, digest in (("x86_64", H), ("aarch64", ARM)):
        mine = sbom_writer.machine_locked(locked, machine)
        assert sbom_writer.locked_hashes(mine)[("torch", "2.13.0")] == [digest["a"]]
    assert sbom_writer.machine_locked(locked, "ppc64le") is None
    assert sbom_writer.machine_locked(None, "x86_64") is None


# --- package locks through the CLI ----------------------------------------------------------

BOTH = "imagekit-test-cpu-torch2.7.1-py3.11-debian12-slim"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tests/data with its cell made torch 2.7.1 on both platforms (arm64's torch from
    PyPI, amd64's from the cpu index), rendered."""
    shutil.copytree(ROOT / "tests" / "data", tmp_path / "p")
    (tmp_path / "p" / ".git").mkdir()
    matrix = tmp_path / "p" / "envs" / "cpu.yaml"
    text = matrix.read_text().replace('torch: "2.13.0"', 'torch: "2.7.1"')
    text = text.replace("features: [onnx-tensorrt]\n", "features: [onnx-tensorrt]\n"
                        "    platform: [linux/amd64, linux/arm64]\n")  # fmt: skip
    matrix.write_text(text)
    monkeypatch.chdir(tmp_path / "p")
    monkeypatch.setattr(resolving, "RESOLVER", Resolver(torch="2.7.1"))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["render", "--envs", "envs"])
    assert exited.value.code == 0
    return tmp_path / "p"


COMMANDS = [("lock", "--check"), ("render", "--check"), ("stage",), ("build", "--dry-run")]


def test_lock_packages_writes_both_and_every_command_checks_both(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = project / "envs" / "packages.lock"
    ran = run(capsys, "lock", "--envs", "envs", "--packages", "--no-bases")
    assert ran.code == 0, ran
    assert f"{BOTH}.txt: written" in ran.out and f"{BOTH}.linux-arm64.txt: written" in ran.out
    for command in COMMANDS:
        assert run(capsys, command[0], "--envs", "envs", *command[1:]).code == 0, command
    assert "2 package locks of 1 cells" in run(capsys, "lock", "--envs", "envs", "--check").out
    staged = project / ".imagekit" / "context" / BOTH / "imagekit" / "locked" / "linux-arm64"
    assert sorted(p.name for p in staged.iterdir()) == ["cuda.txt", "features.txt", "torch.txt"]
    (folder / f"{BOTH}.linux-arm64.txt").unlink()
    for command in COMMANDS:
        ran = run(capsys, command[0], "--envs", "envs", *command[1:])
        assert ran.code == 4, (command, ran)
        assert f"{BOTH}.linux-arm64.txt: missing: {BOTH} is built for" in ran.err
        assert "imagekit lock --packages" in ran.err and "internal error" not in ran.text


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_hand_edited_arm64_lock_with_amd64s_platform_fails_every_command(
    project: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    """The arm64 lock's inputs say x86_64, its fingerprint made to match: a lock that would
    install amd64's wheels in the arm64 image."""
    assert run(capsys, "lock", "--envs", "envs", "--packages", "--no-bases").code == 0
    path = project / "envs" / "packages.lock" / f"{BOTH}.linux-arm64.txt"
    lock = packages.read(path.parent, BOTH, platform=ARM64)
    assert lock is not None
    forged = replace(lock, inputs={**lock.inputs, "platform": X86})
    path.write_text(packages.render_text(forged))
    ran = run(capsys, command[0], "--envs", "envs", *command[1:])
    assert ran.code == 4, ran
    assert (
        f'{path.relative_to(project)}: platform: "{X86}", but this file is the linux/arm64 lock'
        in ran.err
    )
    assert "regenerate it with `imagekit lock --packages`" in ran.err
    assert "internal error" not in ran.text
    if command[0] == "stage":
        assert not (project / ".imagekit" / "context" / BOTH).exists()


# --- images.lock: the file ------------------------------------------------------------------

REF = "debian:bookworm-slim"
INDEX = "sha256:" + "1" * 64
MANIFESTS = {AMD64: "sha256:" + "a" * 64, ARM64: "sha256:" + "b" * 64}


def test_images_lock_writes_platforms_only_where_there_are_some(tmp_path: Path) -> None:
    path = tmp_path / "images.lock"
    images.write(path, images.Lock(pins={REF: INDEX}))
    assert json.loads(path.read_text()) == {"images": {REF: INDEX}}  # as it always was
    assert images.read(path) == images.Lock(pins={REF: INDEX})
    images.write(
        path, images.Lock({REF: INDEX}, {REF: {ARM64: MANIFESTS[ARM64], AMD64: MANIFESTS[AMD64]}})
    )
    data = json.loads(path.read_text())
    assert data == {"images": {REF: INDEX}, "platforms": {REF: MANIFESTS}}
    assert list(data["platforms"][REF]) == [AMD64, ARM64]  # PLATFORMS' order
    assert images.read(path).platforms == {REF: MANIFESTS}


def lock_file(platforms: object) -> bytes:
    return json.dumps({"images": {REF: INDEX}, "platforms": platforms}).encode()


HOSTILE: list[tuple[str, bytes, str]] = [
    ("a list", lock_file([REF]), '"platforms" must be'),
    ("a platform not imagekit's", lock_file({REF: {"linux/arm/v7": INDEX}}),
     "'linux/arm/v7' is not a platform imagekit builds (linux/amd64, linux/arm64)"),
    ("arm64 without linux/", lock_file({REF: {"arm64": INDEX}}), "'arm64' is not a platform"),
    ("a newline in a platform", lock_file({REF: {"linux/arm64\n::error::x": INDEX}}),
     "'linux/arm64\\n::error::x' is not a platform"),
    ("a bad digest", lock_file({REF: {ARM64: "sha256:xyz"}}),
     "of debian:bookworm-slim: linux/arm64 must be sha256: and 64 hex digits"),
    ("a digest a number", lock_file({REF: {ARM64: 1}}), "must be sha256: and 64 hex digits"),
    ("no platform", lock_file({REF: {}}), 'expected {"linux/amd64": "sha256:..."}'),
    ("a base not pinned", lock_file({"ubuntu:24.04": MANIFESTS}),
     "has 'ubuntu:24.04', which \"images\" does not pin"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "data", "words"), HOSTILE, ids=[h[0] for h in HOSTILE])
@pytest.mark.parametrize("command", ["list", "render", "build"])
def test_a_malformed_platforms_key_is_exit_2_naming_it(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    data: bytes,
    words: str,
    command: str,
) -> None:
    (project / "envs" / "images.lock").write_bytes(data)
    args = ["build", "--envs", "envs", "--dry-run"] if command == "build" else [command]
    ran = run(capsys, *args, *(["--envs", "envs"] if command != "build" else []))
    user_error(ran, "images.lock", "not a valid lock file", words, "imagekit lock")
    assert not any(line.startswith("::error::x") for line in ran.text.splitlines())


# --- images.lock: imagekit lock with the fake registry --------------------------------------


def test_lock_records_each_platforms_manifest_of_a_multi_platform_cells_base() -> None:
    engine = FakeRegistry()
    new, notes = bases.lock(engine, [both_cell()], images.Lock())
    assert new.pins == {REF: INDEX}
    assert set(new.platforms[REF]) == {AMD64, ARM64}
    assert new.platforms[REF] == engine.registry_platforms(REF, INDEX)
    assert ("registry_platforms", f"{REF}@{INDEX}") in engine.calls  # the pinned index's
    assert notes == [f"{REF}: unpinned -> {INDEX}"]
    # cells of amd64 alone: the file as it always was, no registry read of platforms
    engine = FakeRegistry()
    new, _ = bases.lock(engine, [amd64_cell()], images.Lock())
    assert new.platforms == {} and not [c for c in engine.calls if c[0] == "registry_platforms"]


def test_lock_refuses_a_base_whose_index_lacks_a_cells_platform() -> None:
    engine = FakeRegistry(base_platforms={REF: (AMD64,)})
    with pytest.raises(UsageError) as info:
        bases.lock(engine, [both_cell()], images.Lock())
    assert info.value.exit_code == 2
    message = str(info.value)
    assert "images.lock was not written" in message
    assert f"base {REF} (index {INDEX}) has no linux/arm64 image, only linux/amd64" in message
    assert f"{CELL} is built for linux/arm64" in message
    assert "sudo imagekit base bootstrap --platform linux/amd64,linux/arm64" in message
    assert message.endswith("then `imagekit lock`")


def test_a_moved_pin_drops_the_old_indexs_platforms_and_a_failed_read_keeps_the_pin() -> None:
    old = images.Lock({REF: "sha256:" + "9" * 64}, {REF: MANIFESTS})

    class NoOras(FakeRegistry):
        def registry_platforms(self, ref: str, digest: str) -> dict[str, str]:
            raise UsageError("reading a base image's platforms needs oras, which is not on PATH")

    new, notes = bases.lock(NoOras(), [both_cell()], old)
    assert new.pins == {REF: INDEX} and new.platforms == {}
    assert f"{REF}: its platforms not read (reading a base image's platforms needs oras" in notes[1]
    # the same pin: what was recorded for it still holds
    new, _ = bases.lock(NoOras(), [both_cell()], images.Lock({REF: INDEX}, {REF: MANIFESTS}))
    assert new.platforms == {REF: MANIFESTS}


def test_imagekit_lock_refuses_and_writes_nothing_then_writes_the_platforms(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeRegistry(base_platforms={REF: (AMD64,)})
    monkeypatch.setattr("imagekit.engine.docker.DockerEngine", lambda cli=None: engine)
    user_error(run(capsys, "lock", "--envs", "envs"), REF, "no linux/arm64 image", BOTH)
    assert not (project / "envs" / "images.lock").exists()
    engine.base_platforms.clear()
    assert run(capsys, "lock", "--envs", "envs").code == 0
    data = json.loads((project / "envs" / "images.lock").read_text())
    assert data["images"] == {REF: INDEX} and set(data["platforms"][REF]) == {AMD64, ARM64}


@pytest.mark.parametrize("command", [("build", "--dry-run"), ("stage",)])
def test_a_build_of_a_platform_the_locked_base_lacks_is_refused_with_the_fix(
    project: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    lock = images.Lock({REF: INDEX}, {REF: {AMD64: MANIFESTS[AMD64]}})
    images.write(project / "envs" / "images.lock", lock)
    ran = run(capsys, command[0], "--envs", "envs", *command[1:])
    user_error(ran, f"base {REF} (index {INDEX}) has no linux/arm64 image", BOTH, "imagekit lock")
    # a lock that records no platforms of the base (older than them) is not judged
    images.write(project / "envs" / "images.lock", images.Lock({REF: INDEX}))
    assert run(capsys, command[0], "--envs", "envs", *command[1:]).code == 0


# --- reading a base's platforms from its registry -------------------------------------------

OCI_INDEX = {
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"digest": MANIFESTS[ARM64], "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"digest": "", "platform": {"os": "linux", "architecture": "s390x"}},  # not ours: unread
        {"digest": MANIFESTS[AMD64], "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:" + "d" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
    ],
}  # fmt: skip


def fake_oras(answers: dict[str, object], asked: list[str]):  # type: ignore[no-untyped-def]
    def oras(args: list[str], reference: str, what: str) -> bytes:
        asked.append(f"{' '.join(args[:2])} {reference}")
        return json.dumps(answers[reference]).encode()

    return oras


def test_a_bases_platforms_are_read_from_its_index_or_its_one_manifests_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    name = "docker.io/library/debian"
    single = {"config": {"digest": "sha256:" + "e" * 64}, "layers": []}
    answers = {
        f"{name}@{INDEX}": OCI_INDEX,
        f"{name}@sha256:{'2' * 64}": single,
        f"{name}@sha256:{'e' * 64}": {"os": "linux", "architecture": "arm64"},
    }
    monkeypatch.setattr(image_registry, "_oras", fake_oras(answers, asked))
    assert image_registry.platform_digests(f"{name}@{INDEX}") == MANIFESTS
    assert image_registry.platform_digests(f"{name}@sha256:{'2' * 64}") == {
        ARM64: f"sha256:{'2' * 64}"
    }
    answers[f"{name}@{INDEX}"] = {
        "manifests": [{"digest": "md5:x", "platform": {"os": "linux", "architecture": "amd64"}}]
    }
    with pytest.raises(ImagekitError, match="gives linux/amd64 no sha256 digest"):
        image_registry.platform_digests(f"{name}@{INDEX}")


def test_the_docker_engine_reads_a_bases_platforms_by_its_full_name_and_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(
        image_registry, "platform_digests", lambda ref: asked.append(ref) or MANIFESTS
    )
    engine = DockerEngine()
    assert engine.registry_platforms(REF, INDEX) == MANIFESTS
    assert engine.registry_platforms("nvidia/cuda:13.0.1-base-ubuntu24.04", INDEX) == MANIFESTS
    assert asked == [f"docker.io/library/debian@{INDEX}", f"docker.io/nvidia/cuda@{INDEX}"]


def test_the_fake_engines_platforms_follow_its_base_platforms() -> None:
    engine = FakeEngine(base_platforms={REF: (ARM64,)})
    assert list(engine.registry_platforms(REF, INDEX)) == [ARM64]
    assert list(FakeEngine().registry_platforms(REF, INDEX)) == [AMD64, ARM64]


# --- uv for real: each platform's lock resolves that platform's wheels (no network) ---------


@pytest.mark.subprocess
def test_uv_resolves_each_platforms_own_wheels(tmp_path: Path) -> None:
    """A dependency whose newest release has x86_64 wheels only: amd64's lock pins it, arm64's
    the release before, the one with an aarch64 wheel."""
    from .test_packagelock import fake_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fake_wheel(wheels, "torch", "9.0.0", ["dep-a>=1"])
    for version, tag in (("1.0", "manylinux_2_28_aarch64"), ("2.0", "manylinux_2_28_x86_64")):
        made = fake_wheel(wheels, "dep-a", version)
        made.rename(wheels / made.name.replace("-any.whl", f"-{tag}.whl"))
    this = replace(both_cell(), torch_requirements=("torch==9.0.0",), feature_steps=())
    resolver = functools.partial(resolving.uv_resolver, extra=["--no-index"])
    pins = {
        platform: [
            p.requirement
            for p in resolving.resolve(this, resolver, "", wheels, platform).groups["torch"]
        ]
        for platform in (AMD64, ARM64)
    }
    assert pins == {AMD64: ["dep-a==2.0", "torch==9.0.0"], ARM64: ["dep-a==1.0", "torch==9.0.0"]}
