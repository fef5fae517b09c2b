"""Registers the engine-facing commands (build, test, lock, base) on the CLI group."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    del cli  # filled in as the engine commands land
