"""`imagekit launch`: print or write the files that run COMMAND on N nodes with one cell's image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from imagekit import terminal
from imagekit.cli.common import (
    Selection,
    examples,
    filter_options,
    list_option,
    old_name_value,
    renamed,
    renamed_option,
    selection_from,
)
from imagekit.cli.params import ENV, IMAGE_REF, OUT_DIR
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell
from imagekit.matrix.profiles import PROFILE_ENV
from imagekit.platforms import PLATFORMS

if TYPE_CHECKING:
    from imagekit.launch import LaunchOptions

SCHEDULERS = ["kubernetes", "slurm"]  # where a launch runs: --scheduler


@click.command(
    short_help="Print a TrainJob/JobSet or sbatch script that runs COMMAND on N nodes.",
    epilog=examples(
        "imagekit launch --scheduler kubernetes --nodes 4 --gpus-per-node 8 \\",
        "    --cell 'cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia' -- train.py --epochs 3",
        "imagekit launch --scheduler kubernetes --kind jobset --profile multi-node-ib \\",
        "    --nodes 2 --gpus-per-node 8 --cell 'cu128-torch2.10.0-py3.12-*-nvidia' -- -m trainer",
        "imagekit launch --scheduler slurm --nodes 64 --gpus-per-node 8 --cuda 12.8 \\",
        "    --torch 2.10 --python 3.12 --flavor nvidia --out jobs/ -- train.py",
        "imagekit launch --scheduler slurm --kind apptainer ... -- train.py",
        "imagekit launch --scheduler slurm --platform linux/arm64 --partition gh200 \\",
        "    ... -- train.py",
    ),
)
@filter_options
# --engine, --scheduler's old name (an "engine" is Docker elsewhere), still taken; declared
# first, so that click has read it when --scheduler asks for its default
@renamed_option("--engine", "old_engine", type=click.Choice(SCHEDULERS, case_sensitive=False))
@click.option(
    "--scheduler",
    required=True,
    default=old_name_value("old_engine"),
    type=click.Choice(SCHEDULERS, case_sensitive=False),
    help="Where it runs.",
)
@click.option(
    "--kind",
    default=None,
    type=click.Choice(["trainjob", "jobset", "pyxis", "apptainer"], case_sensitive=False),
    help="kubernetes: trainjob (Kubeflow Trainer, default) or jobset; "
    "slurm: pyxis (default) or apptainer.",
)
@click.option("--nodes", required=True, type=int, help="Machines in the job.")
@click.option(
    "--gpus-per-node", required=True, type=int, help="GPUs per machine (one process each; 0: CPU)."
)
@click.option(
    "--profile",
    default=None,
    type=click.Choice(sorted(PROFILE_ENV), case_sensitive=False),
    help="NCCL, /dev/shm and RDMA settings (default: the cell's profile).",
)
@click.option("--name", default=None, help="Job name (default: train-<variant>-torch<v>-py<v>).")
@click.option("--namespace", default=None, help="Kubernetes namespace (default: kubectl's).")
@click.option(
    "--image",
    default=None,
    type=IMAGE_REF,
    metavar="REF",
    help="Run this image instead of the cell's first tag.",
)
@click.option(
    "--env",
    multiple=True,
    type=ENV,
    metavar="NAME=VALUE",
    help="Extra environment, e.g. NCCL_IB_HCA=mlx5.",
)
@click.option(
    "--shm-size", default=None, metavar="SIZE", help="/dev/shm, e.g. 64Gi (default: by profile)."
)
@click.option(
    "--rdma-resource",
    default=None,
    metavar="NAME[=COUNT]",
    help="RDMA device resource per node for multi-node-ib (default rdma/ib; none: omit).",
)
@list_option(
    "--checks",
    metavar="NAME[,...]",
    help="Self-check before training, on every node, comma list or repeated (default: stack,"
    "gpus,health,perf,ddp,links; with --gpus-per-node 0: stack,ddp; none: skip).",
)
@click.option(
    "--drain-on-fail",
    is_flag=True,
    help="slurm: a node whose preflight fails drains itself (scontrol, with the failing checks "
    "as the reason; needs a Slurm operator account).",
)
@click.option(
    "--platform",
    default=None,
    type=click.Choice(PLATFORMS, case_sensitive=False),
    help="The nodes' platform, one the cell's image has (default: the image's only one; an "
    "image of several runs on any). kubernetes: a kubernetes.io/arch node selector; slurm: "
    "each node checks its machine first.",
)
@click.option(
    "--partition",
    default=None,
    metavar="NAME",
    help="slurm: the partition to run in (#SBATCH --partition), e.g. one of arm64 nodes "
    "for a linux/arm64 image (GH200, GB200).",
)
@click.option(
    "--out",
    type=OUT_DIR,
    default=None,
    help="Write DIR/<name>.<kind>.yaml|sbatch instead of printing.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch(**kwargs: Any) -> None:
    """Print (or write with --out) launch files that run COMMAND with torchrun on N nodes.

    COMMAND is what torchrun runs, after `--`: a script and its arguments, or -m MODULE.
    Exactly one cell must match the filters. The image is pinned by digest when images.lock
    has one. Every node runs the self-check first, so a bad node fails before training.
    """
    renamed(kwargs, "--engine", "--scheduler", "old_engine", "scheduler")
    from imagekit import launch as launch_mod
    from imagekit import paths

    selection = selection_from(kwargs)
    spec = launch_mod.build(
        one_cell(selection.cells()), pins(selection), launch_options_from(kwargs)
    )
    if spec.nodes > 1 and spec.profile == "single-node":
        terminal.echo(
            "imagekit: note: profile single-node sets no NCCL transport for a multi-node job; "
            "pass --profile multi-node-ib, multi-node-ethernet or (GB200 NVL72) "
            "multi-node-nvlink",
            err=True,
        )
    if spec.profile == "multi-node-nvlink":
        terminal.echo(
            "imagekit: note: profile multi-node-nvlink needs an IMEX channel in every container "
            "and the nodes in one NVLink domain (rack): on Kubernetes add a ComputeDomain's "
            "resource claim (NVIDIA DRA driver) and pod affinity on nvidia.com/gpu.clique; on "
            "Slurm the hosts' nvidia-imex channel0 (NVIDIA_IMEX_CHANNELS=0 is baked). The "
            "self-check's links verdict fails without them",
            err=True,
        )
    text = launch_mod.render(spec)
    if kwargs["out"] is None:
        # the file's own lines; the launchers write no control character (every value is
        # quoted or escaped by the file's rules), so escaping changes nothing but a forgery
        terminal.echo(terminal.split(text))
        return
    path = kwargs["out"] / launch_mod.filename(spec)
    try:
        paths.write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"--out {kwargs['out']}: cannot write {path}: {exc.strerror}") from None
    terminal.echo(f"wrote {path}")


def one_cell(cells: list[Cell]) -> Cell:
    if len(cells) == 1:
        return cells[0]
    raise UsageError(
        f"{len(cells)} cells match; a launch needs exactly one (narrow with --cuda, --torch, "
        f"--python, --os, --flavor or --cell):",
        *(f"  {cell.id}" for cell in cells),
    )


def pins(selection: Selection) -> dict[str, str]:
    from imagekit.locks import images

    return images.read(selection.images_lock()).pins


def launch_options_from(values: Mapping[str, Any]) -> LaunchOptions:
    """The launch's options as given, from launch's options (launch/options.py checks them)."""
    from imagekit.launch import LaunchOptions

    return LaunchOptions(
        scheduler=values["scheduler"],
        kind=values["kind"],
        nodes=values["nodes"],
        gpus_per_node=values["gpus_per_node"],
        command=tuple(values["command"]),
        profile=values["profile"],
        name=values["name"],
        namespace=values["namespace"],
        image=values["image"],
        env=tuple(values["env"]),
        shm_size=values["shm_size"],
        rdma_resource=values["rdma_resource"],
        checks=",".join(values["checks"]) or None,
        drain_on_fail=values["drain_on_fail"],
        platform=values["platform"],
        partition=values["partition"],
    )
