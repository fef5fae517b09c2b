"""The commands that read the matrix and build nothing: render, list, matrix and compat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from imagekit import terminal
from imagekit.cli.common import (
    examples,
    filter_options,
    json_option,
    json_to_stdout,
    list_option,
    selection_from,
    write_json,
)
from imagekit.cli.params import (
    ARM64_RUNNER_LABEL,
    IMAGE_REF,
    OUT_DIR,
    RUNNER_LABEL,
    TORCH_VERSION,
    URL,
)

EPILOG_RENDER = """\b
Examples:
  imagekit render                      # write dockerfiles/<cell>/Dockerfile for every cell
  imagekit render --cuda 12.6          # only the CUDA 12.6 cells
  imagekit render --check              # CI: fail with a diff if committed files are stale
"""


@click.command(epilog=EPILOG_RENDER)
@filter_options
@click.option(
    "--out",
    type=OUT_DIR,
    default=Path("dockerfiles"),
    show_default=True,
    help="Folder for dockerfiles/<cell>/Dockerfile.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 4 with a diff if stale (package locks too).",
)
@click.option(
    "--syntax",
    default=None,
    type=IMAGE_REF,
    metavar="IMAGE",
    help="Opt into a '# syntax=IMAGE' line (pulls that frontend at build time).",
)
def render(**kwargs: Any) -> None:
    """Render one Dockerfile per selected cell."""
    from imagekit.render import dockerfile as render_mod

    selection = selection_from(kwargs)
    terminal.echo(render_mod.command(selection, kwargs["out"], kwargs["syntax"], kwargs["check"]))


@click.command(
    name="list",
    epilog=examples(
        "imagekit list",
        "imagekit list --cuda 12.8,13.0 --flavor slim",
        "imagekit list --json - | jq -r '.[].id'     # the cells as JSON (docs/cli.md)",
    ),
)
@filter_options
@json_option("Write the cells as JSON too: one object per cell, every field of the cell.")
def list_cells(json_path: Path | None, **kwargs: Any) -> None:
    """Print the selected cells as a table (with --json, as JSON too)."""
    from imagekit.render.ci import cells_json, matrix_table

    cells = selection_from(kwargs).cells()
    if json_path is not None:
        write_json(json_path, cells_json(cells))
    if not json_to_stdout(json_path):
        terminal.echo(matrix_table(cells))


# `matrix --format json` printed what `list --json -` prints; it still does, with a note,
# so that `--json` is the one name for a command's JSON and `matrix` the CI files' emitter.
MATRIX_FORMATS = ["github", "github-build", "github-merge", "bake"]


@click.command(
    short_help="Print a GitHub Actions matrix or a bake file of the cells.",
    epilog=examples(
        "imagekit matrix --format github --cuda 12.6",
        "imagekit matrix --format github-build --arm64-runner ubuntu-24.04-arm",
        "imagekit matrix --format bake > docker-bake.json",
    ),
)
@filter_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice([*MATRIX_FORMATS, "json"], case_sensitive=False),
    default=None,
    metavar=f"[{'|'.join(MATRIX_FORMATS)}]",
    help="github: a strategy matrix of the cells (self-test jobs); github-build: one entry "
    "per build job; github-merge: the cells whose platforms are built apart and merged into "
    "one index; bake: a docker-bake file. The cells as JSON: `imagekit list --json -`.",
)
@click.option(
    "--gpu-runner",
    default="gpu",
    type=RUNNER_LABEL,
    show_default=True,
    help="runs-on label for self-test jobs (github formats).",
)
@click.option(
    "--arm64-runner",
    default=None,
    type=ARM64_RUNNER_LABEL,
    metavar="LABEL",
    help="runs-on label of native Linux arm64 runners (e.g. ubuntu-24.04-arm): each platform "
    "builds on its own runner, then one index is merged. Default: arm64 builds under QEMU on "
    "the x86-64 runner, 6-8.5x slower per step (github formats).",
)
def matrix(**kwargs: Any) -> None:
    """Print the selected cells as the data CI reads, on stdout: a GitHub Actions strategy
    matrix (--format github, github-build, github-merge) or a docker-bake file (bake)."""
    from imagekit.render import ci as emit

    fmt = kwargs["fmt"] or "json"
    if fmt == "json":
        terminal.echo(
            "imagekit: note: the cells as JSON are now `imagekit list --json -`; "
            "`imagekit matrix` needs --format " + "|".join(MATRIX_FORMATS),
            err=True,
        )
    cells = selection_from(kwargs).cells()
    github = {
        "github": emit.github_matrix,
        "github-build": emit.github_builds,
        "github-merge": emit.github_merges,
    }
    if fmt == "json":
        data: Any = emit.cells_json(cells)
    elif fmt in github:
        data = github[fmt](cells, kwargs["gpu_runner"], kwargs["arm64_runner"] or "")
    else:
        data = emit.bake(cells)
    write_json(Path("-"), data)


@click.group()
def compat() -> None:
    """Inspect or refresh the compatibility data."""


@compat.command(
    name="show",
    epilog=examples(
        "imagekit compat show                                # the tables",
        "imagekit compat show --driver 535.104.05 --gpu sm_90  # what runs on my host?",
        "imagekit compat show --gpu 'RTX 5090'",
        "imagekit compat show --platform linux/arm64           # Grace nodes",
    ),
)
@click.option("--driver", default=None, help="Host driver version, as nvidia-smi prints it.")
@click.option("--gpu", default=None, help="Compute capability (sm_90, 9.0) or a model (H100).")
@click.option(
    "--platform",
    type=click.Choice(["linux/amd64", "linux/arm64"], case_sensitive=False),
    default="linux/amd64",
    show_default=True,
    help="Whose builds: the x86-64 or the aarch64 (Grace) ones.",
)
def compat_show(driver: str | None, gpu: str | None, platform: str) -> None:
    """Print the tables, or which torch x CUDA builds run on a driver and GPU, and why not."""
    from imagekit.matrix.compat_show import show

    terminal.echo(show(driver=driver, gpu=gpu, platform=platform))


@compat.command(
    name="refresh",
    epilog=examples(
        "imagekit compat refresh            # print the diff",
        "imagekit compat refresh --write    # and write it",
        "imagekit compat refresh --torch 2.16.0 --index https://download.pytorch.org/whl",
    ),
)
@click.option("--write", is_flag=True, help="Write the changes (default: only print the diff).")
@list_option(
    "--torch",
    "versions",
    item=TORCH_VERSION,
    metavar="VERSION[,...]",
    help="Only these torch versions (new ones too), comma list or repeated.",
)
@click.option(
    "--index",
    "torch_index",
    default=None,
    type=URL,
    metavar="URL",
    help="PyTorch-style wheel index to re-derive the variants from.",
)
def compat_refresh(write: bool, versions: tuple[str, ...], torch_index: str | None) -> None:
    """Re-derive Python range, PyPI-default CUDA and torchvision from PyPI (variants: --index)."""
    from imagekit.matrix.compat_refresh import refresh

    terminal.echo(refresh(versions=versions, write=write, torch_index=torch_index))
