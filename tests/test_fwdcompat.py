"""Driver verdicts agree: NVIDIA_REQUIRE_CUDA (what the container runtime enforces), the
io.imagekit.min-driver label, the entrypoint's forward-compatibility decision and the
self-check's driver check, for every CUDA row, both flavors and real hosts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.contract import driver as driver_rules
from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat
from imagekit.runtime import fwdcompat

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"
RTX = "NVIDIA GeForce RTX 4090"

# (driver, the CUDA version that driver reports, NVML brand, device name)
HOSTS = [
    ("470.256.02", "11.4", "tesla", "Tesla T4"),
    ("525.60.13", "12.0", "nvidia", "NVIDIA A100-SXM4-80GB"),
    ("535.104.05", "12.2", "nvidia", H100),
    ("535.104.05", "12.2", "geforce", RTX),
    ("550.127.05", "12.4", "nvidia", H100),
    ("570.124.06", "12.8", "nvidia", "NVIDIA B200"),
    ("580.95.05", "13.0", "nvidia", H100),
    ("595.71.05", "13.2", "geforce", "NVIDIA GeForce RTX 5090"),
]


def runtime_accepts(require: str, driver: str, driver_cuda: str, brand: str) -> bool:
    """libnvidia-container's NVIDIA_REQUIRE_* semantics: space-separated constraints are
    ORed, comma-separated ones ANDed; `cuda` is the driver's CUDA version."""

    def holds(constraint: str) -> bool:
        key, op, value = _split(constraint)
        if key == "brand":
            return brand == value
        have = driver_rules.version_tuple(driver_cuda if key == "cuda" else driver)
        want = driver_rules.version_tuple(value)
        return {">=": have >= want, "<": have < want}[op]

    return any(all(holds(c) for c in group.split(",")) for group in require.split())


def _split(constraint: str) -> tuple[str, str, str]:
    for op in (">=", "<", "="):
        if op in constraint:
            key, value = constraint.split(op, 1)
            return key, op, value
    raise AssertionError(constraint)


@pytest.mark.parametrize("version", list(compat.load().cuda))
@pytest.mark.parametrize("flavor", ["slim", "nvidia"])
def test_runtime_label_entrypoint_and_selfcheck_agree(version: str, flavor: str) -> None:
    row = compat.load().cuda[version]
    require = row.require_cuda(forward=flavor == "nvidia")
    assert require.split()[0] == f"cuda>={row.major}.0"
    assert row.min_driver == driver_rules.MAJOR_DRIVER_FLOOR[row.major]
    for driver, driver_cuda, brand, name in HOSTS:
        native = driver_rules.driver_problem(driver, row.min_driver, version) is None
        decision = fwdcompat.decide(
            driver,
            row.min_driver,
            (name,),
            row.toolkit_driver if flavor == "nvidia" else None,
            row.forward_branches if flavor == "nvidia" else (),
        )
        starts = runtime_accepts(require, driver, driver_cuda, brand)
        assert starts == (native or decision.enable), (driver, brand)
        if decision.enable:  # the self-check then passes on the compat libcuda
            assert (
                driver_rules.driver_problem(driver, row.min_driver, version, row.toolkit_driver)
                is None
            )
        elif not native:
            assert decision.reason and driver_rules.driver_problem(driver, row.min_driver, version)


def test_cuda13_nvidia_image_starts_on_r535_datacenter_but_not_on_geforce() -> None:
    row = compat.load().cuda["13.0"]
    assert 535 in row.forward_branches
    decision = fwdcompat.decide("535.104.05", row.min_driver, (H100,), "580.126.20", (535,))
    assert decision.enable and "forward compatibility" in decision.reason
    refused = fwdcompat.decide("535.104.05", row.min_driver, (RTX,), "580.126.20", (535,))
    assert not refused.enable and "data-center" in refused.reason
    slim = fwdcompat.decide("535.104.05", row.min_driver, (H100,), None, ())
    assert not slim.enable and "no CUDA forward-compatibility package" in slim.reason
    other = fwdcompat.decide("545.23.08", row.min_driver, (H100,), "580.126.20", (535, 550))
    assert not other.enable and "R545" in other.reason


def test_labels_carry_the_branches_only_for_the_nvidia_flavor() -> None:
    cells = {c.id: c for c in load_cells([ROOT / "envs"])}
    nvidia = dict(cells["pytorch-train-cu130-torch2.11.0-py3.12-ubuntu24.04-nvidia"].labels)
    slim = dict(cells["pytorch-train-cu130-torch2.11.0-py3.12-ubuntu24.04-slim"].labels)
    assert nvidia["io.imagekit.forward-branches"] == "535 550 565 570 575"
    assert slim["io.imagekit.forward-branches"] == ""
    env = dict(cells["pytorch-train-cu130-torch2.11.0-py3.12-ubuntu24.04-slim"].env)
    assert env["NVIDIA_REQUIRE_CUDA"] == "cuda>=13.0"


