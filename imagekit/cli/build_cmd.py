"""The commands that build: build, lock, base bootstrap and stage, and build's typed options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from imagekit import terminal
from imagekit.cli.common import (
    Selection,
    docker_option,
    examples,
    filter_options,
    filter_options_writing_lock,
    renamed,
    renamed_option,
    selection_from,
)
from imagekit.cli.params import (
    CACHE_SPEC,
    DEBIAN_SUITE,
    IMAGE_REF,
    OUT_DIR,
    PLATFORM_LIST,
    TAG_SUFFIX,
    URL,
    URL_OR_NONE,
    merge_platforms,
)
from imagekit.errors import UsageError
from imagekit.urls import refuse_credentials

if TYPE_CHECKING:
    from imagekit.builder.build_options import BuildOptions, BuildRun
    from imagekit.engine.interface import Compression


@click.command(
    epilog=examples(
        "imagekit build --cuda 12.6 --os debian12          # the README cell",
        "imagekit build --cuda 12.6 --jobs 2 --keep-going",
        "imagekit build --cell 'cpu-*' --wheelhouse /opt/wheels --torch-index none",
        "imagekit build --cuda 12.8 --push --progress plain  # CI",
        "imagekit build --cuda 12.8 --push                   # zstd, straight from BuildKit",
        "imagekit build --cuda 12.8 --push --compression gzip --load  # older pullers; kept here",
        "imagekit build --cuda 13.0 --platform linux/amd64,linux/arm64 --push  # Grace too",
        "imagekit build --dry-run                          # print the plan only",
    )
)
@filter_options
@click.option(
    "--target",
    default="runtime",
    show_default=True,
    type=click.Choice(["runtime", "packages", "builder", "os-base"], case_sensitive=False),
    help="Stage to build.",
)
@click.option("--push", is_flag=True, help="Push every tag after a successful build.")
@click.option(
    "--provenance/--no-provenance",
    default=True,
    show_default=True,
    help="With --push: attach BuildKit's SLSA provenance (mode=min) where the engine can "
    "hold it (buildx on the containerd store, or a docker-container builder).",
)
@click.option(
    "--attach-sbom/--no-attach-sbom",
    default=True,
    show_default=True,
    help="With --push: attach the image's SBOM to the pushed digest as an OCI referrer "
    "(needs oras).",
)
@click.option(
    "--jobs",
    "-j",
    default=1,
    show_default=True,
    type=click.IntRange(1, 32),
    help="Cells built at the same time.",
)
@click.option("--keep-going", is_flag=True, help="Build the other cells when one fails.")
@click.option("--no-cache", is_flag=True, help="Ignore BuildKit's layer cache.")
@click.option(
    "--network",
    type=click.Choice(["default", "host", "none"], case_sensitive=False),
    default="default",
    show_default=True,
    help="Network for RUN steps; host reaches a mirror on this machine's 127.0.0.1.",
)
@click.option(
    "--cache-from",
    multiple=True,
    type=CACHE_SPEC,
    metavar="REF",
    help="Cache to read: an image built with --cache-to type=inline, or a cache export.",
)
@click.option(
    "--cache-to",
    multiple=True,
    type=CACHE_SPEC,
    metavar="SPEC",
    help="Cache export: type=inline (any engine), or e.g. "
    "type=registry,ref=REPO:buildcache,mode=max (buildx).",
)
@click.option(
    "--compression",
    type=click.Choice(["auto", "zstd", "gzip", "estargz"], case_sensitive=False),
    default="auto",
    show_default=True,
    help="Layer compression of --push. auto: zstd where BuildKit pushes the layers (buildx, "
    "not the docker driver on the classic store), else gzip; gzip for pullers older than "
    "Docker 23 / containerd 1.5. See docs/supply-chain.md (Layer compression).",
)
@click.option(
    "--platform",
    "platforms",
    type=PLATFORM_LIST,
    multiple=True,
    callback=merge_platforms,
    metavar="PLATFORM[,...]",
    help="linux/amd64, linux/arm64 or both (comma list or repeated), each one the cell's "
    "(`platform:` in envs/). "
    "Several make one image index, built with --push; a foreign one runs under QEMU. "
    "Default: this host's platform, where the cell has it.",
)
@click.option(
    "--load",
    is_flag=True,
    help="With --push: keep the image in the local engine too. Without it, where BuildKit "
    "pushes, the build goes straight to the registry and nothing is loaded.",
)
@click.option(
    "--compression-level",
    type=int,
    default=None,
    metavar="N",
    help="0-9 for gzip and estargz, 0-22 for zstd (buildx only).",
)
@click.option(
    "--tag-suffix",
    default="",
    type=TAG_SUFFIX,
    metavar="SUFFIX",
    help="Append to every tag (CI candidates, promoted after `imagekit test`).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; build nothing, contact nothing.")
@click.option(
    "--progress",
    type=click.Choice(["auto", "plain", "quiet"], case_sensitive=False),
    default="auto",
    show_default=True,
    help="auto: a live table on a terminal, plain lines in CI.",
)
@click.option(
    "--ca-bundle",
    type=click.Path(path_type=Path),
    default=None,
    help="Extra CA bundle for pip/uv inside the build (a secret, never a layer). "
    "Default: $PIP_CERT, $REQUESTS_CA_BUNDLE, $SSL_CERT_FILE or pip.conf's cert.",
)
@click.option(
    "--index-url",
    default=None,
    type=URL,
    metavar="URL",
    help="Package-index mirror (may hold credentials: passed as a secret). "
    "Default: $IMAGEKIT_INDEX_URL.",
)
@click.option(
    "--wheelhouse",
    type=click.Path(path_type=Path),
    default=None,
    envvar="IMAGEKIT_WHEELHOUSE",
    help="Folder of wheels offered to every install step (bind-mounted, never copied). "
    "Default: $IMAGEKIT_WHEELHOUSE.",
)
@click.option(
    "--torch-index",
    default=None,
    type=URL_OR_NONE,
    metavar="URL|none",
    envvar="IMAGEKIT_TORCH_INDEX",
    help="Override where torch comes from; 'none' = wheelhouse and PyPI only. "
    "Default: $IMAGEKIT_TORCH_INDEX.",
)
@click.option(
    "--bootstrap-base",
    is_flag=True,
    help="Make missing Debian bases with debootstrap (no registry needed), and add the "
    "platforms a local one lacks beside those it has (one index).",
)
@click.option("--mirror", default=None, type=URL, help="Debian mirror for --bootstrap-base.")
@docker_option
@click.option(
    "--out",
    "report_dir",
    type=OUT_DIR,
    default=Path("reports"),
    show_default=True,
    help="Folder for the reports, <cell>/build.json (docs/build-report.md).",
)
@renamed_option("--report-dir", "old_report_dir", type=OUT_DIR)
def build(**kwargs: Any) -> None:
    """Build the selected cells with BuildKit and report on each."""
    renamed(kwargs, "--report-dir", "--out", "old_report_dir", "report_dir")
    from imagekit.builder import inputs
    from imagekit.builder.orchestrate import run_build
    from imagekit.engine.docker import DockerEngine
    from imagekit.locks import images, packages

    selection = selection_from(kwargs)
    cells = selection.cells()
    locks = selection.package_locks()
    options = replace(build_options_from(kwargs), package_locks=locks)
    # Every path is checked before anything is built or contacted; a stale package lock
    # would install what the matrix no longer asks for, and a base's locked index without
    # a cell's platform would fail in BuildKit's pull, not here with the fix.
    resolved = inputs.resolve(kwargs["ca_bundle"], kwargs["index_url"], kwargs["wheelhouse"])
    packages.raise_if_stale(cells, locks, whole_matrix=False)
    images.refuse_lacking(images.read(selection.images_lock()), cells)
    # The run's one engine: it contacts the daemon only when first used, so a dry run
    # still needs no Docker.
    engine = DockerEngine(kwargs["docker_cli"])
    run_build(engine, cells, options, resolved, build_run_from(kwargs))


def compression_from(kind: str, level: int | None) -> Compression:
    """--compression and --compression-level, checked against BuildKit's ranges."""
    from imagekit.engine.interface import MAX_LEVEL, Compression

    if kind == "auto":
        if level is not None:
            raise UsageError(
                f"--compression-level {level}: a level needs a compression; add "
                "--compression zstd or --compression gzip"
            )
        return Compression("auto")
    if level is not None and not 0 <= level <= MAX_LEVEL[kind]:
        raise UsageError(
            f"--compression-level {level}: {kind} takes 0-{MAX_LEVEL[kind]} "
            "(zstd 0-22, gzip and estargz 0-9); pick a level in range or leave it out"
        )
    return Compression(kind, level)


