"""The image `imagekit test` checks: refused where imagekit did not build it, and what its
container is told (the labels it promises, the GPUs it was given).
"""

from __future__ import annotations

import json
import os

from imagekit import terminal
from imagekit.contract import labels as label
from imagekit.contract import refs
from imagekit.contract.checks import (
    EMULATED_SLOWDOWN,
    ENV_EMULATED,
    ENV_GPUS,
    ENV_LABELS,
    gpus_value,
)
from imagekit.engine.emulation import is_foreign
from imagekit.engine.interface import ImageInfo, RunRegistryEngine
from imagekit.errors import UsageError


def checkable_image(engine: RunRegistryEngine, image: str) -> ImageInfo:
    """The image, pulled where the engine lacks it and it names a registry (a push without
    --load leaves nothing local); refused where it is nowhere or imagekit did not build it."""
    info = engine.inspect(image)
    if info is None and _names_registry(image):
        terminal.echo(f"{image} is not on this engine: pulling it", err=True)
        engine.pull(image)
        info = engine.inspect(image)
    if info is None:
        raise UsageError(f"image {image} is not on this engine; build it or `docker pull` it first")
    if not has_selfcheck(info.labels):
        raise UsageError(
            f"image {image} has no imagekit self-check: it has no io.imagekit.* labels, so "
            "imagekit did not build it. Build it with `imagekit build`, or start your "
            "Dockerfile FROM an image imagekit built (the self-check and its labels come along)"
        )
    return info


def _names_registry(image: str) -> bool:
    try:
        return bool(refs.parse(image).registry)
    except ValueError:
        return False


def has_selfcheck(labels: dict[str, str]) -> bool:
    """imagekit's images carry the self-check and say so with their io.imagekit.* labels."""
    return label.VERSION in labels or label.CELL in labels


def selfcheck_env(
    labels: dict[str, str],
    gpus: bool,
    extra: dict[str, str],
    count: int | None = None,
    architecture: str = "",
) -> dict[str, str]:
    """The self-check's container environment (contract/checks.py): what the image promises
    (its labels), and the GPUs given: none, all (a torch that sees none must fail) or N
    (torch, NVML and the device nodes must all see N); an image of another platform than
    this host's runs under emulation, which the self-check is told; then yours."""
    env = {ENV_LABELS: json.dumps(labels), ENV_GPUS: gpus_value(gpus, count)}
    if is_foreign(architecture):
        env[ENV_EMULATED] = f"qemu, a linux/{architecture} image on a {os.uname().machine} host"
    return {**env, **extra}


def slowdown_for(architecture: str) -> int:
    """How much longer the self-check of this image may take here."""
    return EMULATED_SLOWDOWN if is_foreign(architecture) else 1


def gpu_count(choice: str) -> int | None:
    """--gpus N: the number; auto, all and none name none."""
    return int(choice) if choice.isdigit() else None


def wants_gpus(choice: str, engine_has_runtime: bool) -> bool:
    """--gpus all (or N) on an engine without the NVIDIA runtime is a mistake, not a CPU
    run; --gpus 0 is --gpus none."""
    given = choice == "all" or (choice.isdigit() and int(choice) > 0)
    if given and not engine_has_runtime:
        raise UsageError(
            f"--gpus {choice}: this Docker engine has no NVIDIA runtime, so no GPU can reach "
            "the container. Install the NVIDIA Container Toolkit (nvidia-ctk runtime configure "
            "--runtime=docker, then restart dockerd), or run with --gpus none for a CPU check"
        )
    return given or (choice == "auto" and engine_has_runtime)
