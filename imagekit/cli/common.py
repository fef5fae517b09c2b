"""Options and helpers shared by the commands (kept apart so command modules can import
them without importing the CLI group)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from imagekit import terminal
from imagekit.cli.params import OUT_FILE, CommaList, flatten
from imagekit.errors import UsageError
from imagekit.locks.pinned import load_cells
from imagekit.matrix.catalog import Filters, select
from imagekit.matrix.cells import Cell


def examples(*lines: str) -> str:
    """An epilog click prints verbatim (\\b stops it re-wrapping the lines)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def filter_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--cuda/--torch/--python/--os/--flavor/--cell, comma lists or repeated; plus --envs and --lock
    (which must be an existing file: a mistyped one would build unpinned, silently)."""
    return _filter_options(func, lock_exists=True)


def filter_options_writing_lock(func: Callable[..., Any]) -> Callable[..., Any]:
    """filter_options for `imagekit lock`, which may make the --lock file."""
    return _filter_options(func, lock_exists=False)


def list_option(*decls: str, item: click.ParamType = click.STRING, **kwargs: Any) -> Any:
    """An option that takes a comma list and is repeatable, the two alike: `--cuda 12.8,13.0`
    is `--cuda 12.8 --cuda 13.0`. Its value is one tuple of items."""
    return click.option(*decls, multiple=True, type=CommaList(item), callback=flatten, **kwargs)


def _filter_options(func: Callable[..., Any], lock_exists: bool) -> Callable[..., Any]:
    options = [
        click.option(
            "--envs",
            "envs",
            multiple=True,
            type=click.Path(path_type=Path),
            metavar="PATH",
            # repeated only: a path may hold a comma
            help="Matrix file or folder (repeatable; a path may hold commas, so no comma "
            "list). Default: ./envs; the built-in catalog is --envs builtin:training.",
        ),
        click.option(
            "--lock",
            type=click.Path(path_type=Path, exists=lock_exists, dir_okay=False),
            default=None,
            help="Digest lock file. Default: images.lock beside the matrix files.",
        ),
        list_option(
            "--cuda",
            metavar="VERSION[,...]",
            help="CUDA versions, comma list or repeated, e.g. 12.8,13.0 or cpu.",
        ),
        list_option(
            "--torch",
            metavar="VERSION[,...]",
            help="torch versions, comma list or repeated; 2.7 matches 2.7.1.",
        ),
        list_option(
            "--python",
            metavar="VERSION[,...]",
            help="Python versions, comma list or repeated, e.g. 3.11,3.12.",
        ),
        list_option(
            "--os",
            "os_",
            metavar="OS[,...]",
            help="OS names, comma list or repeated, e.g. ubuntu24.04,debian12.",
        ),
        list_option(
            "--flavor",
            item=click.Choice(["nvidia", "slim"], case_sensitive=False),
            metavar="FLAVOR[,...]",
            help="nvidia (nvidia/cuda bases, nvcc in the builder) or slim (plain OS base); "
            "comma list or repeated.",
        ),
        list_option(
            "--cell",
            metavar="GLOB[,...]",
            help="Cell id globs, comma list or repeated, e.g. 'cu126-*-slim'.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@dataclass(frozen=True)
class Selection:
    """Which cells a command works on: matrix files, lock file, filters. Built once from
    click's values in the command (selection_from), then passed on."""

    envs: tuple[Path, ...] = ()
    lock: Path | None = None
    filters: Filters = field(default_factory=Filters)

    def cells(self) -> list[Cell]:
        return select(load_cells(self.envs, self.lock), self.filters)

    def images_lock(self) -> Path:
        from imagekit.locks import images
        from imagekit.matrix.catalog import default_envs

        return self.lock or images.default_path(list(self.envs) or default_envs())

    def package_locks(self) -> Path:
        """packages.lock/, beside images.lock."""
        from imagekit.locks.packages import default_dir

        return default_dir(self.images_lock())


def selection_from(values: Mapping[str, Any]) -> Selection:
    """The selection, from filter_options' values; nothing reads click's dict for it after.

    Every command turns its options into typed objects this way: a `<type>_from(values)`
    function beside the command (build_options_from, launch_options_from, ...)."""
    return Selection(
        envs=tuple(values["envs"]),
        lock=values["lock"],
        filters=Filters(
            cuda=tuple(values["cuda"]),
            torch=tuple(values["torch"]),
            python=tuple(values["python"]),
            os=tuple(values["os_"]),
            flavor=tuple(values["flavor"]),
            cell=tuple(values["cell"]),
        ),
    )


docker_option = click.option(
    "--docker",
    "docker_cli",
    default=None,
    metavar="PATH",
    help="Docker CLI to use (default: $IMAGEKIT_DOCKER, else discovered).",
)


def json_option(text: str) -> Callable[[Any], Any]:
    """--json FILE, the one name for a command's report as JSON; `-` writes it to stdout."""
    return click.option(
        "--json",
        "json_path",
        type=OUT_FILE,
        default=None,
        metavar="FILE",
        help=f"{text} '-': to stdout (then the lines for people go to stderr).",
    )


def json_to_stdout(path: Path | None) -> bool:
    return path is not None and str(path) == "-"


def write_json(path: Path, data: Any, sort_keys: bool = False) -> None:
    """--json FILE: the report to FILE (written whole or not at all), or to stdout for `-`."""
    from imagekit.paths import write_atomic

    text = json.dumps(data, indent=2, sort_keys=sort_keys)
    if json_to_stdout(path):
        # JSON escapes every control character itself; its line breaks are its own
        terminal.echo(text.splitlines())
    else:
        write_atomic(path, text + "\n")


def renamed_option(old: str, dest: str, **kwargs: Any) -> Callable[[Any], Any]:
    """An option's old name, still taken but hidden from help; `renamed` merges it into the
    new one's value and says once, on stderr, what it is called now."""
    return click.option(old, dest, hidden=True, default=None, **kwargs)


def old_name_value(dest: str) -> Callable[[], Any]:
    """The default of a required option whose old name (renamed_option, `dest`) is declared
    just before it: the old name's value, so that either name satisfies `required`, and
    neither is click's own "Missing option" for the new name. click reads the options given
    first, then the others in their order of declaration, so the old one has been read when
    this default is asked for."""

    def default() -> Any:
        value = click.get_current_context().params.get(dest)
        if value is None:
            raise click.MissingParameter()  # click adds which option, as for any other
        return value

    return default


def renamed(values: dict[str, Any], old: str, new: str, dest: str, new_dest: str) -> None:
    """Move an old option's value (`dest`) to the new one's (`new_dest`), with a note; both
    given is a usage error (which one was meant?)."""
    value = values.pop(dest)
    if value is None:
        return
    source = click.get_current_context().get_parameter_source(new_dest)
    if source is click.core.ParameterSource.COMMANDLINE:
        raise UsageError(f"{old} is the old name of {new}: give {new} alone")
    terminal.echo(f"imagekit: note: {old} is now {new}; the old name will go away", err=True)
    values[new_dest] = value
