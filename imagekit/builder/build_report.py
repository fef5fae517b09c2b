"""The build's report: each cell's record (build.json), the layers the cells share, the summary."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from imagekit.engine.interface import Layer
from imagekit.errors import BuildError
from imagekit.sizes import gb
from imagekit.text_table import render_table

_GROUP = re.compile(r"/run/imagekit/groups/([\w-]+)\.txt")
_SHELL = re.compile(r"^(RUN )?(\|\d+ \S*=\S* )*(/bin/sh -c )?(\. /run/imagekit/build-env\.sh && )?")


@dataclass
class CellReport:
    cell: str
    # built | failed | over-budget | wrong-platform | push-failed | interrupted |
    # not-attempted (docs/build-report.md)
    status: str = "pending"
    tags: list[str] = field(default_factory=list)
    image_id: str = ""
    seconds: float = 0.0
    steps: list[dict[str, object]] = field(default_factory=list)
    size_bytes: int = 0
    size_budget: int = 0
    largest_layers: list[dict[str, object]] = field(default_factory=list)
    # every layer, oldest first: diff_id, size_bytes, created_by, shared_with (the other
    # cells of this run that have the same layer)
    layers: list[dict[str, object]] = field(default_factory=list)
    # of the layers' bytes: new in this run (not in an earlier cell), and already there
    unique_bytes: int = 0
    shared_bytes: int = 0
    pushed: list[str] = field(default_factory=list)
    push_seconds: float = 0.0  # all of the cell's tags
    push_compression: str = ""  # gzip (the engine's push), or what buildx pushed
    # builder: BuildKit pushed as it built, nothing loaded (--push without --load); engine:
    # the image was loaded, then pushed; "" where nothing was pushed
    push_path: str = ""
    # what size_bytes (the image's and each layer's) count: unpacked (the local image's
    # layers) or compressed (as pushed, read from the registry where nothing was loaded)
    sizes: str = "unpacked"
    # the pushed image's provenance: attached | off (--no-provenance) | unsupported (the
    # engine cannot hold an attestation manifest); "" where nothing was pushed
    provenance: str = ""
    sbom: list[str] = field(default_factory=list)  # the attached SBOM artifacts (name@digest)
    # attached | off (--no-attach-sbom) | not-in-stage (--target os-base, builder, packages:
    # only the runtime stage writes one, so none was attached) | "" where nothing was pushed
    sbom_status: str = ""
    # what BuildKit warned about the build: {rule, message, line}; InvalidBaseImagePlatform
    # fails the cell (wrong-platform)
    warnings: list[dict[str, object]] = field(default_factory=list)
    # the platform proof of the first platform's image (builder/platform_proof.py): each file
    # read, {what, path, found, expected, ok}; by_platform has each platform's
    content: list[dict[str, object]] = field(default_factory=list)
    # the platforms built (linux/amd64, linux/arm64); the fields above describe the first.
    # Where there are several, each one's image: image_id (its manifest's digest),
    # size_bytes, layers, largest_layers, sbom and content, as above
    platforms: list[str] = field(default_factory=list)
    by_platform: dict[str, dict[str, object]] = field(default_factory=dict)
    error: str = ""  # its lines, each escaped (terminal.render): every newline is imagekit's

    @property
    def ok(self) -> bool:
        return self.status == "built"


def layer_summary(in_order: Sequence[Layer]) -> dict[str, object]:
    """An image's size and layers, oldest first, and its five largest."""
    largest = sorted(in_order, key=lambda layer: -layer.size)[:5]
    return {
        "size_bytes": sum(layer.size for layer in in_order),
        "layers": [
            {"diff_id": x.diff_id, "size_bytes": x.size, "created_by": x.created_by[:300]}
            for x in in_order
        ],
        "largest_layers": [
            {"size_bytes": x.size, "created_by": x.created_by[:160]} for x in largest
        ],
    }


