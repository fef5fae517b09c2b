"""`imagekit sbom` and `imagekit verify`: what is in an image, and whether a signed
self-check attestation proves it on a given GPU (docs/sbom.md, docs/attestations.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagekit import terminal
from imagekit.cli.common import docker_option, examples, json_option, json_to_stdout, write_json
from imagekit.cli.params import IMAGE_REF


@click.command(
    epilog=examples(
        "imagekit sbom ghcr.io/acme/train:2.7.1-cu126-py3.11-debian12-slim > sbom.cdx.json",
        "imagekit sbom IMAGE --summary             # a table: every package and its version",
        "imagekit sbom IMAGE --from registry       # the SBOM attached to the pushed digest",
    )
)
@click.argument("image", type=IMAGE_REF)
@click.option("--summary", is_flag=True, help="Print a table a person can read, not the JSON.")
@click.option(
    "--from",
    "source",
    type=click.Choice(["auto", "image", "registry"], case_sensitive=False),
    default="auto",
    show_default=True,
    help="image: the file in the local image; registry: the SBOM attached to the image "
    "there (oras); auto: the local image where the engine has it, else the registry.",
)
@docker_option
def sbom(image: str, summary: bool, source: str, docker_cli: str | None) -> None:
    """Print IMAGE's SBOM (CycloneDX 1.6 JSON, as the image holds it) or its summary."""
    from imagekit.engine.docker import DockerEngine
    from imagekit.supply import sbom as sbom_mod
    from imagekit.supply.sbom_summary import check_document, summary_lines

    data = sbom_mod.read(DockerEngine(docker_cli), image, source)
    if not summary:
        # the document as it is, line by line through the one writer: a well-formed SBOM
        # comes out byte for byte, a hostile one with its control characters escaped
        terminal.echo(data.decode("utf-8", "backslashreplace").splitlines())
        return
    try:
        doc = json.loads(data)
    except ValueError as exc:
        from imagekit.errors import ImagekitError

        raise ImagekitError(f"the SBOM of {image} is not JSON: {exc}") from None
    terminal.echo(summary_lines(check_document(doc)))


@click.command(
    epilog=examples(
        "imagekit verify ghcr.io/acme/train:TAG --key cosign.pub",
        "imagekit verify IMAGE --key cosign.pub --gpu-model 'NVIDIA H100 80GB HBM3'",
        "imagekit verify IMAGE --key env://COSIGN_PUBLIC_KEY --json verdict.json",
    )
)
@click.argument("image", type=IMAGE_REF)
@click.option(
    "--key", required=True, metavar="PUB", help="cosign public key (a file, env://VAR, KMS URI)."
)
@click.option(
    "--gpu-model",
    default="",
    metavar="NAME",
    help="Pass only if a passing run on this GPU model (NVML's name) is attested.",
)
@json_option("Write the verdicts as JSON.")
def verify(image: str, key: str, gpu_model: str, json_path: Path | None) -> None:
    """Exit 0 only when IMAGE's digest carries a valid attestation, signed by KEY, of a
    passing self-check (on --gpu-model where given); print the verdicts it carries."""
    from imagekit.supply import attestation

    digest, found = attestation.verify(image, key, gpu_model)
    pinned = _pinned(image, digest)
    if json_path:
        verdicts = {"image": pinned, "verdicts": [v.predicate for v in found]}
        write_json(json_path, verdicts, sort_keys=True)
    lines = [f"verified: {pinned}", *(line for v in found for line in v.lines())]
    terminal.echo(lines, err=json_to_stdout(json_path))


def _pinned(image: str, digest: str) -> str:
    from imagekit.contract import refs

    return str(refs.parse(image).by_digest(digest))
