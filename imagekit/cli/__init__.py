"""Command line. Thin: options -> a plain object -> one function per command.

Errors are ImagekitError subclasses with an exit code each; only `main` exits.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from imagekit import __version__, terminal
from imagekit.cli.common import (
    Selection,
    examples,
    filter_options,
    json_option,
    json_to_stdout,
    list_option,
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
from imagekit.contract import exits
from imagekit.contract.text import escape
from imagekit.errors import ImagekitError
from imagekit.urls import mask

EPILOG_RENDER = """\b
Examples:
  imagekit render                      # write dockerfiles/<cell>/Dockerfile for every cell
  imagekit render --cuda 12.6          # only the CUDA 12.6 cells
  imagekit render --check              # CI: fail with a diff if committed files are stale
"""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="imagekit")
def cli() -> None:
    """Render, build, test and publish a CUDA x PyTorch x Python image matrix.

    \b
    Typical flow:
      imagekit init                         # a matrix, a workflow, .dockerignore here
      imagekit doctor                       # is this machine ready for it
      imagekit list                         # what the matrix holds
      imagekit render                       # Dockerfiles into dockerfiles/
      imagekit build --cuda 12.6            # build those cells with BuildKit
      imagekit test IMAGE                   # self-check an image on this host
    """


@cli.command(epilog=EPILOG_RENDER)
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

    selection = Selection.of(kwargs)
    terminal.echo(render_mod.command(selection, kwargs["out"], kwargs["syntax"], kwargs["check"]))


@cli.command(
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

    cells = Selection.of(kwargs).cells()
    if json_path is not None:
        write_json(json_path, cells_json(cells))
    if not json_to_stdout(json_path):
        terminal.echo(matrix_table(cells))


# `matrix --format json` printed what `list --json -` prints; it still does, with a note,
# so that `--json` is the one name for a command's JSON and `matrix` the CI files' emitter.
MATRIX_FORMATS = ["github", "github-build", "github-merge", "bake"]


@cli.command(
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
    cells = Selection.of(kwargs).cells()
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


@cli.group()
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


def main(argv: list[str] | None = None) -> None:
    # A shell that backgrounds a job starts it with SIGINT ignored, and a child inherits
    # that; Ctrl-C (or a CI runner's cancel) must still stop the builds and clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli.main(args=argv, prog_name="imagekit", standalone_mode=False)
    except ImagekitError as exc:
        if getattr(exc, "report", ()):
            terminal.echo(exc.report)
        if os.environ.get("GITHUB_ACTIONS") == "true":  # each problem shows on its line
            for problem in getattr(exc, "records", ()):
                terminal.command(problem.annotation())
        terminal.echo([f"imagekit: error: {exc.lines[0]}", *exc.lines[1:]], err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        terminal.echo("imagekit: interrupted", err=True)
        sys.exit(exits.INTERRUPTED)
    except click.ClickException as exc:
        show_click_error(exc)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug: keep the traceback in a log, not on the user's screen
        log = write_crash_log(exc)
        terminal.echo(
            [
                f"imagekit: internal error: {type(exc).__name__}: {mask(str(exc))}",
                f"the traceback and versions are in {log}; please include it in a bug report",
            ],
            err=True,
        )
        sys.exit(exits.INTERNAL)
    sys.exit(exits.OK)


def show_click_error(exc: click.ClickException) -> None:
    """click's own error (a missing option, a bad value), written as click would, through
    the one writer: its message holds the value the user typed, so it is one line, except
    where click's message is imagekit's own words (the help of a group run bare, a missing
    option's choices)."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and ctx is not None:
        terminal.echo(ctx.get_help().splitlines(), err=True)
        return
    message = exc.format_message()
    if isinstance(exc, click.MissingParameter):
        said = [line.replace("\t", "    ") for line in message.split("\n")]
    else:
        said = [message]
    lines: list[str] = []
    if ctx is not None:
        lines += ctx.get_usage().splitlines()  # click's, from imagekit's own names
        if ctx.command.get_help_option(ctx) is not None:
            lines.append(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.")
        lines.append("")
    terminal.echo([*lines, f"Error: {said[0]}", *said[1:]], err=True)


def write_crash_log(exc: BaseException) -> Path:
    import platform
    import tempfile

    from imagekit.urls import mask_environment

    # masked as a whole: an argument, a variable or an exception's text may hold a URL with
    # credentials (--index-url https://user:token@host/simple); escaped value by value, so a
    # variable or an argument cannot forge a line of the log
    environment = [
        f"  {escape(k)}={escape(v)}" for k, v in mask_environment(dict(os.environ)).items()
    ]
    text = mask(
        "\n".join(
            [
                f"imagekit {__version__}, Python {platform.python_version()}, "
                + escape(" ".join(os.uname())),
                f"argv: {sys.argv!r}",
                "",
                "environment:",
                *environment,
                "",
                *traceback_lines(exc),
                "",
            ]
        )
    )
    fd, name = tempfile.mkstemp(prefix="imagekit-crash-", suffix=".log")
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(name)


def traceback_lines(exc: BaseException) -> list[str]:
    """The traceback as Python prints it, causes first, each exception's text escaped."""
    import traceback

    lines: list[str] = []
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None:
        lines += [*traceback_lines(cause), "", "The above exception led to:", ""]
    lines.append("Traceback (most recent call last):")
    lines += [
        line for chunk in traceback.format_tb(exc.__traceback__) for line in chunk.splitlines()
    ]
    return [*lines, f"{type(exc).__name__}: {escape(str(exc))}"]


def _register_optional_commands() -> None:
    # Commands in their own modules (one per command), imported lazily by click at call
    # time would complicate help; they are light to import, so register them here.
    from imagekit.cli.commands import register

    register(cli)


_register_optional_commands()


if __name__ == "__main__":
    main()
