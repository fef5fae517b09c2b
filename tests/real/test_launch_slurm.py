"""`imagekit launch --scheduler slurm` submitted for real to a one-node Slurm on this machine
(.ci/slurm-one-node.sh: Debian's slurm-wlm and munge, started as root).

Pyxis/enroot and Apptainer are not packaged here, so the script's container is swapped for
`docker run` of the session's CPU test image through IMAGEKIT_LAUNCHER. What runs for real:
the generated sbatch script under sbatch, its directives, both srun steps, the node check of
/dev/shm, the self-check inside the image, the head-node lookup and torchrun's c10d rendezvous
(one node, one process: gloo). Not exercised: Pyxis's and Apptainer's options, GPUs, NCCL
transports, memlock, and more than one node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devkit.realengine import DOCKER, imagekit

from ..conftest import ROOT
from .conftest import TAG

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TRAIN = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {total.item()},"
      f" NCCL_SOCKET_IFNAME={os.environ.get('NCCL_SOCKET_IFNAME')}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def slurm() -> None:
    if os.geteuid() != 0 or not (shutil.which("apt-get") or shutil.which("slurmctld")):
        pytest.skip("a one-node Slurm needs root and Debian's slurm-wlm packages")
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "slurm-one-node.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if not shutil.which("sbatch"):
        pytest.skip(f"Slurm could not be installed: {result.stderr[-2000:]}")
    assert result.returncode == 0, result.stdout + result.stderr


def submit(
    project: Path,
    folder: Path,
    docker_shm: str | None,
    launch: tuple[str, ...] = (),
    docker: tuple[str, ...] = (),
) -> tuple[int, str]:
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN, encoding="utf-8")
    result = imagekit(
        "launch", "--scheduler", "slurm", "--nodes", "1", "--gpus-per-node", "0",
        "--cell", "cpu-*", "--profile", "multi-node-ethernet", "--shm-size", "1Gi",
        "--checks", "stack,ddp", "--name", "smoke", "--out", str(folder), *launch,
        "--", "train.py", "--note", "it's",
        cwd=project,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    script = folder / "smoke.pyxis.sbatch"
    assert TAG in script.read_text()
    shm = ["--shm-size", docker_shm] if docker_shm else []
    launcher = [
        DOCKER, "run", "--rm", "--network", "host", *shm, *docker,
        "-v", f"{folder}:{folder}", "-w", str(folder),
        "-e", "NCCL_IB_DISABLE", "-e", "NCCL_SOCKET_IFNAME", TAG,
    ]  # fmt: skip
    env = {**os.environ, "IMAGEKIT_LAUNCHER": " ".join(launcher)}
    # Submitted from the job's folder: $SLURM_SUBMIT_DIR is where sbatch ran, and the
    # container mounts the folder (Pyxis mounts $SLURM_SUBMIT_DIR the same way).
    job = subprocess.run(
        ["sbatch", "--wait", "--parsable", f"--chdir={folder}", str(script)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    job_id = job.stdout.strip().split(";")[0]
    output = (folder / f"smoke-{job_id}.out").read_text(encoding="utf-8")
    return job.returncode, output


def test_the_sbatch_script_self_checks_then_trains(
    slurm: None, project: Path, tmp_path: Path
) -> None:
    code, output = submit(project, tmp_path / "job", docker_shm="2g")
    assert code == 0, output
    assert "imagekit launch: checking 1 nodes" in output
    assert "2 passed, 0 failed" in output, output  # stack and ddp, in the image
    assert output.index("2 passed, 0 failed") < output.index("rank 0 of 1: sum 1.0")
    assert "NCCL_SOCKET_IFNAME=^docker,lo" in output  # the profile's env reached the ranks


def test_a_node_with_too_little_shm_fails_before_training(
    slurm: None, project: Path, tmp_path: Path
) -> None:
    code, output = submit(project, tmp_path / "job", docker_shm=None)  # Docker's 64 MB
    assert code != 0
    assert "/dev/shm has 65536 KiB; profile multi-node-ethernet needs 1Gi" in output
    assert "rank 0" not in output
    assert "rendezvous at" not in output


def node_name() -> str:
    return subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True
    ).stdout.split()[0]


def scontrol(*args: str) -> str:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_a_node_whose_preflight_fails_drains_itself_with_the_reason(
    slurm: None, project: Path, tmp_path: Path
) -> None:
    node = node_name()
    assert "DRAIN" not in scontrol("show", "node", node)  # a clean start
    # ddp's rank 1 dies in the container; Pyxis runs the container as the job's user (root
    # here), so the container may write its report into the submit folder.
    fault = ("--user", "0:0", "-e", "IMAGEKIT_SELFCHECK_FAULT=ddp-die")
    try:
        code, output = submit(
            project, tmp_path / "job", "2g", launch=("--drain-on-fail",), docker=fault
        )
        shown = scontrol("show", "node", node)
        reasons = subprocess.run(
            ["sinfo", "-R", "-h", "-o", "%N|%200E"], capture_output=True, text=True, check=True
        ).stdout
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
    assert code != 0
    assert "rank 0 of 1: sum" not in output  # no training
    state = next(w for w in shown.split() if w.startswith("State="))
    assert "DRAIN" in state, shown
    reason = "imagekit preflight: ddp failed: ddp: gloo (2 ranks): rank 1 died with exit code 3"
    assert f"Reason={reason}" in shown, shown
    assert f"{node}|{reason}" in reasons, reasons
    assert f"imagekit launch: drained {node}: {reason}" in output
    assert "DRAIN" not in scontrol("show", "node", node).split("Reason")[0]  # resumed
    print(f"drained {node}: {reason}")