def build_options_from(values: Mapping[str, Any]) -> BuildOptions:
    """What is built and how, from build's options."""
    from imagekit.builder.build_options import BuildOptions

    torch_index = refuse_credentials(
        values["torch_index"], "--torch-index", "a build argument (build history, provenance)"
    )
    refuse_credentials(values["mirror"], "--mirror", "the base image's apt sources")
    compression = compression_from(values["compression"], values["compression_level"])
    if not (compression.default or compression.auto) and not values["push"]:
        raise UsageError(
            f"{compression.as_options()}: layers are compressed when they are pushed; "
            "add --push (the local image store keeps layers uncompressed)"
        )
    return BuildOptions(
        target=values["target"],
        push=values["push"],
        jobs=values["jobs"],
        keep_going=values["keep_going"],
        no_cache=values["no_cache"],
        network="" if values["network"] == "default" else values["network"],
        cache_from=tuple(values["cache_from"]),
        cache_to=tuple(values["cache_to"]),
        tag_suffix=values["tag_suffix"],
        torch_index="" if torch_index == "none" else torch_index,
        report_dir=values["report_dir"],
        compression=compression,
        provenance=values["provenance"],
        attach_sbom=values["attach_sbom"],
        load=values["load"],
        platforms=values["platforms"] or (),
    )