def fake_nvidia(tmp_path: Path, driver: str, model: str, compat_lib: str | None) -> Path:
    proc = tmp_path / "proc"
    (proc / "gpus" / "0000:00:04.0").mkdir(parents=True)
    (proc / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Jul 1 2025\n"
    )
    (proc / "gpus" / "0000:00:04.0" / "information").write_text(f"Model: \t\t {model}\nIRQ: 1\n")
    lib = tmp_path / "compat"
    lib.mkdir()
    if compat_lib:
        (lib / f"libcuda.so.{compat_lib}").write_bytes(b"")
    return tmp_path


def test_readers_parse_the_driver_files(tmp_path: Path) -> None:
    root = fake_nvidia(tmp_path, "535.104.05", H100, "580.126.20")
    assert fwdcompat.read_driver(str(root / "proc" / "version")) == "535.104.05"
    assert fwdcompat.read_gpu_names(str(root / "proc/gpus/*/information")) == (H100,)
    assert fwdcompat.read_compat_driver(str(root / "compat")) == "580.126.20"
    assert fwdcompat.read_compat_driver(str(tmp_path / "absent")) is None


def test_main_prints_exports_the_entrypoint_evals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_nvidia(tmp_path, "535.104.05", H100, "580.126.20")
    labels = tmp_path / "labels.json"
    labels.write_text(
        '{"io.imagekit.min-driver": "580.65.06", "io.imagekit.forward-branches": "535 550"}'
    )
    monkeypatch.setattr(fwdcompat, "PROC_DRIVER", str(root / "proc" / "version"))
    monkeypatch.setattr(fwdcompat, "PROC_GPUS", str(root / "proc/gpus/*/information"))
    monkeypatch.setattr(fwdcompat, "COMPAT_DIR", str(root / "compat"))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/lib64")
    assert fwdcompat.main(str(labels)) == 0
    out, err = capsys.readouterr()
    assert f"export LD_LIBRARY_PATH={root / 'compat'}:/usr/local/cuda/lib64" in out
    assert "export IMAGEKIT_FORWARD_COMPAT=580.126.20" in out
    assert "using CUDA forward compatibility" in err
    # a new enough driver: nothing to export, nothing to say
    fake_nvidia(tmp_path / "new", "580.95.05", H100, "580.126.20")
    monkeypatch.setattr(fwdcompat, "PROC_DRIVER", str(tmp_path / "new" / "proc" / "version"))
    fwdcompat.main(str(labels))
    assert capsys.readouterr() == ("", "")


def run_entrypoint(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    show = "import os; print(os.environ.get('LD_LIBRARY_PATH'), os.environ.get('IMAGEKIT_FORWARD_COMPAT'))"
    return subprocess.run(
        ["/bin/sh", str(script), sys.executable, "-c", show],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )


@pytest.mark.subprocess
def test_the_entrypoint_enables_forward_compat_and_the_command_sees_it(tmp_path: Path) -> None:
    """The real entrypoint, run by /bin/sh, with its system paths pointed at a fake R535 host
    with an H100 and an image carrying the CUDA 13 compat libcuda."""
    root = fake_nvidia(tmp_path, "535.104.05", H100, "580.126.20")
    labels = tmp_path / "labels.json"
    labels.write_text(
        '{"io.imagekit.min-driver": "580.65.06", "io.imagekit.forward-branches": "535 550"}'
    )
    decide = (
        f"{sys.executable} -c 'import imagekit.runtime.fwdcompat as f; "
        f'f.PROC_DRIVER="{root}/proc/version"; f.PROC_GPUS="{root}/proc/gpus/*/information"; '
        f'f.COMPAT_DIR="{root}/compat"; f.main("{labels}")\''
    )
    text = (ROOT / "templates" / "context" / "entrypoint.sh").read_text()
    assert "/opt/venv/bin/python -m imagekit.runtime.fwdcompat" in text
    text = (
        text.replace("/opt/venv/bin/python -m imagekit.runtime.fwdcompat", decide)
        .replace("/usr/local/cuda/compat", f"{root}/compat")
        .replace("/proc/driver/nvidia/version", f"{root}/proc/version")
    )
    script = tmp_path / "entrypoint.sh"
    script.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}
    result = run_entrypoint(script, env)
    assert result.stdout.split() == [f"{root}/compat:/usr/local/cuda/lib64", "580.126.20"]
    assert "using CUDA forward compatibility" in result.stderr
    # the user's own choice wins: a set IMAGEKIT_FORWARD_COMPAT skips the decision
    result = run_entrypoint(script, {**env, "IMAGEKIT_FORWARD_COMPAT": "off"})
    assert result.stdout.split() == ["/usr/local/cuda/lib64", "off"] and result.stderr == ""


@pytest.mark.subprocess
def test_without_a_compat_dir_the_entrypoint_never_starts_python() -> None:
    """Slim images (and this machine) have no /usr/local/cuda/compat: CMD runs unchanged."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    result = run_entrypoint(ROOT / "templates" / "context" / "entrypoint.sh", env)
    assert result.stdout.split() == ["None", "None"] and result.stderr == ""
