"""Launch files run as written (issue 29, item 8): each generated sbatch script (Pyxis and
Apptainer) runs under bash with stand-ins for srun, apptainer, scontrol, enroot and hostname
that record what they received, and Slurm's variables set as Slurm sets them. Values with
commas, `=`, spaces, quotes, `$` and backslashes reach the container intact; two references
get two .sif files; the names the shell or the scheduler own are refused at the edge."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

from imagekit.launch import slurm
from imagekit.platforms import AMD64, ARM64

from .test_launch import render, run_main, spec_of

# Every character that has broken a launcher: Apptainer's --env splits at `,` and reads `=`;
# shells expand `$`, split at spaces, and quote with ' " and \.
HOSTILE = "a,b=c d 'e' \"f\" $HOME ${X:-y} `id` \\n\\ %s ;|&*? end "

# Each stand-in records its argv (one argument per line in .argv, for reading; NUL-separated
# in .argv0, byte for byte) and, for the container's commands, its environment
# (NUL-separated), under $RECORD.
RECORDER = """#!/bin/bash
n=$(ls "$RECORD" | wc -l)
printf '%s\\n' "$@" > "$RECORD/$n.$(basename "$0").argv"
printf '%s\\0' "$@" > "$RECORD/$n.$(basename "$0").argv0"
"""
SRUN = (
    RECORDER
    + """\
# Slurm passes the job's environment to the task; run the step on this one "node".
while [[ "${1:-}" == --* ]]; do shift; done
exec "$@"
"""
)
# Apptainer: `pull FILE URI` makes the file; `exec [opts] SIF CMD...` runs CMD with a clean
# environment plus the --env-file, sourced as shell as Apptainer does (nothing inherited).
APPTAINER = (
    RECORDER
    + """\
if [[ "$1" == pull ]]; then echo "$3" > "$2"; exit 0; fi
shift
env_file=""
while [[ "$1" == --* ]]; do
  case "$1" in
    --nv) shift ;;
    --env-file) env_file="$2"; shift 2 ;;
    --env) env_list+="${env_list:+,}$2"; shift 2 ;;  # Apptainer splits these at commas
    *) shift 2 ;;
  esac
done
[[ -f "$1" ]] || { echo "apptainer: no image $1" >&2; exit 255; }
shift
exec env -i PATH="$PATH" RECORD="$RECORD" ENV_LIST="${env_list:-}" bash -c '
  IFS=, read -r -a pairs <<< "$ENV_LIST"; unset ENV_LIST
  for pair in "${pairs[@]}"; do export "${pair%%=*}=${pair#*=}"; done
  set -a; [[ -z "$1" ]] || . "$1"; set +a; shift; exec "$@"' env "$env_file" "$@"
"""
)
INSIDE = RECORDER + 'env -0 > "$RECORD/$n.$(basename "$0").env"\n'
TOOLS = {
    "srun": SRUN,
    "apptainer": APPTAINER,
    "scontrol": RECORDER + "echo node-1; echo node-2\n",
    "enroot": RECORDER,
    "hostname": "#!/bin/bash\necho node-1\n",
    # inside the container: the self-check and torchrun record what they were given
    "python": INSIDE,
    "torchrun": INSIDE,
}


def stand_ins(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in TOOLS.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def sbatch(tmp_path: Path, text: str, submit: Path, job: str = "4242") -> Path:
    """Run the script as sbatch would on the first node; the folder of records."""
    result, record = run_sbatch(tmp_path, text, submit, job)
    assert result.returncode == 0, result.stderr
    return record


def run_sbatch(
    tmp_path: Path, text: str, submit: Path, job: str = "4242"
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the script as sbatch would on the first node, however it ends."""
    record = tmp_path / f"record-{job}"
    record.mkdir()
    script = tmp_path / f"job-{job}.sbatch"
    script.write_text(text)
    tools = tmp_path / "bin" if (tmp_path / "bin").is_dir() else stand_ins(tmp_path)
    env = {
        "PATH": f"{tools}:/usr/bin:/bin",
        "RECORD": str(record),
        "HOME": "/home/someone",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "node-[1-2]",
        "SLURM_JOB_ID": job,
        "SLURMD_NODENAME": "node-1",
        "SLURM_SUBMIT_DIR": str(submit),
    }
    result = subprocess.run(
        ["bash", str(script)], env=env, cwd=submit, capture_output=True, text=True, timeout=60
    )
    return result, record