def build_run_from(values: Mapping[str, Any]) -> BuildRun:
    """How this run goes, from build's options."""
    from imagekit.builder.build_options import BuildRun

    return BuildRun(
        dry_run=values["dry_run"],
        bootstrap_base=values["bootstrap_base"],
        mirror=values["mirror"],
        progress=values["progress"],
    )


@click.command(
    short_help="Pin base images to digests in images.lock, and packages with --packages.",
    epilog=examples(
        "imagekit lock",
        "imagekit lock --cuda 12.8",
        "imagekit lock --packages                          # and every cell's Python packages",
        "imagekit lock --packages --no-bases --torch-index none --wheelhouse /opt/wheels",
        "imagekit lock --check                             # CI: exit 4 if a package lock is stale",
    ),
)
@filter_options_writing_lock
@click.option(
    "--packages",
    is_flag=True,
    help="Also resolve each cell's Python packages with uv (hashes included) into "
    "packages.lock/<cell>.txt beside images.lock (linux/arm64's: <cell>.linux-arm64.txt); "
    "builds then install exactly those.",
)
@click.option("--no-bases", is_flag=True, help="Leave images.lock alone (no Docker needed).")
@click.option(
    "--wheelhouse",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder of wheels to resolve from too (give the build the same one).",
)
@click.option(
    "--torch-index",
    default=None,
    type=URL_OR_NONE,
    metavar="URL|none",
    help="Resolve torch from here instead of the cell's index; 'none' = wheelhouse and PyPI.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 4 if a package lock is stale.")
@docker_option
def lock(**kwargs: Any) -> None:
    """Pin base images to registry digests in images.lock (the renderer uses the pins), and
    with --packages each cell's Python packages, with hashes (builds install exactly those)."""
    from imagekit.locks import packages, resolving

    selection = selection_from(kwargs)
    folder = selection.package_locks()
    if kwargs["check"]:
        cells = selection.cells()
        packages.raise_if_stale(cells, folder, whole_matrix=selection.filters.empty)
        count = sum(
            packages.lock_path(folder, c.id, p).is_file() for c in cells for p in c.platforms
        )
        terminal.echo(f"{folder}: {count} package locks of {len(cells)} cells, all current")
        return
    if not kwargs["no_bases"]:
        lock_bases(selection, kwargs["docker_cli"])
    if kwargs["packages"]:
        from imagekit.builder import inputs
        from imagekit.urls import refuse_credentials

        index = refuse_credentials(kwargs["torch_index"], "--torch-index", "the package lock")
        wheelhouse = inputs.check_wheelhouse(kwargs["wheelhouse"])
        notes = resolving.lock_cells(
            selection.cells(),
            folder,
            resolving.RESOLVER,
            "" if index == "none" else index,
            wheelhouse,
        )
        terminal.echo(notes)


