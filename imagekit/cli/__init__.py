"""Command line: the `imagekit` group, and `main`, the one place that exits.

Thin: each command, in its command module (cli/*_cmd.py), turns click's values into typed
objects (a `<type>_from(values)` function each) and calls one function. Errors are
ImagekitError subclasses with an exit code each.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from imagekit import __version__, terminal
from imagekit.cli import (
    build_cmd,
    doctor_cmd,
    imagetest_cmd,
    init_cmd,
    launch_cmd,
    matrix_cmd,
    supply_cmd,
)
from imagekit.contract import exits
from imagekit.contract.text import escape
from imagekit.errors import ImagekitError
from imagekit.urls import mask


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


# The commands, in their command modules; those import cli.common and cli.params, never
# this module, so the group is whole once this module is imported.
for _command in (
    matrix_cmd.render,
    matrix_cmd.list_cells,
    matrix_cmd.matrix,
    matrix_cmd.compat,
    build_cmd.build,
    supply_cmd.sbom,
    supply_cmd.verify,
    build_cmd.lock,
    build_cmd.base_group,
    imagetest_cmd.test_image,
    build_cmd.stage,
    launch_cmd.launch,
    doctor_cmd.doctor,
    init_cmd.init,
):
    cli.add_command(_command)


if __name__ == "__main__":
    main()