def share_layers(reports: Sequence[CellReport]) -> None:
    """Which layers the cells of one run have in common, by diff ID. A layer's bytes count
    as unique in the first cell (in run order) that has it and as shared in every later
    one, so the unique sizes add up to what a registry or a node stores for the run."""
    holders: dict[str, list[str]] = {}
    for r in reports:
        for layer in r.layers:
            cells = holders.setdefault(str(layer["diff_id"]), [])
            if r.cell not in cells:
                cells.append(r.cell)
    seen: set[str] = set()
    for r in reports:
        r.unique_bytes = r.shared_bytes = 0
        for layer in r.layers:
            diff_id, size = str(layer["diff_id"]), int(layer["size_bytes"])  # type: ignore[call-overload]
            layer["shared_with"] = [c for c in holders.get(diff_id, []) if c != r.cell]
            if diff_id and diff_id in seen:
                r.shared_bytes += size
            else:
                r.unique_bytes += size
                seen.add(diff_id)


def cost_line(reports: Sequence[CellReport]) -> str:
    """What the run's images weigh, and what is stored once their shared layers are."""
    measured = [r for r in reports if r.layers]
    if not measured:
        return ""
    total = sum(r.unique_bytes + r.shared_bytes for r in measured)
    unique = sum(r.unique_bytes for r in measured)
    return (
        f"matrix cost: {len(measured)} image{'s' if len(measured) != 1 else ''}, "
        f"{gb(total)} of layers; {gb(unique)} to store and push, each shared layer once "
        f"({gb(total - unique)} shared)"
    )


def summary(reports: Sequence[CellReport]) -> list[str]:
    header = ("CELL", "STATUS", "TIME", "SIZE", "UNIQUE", "SHARED", "PUSH", "CACHED")
    lines = render_table(header, [_summary_row(r) for r in reports], right=header[2:])
    for r in reports:
        if not r.ok and r.error:  # escaped line by line when it was set
            lines += ["", f"{r.cell} {r.status}:", *("    " + x for x in r.error.split("\n")[-15:])]
    lines += warning_lines(reports)
    if cost := cost_line(reports):
        lines += ["", cost]
    no_sbom = [r.cell for r in reports if r.sbom_status == "not-in-stage"]
    if no_sbom:
        lines.append(
            f"pushed without an SBOM: {', '.join(no_sbom)} (the stage built holds none: only "
            "the runtime stage writes one)"
        )
    compressed = [r.cell for r in reports if r.layers and r.sizes == "compressed"]
    if compressed:
        lines.append(
            f"sizes of {', '.join(compressed)}: compressed, as pushed (built without --load, "
            "read back from the registry)"
        )
    built = sum(r.ok for r in reports)
    skipped = sum(r.status == "not-attempted" for r in reports)
    lines += [
        "",
        f"{built} built, {len(reports) - built - skipped} failed, {skipped} not attempted",
    ]
    return lines


def warning_lines(reports: Sequence[CellReport]) -> list[str]:
    """What BuildKit warned about each cell's build, a line each."""
    lines = []
    for r in reports:
        for w in r.warnings:
            at = f" (Dockerfile line {w['line']})" if w.get("line") else ""
            lines.append(f"{r.cell}: BuildKit warned {w['rule']}: {w['message']}{at}")
    return ["", *lines] if lines else []


def _summary_row(r: CellReport) -> tuple[str, ...]:
    cached = sum(1 for s in r.steps if s["cached"])
    push = f"{r.push_seconds:.0f}s" if r.push_compression else "-"
    sizes = (gb(r.size_bytes), gb(r.unique_bytes), gb(r.shared_bytes))
    return (r.cell, r.status, f"{r.seconds:.0f}s", *sizes, push, f"{cached}/{len(r.steps)}")


def raise_for_failures(reports: Sequence[CellReport]) -> None:
    """Failed (tried and broke) and not attempted (stopped early, or no base here) apart."""
    failed = [r.cell for r in reports if not r.ok and r.status != "not-attempted"]
    skipped = [r.cell for r in reports if r.status == "not-attempted"]
    if not failed and not skipped:
        return
    parts = []
    if failed:
        parts.append(f"{len(failed)} failed: {', '.join(failed)}")
    if skipped:
        parts.append(f"{len(skipped)} not attempted: {', '.join(skipped)}")
    raise BuildError(f"of {len(reports)} cells, " + "; ".join(parts))


def describe(created_by: str) -> str:
    """A layer as a user knows it: the venv's torch layer, or its instruction, shortened."""
    if group := _GROUP.search(created_by):
        return f"the venv's {group[1]} layer"
    return _SHELL.sub("", created_by.strip())[:80]
