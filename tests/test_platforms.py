"""The platform axis (issue 39): `platform:` in envs/*.yaml, the arm64 compatibility data,
the refusals at load, `compat show --platform` and what `compat refresh` reads for aarch64."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.cli import cli
from imagekit.contract.checks import CheckResult, failed, passed
from imagekit.errors import SpecError
from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat, compat_refresh
from imagekit.platforms import AMD64, ARM64

WriteEnv = Callable[..., Path]


def cell_block(
    cuda: str = "cpu",
    torch: str = "2.7.1",
    python: str = "3.11",
    os: str = "debian12",
    **more: object,
) -> str:
    block = {"cuda": cuda, "torch": torch, "python": python, "os": os, "flavor": "slim", **more}
    return yaml.safe_dump({"matrix": [block]}, default_flow_style=False)


def problems(folder: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_cells([folder])
    return info.value.problems


def test_a_cell_is_amd64_alone_unless_it_says_otherwise(write_env: WriteEnv) -> None:
    (cell,) = load_cells([write_env(cell_block())])
    assert cell.platforms == (AMD64,)
    (cell,) = load_cells([write_env(cell_block(platform=["linux/arm64", "linux/amd64"]))])
    assert cell.platforms == (AMD64, ARM64)  # one order, whatever the file's
    assert cell.id == "imagekit-cpu-torch2.7.1-py3.11-debian12-slim"  # one image per cell, not two


def test_platform_cascades_from_defaults_and_overrides(write_env: WriteEnv) -> None:
    text = "defaults:\n  platform: [linux/amd64, linux/arm64]\n" + cell_block()
    text += "overrides:\n  - match: {python: '3.11'}\n    platform: linux/arm64\n"
    (cell,) = load_cells([write_env(text)])
    assert cell.platforms == (ARM64,)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("arm64", "write 'linux/arm64'"),
        ("aarch64", "write 'linux/arm64'"),
        ("x86_64", "write 'linux/amd64'"),
        ("linux/riscv64", "a platform is one of linux/amd64, linux/arm64"),
        ([], "name at least one platform"),
    ],
)
def test_a_bad_platform_names_the_field_the_value_and_the_fix(
    write_env: WriteEnv, value: object, needle: str
) -> None:
    (msg,) = problems(write_env(cell_block(platform=value)))
    assert "envs/m.yaml:" in msg and "matrix[0].platform" in msg
    assert needle in msg


@pytest.mark.parametrize(
    ("cell", "needle"),
    [
        # PyPI's torch 2.5.1 has aarch64 wheels for 3.9-3.12 only (3.13 on x86-64)
        (
            {"torch": "2.5.1", "python": "3.13", "os": "debian13"},
            "torch 2.5.1 has no wheels for linux/arm64 for Python 3.13; it has 3.9",
        ),
        # onnxruntime-gpu's aarch64 wheels are CUDA 13 builds (1.29 on)
        (
            {"cuda": "13.0", "torch": "2.14.1", "python": "3.12", "features": ["onnx"]},
            "",
        ),
        (
            {"cuda": "12.8", "torch": "2.8.0", "features": ["onnx"]},
            "torch 2.8.0 has no CUDA 12.8 build for linux/arm64; it exists for linux/arm64 for "
            "CUDA 12.9 (cu129 only",
        ),
        (
            {"cuda": "cpu", "features": ["onnx-tensorrt"]},
            "",
        ),
        (
            {"cuda": "13.0", "torch": "2.14.1", "python": "3.12", "features": ["onnx-tensorrt"]},
            "feature onnx-tensorrt has no linux/arm64 packages for CUDA 13 cells (TensorRT's",
        ),
    ],
)
def test_a_combination_upstream_does_not_publish_for_arm64_is_refused_with_why(
    write_env: WriteEnv, cell: dict[str, object], needle: str
) -> None:
    folder = write_env(cell_block(**{**cell, "platform": ["linux/amd64", "linux/arm64"]}))
    if not needle:
        (loaded,) = load_cells([folder])
        assert loaded.platforms == (AMD64, ARM64)
        return
    (msg,) = problems(folder)
    assert msg.startswith("envs/m.yaml:")
    assert f"platform linux/arm64: {needle}" in msg
    assert "drop linux/arm64 from this cell's `platform`" in msg


def test_the_same_cell_on_amd64_alone_loads() -> None:
    data = compat.load()
    data.check_combination("12.8", "2.8.0", "3.11", "debian12")  # x86-64: the cu128 variant
    with pytest.raises(compat.CompatError, match="for linux/arm64"):
        data.check_combination("12.8", "2.8.0", "3.11", "debian12", ARM64)


@pytest.mark.parametrize(
    ("cuda", "torch", "platform", "index"),
    [
        ("cpu", "2.7.1", AMD64, "https://download.pytorch.org/whl/cpu"),
        ("cpu", "2.7.1", ARM64, None),  # PyPI's aarch64 wheel up to 2.10 is the CPU build
        ("cpu", "2.14.1", ARM64, "https://download.pytorch.org/whl/cpu"),  # PyPI's: CUDA 13.0
        ("13.0", "2.14.1", ARM64, None),
        ("12.6", "2.7.1", AMD64, None),
    ],
)
def test_where_torch_comes_from_follows_the_platform(
    cuda: str, torch: str, platform: str, index: str | None
) -> None:
    assert compat.load().torch_index(cuda, torch, platform) == index


def test_every_arm64_row_names_its_source() -> None:
    data = compat.load()
    for release in data.torch.values():
        assert release.arm64 is not None, release.version  # PyPI has aarch64 wheels of all
        assert "pypi" in release.arm64.source
        assert set(release.arm64.python) <= set(release.python) | {"3.8"}


def test_compat_show_platform_prints_the_arm64_tables() -> None:
    result = CliRunner().invoke(cli, ["compat", "show", "--platform", "linux/arm64"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "Builds for linux/arm64:"
    row = next(line for line in lines if line.startswith("2.7.1 "))
    assert "CPU" in row.split()  # PyPI's aarch64 wheel of 2.7.1 is a CPU build
    row = next(line for line in lines if line.startswith("2.14.1 "))
    assert "13.0" in row.split()
    assert any(line.startswith("onnx ") and "onnxruntime-gpu>=1.29" in line for line in lines)
    default = CliRunner().invoke(cli, ["compat", "show"]).output
    assert "imagekit compat show --platform linux/arm64" in default


def test_compat_show_refuses_an_unknown_platform_with_exit_2() -> None:
    result = CliRunner().invoke(cli, ["compat", "show", "--platform", "arm64"])
    assert result.exit_code == 2
    assert "'arm64' is not one of 'linux/amd64', 'linux/arm64'" in result.output


# -- compat refresh for aarch64 --------------------------------------------------------------
X86_ONLY = 'Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"'
LINUX = 'Requires-Dist: cuda-toolkit[cudart]==13.0.2; platform_system == "Linux"'


@pytest.mark.parametrize(
    ("line", "machine", "cuda"),
    [
        (X86_ONLY, "x86_64", "12.8"),
        (X86_ONLY, "aarch64", None),  # torch <= 2.10's aarch64 wheels: CPU builds
        (LINUX, "aarch64", "13.0"),  # 2.11 on: a CUDA 13 build for aarch64 too
        (LINUX + ' and python_version < "3.11"', "aarch64", None),
        ('Requires-Dist: cuda-toolkit==13.0.2; extra == "cuda"', "x86_64", None),
    ],
)
def test_cuda_pin_holds_only_where_its_markers_do(
    line: str, machine: str, cuda: str | None
) -> None:
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1\n{line}\n"
    assert compat_refresh.cuda_pin(metadata, machine, "3.11") == cuda


@pytest.mark.parametrize(
    ("filename", "machine", "python"),
    [
        ("torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl", "aarch64", "3.11"),
        ("torch-2.4.1-cp38-cp38-manylinux2014_aarch64.whl", "aarch64", "3.8"),
        ("torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl", "x86_64", None),
        ("torch-2.7.1-cp311-cp311-manylinux_2_28_x86_64.whl", "aarch64", None),
        ("torch-2.7.1-cp311-none-macosx_11_0_arm64.whl", "aarch64", None),
    ],
)
def test_wheel_names_are_read_per_machine(filename: str, machine: str, python: str | None) -> None:
    wheel = compat_refresh.linux_wheel(filename, machine)
    assert (wheel.python if wheel else None) == python


# -- emulation: which platforms this host's containers run --------------------------------
QEMU_PF = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: PF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""


@pytest.mark.parametrize(
    ("platform", "machine", "entries", "needle"),
    [
        (AMD64, "x86_64", {}, None),  # native
        (ARM64, "aarch64", {}, None),  # a Grace node builds arm64 natively
        (ARM64, "x86_64", {"qemu-aarch64": QEMU_PF}, None),  # Debian's qemu-user-static
        (ARM64, "x86_64", {}, "binfmt_misc is not mounted or empty"),
        (ARM64, "x86_64", {"qemu-aarch64": QEMU_PF.replace("flags: PF", "flags: P")}, "F flag"),
        (ARM64, "x86_64", {"qemu-aarch64": QEMU_PF.replace("enabled", "disabled")}, "registration"),
        (ARM64, "x86_64", {"python3.11": "enabled\nflags: \nmagic a70d0d0a\n"}, "apt-get"),
        (AMD64, "aarch64", {"qemu-aarch64": QEMU_PF}, "tonistiigi/binfmt --install amd64"),
    ],
)
def test_emulation_is_a_pure_function_of_the_machine_and_binfmt(
    platform: str, machine: str, entries: dict[str, str], needle: str | None
) -> None:
    from imagekit.engine.emulation import emulation_problem

    problem = emulation_problem(platform, machine, entries)
    if needle is None:
        assert problem is None
    else:
        assert problem is not None and needle in problem and platform in problem


@pytest.mark.parametrize(
    ("platform", "entries", "interpreter"),
    [
        (ARM64, {"qemu-aarch64": QEMU_PF}, "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"),
        # found by its ELF magic, whatever the registration is called
        (ARM64, {"arm64-runner": QEMU_PF}, "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"),
        (
            ARM64,
            {"qemu-aarch64": QEMU_PF.replace("flags: PF", "flags: P")},
            "",
        ),  # not in containers
        (ARM64, {"qemu-aarch64": QEMU_PF.replace("enabled", "disabled")}, ""),
        (AMD64, {"qemu-aarch64": QEMU_PF}, ""),  # another machine's registration
        (ARM64, {}, ""),
    ],
)
def test_the_interpreter_is_the_registration_containers_use(
    platform: str, entries: dict[str, str], interpreter: str
) -> None:
    from imagekit.engine.emulation import interpreter as interpreter_of

    assert interpreter_of(platform, entries) == interpreter


def test_binfmt_is_read_from_a_folder(tmp_path: Path) -> None:
    from imagekit.engine.emulation import read_binfmt

    (tmp_path / "register").write_text("")
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "qemu-aarch64").write_text(QEMU_PF)
    assert read_binfmt(tmp_path) == {"qemu-aarch64": QEMU_PF}
    assert read_binfmt(tmp_path / "absent") == {}


# -- the self-check under emulation ---------------------------------------------------------
X86_FLAGS = ["fpu", "sse2", "avx2", "avx512_vnni"]
ARM_FLAGS = ["fp", "asimd", "asimddp", "sve2", "i8mm", "bf16"]


@pytest.mark.parametrize(
    ("machine", "flags", "env", "found"),
    [
        ("x86_64", X86_FLAGS, {}, ""),
        ("aarch64", ARM_FLAGS, {}, ""),  # a Grace node
        ("aarch64", X86_FLAGS, {}, "aarch64 process on a CPU whose /proc/cpuinfo is x86-64's"),
        ("x86_64", ARM_FLAGS, {}, "x86_64 process on a CPU whose /proc/cpuinfo is Arm's"),
        ("aarch64", ARM_FLAGS, {"IMAGEKIT_EMULATED": "qemu"}, "the host said so"),  # QEMU 8.1+
        ("aarch64", [], {}, ""),  # flags not read: not guessed
    ],
)
def test_emulation_is_known_from_the_host_or_the_cpu(
    machine: str, flags: list[str], env: dict[str, str], found: str
) -> None:
    from imagekit.selfcheck.verdicts.emulated import emulation

    said = emulation(machine, flags, env)
    assert (found in said) if found else said == ""


# /proc/cpuinfo inside a linux/arm64 container under QEMU 11.1.3 on this x86-64 host
# (Features cut short; "(null)" is QEMU's own), and a Grace CPU's (Neoverse V2).
QEMU11_CPUINFO = """processor\t: 0
model name\t: ARMv8 Processor rev 0 (v8l)
BogoMIPS\t: 100.00
Features\t: fp asimd aes pmull sha1 sha2 crc32 atomics asimddp sve i8mm bf16 sve2 (null)
CPU implementer\t: 0x00
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0x051
CPU revision\t: 0
"""
GRACE_CPUINFO = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve i8mm bf16 sve2
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0
"""


