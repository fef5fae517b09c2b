"""`imagekit build`: plan the selected cells, build them with BuildKit, report.

plan() is pure (testable without Docker, printed by --dry-run); run() drives an Engine.
Tags are applied only after a build succeeds, so an interrupted or failed build leaves
no tag behind.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from imagekit import paths, terminal
from imagekit.builder import context as context_mod
from imagekit.builder.display import Display
from imagekit.builder.inputs import Inputs
from imagekit.builder.log import WRONG_BASE_PLATFORM, StepLog
from imagekit.builder.platform_proof import Proof, prove
from imagekit.engine.emulation import host_platform
from imagekit.engine.image_registry import by_digest
from imagekit.engine.interface import (
    BuildRegistryEngine,
    BuildRequest,
    Compression,
    Layer,
    build_flags,
    build_push_flags,
    push_flags,
)
from imagekit.errors import BuildError, ImagekitError, Interrupted, PushError, UsageError
from imagekit.matrix.cells import Cell
from imagekit.paths import write_atomic
from imagekit.platforms import AMD64
from imagekit.render.dockerfile import render
from imagekit.sizes import gb
from imagekit.supply import sbom
from imagekit.text_table import render_table


@dataclass(frozen=True)
class BuildOptions:
    target: str = "runtime"
    push: bool = False
    jobs: int = 1
    keep_going: bool = False
    no_cache: bool = False
    network: str = ""  # "" (the engine's default), "host" or "none"
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    # e.g. "-candidate-123": CI pushes candidates and promotes them after the self-check
    tag_suffix: str = ""
    torch_index: str | None = None  # None: as rendered; "": none (wheelhouse/PyPI only)
    work_dir: Path = paths.WORK
    package_locks: Path | None = None  # packages.lock/ (`imagekit lock --packages`)
    report_dir: Path = paths.REPORTS
    labels: tuple[tuple[str, str], ...] = ()  # build-time labels, see build_labels()
    # of pushed layers; anything but gzip at the engine's level needs buildx
    compression: Compression = field(default_factory=Compression)
    # On --push (the CLI turns both on; --no-provenance, --no-attach-sbom turn them off):
    # BuildKit's SLSA provenance where the engine can hold it, and the image's SBOM attached
    # to the pushed digest as an OCI referrer (supply/sbom.py).
    provenance: bool = False
    attach_sbom: bool = False
    # With --push: also keep the image in the engine's store. Without it, where BuildKit
    # pushes (BuildEngine.pushes_from_builder), the build goes straight to the registry.
    load: bool = False
    # --platform: what to build of each cell (empty: this host's platform where the cell
    # has it, else the cell's first); several make one image index, which is pushed.
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannedBuild:
    cell: Cell
    request: BuildRequest
    tags: tuple[str, ...]

    @property
    def platforms(self) -> tuple[str, ...]:
        """What this build makes: the request's platforms, or the engine's own."""
        return self.request.platforms or (HOST,)

    def command(self, docker: Sequence[str] = ("docker", "build")) -> str:
        flags = build_flags(self.request)
        return shlex.join([*docker, *flags]) + f"   # then tag {', '.join(self.tags)}"

    def build_push_command(self, compression: Compression) -> str:
        """The one build that BuildKit pushes as it exports (--push without --load)."""
        flags = build_push_flags(self.request, self.tags, compression)
        return shlex.join(["docker", "buildx", "build", *flags])

    def push_command(self, compression: Compression) -> str:
        """How the tags are pushed: the engine's push (gzip), or BuildKit's exporter."""
        if compression.default:
            return "; ".join(shlex.join(["docker", "push", tag]) for tag in self.tags)
        # the same request again, fully cached, as DockerEngine.push_args runs it
        return shlex.join(
            ["docker", "buildx", "build", *push_flags(self.request, self.tags, compression)]
        )


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


def plan(cells: Sequence[Cell], options: BuildOptions, inputs: Inputs) -> list[PlannedBuild]:
    builds = []
    for cell in cells:
        ctx = paths.context_dir(options.work_dir, cell.id)
        # No inline cache unless asked (--cache-to type=inline): BuildKit writes its records
        # into the image config in an unstable order (moby/buildkit#1876, #3188), which gave
        # a fully cached rebuild a new image ID.
        args: list[tuple[str, str]] = []
        if options.torch_index is not None:
            args.append(("TORCH_INDEX_URL", options.torch_index))
            if cell.arm64_torch_index is not None:  # the Dockerfile has arm64's own
                args.append(("TORCH_INDEX_URL_ARM64", options.torch_index))
        platforms = platforms_for(cell, options.platforms)
        secrets = [("ca", inputs.ca_bundle)] if inputs.ca_bundle else []
        if inputs.index_url:
            secrets.append(("index", options.work_dir / "secrets" / "index"))
        request = BuildRequest(
            context=ctx,
            dockerfile=paths.work_dockerfile(options.work_dir, cell.id),
            target=options.target,
            build_args=tuple(args),
            secrets=tuple(secrets),
            labels=options.labels,
            cache_from=options.cache_from,
            cache_to=options.cache_to,
            no_cache=options.no_cache,
            network=options.network,
            push_compression=options.compression if options.push else None,
            platforms=() if platforms == (HOST,) else platforms,
        )
        tags = tuple(t + options.tag_suffix for t in cell.tags)
        builds.append(PlannedBuild(cell=cell, request=request, tags=tags))
    return builds


def platforms_for(cell: Cell, asked: tuple[str, ...]) -> tuple[str, ...]:
    """The platforms to build of a cell: those asked (each one the cell's), or this host's
    where the cell has it, else the cell's first."""
    if not asked:
        return (HOST,) if HOST in cell.platforms else cell.platforms[:1]
    missing = [p for p in asked if p not in cell.platforms]
    if missing:
        raise UsageError(
            f"--platform {','.join(asked)}: cell {cell.id} ({cell.origin}) is built for "
            f"{', '.join(cell.platforms)}; add {', '.join(missing)} to its `platform:` "
            f"(`imagekit compat show --platform {missing[0]}` says what upstream publishes), "
            "or select cells that have it"
        )
    return asked


def build_labels(env: dict[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """Provenance labels, set at build time so they never bust the cache. None of them comes
    from the clock: a no-op rebuild must give the same image ID (and digest)."""
    env = dict(os.environ) if env is None else env
    labels = []
    created = source_date(env.get("SOURCE_DATE_EPOCH"), git_output("log", "-1", "--format=%ct"))
    if created:
        labels.append(("org.opencontainers.image.created", created))
    revision = git_output("rev-parse", "HEAD")
    if revision:
        labels.append(("org.opencontainers.image.revision", revision))
    source = source_url(env, git_output("remote", "get-url", "origin"))
    if source:
        labels.append(("org.opencontainers.image.source", source))
    return tuple(labels)


def source_date(epoch: str | None, commit_time: str) -> str | None:
    """SOURCE_DATE_EPOCH (reproducible-builds.org), else the commit time, else none."""
    for value in (epoch, commit_time):
        if value and value.strip().isdigit():
            stamp = datetime.fromtimestamp(int(value.strip()), timezone.utc)
            return stamp.isoformat(timespec="seconds")
    return None


def source_url(env: dict[str, str], remote: str) -> str | None:
    """The repository's public URL: GitHub Actions' variables, else the git remote, with any
    credentials in it dropped (a token in a remote URL must never reach a label)."""
    if env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{env['GITHUB_REPOSITORY']}"
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(.+?)(\.git)?/?", remote)
    if scp:
        return f"https://{scp.group(1)}/{scp.group(2)}"
    parsed = urllib.parse.urlsplit(remote)
    if parsed.scheme not in ("https", "http", "ssh", "git") or not parsed.hostname:
        return None
    path = parsed.path.removesuffix("/").removesuffix(".git")
    port = f":{parsed.port}" if parsed.port and parsed.scheme in ("https", "http") else ""
    return f"https://{parsed.hostname}{port}{path}"


def git_output(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


@contextmanager
def index_secret(path: Path, url: str | None) -> Iterator[None]:
    """The index URL as a 0600 file for the duration of the builds, then gone."""
    if not url:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(url)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


class Runner:
    def __init__(
        self,
        engine: BuildRegistryEngine,
        options: BuildOptions,
        inputs: Inputs,
        display: Display,
    ) -> None:
        self.engine, self.options, self.inputs, self.display = engine, options, inputs, display
        self.reports: dict[str, CellReport] = {}
        self._stop = threading.Event()  # set on the first failure unless --keep-going

    def run(self, builds: Sequence[PlannedBuild]) -> list[CellReport]:
        self.display.message(self.engine.describe())
        for b in builds:
            self.reports[b.cell.id] = CellReport(cell=b.cell.id, size_budget=b.cell.size_budget)
        secret = self.options.work_dir / "secrets" / "index"
        with index_secret(secret, self.inputs.index_url), self.display:
            self._run_pool(builds)
        reports = [self.reports[b.cell.id] for b in builds]
        share_layers(reports)
        for report in reports:
            if report.layers:
                self._write_report(report)
        return reports

    def _run_pool(self, builds: Sequence[PlannedBuild]) -> None:
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.jobs))
        futures: dict[Future[None], PlannedBuild] = {
            pool.submit(self.build_one, b): b for b in builds
        }
        try:
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:
            for f in futures:
                f.cancel()
            self.engine.stop_all()
            pool.shutdown(wait=True)
            self._mark_unfinished("interrupted")
            raise Interrupted(self._interrupted_message()) from None
        pool.shutdown(wait=True)
        self._mark_unfinished("not-attempted")
        raise_first_bug(futures)

    def _mark_unfinished(self, status: str) -> None:
        for report in self.reports.values():
            if report.status == "pending" or (status == "interrupted" and not report.ok):
                report.status = status
                self._untag(report)
                self._write_report(report)

    def _interrupted_message(self) -> str:
        stopped = [r.cell for r in self.reports.values() if r.status == "interrupted"]
        return f"interrupted; stopped {', '.join(stopped) or 'nothing'} (no tags left for them)"

    def build_one(self, build: PlannedBuild) -> None:
        report = self.reports[build.cell.id]
        if self._stop.is_set():
            return  # an earlier cell failed; left "pending", reported as not attempted
        started = time.monotonic()
        self.display.start(build.cell.id)
        report.platforms = list(build.platforms)
        steps = StepLog()
        try:
            self._prepare(build)
            if self.pushes_straight():
                self._build_push(build, report, steps)
            else:
                on_line = lambda line: self._line(build, line, steps)  # noqa: E731
                report.image_id = self.engine.build(build.request, on_line).image_id
                self._prove_local(build, report, steps)
                self._tag(build, report)
                self._measure(build, report, self.engine.layers(report.image_id))
                if report.status == "built" and self.options.push:
                    self._push(build, report)
        except ImagekitError as exc:
            report.status = "failed" if report.status in ("pending", "built") else report.status
            report.error = terminal.render(exc.lines)  # one line each: no value breaks one
        except Exception as exc:  # a bug: the cell failed, and the run ends in exit 70
            report.status = "failed"
            report.error = terminal.render(f"internal error: {type(exc).__name__}: {exc}")
            self._untag(report)
            raise
        except BaseException:
            report.status = "interrupted"
            self._untag(report)
            raise
        finally:
            if not report.ok and not self.options.keep_going:
                self._stop.set()
            report.seconds = round(time.monotonic() - started, 2)
            report.steps, report.warnings = steps.as_list(), steps.warnings_as_list()
            self.display.finish(build.cell.id, report.status)
            self._write_report(report)

    def _line(self, build: PlannedBuild, line: str, steps: StepLog) -> None:
        steps.feed(line)
        self.display.line(build.cell.id, line, steps)

    def _prepare(self, build: PlannedBuild) -> None:
        context_mod.stage(
            build.cell, build.request.context, self.inputs.wheelhouse, self.options.package_locks
        )
        write_atomic(build.request.dockerfile, render(build.cell))

    def _tag(self, build: PlannedBuild, report: CellReport) -> None:
        try:
            for ref in build.tags:
                self.engine.tag(report.image_id, ref)
                report.tags.append(ref)
        except BaseException:
            self._untag(report)  # all of a cell's tags or none
            raise
        report.status = "built"

    def _untag(self, report: CellReport) -> None:
        for ref in report.tags:
            self.engine.untag(ref)
        report.tags.clear()

    def pushes_straight(self) -> bool:
        return pushes_straight(self.options, self.engine)

    def _push_request(self, build: PlannedBuild, report: CellReport, path: str) -> BuildRequest:
        """The cell's request as pushed (provenance where the engine can hold it), and what
        the report says of the push before it starts."""
        request = pushed_request(build.request, self.options, self.engine)
        report.push_compression, report.push_path = str(self.options.compression), path
        report.provenance = provenance_state(self.options.provenance, request.provenance)
        return request

    def _build_push(self, build: PlannedBuild, report: CellReport, steps: StepLog) -> None:
        """Build and push in one BuildKit run; the report is read back from the registry."""
        compression = self.options.compression
        request = self._push_request(build, report, "builder")
        exporting: list[float] = []

        def on_line(line: str) -> None:
            if not exporting and _EXPORT.search(line):
                exporting.append(time.monotonic())
            self._line(build, line, steps)

        pushed = self.engine.build_push(request, build.tags, compression, on_line)
        # push_seconds: from BuildKit's export (compression and upload) to the end
        report.push_seconds = round(time.monotonic() - (exporting or [time.monotonic()])[0], 2)
        report.pushed, report.status, report.sizes = pushed, "built", "compressed"
        where = " (it is in the registry: do not promote it)"
        self._judge(build, report, steps, [], where)  # BuildKit's own word, before reading back
        pushed_images, problems = [], []
        for platform in build.platforms:  # each one's image, read back from the registry
            image_id, layers = self.engine.pushed_layers(pushed[0], platform)
            self._measure(build, report, layers, platform, image_id)
            files = self.engine.pushed_files(by_digest(pushed[0], image_id), layers)
            proof = prove(platform, files, build.cell.python)
            problems.append(self._record(build, report, platform, proof))
            pushed_images.append((platform, image_id, layers))
        self._judge(build, report, steps, problems, where)
        report.sbom_status = self._sbom_status(build)
        for platform, image_id, layers in pushed_images:
            if report.sbom_status == "attached" and report.status == "built":
                self._attach_pushed_sbom(build, report, layers, platform, image_id)

    def _prove_local(self, build: PlannedBuild, report: CellReport, steps: StepLog) -> None:
        """The built image's files read for their platform before it gets a tag: an image
        whose files are another platform's is never tagged, pushed or promoted."""
        (platform,) = build.platforms  # a local image is of one platform
        asked = "" if platform == HOST else platform
        with self.engine.image_files(report.image_id, asked) as files:
            proof = prove(platform, files, build.cell.python)
        self._judge(build, report, steps, [self._record(build, report, platform, proof)], "")

    def _record(self, build: PlannedBuild, report: CellReport, platform: str, proof: Proof) -> str:
        """The proof in the report; why the image is not its platform's ("" where it is)."""
        if platform == build.platforms[0]:
            report.content = proof.as_list()
        if len(build.platforms) > 1:
            report.by_platform.setdefault(platform, {})["content"] = proof.as_list()
        return proof.problem(build.cell.runtime_image)

    def _judge(
        self,
        build: PlannedBuild,
        report: CellReport,
        steps: StepLog,
        problems: Sequence[str],
        where: str,
    ) -> None:
        """A cell whose files are not its platform's, or that BuildKit built on a base of
        another platform (its InvalidBaseImagePlatform warning), fails here."""
        problems = [p + where for p in problems if p]
        for warned in steps.warnings:
            if warned.rule == WRONG_BASE_PLATFORM:
                problems.append(
                    f"BuildKit built on a base of another platform ({warned.rule}: "
                    f"{warned.message}): the image's files are that platform's whatever its "
                    f"config says{where}. Fix: a base that has {', '.join(build.platforms)} "
                    "(`imagekit build --bootstrap-base` adds it to a Debian base)"
                )
        if problems:
            report.status = "wrong-platform"
            raise BuildError(*problems)

    def _sbom_status(self, build: PlannedBuild) -> str:
        """Whether the pushed image's SBOM is attached: only the runtime stage writes one."""
        return sbom_status(self.options, build.request.target)

    def _attach_pushed_sbom(
        self,
        build: PlannedBuild,
        report: CellReport,
        layers: Sequence[Layer],
        platform: str,
        image_id: str,
    ) -> None:
        """The SBOM of one platform's image, attached to that image (of one platform: to
        each pushed reference, as before)."""
        try:
            data = self._pushed_sbom(report.pushed[0], layers, report)
            several = len(build.platforms) > 1
            targets = [by_digest(report.pushed[0], image_id)] if several else report.pushed
            attached = [sbom.attach(ref, data) for ref in dict.fromkeys(targets)]
        except ImagekitError:
            report.status = "push-failed"
            raise
        report.sbom += attached
        if several:
            report.by_platform[platform]["sbom"] = attached

    def _pushed_sbom(self, ref: str, layers: Sequence[Layer], report: CellReport) -> bytes:
        """The SBOM from its own small layer in the registry (the step that wrote it)."""
        for layer in reversed(layers):
            if sbom.WRITER in layer.created_by:
                data = self.engine.pushed_file(ref, layer, sbom.PATH)
                if data is not None:
                    return data
        raise PushError(
            f"{report.cell}: the pushed image has no layer with an SBOM at {sbom.PATH} to "
            "attach; check that its Dockerfile is current (`imagekit render --check`)"
        )

    def _measure(
        self,
        build: PlannedBuild,
        report: CellReport,
        in_order: list[Layer],
        platform: str = "",
        image_id: str = "",
    ) -> None:
        # Uncompressed on every store: the sum of the layers. The containerd store's own
        # image size counts the compressed blobs in its content store besides. A push
        # without --load counts the compressed layers as pushed (sizes: compressed).
        measured = layer_summary(in_order)
        several = len(build.platforms) > 1
        if not platform or platform == build.platforms[0]:
            report.size_bytes = int(measured["size_bytes"])
            report.layers = measured["layers"]  # type: ignore[assignment]
            report.largest_layers = measured["largest_layers"]  # type: ignore[assignment]
            report.image_id = image_id or report.image_id
        if several:
            report.by_platform[platform] = {"image_id": image_id, **measured, "sbom": []}
        size = int(measured["size_bytes"])
        if size > build.cell.size_budget:
            report.status = "over-budget"
            layers = sorted(in_order, key=lambda layer: -layer.size)
            top = "; ".join(f"{gb(x.size)} {describe(x.created_by)}" for x in layers[:3])
            pushed = (
                " (compressed, as pushed: it is in the registry; do not promote it)"
                if report.sizes == "compressed"
                else ""
            )
            whose = f"the {platform} image" if several else "image"
            report.error = terminal.render(
                f"{whose} is {gb(size)}{pushed}, over the cell's size_budget of "
                f"{gb(build.cell.size_budget)}; largest layers: {top}"
            )

    def _push(self, build: PlannedBuild, report: CellReport) -> None:
        compression = self.options.compression
        request = self._push_request(build, report, "engine")
        provenance = request.provenance
        started = time.monotonic()
        try:
            if engine_pushes(self.engine, compression, provenance):
                for ref in build.tags:
                    report.pushed.append(self.engine.push(ref))
            else:
                report.pushed += self.engine.push_compressed(request, build.tags, compression)
            report.sbom_status = self._sbom_status(build)
            if report.sbom_status == "attached":
                report.sbom = self._attach_sbom(build.tags[0], report)
        except ImagekitError:
            report.status = "push-failed"
            raise
        finally:
            report.push_seconds = round(time.monotonic() - started, 2)

    def _attach_sbom(self, image: str, report: CellReport) -> list[str]:
        data = self.engine.read_file(image, sbom.PATH)
        if data is None:
            raise PushError(
                f"{report.cell}: the built image has no SBOM at {sbom.PATH} to attach; "
                "check that its Dockerfile is current (`imagekit render --check`)"
            )
        return [sbom.attach(ref, data) for ref in dict.fromkeys(report.pushed)]

    def _write_report(self, report: CellReport) -> None:
        path = paths.report_file(self.options.report_dir, report.cell)
        write_atomic(path, json.dumps(asdict(report), indent=2) + "\n")


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


# The push's decisions, one function each, read by the run (Runner) and by the dry run
# (dry_run.py), which asks them of the engines it pictures instead of the real one.
class PushEngine(Protocol):
    def pushes_from_builder(self) -> bool: ...
    def attaches_provenance(self) -> bool: ...
    def pushes_as_stored(self, compression: Compression) -> bool: ...


def pushes_straight(options: BuildOptions, engine: PushEngine) -> bool:
    """--push without --load, where BuildKit pushes: one build, nothing loaded."""
    return options.push and not options.load and engine.pushes_from_builder()


def pushed_request(
    request: BuildRequest, options: BuildOptions, engine: PushEngine
) -> BuildRequest:
    """The request as pushed: BuildKit's provenance where asked and the engine can hold it."""
    return replace(request, provenance=options.provenance and engine.attaches_provenance())


def engine_pushes(engine: PushEngine, compression: Compression, provenance: bool) -> bool:
    """Whether the engine's own `docker push` sends the loaded image; else BuildKit exports
    it again and pushes. The engine's push writes no attestation: provenance needs BuildKit."""
    return engine.pushes_as_stored(compression) and not provenance


def sbom_status(options: BuildOptions, target: str) -> str:
    """Whether the pushed image's SBOM is attached: only the runtime stage writes one."""
    if not options.attach_sbom:
        return "off"
    return "attached" if sbom.in_stage(target) else "not-in-stage"


def provenance_state(asked: bool, attached: bool) -> str:
    if attached:
        return "attached"
    return "unsupported" if asked else "off"


def raise_first_bug(futures: Iterable[Future[None]]) -> None:
    """A future keeps its thread's exception to itself: raise the first bug a build thread
    met, so the CLI reports an internal error (exit 70, crash log) instead of a quiet cell."""
    for future in futures:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise error


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


# BuildKit's export of the image (then its push), as its plain progress names it
HOST = host_platform() or AMD64  # what a build without --platform makes
_EXPORT = re.compile(r"^#\d+ exporting (to image|layers)")
_GROUP = re.compile(r"/run/imagekit/groups/(\w+)\.txt")
_SHELL = re.compile(r"^(RUN )?(\|\d+ \S*=\S* )*(/bin/sh -c )?(\. /run/imagekit/build-env\.sh && )?")


def describe(created_by: str) -> str:
    """A layer as a user knows it: the venv's torch layer, or its instruction, shortened."""
    if group := _GROUP.search(created_by):
        return f"the venv's {group[1]} layer"
    return _SHELL.sub("", created_by.strip())[:80]
