"""Options and helpers shared by the commands (kept apart so command modules can import
them without importing the CLI group)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from imagekit.matrix.catalog import Filters, load_cells, select
from imagekit.matrix.cells import Cell


def examples(*lines: str) -> str:
    """An epilog click prints verbatim (\\b stops it re-wrapping the lines)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def filter_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--cuda/--torch/--python/--os/--flavor/--cell, repeatable; plus --envs and --lock
    (which must be an existing file: a mistyped one would build unpinned, silently)."""
    return _filter_options(func, lock_exists=True)


def filter_options_writing_lock(func: Callable[..., Any]) -> Callable[..., Any]:
    """filter_options for `imagekit lock`, which may make the --lock file."""
    return _filter_options(func, lock_exists=False)


def _filter_options(func: Callable[..., Any], lock_exists: bool) -> Callable[..., Any]:
    options = [
        click.option(
            "--envs",
            "envs",
            multiple=True,
            type=click.Path(path_type=Path),
            help="Matrix file or folder (repeatable). Default: ./envs, else the built-in catalog.",
        ),
        click.option(
            "--lock",
            type=click.Path(path_type=Path, exists=lock_exists, dir_okay=False),
            default=None,
            help="Digest lock file. Default: images.lock beside the matrix files.",
        ),
        click.option("--cuda", multiple=True, help="CUDA version(s), e.g. 12.6, or cpu."),
        click.option("--torch", multiple=True, help="torch version(s); 2.7 matches 2.7.1."),
        click.option("--python", multiple=True, help="Python version(s), e.g. 3.11."),
        click.option("--os", "os_", multiple=True, help="OS, e.g. ubuntu24.04 or debian12."),
        click.option(
            "--flavor",
            multiple=True,
            type=click.Choice(["nvidia", "slim"]),
            help="nvidia (nvidia/cuda bases, nvcc in the builder) or slim (plain OS base).",
        ),
        click.option("--cell", multiple=True, help="Cell id glob, e.g. 'cu126-*-slim'."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@dataclass(frozen=True)
class Selection:
    """Which cells a command works on: matrix files, lock file, filters. Built once from
    click's values in the command, then passed on (nothing reads click's dict after)."""

    envs: tuple[Path, ...] = ()
    lock: Path | None = None
    filters: Filters = field(default_factory=Filters)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Selection:
        return cls(
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


docker_option = click.option(
    "--docker",
    "docker_cli",
    default=None,
    metavar="PATH",
    help="Docker CLI to use (default: $IMAGEKIT_DOCKER, else discovered).",
)