@pytest.mark.parametrize(
    ("cpuinfo", "env", "found"),
    [
        (QEMU11_CPUINFO, {}, "implementer is 0x00"),
        (QEMU11_CPUINFO, {"IMAGEKIT_EMULATED": "qemu"}, "the host said so"),
        (GRACE_CPUINFO, {}, ""),
    ],
)
def test_qemus_made_up_arm_cpu_is_known_without_the_host_saying_so(
    cpuinfo: str, env: dict[str, str], found: str
) -> None:
    from imagekit.selfcheck.readers.cpuinfo import parse_cpuinfo
    from imagekit.selfcheck.verdicts.emulated import emulation

    cpu = parse_cpuinfo(cpuinfo)
    said = emulation("aarch64", cpu["flags"], env, cpu.get("implementer", ""))
    assert (found in said) if found else said == ""


def test_an_aarch64_process_runs_arms_int8_rule_whatever_cpuinfo_says() -> None:
    from imagekit.selfcheck.verdicts.int8 import int8_scheme

    assert int8_scheme(["avx2"]).name == "U8U8"  # x86 without VNNI: U8S8 saturates
    emulated = int8_scheme(["avx2"], "aarch64")  # the same host's cpuinfo, under QEMU
    assert emulated.name == "U8S8" and "Arm (emulated" in emulated.why
    assert int8_scheme(ARM_FLAGS, "aarch64").name == "U8S8"
    assert "Arm (i8mm)" in int8_scheme(ARM_FLAGS, "aarch64").why  # the best one it has


