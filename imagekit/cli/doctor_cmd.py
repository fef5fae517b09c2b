"""`imagekit doctor`: what this machine has of what the selected cells need (docs/doctor.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from imagekit import terminal
from imagekit.cli.common import (
    docker_option,
    examples,
    filter_options,
    json_option,
    json_to_stdout,
    list_option,
    selection_from,
    write_json,
)
from imagekit.errors import EngineError


@click.command(
    epilog=examples(
        "imagekit doctor                                # the machine, for every cell",
        "imagekit doctor --cuda 12.6 --os debian12       # for those cells only",
        "imagekit doctor --push                         # and what a push needs",
        "imagekit doctor --registry 127.0.0.1:5000 --json -",
    )
)
@filter_options
@click.option(
    "--push",
    is_flag=True,
    help="Also require what `imagekit build --push` needs: the cells' registries answering "
    "(with a login where they ask for one) and oras.",
)
@list_option(
    "--registry",
    "registries",
    metavar="HOST[,...]",
    help="Registries to check (and require) instead of the cells' own, e.g. 127.0.0.1:5000.",
)
@click.option("--attest", is_flag=True, help="Also require cosign (`imagekit test --attest`).")
@click.option(
    "--gpu", is_flag=True, help="Also require a GPU, its driver and the engine's GPU runtime."
)
@docker_option
@json_option("Write every check as JSON (docs/doctor.md).")
def doctor(**kwargs: Any) -> None:
    """Check the engine and its image store, buildx and its driver, the registry, QEMU for
    the foreign platform, cosign, oras and the GPUs: each ok, or the fix.

    Exit 0 when everything the selected cells need is there (optional checks may warn);
    exit 5 when something they need is missing. Without a matrix here it checks the
    machine alone."""
    from imagekit import readiness

    needs = readiness.needs_of(
        *_cells_and_where(kwargs),
        push=kwargs["push"],
        registries=kwargs["registries"],
        attest=kwargs["attest"],
        gpu=kwargs["gpu"],
    )
    checks = readiness.judge(readiness.gather(needs, kwargs["docker_cli"]), needs)
    json_path = kwargs["json_path"]
    # with --json -, stdout is the JSON alone and the lines for people go to stderr
    terminal.echo(readiness.lines(checks), err=json_to_stdout(json_path))
    if json_path is not None:
        write_json(json_path, readiness.report(checks, needs))
    missing = [c.name for c in checks if c.status == readiness.MISSING]
    if missing:
        raise EngineError(f"not ready: {', '.join(missing)} missing (each line above says the fix)")
    warned = sum(c.status == readiness.WARN for c in checks)
    tail = f" ({warned} optional warning{'s' if warned != 1 else ''})" if warned else ""
    terminal.echo(
        f"ready: everything the selection needs is here{tail}", err=json_to_stdout(json_path)
    )


def _cells_and_where(kwargs: dict[str, Any]) -> tuple[list[Any], str]:
    """The selected cells and where they come from; none (and no error) where no matrix is
    here and none was named: doctor is the first thing a new machine runs."""
    selection = selection_from(kwargs)
    if not selection.envs and not Path("envs").is_dir():
        return [], ""
    where = ", ".join(str(p) for p in selection.envs) or "envs/"
    return selection.cells(), where
