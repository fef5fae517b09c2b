"""`imagekit launch`: files that run a command on N nodes with a cell's image.

options.py checks the options and resolves the image (pinned by digest from images.lock)
and the nodes' platform (one of the image's); kubernetes.py writes a TrainJob or JobSet (a
kubernetes.io/arch node selector), slurm.py an sbatch script for Pyxis or Apptainer (each
node checks its machine first). docs/launch-platforms.md describes the platform handling.
Pure functions from a LaunchSpec to text: nothing here contacts a cluster.
"""

from __future__ import annotations

from imagekit.launch import kubernetes, slurm
from imagekit.launch.options import LaunchOptions, LaunchSpec, build

__all__ = ["LaunchOptions", "LaunchSpec", "build", "filename", "render"]


def render(spec: LaunchSpec) -> str:
    return kubernetes.render(spec) if spec.scheduler == "kubernetes" else slurm.render(spec)


def filename(spec: LaunchSpec) -> str:
    """e.g. train-cu128-torch2-10-0-py3-12.trainjob.yaml or ....pyxis.sbatch"""
    suffix = "yaml" if spec.scheduler == "kubernetes" else "sbatch"
    return f"{spec.name}.{spec.kind}.{suffix}"