def test_imagekit_test_tells_an_image_of_another_platform_it_is_emulated() -> None:
    from imagekit.imagetest.image import selfcheck_env, slowdown_for

    native = selfcheck_env({}, False, {}, None, "amd64")
    foreign = selfcheck_env({}, False, {}, None, "arm64")
    assert "IMAGEKIT_EMULATED" not in native
    assert foreign["IMAGEKIT_EMULATED"].startswith("qemu, a linux/arm64 image on a x86_64")
    assert (slowdown_for("amd64"), slowdown_for("arm64"), slowdown_for("")) == (1, 10, 1)


def test_time_limits_grow_under_emulation_but_never_a_given_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imagekit.contract.check_table import BY_NAME
    from imagekit.selfcheck.run import processes

    seen: dict[str, float] = {}
    monkeypatch.setattr(processes, "run_check", lambda name, limit: seen.setdefault(name, limit))
    processes.run_all(["stack"], None, 1, lambda *a: None, False, slowdown=10)
    assert seen["stack"] == BY_NAME["stack"].limit_s * 10
    seen.clear()
    processes.run_all(["stack"], 30, 1, lambda *a: None, False, slowdown=10)
    assert seen["stack"] == 30


@pytest.mark.parametrize(
    ("cell", "needed"),
    [
        ({}, True),  # CPU, uv, Python 3.11: nothing else brings setuptools
        ({"compile": False}, False),
        ({"installer": "pip"}, False),  # pip's venv brings its own on 3.11
        ({"python": "3.12", "os": "ubuntu24.04"}, False),  # torch declares it from 3.12 on
        ({"cuda": "12.6"}, False),  # triton brings it
    ],
)
def test_torch_compile_gets_setuptools_where_nothing_else_brings_it(
    write_env: WriteEnv, cell: dict[str, object], needed: bool
) -> None:
    (loaded,) = load_cells([write_env(cell_block(**{"installer": "uv", **cell}))])
    assert ("setuptools" in loaded.torch_requirements) is needed