def lock_bases(selection: Selection, docker_cli: str | None) -> None:
    from imagekit.builder import bases as base
    from imagekit.engine.docker import DockerEngine
    from imagekit.locks import images

    path = selection.images_lock()
    new, notes = base.lock(DockerEngine(docker_cli), selection.cells(), images.read(path))
    terminal.echo(notes)
    changed = images.write(path, new)
    terminal.echo(
        f"{path}: {len(new.pins)} pins ({'updated' if changed else 'unchanged'}); "
        "run `imagekit render` to use them"
    )


@click.group(name="base")
def base_group() -> None:
    """Make base images without a registry."""


@base_group.command(
    epilog=examples(
        "sudo imagekit base bootstrap --suite bookworm",
        "sudo imagekit base bootstrap --suite bookworm --mirror http://mirror.internal/debian",
        "sudo imagekit base bootstrap --platform linux/amd64,linux/arm64  # one index, both",
        "sudo imagekit base bootstrap --bake-packages  # the OS packages envs/ cells install",
    )
)
@click.option(
    "--suite", default="bookworm", type=DEBIAN_SUITE, show_default=True, help="Debian suite."
)
@click.option(
    "--mirror", default=None, type=URL, help="Debian mirror URL (default: deb.debian.org)."
)
@click.option(
    "--tag",
    default=None,
    type=IMAGE_REF,
    help="Image name (default: the matrix's name for the suite, "
    "e.g. debian:bookworm-slim, so FROM lines resolve to it).",
)
@click.option(
    "--platform",
    "platforms",
    type=PLATFORM_LIST,
    multiple=True,
    callback=merge_platforms,
    metavar="PLATFORM[,...]",
    help="linux/amd64, linux/arm64 or both, comma list or repeated (one image index; "
    "foreign ones under QEMU). "
    "Default: this host's.",
)
@click.option(
    "--bake-packages",
    is_flag=True,
    help="Install into the base the OS packages that the matrix's cells on this suite's "
    "image install (g++, Python, ...), so their apt step has nothing to do: no apt pass in "
    "a cold build.",
)
@click.option(
    "--envs",
    "envs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Matrix file or folder for --bake-packages (repeatable). Default: ./envs.",
)
@docker_option
def bootstrap(
    suite: str,
    mirror: str | None,
    tag: str | None,
    platforms: tuple[str, ...] | None,
    bake_packages: bool,
    envs: tuple[Path, ...],
    docker_cli: str | None,
) -> None:
    """Make a Debian base image from a package mirror with debootstrap."""
    from imagekit.builder import bases as base
    from imagekit.engine.docker import DockerEngine
    from imagekit.urls import refuse_credentials

    refuse_credentials(mirror, "--mirror", "the base image's apt sources")
    names = {suite: image for image, suite in base.bootstrappable().items()}
    suite_image = names.get(suite) or f"debian:{suite}"
    tag = tag or suite_image
    include: list[str] = []
    if bake_packages:
        include = base.baked_packages(Selection(envs=envs).cells(), {tag, suite_image})
        terminal.echo(f"{tag}: baking in {' '.join(include)}")
    engine = DockerEngine(docker_cli)
    image_id = base.bootstrap(
        engine, suite, tag, mirror or base.DEFAULT_MIRROR, platforms or (), include
    )
    terminal.echo(f"{tag}: {image_id}")


@click.command(
    short_help="Write the build contexts that a bake file points at.",
    epilog=examples(
        "imagekit stage --cuda 12.8",
        "imagekit matrix --format bake --cuda 12.8 > docker-bake.json",
        "docker buildx bake -f docker-bake.json cuda-12-8",
    ),
)
@filter_options
@click.option(
    "--wheelhouse",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder of wheels offered to every install step, linked into each context's "
    "wheelhouse/ (as `imagekit build --wheelhouse`).",
)
def stage(**kwargs: Any) -> None:
    """Write the build contexts (.imagekit/context/<cell>) that a bake file points at."""
    from imagekit import paths
    from imagekit.builder import context, inputs
    from imagekit.locks import images, packages

    wheelhouse = inputs.check_wheelhouse(kwargs["wheelhouse"])
    selection = selection_from(kwargs)
    cells = selection.cells()
    locks = selection.package_locks()
    packages.raise_if_stale(cells, locks, whole_matrix=False)
    images.refuse_lacking(images.read(selection.images_lock()), cells)
    for cell in cells:
        context.stage(cell, paths.context_dir(paths.WORK, cell.id), wheelhouse, locks)
    terminal.echo(f"staged {len(cells)} contexts under {paths.contexts(paths.WORK)}/")
