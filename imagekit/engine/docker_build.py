"""DockerEngine's builds: BuildKit through the docker CLI (buildx, or a pre-23 CLI with
DOCKER_BUILDKIT=1; the SDK has no BuildKit build API), the pushes BuildKit exports, and the
images made from a root filesystem or an OCI layout (`docker import`, `load`, `save`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from imagekit import terminal
from imagekit.engine import emulation
from imagekit.engine.discover import estargz_crash, unsupported
from imagekit.engine.docker_daemon import DockerConnection, split_ref
from imagekit.engine.image_registry import push_failure
from imagekit.engine.interface import (
    BuildRequest,
    BuildResult,
    Compression,
    LineSink,
    build_flags,
    build_push_flags,
    image_output,
    inline_cache_as_build_arg,
    push_flags,
)
from imagekit.errors import BuildError, EngineError, PushError, UsageError

# What `docker import` sets on a root filesystem that becomes a base (import_rootfs): the
# official Debian images' CMD and locale
IMPORT_CHANGES = ("--change", 'CMD ["bash"]', "--change", "ENV LANG=C.UTF-8")


class DockerBuilds(DockerConnection):
    """Building, and what the builder can do (BuildEngine's part of DockerEngine)."""

    def exports_to_content_store(self) -> bool:
        """buildx's docker driver on the containerd store: BuildKit's image exporter writes
        the layers into containerd's content store, in a compression imagekit chooses."""
        b = self.builder
        return b.kind == "buildx" and b.driver == "docker" and self.containerd_store

    def build_args(self, request: BuildRequest, iidfile: Path, metadata: Path) -> list[str]:
        if self.builder.kind != "buildx":
            request = inline_cache_as_build_arg(request)
            if request.cache_to:
                raise EngineError(
                    "--cache-to needs docker buildx (the built-in BuildKit of older CLIs "
                    "exports inline cache only: --cache-to type=inline)"
                )
            prefix = [self.builder.cli, "build", "--progress=plain", "--iidfile", str(iidfile)]
            return [*prefix, *build_flags(request)]
        # Local images carry no provenance attestation: it would make the tag an index whose
        # timestamps give every no-op rebuild a new ID.
        args = [self.builder.cli, "buildx", "build", "--progress=plain", "--provenance=false"]
        args += ["--iidfile", str(iidfile), "--metadata-file", str(metadata)]
        if self.exports_to_content_store():
            # Uncompressed for the local store (compressing 6 GB only to unpack it again was
            # most of the export); in the push's compression when a push follows, so the
            # push sends the layers as stored.
            args += ["--output", image_output(request.push_compression)]
        else:
            args.append("--load")
        return [*args, *build_flags(request)]

    def attaches_provenance(self) -> bool:
        """Whether a push can carry BuildKit's provenance attestation: an image index with an
        attestation manifest, which the docker driver writes on the containerd store only
        (the classic store and Docker 20.10's built-in BuildKit hold no index)."""
        b = self.builder
        if b.kind != "buildx":
            return False
        return b.driver != "docker" or self.containerd_store

    def pushes_as_stored(self, compression: Compression) -> bool:
        """Whether `push` sends the built image's layers in `compression`: gzip at the
        engine's level always; any compression where the build exported in it."""
        return compression.default or self.exports_to_content_store()

    def check_support(self, cache_to: Sequence[str], compression: Compression) -> None:
        """Refuse, before anything builds, what this builder cannot do (exit 2)."""
        if not cache_to and compression.default:
            return
        containerd_store = self.builder.kind == "buildx" and self.containerd_store
        problems = unsupported(self.builder, cache_to, compression, containerd_store)
        if compression.kind == "estargz":
            self.client  # noqa: B018 - reads the daemon's Go version
            problems += estargz_crash(self._server_version, self._server_go)
        if problems:
            raise UsageError(*problems)

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildResult:
        self.client  # noqa: B018 - fail early with the daemon hint
        with tempfile.TemporaryDirectory(prefix="imagekit-iid-") as tmp:
            iidfile, metadata = Path(tmp) / "iid", Path(tmp) / "metadata.json"
            log = self._stream(self.build_args(request, iidfile, metadata), on_line)
            if not iidfile.is_file():
                raise BuildError(*failure_lines("docker build", log))
            image_id = iidfile.read_text().strip()
            if self.containerd_store and metadata.is_file():
                # buildx's --iidfile holds the config digest; the containerd store names an
                # image by its manifest's, which the metadata file has.
                said = json.loads(metadata.read_text()).get("containerimage.digest")
                image_id = str(said or image_id)
            return BuildResult(image_id=image_id, log=tuple(log))

    def _stream(self, args: list[str], on_line: LineSink) -> list[str]:
        # Own process group: Ctrl-C handling stops builds explicitly (stop_all).
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.builder.environment(),
            start_new_session=True,
            errors="replace",
        )
        with self._lock:
            self._procs.add(proc)
        log: list[str] = []
        try:
            assert proc.stdout is not None
            with proc.stdout:  # closed here, not left to the garbage collector
                for raw in proc.stdout:
                    line = raw.rstrip("\n")
                    log.append(line)
                    on_line(line)
            proc.wait()
        finally:
            with self._lock:
                self._procs.discard(proc)
        if proc.returncode != 0:
            raise BuildError(*failure_lines(f"{Path(args[0]).name} {args[1]}", log))
        return log

    def stop_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                continue
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def push_args(
        self,
        request: BuildRequest,
        tags: Sequence[str],
        compression: Compression,
        metadata: Path,
    ) -> list[str]:
        """The same build again (every step cached), exported by BuildKit's image exporter
        with the chosen compression and pushed; the engine's own push only writes gzip."""
        if self.builder.kind != "buildx":  # check_support refuses this before any build
            raise EngineError(f"--compression {compression} needs docker buildx")
        return self._buildx_build(metadata, push_flags(request, tags, compression))

    def _buildx_build(self, metadata: Path, flags: list[str]) -> list[str]:
        """`docker buildx build` with plain progress and a metadata file (the pushed digest)."""
        prefix = [self.builder.cli, "buildx", "build", "--progress=plain"]
        return [*prefix, "--metadata-file", str(metadata), *flags]

    def push_compressed(
        self, request: BuildRequest, tags: Sequence[str], compression: Compression
    ) -> list[str]:
        def args(metadata: Path) -> list[str]:
            return self.push_args(request, tags, compression, metadata)

        return self._buildx_push(args, tags, lambda _: None)

    def pushes_from_builder(self) -> bool:
        """Whether BuildKit itself writes and pushes the layers (Builder.pushes_layers)."""
        return self.builder.pushes_layers(self.containerd_store)

    def build_push(
        self,
        request: BuildRequest,
        tags: Sequence[str],
        compression: Compression,
        on_line: LineSink,
    ) -> list[str]:
        """The build, exported by BuildKit straight to the registry: nothing is loaded into
        the engine's image store (store=false), so nothing is written twice."""
        if not self.pushes_from_builder():  # the session asks only where it can
            raise EngineError("a push straight from BuildKit needs buildx and its image exporter")
        self.client  # noqa: B018 - fail early with the daemon hint

        def args(metadata: Path) -> list[str]:
            return self._buildx_build(metadata, build_push_flags(request, tags, compression))

        return self._buildx_push(args, tags, on_line, build_failure=True)

    def _buildx_push(
        self,
        args_for: Callable[[Path], list[str]],
        tags: Sequence[str],
        on_line: LineSink,
        build_failure: bool = False,
    ) -> list[str]:
        """Run a buildx build that pushes; the pushed digest (the index's where provenance
        made one) from its metadata file, named after each tag."""
        with tempfile.TemporaryDirectory(prefix="imagekit-push-") as tmp:
            metadata = Path(tmp) / "metadata.json"
            try:
                self._stream(args_for(metadata), on_line)
            except BuildError as exc:
                if build_failure:
                    raise
                headline, *tail = exc.lines
                reason = headline.removesuffix("; its last lines:")
                raise PushError(push_failure(tags[0], reason), *tail[-5:]) from None
            digest = ""
            if metadata.is_file():
                digest = str(json.loads(metadata.read_text()).get("containerimage.digest", ""))
        if not digest:
            raise PushError(push_failure(tags[0], "buildx reported no pushed digest"))
        return [f"{split_ref(tag)[0]}@{digest}" for tag in tags]

    def import_rootfs(self, rootfs: Path, tag: str, platform: str = "") -> str:
        """`tar | docker import`: a root filesystem folder becomes a one-layer image `tag`
        (for `platform`, where that is not the engine's own)."""
        on = ["--platform", platform] if platform else []
        args = [self.builder.cli, "import", *on, *IMPORT_CHANGES, "-", tag]
        return self._from_tar(rootfs, args, f"docker import of {tag}").strip()

    def load_layout(self, layout: Path) -> None:
        """`tar | docker load` of an OCI image layout: an index of several platforms stays
        one image (on the containerd image store)."""
        self._from_tar(layout, [self.builder.cli, "load"], f"docker load of {layout}")

    def save_layout(self, ref: str, layout: Path) -> None:
        """`docker save ref | tar -x`: the image (every platform it holds) as a folder."""
        layout.mkdir(parents=True, exist_ok=True)
        save = [self.builder.cli, "save", ref]
        self._piped(save, ["tar", "-C", str(layout), "-x"], f"docker save of {ref}")

    def _from_tar(self, folder: Path, args: list[str], what: str) -> str:
        tar = ["tar", "-C", str(folder), "--numeric-owner", "-c", "."]
        return self._piped(tar, args, what)

    @staticmethod
    def _piped(source: list[str], sink: list[str], what: str) -> str:
        """`source | sink`, both waited for: the sink's output, or the words of the one that
        failed (the source's stderr goes to a file: a full pipe would stall it)."""
        with tempfile.TemporaryFile() as said:
            first = subprocess.Popen(source, stdout=subprocess.PIPE, stderr=said)
            second = subprocess.run(sink, stdin=first.stdout, capture_output=True, check=False)
            if first.stdout:
                first.stdout.close()
            first.wait()
            said.seek(0)
            words = said.read() if first.returncode != 0 else second.stderr
        if first.returncode != 0 or second.returncode != 0:
            tail = terminal.split(words.decode("utf-8", "replace").strip())[-15:]
            raise EngineError(f"{what} failed:", *terminal.foreign(tail))
        return str(second.stdout.decode("utf-8", "replace"))

    def holds_multi_platform(self) -> bool:
        """An image of several platforms under one name (Builder.holds_multi_platform)."""
        return self.builder.holds_multi_platform(self.containerd_store)

    def emulation_problem(self, platform: str) -> str | None:
        """Why this engine's containers cannot run `platform`'s programs (None: they can).
        Its builders run on this kernel, whose binfmt_misc registrations decide."""
        return emulation.emulation_problem(platform, os.uname().machine, emulation.read_binfmt())


def failure_lines(what: str, log: Sequence[str]) -> list[str]:
    """A failed command's error: what failed, then its last lines behind a gutter (the
    engine's words, a Dockerfile's too: shown, never taken as imagekit's own lines)."""
    if not log:
        return [f"{what} failed with no output"]
    return [f"{what} failed; its last lines:", *terminal.foreign(log[-40:])]