# -- a probe that crashes under emulation -----------------------------------------------------


def crashed_result() -> CheckResult:
    from imagekit.selfcheck.run.processes import _result

    return _result(-11, Path("/nonexistent"), "")  # what the runner makes of a SIGSEGV


@pytest.mark.parametrize(
    ("result", "under", "status"),
    [
        (crashed_result(), "the host said so (IMAGEKIT_EMULATED=linux/arm64)", "skipped"),
        (crashed_result(), "", "failed"),  # natively a crash is the image's
        (failed("onnxruntime differs from torch by 0.5"), "QEMU", "failed"),  # not a crash
        (failed("crashed: the word alone"), "QEMU", "failed"),  # no signal recorded
        (passed(), "QEMU", "passed"),
    ],
)
def test_a_crash_under_emulation_is_not_judged(
    result: CheckResult, under: str, status: str
) -> None:
    from imagekit.selfcheck.verdicts.emulated import unjudged_crash

    out = unjudged_crash(result, under)
    assert out.status.value == status
    if status == "skipped":
        assert out.reason.startswith("crashed: killed by signal SIGSEGV (11) under emulation")
        assert out.measurements["signal"] == "SIGSEGV" and out.measurements["emulated_crash"]


@pytest.mark.parametrize(
    ("require", "crash_under", "onnx"),
    [
        ([], "the host said so (IMAGEKIT_EMULATED=linux/arm64)", "skipped"),  # promise unprovable
        (["onnx"], "the host said so (IMAGEKIT_EMULATED=linux/arm64)", "failed"),  # asked for
        ([], "", "failed"),  # natively: the crash stands, and the promise is required
    ],
)
def test_an_images_promise_is_not_required_where_emulation_cannot_prove_it(
    require: list[str], crash_under: str, onnx: str
) -> None:
    from imagekit.selfcheck.run import judge
    from imagekit.selfcheck.verdicts.emulated import unjudged_crash

    crash = unjudged_crash(crashed_result(), crash_under)
    snap = {
        "format": 1,
        "selected": ["onnx"],
        "require": require,
        "labels": {"io.imagekit.features": "onnx"},
        "checks": {"onnx": {**crash.to_json(), "name": "onnx"}},
    }
    results = judge.judge(snap)
    assert results["onnx"].status.value == onnx
    assert judge.exit_code(results) == (0 if onnx == "skipped" else 1)  # imagekit test: 8
