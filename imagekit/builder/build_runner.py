"""`imagekit build`'s run: the planned builds on an Engine, each cell tagged, measured,
pushed and reported.

Tags are applied only after a build succeeds, so an interrupted or failed build leaves
no tag behind.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from imagekit import paths, terminal
from imagekit.builder import context as context_mod
from imagekit.builder import sbom_attach
from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import HOST, PlannedBuild
from imagekit.builder.build_report import CellReport, describe, layer_summary, share_layers
from imagekit.builder.display import Display
from imagekit.builder.inputs import Inputs
from imagekit.builder.log import WRONG_BASE_PLATFORM, StepLog
from imagekit.builder.platform_proof import Proof, prove
from imagekit.builder.push_decisions import (
    engine_pushes,
    provenance_state,
    pushed_request,
    pushes_straight,
    sbom_status,
)
from imagekit.engine.image_registry import by_digest
from imagekit.engine.interface import BuildRegistryEngine, BuildRequest, Layer
from imagekit.errors import BuildError, ImagekitError, Interrupted
from imagekit.paths import write_atomic
from imagekit.render.dockerfile import render
from imagekit.sizes import gb

# BuildKit's export of the image (then its push), as its plain progress names it
_EXPORT = re.compile(r"^#\d+ exporting (to image|layers)")


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
        self, engine: BuildRegistryEngine, options: BuildOptions, inputs: Inputs, display: Display
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
                sbom_attach.attach_pushed(self.engine, build, report, layers, platform, image_id)

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
                report.sbom = sbom_attach.attach_loaded(self.engine, build.tags[0], report)
        except ImagekitError:
            report.status = "push-failed"
            raise
        finally:
            report.push_seconds = round(time.monotonic() - started, 2)

    def _write_report(self, report: CellReport) -> None:
        path = paths.report_file(self.options.report_dir, report.cell)
        write_atomic(path, json.dumps(asdict(report), indent=2) + "\n")


def raise_first_bug(futures: Iterable[Future[None]]) -> None:
    """A future keeps its thread's exception to itself: raise the first bug a build thread
    met, so the CLI reports an internal error (exit 70, crash log) instead of a quiet cell."""
    for future in futures:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise error
