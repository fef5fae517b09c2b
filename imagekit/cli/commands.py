"""Engine-facing commands: build, lock, base bootstrap, test. Registered on the CLI group."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from imagekit import terminal
from imagekit.cli.common import (
    Selection,
    docker_option,
    examples,
    filter_options,
    filter_options_writing_lock,
    json_option,
    json_to_stdout,
    list_option,
    renamed,
    renamed_option,
)
from imagekit.cli.params import (
    CACHE_SPEC,
    DEBIAN_SUITE,
    ENV,
    IMAGE_REF,
    OUT_DIR,
    OUT_FILE,
    PLATFORM_LIST,
    TAG_SUFFIX,
    URL,
    URL_OR_NONE,
    merge_platforms,
)


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
    from imagekit.cli.build_options import build_run_from, options_from
    from imagekit.engine.docker import DockerEngine
    from imagekit.locks import images, packages

    selection = Selection.of(kwargs)
    cells = selection.cells()
    locks = selection.package_locks()
    options = replace(options_from(kwargs), package_locks=locks)
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

    selection = Selection.of(kwargs)
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
@docker_option
def bootstrap(
    suite: str,
    mirror: str | None,
    tag: str | None,
    platforms: tuple[str, ...] | None,
    docker_cli: str | None,
) -> None:
    """Make a Debian base image from a package mirror with debootstrap."""
    from imagekit.builder import bases as base
    from imagekit.engine.docker import DockerEngine
    from imagekit.urls import refuse_credentials

    refuse_credentials(mirror, "--mirror", "the base image's apt sources")
    names = {suite: image for image, suite in base.bootstrappable().items()}
    tag = tag or names.get(suite) or f"debian:{suite}"
    engine = DockerEngine(docker_cli)
    image_id = base.bootstrap(engine, suite, tag, mirror or base.DEFAULT_MIRROR, platforms or ())
    terminal.echo(f"{tag}: {image_id}")


class GpusChoice(click.ParamType):
    """--gpus: auto, all, none, or a count of GPUs (0 to 1024)."""

    name = "auto|all|none|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip().lower()
        if text in ("auto", "all", "none") or (text.isdigit() and int(text) <= 1024):
            return text
        self.fail(f"{value!r}: give auto, all, none or a number of GPUs such as 8", param, ctx)


def report_option(flag: str, dest: str, text: str) -> Callable[[Any], Any]:
    return click.option(flag, dest, type=OUT_FILE, default=None, help=text)


@click.command(
    name="test",
    epilog=examples(
        "imagekit test ghcr.io/acme/train:2.7.1-cu126-py3.11-debian12-slim",
        "imagekit test IMAGE --require gpu,flash,tensorrt --junit reports/selfcheck.xml",
        "imagekit test IMAGE --soak 300       # 5 minutes of GEMM load on every GPU",
        "imagekit test IMAGE --stamp          # tag IMAGE-validated when it passes",
        "imagekit test REGISTRY/NAME:TAG --attest cosign.key   # sign the passing verdict",
        "imagekit test IMAGE --nodes 2        # 2 containers, torchrun c10d, DDP across them",
        "imagekit test IMAGE --nodes 4 --procs-per-node 2 --env NCCL_DEBUG=INFO",
    ),
)
@click.argument("image", type=IMAGE_REF)
@click.option(
    "--gpus",
    type=GpusChoice(),
    default="auto",
    show_default=True,
    help="auto: all GPUs when the engine has the NVIDIA runtime; all; none; or N: the "
    "first N GPUs, and the self-check fails unless torch, NVML and the container see N.",
)
@click.option(
    "--ipc-host", is_flag=True, help="Share the host IPC namespace instead of --shm-size."
)
@click.option(
    "--shm-size",
    default="8g",
    show_default=True,
    metavar="SIZE",
    help="/dev/shm of the container(s) (docker run --shm-size, e.g. 16g); NCCL and "
    "DataLoader workers need GBs.",
)
@list_option(
    "--require",
    metavar="NAME[,...]",
    help="Fail, not skip, unless these work: gpu, flash, flash-attn, onnx, tensorrt, "
    "compile; comma list or repeated.",
)
@list_option(
    "--checks", metavar="NAME[,...]", help="Checks to run, comma list or repeated (default: all)."
)
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Seconds per check before it is killed (default: each check's own limit); "
    "with --nodes, for the check once every node has joined (default: 120).",
)
@click.option(
    "--soak",
    type=click.FloatRange(0, 3600),
    default=0,
    metavar="SECONDS",
    help="Hold the GEMM on every GPU this long and judge its steady rate, the clocks, the "
    "power limit and the temperature under that load (default 0: the short run).",
)
@json_option("Write every check's status, reason and measurements as JSON.")
@report_option("--junit", "junit_path", "Write the results as JUnit XML (a test case per check).")
@report_option(
    "--snapshot",
    "snapshot_path",
    "Write the host snapshot the checks were judged from (docs/host-snapshot.md); with "
    "--attest, the file whose digest the attestation names.",
)
@click.option(
    "--stamp", is_flag=True, help="On success, tag IMAGE-validated with the results as labels."
)
@click.option(
    "--env",
    "env",
    multiple=True,
    type=ENV,
    metavar="NAME=VALUE",
    help="Set in the container(s), over the image's ENV (repeatable), e.g. NCCL_DEBUG=INFO.",
)
@click.option(
    "--nodes",
    type=int,
    default=None,
    help="Run the distributed check across this many containers (torchrun, c10d rendezvous).",
)
@click.option(
    "--procs-per-node",
    type=int,
    default=1,
    show_default=True,
    help="With --nodes: ranks per container (on GPUs, one per GPU).",
)
@click.option(
    "--join-timeout",
    type=float,
    default=120,
    show_default=True,
    help="With --nodes: seconds every node has to reach the rendezvous.",
)
@click.option(
    "--subnet",
    default=None,
    metavar="CIDR",
    help="With --nodes: the run's network (default: a free /24 in 10.200.0.0/13).",
)
@click.option(
    "--attest",
    "attest",
    default=None,
    metavar="KEY",
    help="After a pass, sign the verdict for IMAGE's digest in its registry with this cosign "
    "key (a file, env://VAR or a KMS URI) and push it there; see docs/attestations.md.",
)
@docker_option
def test_image(image: str, docker_cli: str | None, **kwargs: Any) -> None:
    """Run the self-check inside IMAGE on this host and report.

    With --nodes N: start N containers on a network of their own, one per node, and run
    the distributed check across them under torchrun; report the hosts, the join time,
    whether gradients agree after a DDP step and the all-reduce bandwidth."""
    from imagekit.engine.docker import DockerEngine
    from imagekit.imagetest.one_container import SelfCheckOptions, check_image

    kwargs["env"] = env_pairs(kwargs["env"])
    # the self-check takes its lists as it prints them: comma-joined
    kwargs["require"], kwargs["checks"] = ",".join(kwargs["require"]), ",".join(kwargs["checks"])
    multi = {k: kwargs.pop(k) for k in ("nodes", "procs_per_node", "join_timeout", "subnet")}
    with json_through_file(kwargs) as people:
        if multi["nodes"] is not None:
            people(test_nodes(DockerEngine(docker_cli), image, multi, kwargs))
            return
        output, validated = check_image(DockerEngine(docker_cli), image, SelfCheckOptions(**kwargs))
        people([*output, *([f"stamped: {validated}"] if validated else [])])


@contextmanager
def json_through_file(kwargs: dict[str, Any]) -> Iterator[Callable[[list[str]], None]]:
    """`--json -`: the report is written to a scratch file, then printed on stdout, pass or
    fail, and the lines for people (the table, a failure's report) go to stderr."""
    if not json_to_stdout(kwargs["json_path"]):
        yield terminal.echo
        return
    import tempfile

    from imagekit.errors import ImagekitError

    with tempfile.TemporaryDirectory(prefix="imagekit-json-") as tmp:
        kwargs["json_path"] = scratch = Path(tmp) / "report.json"
        try:
            yield lambda lines: terminal.echo(lines, err=True)
        except ImagekitError as exc:
            if getattr(exc, "report", ()):
                terminal.echo(exc.report, err=True)
                exc.report = []
            raise
        finally:
            if scratch.is_file():
                terminal.echo(scratch.read_text(encoding="utf-8").splitlines())


def env_pairs(values: tuple[str, ...]) -> dict[str, str]:
    from imagekit.errors import UsageError

    pairs = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {item!r}: give NAME=VALUE, e.g. --env NCCL_DEBUG=INFO")
        pairs[name] = value
    return pairs


# Single-node options that mean nothing across nodes: refused rather than ignored.
NOT_WITH_NODES = {
    "ipc_host": "--ipc-host",
    "require": "--require",
    "checks": "--checks",
    "junit_path": "--junit",
    "snapshot_path": "--snapshot",
    "stamp": "--stamp",
    "attest": "--attest",
    "soak": "--soak",
}


def test_nodes(engine: Any, image: str, multi: dict[str, Any], kwargs: dict[str, Any]) -> list[str]:
    from imagekit.errors import UsageError
    from imagekit.imagetest.nodes_plan import NodesOptions
    from imagekit.imagetest.nodes_run import check_nodes

    for key, flag in NOT_WITH_NODES.items():
        if kwargs[key]:
            raise UsageError(
                f"{flag} with --nodes: the multi-node run checks DDP across containers only; "
                f"run `imagekit test IMAGE {flag} ...` without --nodes for that"
            )
    options = NodesOptions(
        nodes=multi["nodes"],
        procs_per_node=multi["procs_per_node"],
        gpus=kwargs["gpus"],
        shm_size=kwargs["shm_size"],
        join_timeout=multi["join_timeout"],
        timeout=kwargs["timeout"] or 120.0,
        subnet=multi["subnet"],
        env=kwargs["env"],
        json_path=kwargs["json_path"],
    )
    return check_nodes(engine, image, options, say=lambda line: terminal.echo(line, err=True))


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
    selection = Selection.of(kwargs)
    cells = selection.cells()
    locks = selection.package_locks()
    packages.raise_if_stale(cells, locks, whole_matrix=False)
    images.refuse_lacking(images.read(selection.images_lock()), cells)
    for cell in cells:
        context.stage(cell, paths.context_dir(paths.WORK, cell.id), wheelhouse, locks)
    terminal.echo(f"staged {len(cells)} contexts under {paths.contexts(paths.WORK)}/")


def register(cli: click.Group) -> None:
    from imagekit.cli.doctor import doctor
    from imagekit.cli.init import init
    from imagekit.cli.launch import launch
    from imagekit.cli.supply import sbom, verify

    cli.add_command(build)
    cli.add_command(sbom)
    cli.add_command(verify)
    cli.add_command(lock)
    cli.add_command(base_group)
    cli.add_command(test_image)
    cli.add_command(stage)
    cli.add_command(launch)
    cli.add_command(doctor)
    cli.add_command(init)