def recorded(record: Path, tool: str, what: str = "argv") -> list[str]:
    """Each call's record of `tool`, in order, as written (no newline translation: a \\r in
    an argument stays)."""
    calls = sorted(record.glob(f"*.{tool}.{what}"), key=lambda p: int(p.name.split(".")[0]))
    return [p.read_bytes().decode("utf-8") for p in calls]


def argv_of(record: Path, tool: str) -> list[list[str]]:
    """Each call's arguments, byte for byte (newlines in them included)."""
    return [text.split("\0")[:-1] for text in recorded(record, tool, "argv0")]


def container_env(record: Path, tool: str) -> dict[str, str]:
    (text,) = recorded(record, tool, "env")
    return dict(item.split("=", 1) for item in text.split("\0") if item)


def job_text(kind: str, **changes: object) -> str:
    values: dict[str, object] = {
        "scheduler": "slurm",
        "kind": kind,
        "nodes": 2,
        "gpus_per_node": 8,
        "profile": "multi-node-ethernet",  # no memlock to raise here
        "shm_size": "1Mi",
        "env": (f"HOSTILE={HOSTILE}", "EMPTY=", "NCCL_DEBUG=INFO"),
        "command": ("train.py", "--name", "it's $HOME", "a,b=c"),
    }
    values.update(changes)
    return render(spec_of(**values))


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
def test_values_reach_the_container_byte_for_byte(tmp_path: Path, kind: str) -> None:
    submit = tmp_path / "submit"
    submit.mkdir()
    record = sbatch(tmp_path, job_text(kind), submit)
    for tool in ("python", "torchrun"):  # the preflight's self-check, then training
        env = container_env(record, tool)
        assert env["HOSTILE"] == HOSTILE, (tool, env.get("HOSTILE"))
        assert env["EMPTY"] == "" and env["NCCL_DEBUG"] == "INFO"
        assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo"  # the profile's, with its comma
    (torchrun,) = recorded(record, "torchrun")
    assert torchrun.splitlines() == [
        "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
        "--rdzv-endpoint=node-1:29500", "--rdzv-id=4242",
        "train.py", "--name", "it's $HOME", "a,b=c",
    ]  # fmt: skip
    sruns = [call.splitlines() for call in recorded(record, "srun")]
    assert len(sruns) == 3  # the machine check (on the host), the preflight, then training
    assert not [a for a in sruns[0] if a.startswith("--container") or a == "apptainer"]
    if kind == "pyxis":
        # Pyxis takes names; the values come from the job's environment, exported as written
        (names,) = [a.split("=", 1)[1] for a in sruns[2] if a.startswith("--container-env=")]
        assert set(names.split(",")) >= {"HOSTILE", "EMPTY", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME"}
    else:
        execs = [c.splitlines() for c in recorded(record, "apptainer") if c.startswith("exec")]
        assert len(execs) == 2 and all("--env-file" in e and "--env" not in e for e in execs)
        assert not list(submit.glob("imagekit-env-*"))  # the env file goes when the job ends


@pytest.mark.subprocess
def test_two_references_get_two_sif_files(tmp_path: Path) -> None:
    submit = tmp_path / "submit"
    submit.mkdir()
    sifs = []
    for job, image in [
        ("1", "ghcr.io/team-a/train:1.0"),
        ("2", "registry.example.com/team-b/train:1.0"),
        ("3", "ghcr.io/team-a/train:1.0@sha256:" + "ab" * 32),
    ]:
        record = sbatch(tmp_path, job_text("apptainer", image=image), submit, job)
        (pull,) = [c.splitlines() for c in recorded(record, "apptainer") if c.startswith("pull")]
        sif = Path(pull[1])
        assert sif.read_text().strip() == pull[2]  # this job pulled its own image
        assert all(sif.name in c for c in recorded(record, "apptainer") if c.startswith("exec"))
        sifs.append(sif.name)
    assert len(set(sifs)) == 3, sifs
    assert sifs[0].startswith("train_1.0-") and sifs[1].startswith("train_1.0-")
    # the same reference again reuses its file
    record = sbatch(tmp_path, job_text("apptainer", image="ghcr.io/team-a/train:1.0"), submit, "4")
    assert not [c for c in recorded(record, "apptainer") if c.startswith("pull")]


def test_sif_names_are_unique_per_full_reference() -> None:
    refs = [
        "ghcr.io/team-a/train:1.0",
        "registry.example.com/team-b/train:1.0",
        "ghcr.io/team-a/train:1.0@sha256:" + "ab" * 32,
        "ghcr.io/team-a/train:1.0@sha256:" + "cd" * 32,
        "ghcr.io/team-a/train_1.0",  # the same readable stem as train:1.0
    ]
    names = [slurm.sif_name(ref) for ref in refs]
    assert len(set(names)) == len(refs)
    assert all(n.endswith(".sif") and "/" not in n for n in names)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ("UID=1000", ["--env UID=1000", "the shell's own", "leave it out"]),
        ("BASH_ENV=/tmp/x", ["--env BASH_ENV=/tmp/x", "the shell's own"]),
        ("IFS=,", ["--env IFS=,", "the shell's own"]),
        ("PATH=/evil", ["--env PATH=/evil", "the shell's own"]),
        ("SLURM_NNODES=1", ["--env SLURM_NNODES=1", "scheduler", "sbatch -N 2 FILE"]),
        ("SRUN_CPUS_PER_TASK=4", ["scheduler"]),
        ("SLURMD_NODENAME=x", ["scheduler"]),
        ("PMIX_RANK=0", ["process manager"]),
        ("OMPI_COMM_WORLD_SIZE=2", ["process manager"]),
        ("LD_PRELOAD=/tmp/x.so", ["dynamic loader", "set it in the image"]),
        ("APPTAINER_BIND=/", ["container runtime"]),
        ("ENROOT_MOUNT_HOME=y", ["container runtime"]),
        ("IMAGEKIT_LAUNCHER=sh", ["imagekit's own"]),
        ("MASTER_ADDR=x", ["rendezvous"]),
    ],
)
def test_names_the_shell_or_the_scheduler_own_are_refused(
    env: str, words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(launch_args("--env", env), capsys)
    assert code == 2, err
    for word in words:
        assert word in err, (word, err)


def test_names_like_them_are_not(capsys: pytest.CaptureFixture[str]) -> None:
    for env in ("NCCL_IB_HCA=mlx5", "UIDX=1", "MY_SLURM_NOTE=x", "BASHFUL=1", "HOME_DIR=/x"):
        assert run_main(launch_args("--env", env), capsys)[0] == 0, env


@pytest.mark.parametrize(
    ("resource", "ok"),
    [
        ("nvidia.com/gpu=1", False),
        ("amd.com/gpu", False),
        ("nvidia.com/mig-1g.10gb", False),
        ("nvidia.com/gpu.shared", False),
        ("gpu.intel.com/i915", False),
        ("cpu", False),
        ("memory=1", False),
        ("ephemeral-storage", False),
        ("hugepages-2Mi=1", False),
        ("kubernetes.io/batch", False),
        ("rdma/ib", True),
        ("rdma/hca_shared_devices_a", True),
        ("nvidia.com/hostdev=8", True),
        ("nvidia.com/rdma_shared_device_a", True),
        ("openshift.io/mlnxnics=2", True),
    ],
)
def test_rdma_resource_is_checked_against_what_it_is_for(
    resource: str, ok: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(
        launch_args("--rdma-resource", resource, scheduler="kubernetes", profile="multi-node-ib"),
        capsys,
    )
    assert (code == 0) == ok, err
    if not ok:
        assert code == 2 and f"--rdma-resource {resource}" in err and "rdma/ib" in err


def launch_args(
    *extra: str, scheduler: str = "slurm", profile: str = "multi-node-ethernet"
) -> list[str]:
    return [
        "launch", "--scheduler", scheduler, "--nodes", "2", "--gpus-per-node", "8",
        "--profile", profile, "--cell", "cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia",
        *extra, "--", "train.py",
    ]  # fmt: skip


def test_a_value_with_a_newline_is_refused_before_it_reaches_a_heredoc() -> None:
    from imagekit.errors import UsageError

    with pytest.raises(UsageError, match="control character"):
        spec_of(scheduler="slurm", kind="apptainer", env=("X=a\nIMAGEKIT_ENV\nrm -rf ~",))


# -- each node's machine, checked on the host before any container -------------------------------

THIS_MACHINE = {"x86_64": AMD64, "aarch64": ARM64}.get(platform.machine())
OTHER_MACHINE = {AMD64: ARM64, ARM64: AMD64}.get(THIS_MACHINE or "")
needs_a_known_machine = pytest.mark.skipif(
    THIS_MACHINE is None, reason=f"this machine is {platform.machine()}, neither of the images'"
)


@pytest.mark.subprocess
@needs_a_known_machine
@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
@pytest.mark.parametrize("drain", [False, True], ids=["", "drain"])
def test_a_node_of_another_machine_ends_the_job_before_any_container(
    tmp_path: Path, kind: str, drain: bool
) -> None:
    # On x86_64: an arm64-only image (a GH200 or GB200 build) sent to this node.
    assert OTHER_MACHINE is not None
    submit = tmp_path / "submit"
    submit.mkdir()
    text = job_text(kind, platforms=(OTHER_MACHINE,), drain_on_fail=drain)
    result, record = run_sbatch(tmp_path, text, submit)
    assert result.returncode != 0
    arch = OTHER_MACHINE.partition("/")[2]
    for words in (
        f"node node-1 is {platform.machine()}",
        f"the image's platforms: {OTHER_MACHINE};",
        f"submit to a partition of {arch} nodes: --partition",
    ):
        assert words in result.stderr, (words, result.stderr)
    # nothing pulled, no container, no preflight, no training, and no node drained: the
    # node is fine, the job went to the wrong partition
    for tool in ("python", "torchrun", "apptainer", "enroot", "scontrol"):
        assert not recorded(record, tool), tool
    (srun,) = argv_of(record, "srun")
    assert srun[:2] == ["--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert srun[2:4] == ["bash", "-c"] and "uname -m" in srun[4]
    assert not list(submit.iterdir())  # no reports folder, no env file, no .sif


@pytest.mark.subprocess
@needs_a_known_machine
@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
@pytest.mark.parametrize("platforms", ["this", "both"])
def test_a_node_of_the_images_machine_passes_the_check(
    tmp_path: Path, kind: str, platforms: str
) -> None:
    assert THIS_MACHINE is not None
    submit = tmp_path / "submit"
    submit.mkdir()
    images = (THIS_MACHINE,) if platforms == "this" else (AMD64, ARM64)
    text = job_text(kind, platforms=images, drain_on_fail=True)
    result, record = run_sbatch(tmp_path, text, submit)
    assert result.returncode == 0, result.stderr
    assert "imagekit launch: checking the machine of 2 nodes" in result.stderr
    assert "is not" not in result.stderr and "not starting" not in result.stderr
    assert len(recorded(record, "python")) == 1 and len(recorded(record, "torchrun")) == 1
    if kind == "apptainer":
        (sif,) = submit.glob("*.sif")
        # an image of several platforms keeps a file per machine (apptainer pulls the host's)
        assert sif.name.endswith(f"-{platform.machine()}.sif") == (platforms == "both")
