"""`imagekit test`: the self-check inside an image on this host, or across N containers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from imagekit import terminal
from imagekit.cli.common import docker_option, examples, json_option, json_to_stdout, list_option
from imagekit.cli.params import ENV, IMAGE_REF, OUT_FILE

if TYPE_CHECKING:
    from imagekit.imagetest.nodes_plan import NodesOptions
    from imagekit.imagetest.one_container import SelfCheckOptions


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
    from imagekit.imagetest.nodes_run import check_nodes
    from imagekit.imagetest.one_container import check_image

    with json_through_file(kwargs) as people:
        if kwargs["nodes"] is not None:
            options = nodes_options_from(kwargs)
            say = lambda line: terminal.echo(line, err=True)  # noqa: E731
            people(check_nodes(DockerEngine(docker_cli), image, options, say=say))
            return
        options = selfcheck_options_from(kwargs)
        output, validated = check_image(DockerEngine(docker_cli), image, options)
        people([*output, *([f"stamped: {validated}"] if validated else [])])


def selfcheck_options_from(values: Mapping[str, Any]) -> SelfCheckOptions:
    """The single-container self-check's options, from test's options."""
    from imagekit.imagetest.one_container import SelfCheckOptions

    return SelfCheckOptions(
        env=env_pairs(values["env"]),  # checked first: a bad --env is refused before a run
        gpus=values["gpus"],
        ipc_host=values["ipc_host"],
        shm_size=values["shm_size"],
        # the self-check takes its lists as it prints them: comma-joined
        require=",".join(values["require"]),
        checks=",".join(values["checks"]),
        timeout=values["timeout"],
        soak=values["soak"],
        json_path=values["json_path"],
        junit_path=values["junit_path"],
        snapshot_path=values["snapshot_path"],
        stamp=values["stamp"],
        attest=values["attest"],
    )


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


def env_pairs(items: tuple[str, ...]) -> dict[str, str]:
    from imagekit.errors import UsageError

    pairs = {}
    for item in items:
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


def nodes_options_from(values: Mapping[str, Any]) -> NodesOptions:
    """The multi-node run's options, from test's options (--nodes given)."""
    from imagekit.errors import UsageError
    from imagekit.imagetest.nodes_plan import NodesOptions

    env = env_pairs(values["env"])  # checked first, as on a single node
    for key, flag in NOT_WITH_NODES.items():
        if values[key]:
            raise UsageError(
                f"{flag} with --nodes: the multi-node run checks DDP across containers only; "
                f"run `imagekit test IMAGE {flag} ...` without --nodes for that"
            )
    return NodesOptions(
        nodes=values["nodes"],
        procs_per_node=values["procs_per_node"],
        gpus=values["gpus"],
        shm_size=values["shm_size"],
        join_timeout=values["join_timeout"],
        timeout=values["timeout"] or 120.0,
        subnet=values["subnet"],
        env=env,
        json_path=values["json_path"],
    )
