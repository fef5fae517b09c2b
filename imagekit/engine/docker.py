"""The real engine: BuildKit builds through the docker CLI, the rest through the Docker SDK.

The SDK has no BuildKit build API, so builds run the CLI (buildx, or a pre-23 CLI with
DOCKER_BUILDKIT=1). Nothing here contacts the daemon until a method is called.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from imagekit import terminal
from imagekit.contract.refs import parse
from imagekit.engine import emulation, pushed
from imagekit.engine.discover import (
    Builder,
    check_engine_version,
    daemon_hint,
    estargz_crash,
    find_builder,
    unsupported,
    use_engine,
)
from imagekit.engine.image_files import TarIndex
from imagekit.engine.interface import (
    BuildRequest,
    BuildResult,
    Compression,
    ContainerState,
    ImageInfo,
    Labelled,
    Layer,
    LineSink,
    RunOptions,
    RunResult,
    Started,
    SubnetTaken,
    build_flags,
    build_push_flags,
    image_output,
    inline_cache_as_build_arg,
    push_flags,
)
from imagekit.engine.local_files import LocalFiles
from imagekit.errors import BuildError, EngineError, PushError, UsageError
from imagekit.platforms import AMD64

# What `docker import` sets on a root filesystem that becomes a base (import_rootfs): the
# official Debian images' CMD and locale
IMPORT_CHANGES = ("--change", 'CMD ["bash"]', "--change", "ENV LANG=C.UTF-8")


class DockerEngine:
    def __init__(self, docker_cli: str | None = None) -> None:
        self._chosen_cli = docker_cli
        self._builder: Builder | None = None
        self._client: Any = None
        self._server_version = "?"
        self._server_go = ""
        self._containerd_store: bool | None = None
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()

    # -- connection -----------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import docker  # deferred: never contact the daemon at import time

            use_engine(self._chosen_cli)  # the recorded engine's environment, before the SDK
            try:
                client = docker.from_env(timeout=300)
                version = client.version()
                self._server_version = str(version.get("Version", "?"))
                self._server_go = str(version.get("GoVersion", ""))
            except Exception as exc:  # the SDK raises several types for "no daemon"
                raise EngineError(f"{daemon_hint()} ({type(exc).__name__}: {exc})") from None
            check_engine_version(self._server_version)
            self._client = client
        return self._client

    @property
    def builder(self) -> Builder:
        if self._builder is None:
            self._builder = find_builder(self._chosen_cli)
        return self._builder

    @property
    def containerd_store(self) -> bool:
        """Whether the daemon keeps images in containerd's store (Docker 29's default), where
        an image is named by its manifest digest and a build exports into a content store."""
        if self._containerd_store is None:
            status = self.client.info().get("DriverStatus") or []
            self._containerd_store = "io.containerd.snapshotter" in json.dumps(status)
        return self._containerd_store

    def describe(self) -> str:
        self.client  # noqa: B018 - connects and checks the version
        b = self.builder
        how = "buildx" if b.kind == "buildx" else "DOCKER_BUILDKIT=1"
        store = "containerd image store" if self.containerd_store else "classic image store"
        return (
            f"Docker engine {self._server_version}, {store}; "
            f"builds with {b.cli} {b.cli_version} ({how})"
        )

    # -- build ----------------------------------------------------------------------------
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

    # -- images ---------------------------------------------------------------------------
    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        self.client.images.get(image_id).tag(repo, tag)

    def untag(self, ref: str) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.ImageNotFound):
            self.client.images.remove(ref, noprune=True)

    def inspect(self, ref: str) -> ImageInfo | None:
        import docker.errors

        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        config = image.attrs.get("Config") or {}
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        return ImageInfo(
            id=image.id,
            size=int(image.attrs.get("Size", 0)),
            labels=dict(config.get("Labels") or {}),
            env=env,
            user=str(config.get("User") or ""),
            repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
            tags=tuple(image.tags),
            architecture=str(image.attrs.get("Architecture") or ""),
        )

    def image_platforms(self, ref: str) -> tuple[str, ...] | None:
        """The local image's platforms: on the containerd store each manifest whose content
        is here (`?manifests=1`, API 1.48 on: an index pulled for one platform lists the
        others unavailable), else the image's one os/architecture."""
        import docker.errors

        api = self.client.api  # first: no daemon is the daemon hint, not a missing image
        if self.builder.kind == "buildx" and self.builder.driver != "docker":
            return None  # a builder of its own never reads the engine's images
        try:
            if self.containerd_store:
                url = api._url("/images/{0}/json", ref)
                attrs = api._result(api._get(url, params={"manifests": "1"}), True)
            else:
                attrs = api.inspect_image(ref)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"inspecting {ref}: {exc.explanation or exc}") from None
        return held_platforms(attrs, self.containerd_store)

    def registry_image_platforms(self, ref: str) -> tuple[str, ...]:
        """The daemon's look at the registry (`GET /distribution/{name}/json`): the
        platforms of the index, or of the one manifest, the tag names."""
        found = self.client.images.get_registry_data(ref).attrs.get("Platforms") or []
        names = [f"{p.get('os')}/{p.get('architecture')}" for p in found if isinstance(p, dict)]
        return tuple(dict.fromkeys(n for n in names if "unknown" not in n))

    def image_files(self, image: str, platform: str = "") -> LocalFiles:
        return LocalFiles(self.client, image, platform)

    def pushed_files(self, ref: str, layers: Sequence[Layer]) -> TarIndex:
        return pushed.files(ref, layers)

    def read_file(self, image: str, path: str) -> bytes | None:
        """One file of the image, read from a container that is created and never started;
        None where the image has no such file."""
        import docker.errors

        container = self.client.containers.create(image, command=["true"], entrypoint=[])
        try:
            stream, _ = container.get_archive(path)
            return file_from_tar(b"".join(stream))
        except docker.errors.NotFound:
            return None
        finally:
            container.remove(force=True)

    def pull(self, ref: str) -> None:
        import docker.errors

        try:
            self.client.images.pull(ref)
        except docker.errors.APIError as exc:
            raise EngineError(f"pulling {ref} failed: {exc.explanation or exc}") from None

    def layers(self, ref: str) -> list[Layer]:
        image = self.client.images.get(ref)
        diff_ids = list((image.attrs.get("RootFS") or {}).get("Layers") or [])
        arch = str(image.attrs.get("Architecture") or "")
        if self.containerd_store and emulation.is_foreign(arch):
            return align_layers(diff_ids, self._history(ref, arch))
        return align_layers(diff_ids, image.history())

    def _history(self, ref: str, arch: str) -> list[dict[str, Any]]:
        """An image of another platform's history: the containerd store counts its layers'
        sizes only when asked for that platform (the API's `platform`, 1.48 on; the SDK's
        history() cannot ask), and only once they are unpacked, which BuildKit's export does
        for the engine's own platform alone: a container created (never started) unpacks
        them, as the first `docker run` would."""
        container = self.client.containers.create(ref, platform=f"linux/{arch}")
        container.remove(force=True)
        api = self.client.api
        platform = json.dumps({"os": "linux", "architecture": arch})
        url = api._url("/images/{0}/history", ref)
        return list(api._result(api._get(url, params={"platform": platform}), True))

    def push(self, ref: str) -> str:
        repo, tag = split_ref(ref)
        digest = ""
        try:
            for event in self.client.images.push(repo, tag=tag, stream=True, decode=True):
                if "error" in event:
                    raise PushError(_push_failure(ref, str(event["error"])))
                digest = pushed_digest(event) or digest
            # The containerd store may report neither an aux record nor a digest line: the
            # registry then says what it holds under the tag.
            digest = digest or self._registry_digest_or_empty(ref)
        except PushError:
            raise
        except Exception as exc:  # connection refused, DNS, TLS: all mean "not pushed"
            raise PushError(_push_failure(ref, f"{type(exc).__name__}: {exc}")) from None
        if not digest:
            raise PushError(_push_failure(ref, "the registry returned no digest"))
        return f"{repo}@{digest}"

    def _registry_digest_or_empty(self, ref: str) -> str:
        import docker.errors

        try:
            return self.registry_digest(ref)
        except docker.errors.APIError:
            return ""

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

    def pushed_layers(self, ref: str, platform: str = AMD64) -> tuple[str, list[Layer]]:
        """The pushed image's manifest digest and layers for `platform`, read back from its
        registry."""
        image = pushed.pushed_image(ref, platform.rpartition("/")[2])
        return image.digest, image.layers

    def pushed_file(self, ref: str, layer: Layer, path: str) -> bytes | None:
        return pushed.layer_file(ref, layer, path)

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
                raise PushError(_push_failure(tags[0], reason), *tail[-5:]) from None
            digest = ""
            if metadata.is_file():
                digest = str(json.loads(metadata.read_text()).get("containerimage.digest", ""))
        if not digest:
            raise PushError(_push_failure(tags[0], "buildx reported no pushed digest"))
        return [f"{split_ref(tag)[0]}@{digest}" for tag in tags]

    def registry_digest(self, ref: str) -> str:
        return str(self.client.images.get_registry_data(ref).id)

    def registry_platforms(self, ref: str, digest: str) -> dict[str, str]:
        """Read with oras, as pushed images are: the daemon's registry API says which
        platforms an index has, not their manifests' digests."""
        return pushed.platform_digests(str(parse(ref).normalized().by_digest(digest)))

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

    def has_gpu_runtime(self) -> bool:
        runtimes = self.client.info().get("Runtimes") or {}
        return "nvidia" in runtimes or Path("/usr/bin/nvidia-container-runtime").exists()

    def stamp(self, image: str, ref: str, labels: dict[str, str]) -> None:
        """Tag `ref` as `image` plus labels: same layers, one metadata commit."""
        repo, tag = split_ref(ref)
        changes = [f"LABEL {key}={json.dumps(value)}" for key, value in sorted(labels.items())]
        container = self.client.containers.create(image)
        try:
            container.commit(repository=repo, tag=tag, changes=changes)
        finally:
            container.remove(force=True)

    # -- containers -----------------------------------------------------------------------
    def run(self, image: str, command: Sequence[str], options: RunOptions) -> RunResult:
        container, notes = self._start_with_fallback(image, command, options)
        return self._wait(container, options, notes)

    def start(self, image: str, command: Sequence[str], options: RunOptions) -> Started:
        """Start a container and return at once; the caller watches and removes it."""
        container, notes = self._start_with_fallback(image, command, options)
        return Started(id=str(container.id), notes=notes)

    def _start_with_fallback(
        self, image: str, command: Sequence[str], options: RunOptions
    ) -> tuple[Any, tuple[str, ...]]:
        import docker.errors

        try:
            return self._start(image, command, options), ()
        except docker.errors.APIError as exc:
            if not (options.memlock_unlimited and "rlimit" in str(exc)):
                raise start_error(image, exc) from None
        # Unprivileged engines (rootless, nested) may not raise RLIMIT_MEMLOCK.
        notes = (
            "this engine refused --ulimit memlock=-1; ran with its default memlock "
            "(NCCL over RDMA needs it unlimited on real training hosts)",
        )
        try:
            return self._start(image, command, replace(options, memlock_unlimited=False)), notes
        except docker.errors.APIError as again:
            raise start_error(image, again) from None

    def _start(self, image: str, command: Sequence[str], options: RunOptions) -> Any:
        kwargs = run_kwargs(options, self.client.api.api_version)
        container = self.client.containers.create(image, list(command), **kwargs)
        try:
            container.start()
        except BaseException:
            container.remove(force=True)  # a container that never ran leaves nothing behind
            raise
        return container

    def _wait(self, container: Any, options: RunOptions, notes: tuple[str, ...]) -> RunResult:
        import docker.errors
        import requests.exceptions

        timed_out = False
        try:
            try:
                code = int(container.wait(timeout=options.timeout).get("StatusCode", 1))
            except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout):
                timed_out, code = True, 124
                container.kill()
            output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        return RunResult(exit_code=code, output=output, timed_out=timed_out, notes=notes)

    def state(self, container: str) -> ContainerState | None:
        import docker.errors

        try:
            attrs = self.client.containers.get(container).attrs.get("State") or {}
        except docker.errors.NotFound:
            return None
        running = bool(attrs.get("Running")) or attrs.get("Status") in ("created", "restarting")
        return ContainerState(
            running=running,
            exit_code=None if running else int(attrs.get("ExitCode", 0)),
            oom_killed=bool(attrs.get("OOMKilled")),
            finished_at=None if running else epoch(str(attrs.get("FinishedAt", ""))),
            error=str(attrs.get("Error") or ""),
        )

    def logs(self, container: str) -> str:
        import docker.errors

        try:
            raw = self.client.containers.get(container).logs(stdout=True, stderr=True)
        except docker.errors.NotFound:
            return ""
        return bytes(raw).decode("utf-8", "replace")

    def remove(self, container: str) -> None:
        """Kill and remove; a container already gone (or going) is fine."""
        import docker.errors

        try:
            self.client.containers.get(container).remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise

    # -- networks -------------------------------------------------------------------------
    def create_network(self, name: str, subnet: str, labels: dict[str, str]) -> None:
        import docker.errors
        from docker.types import IPAMConfig, IPAMPool

        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=subnet)])
        try:
            self.client.networks.create(
                name, driver="bridge", ipam=ipam, labels=labels, check_duplicate=True
            )
        except docker.errors.APIError as exc:
            said = str(getattr(exc, "explanation", None) or exc)
            if "overlap" in said:
                raise SubnetTaken(f"subnet {subnet}: {said}") from None
            raise EngineError(f"could not create network {name} ({subnet}): {said}") from None

    def remove_network(self, name: str) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):
            self.client.networks.get(name).remove()

    def labelled(self, key: str) -> list[Labelled]:
        found = [
            Labelled("container", c.name, dict(c.labels))
            for c in self.client.containers.list(all=True, filters={"label": key})
        ]
        for net in self.client.networks.list(filters={"label": key}):
            found.append(Labelled("network", net.name, dict(net.attrs.get("Labels") or {})))
        return found


def held_platforms(attrs: dict[str, Any], containerd_store: bool = False) -> tuple[str, ...]:
    """An image inspect's platforms (os/architecture): its available image manifests where
    the containerd store lists them (attestations and absent platforms left out), else its
    own; none (not known) on a containerd store whose API predates the list (1.48), where
    an index's other platforms cannot be told from absent ones."""
    manifests = attrs.get("Manifests")
    if containerd_store and not isinstance(manifests, list):
        return ()
    if isinstance(manifests, list) and manifests:
        names = [
            f"{platform.get('os')}/{platform.get('architecture')}"
            for m in manifests
            if isinstance(m, dict) and m.get("Kind") == "image" and m.get("Available")
            for platform in [(m.get("ImageData") or {}).get("Platform") or {}]
        ]
        return tuple(dict.fromkeys(names))
    return (f"{attrs.get('Os') or 'linux'}/{attrs.get('Architecture') or 'unknown'}",)


def epoch(stamp: str) -> float | None:
    """Docker's RFC 3339 time with nanoseconds -> epoch seconds (None for the zero time)."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, frac = stamp.rstrip("Z").partition(".")
    try:
        whole = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return whole + float(f"0.{frac or 0}")


_METADATA_ONLY = re.compile(
    r"^(/bin/sh -c #\(nop\) )?(ENV|LABEL|CMD|ENTRYPOINT|USER|EXPOSE|ARG|STOPSIGNAL|HEALTHCHECK|"
    r"SHELL|VOLUME|ONBUILD|MAINTAINER)\b"
)


def align_layers(diff_ids: Sequence[str], history: Sequence[dict[str, Any]]) -> list[Layer]:
    """The image's layers, oldest first: RootFS diff IDs joined with `docker history`.

    History (newest first from the API) also has entries that made no layer (ENV, LABEL...);
    the API does not say which, only their size 0. Entries with bytes made a layer; of the
    empty ones, those that can change files (RUN, COPY, ADD, WORKDIR) are taken next, the
    latest first, until there is one entry per diff ID. A layer no entry accounts for keeps
    its diff ID with size 0 and no instruction."""
    entries = [(str(h.get("CreatedBy") or ""), int(h.get("Size") or 0)) for h in reversed(history)]
    chosen = {i for i, (_, size) in enumerate(entries) if size > 0}
    for i in reversed(range(len(entries))):
        if len(chosen) >= len(diff_ids):
            break
        if i not in chosen and not _METADATA_ONLY.match(entries[i][0].strip()):
            chosen.add(i)
    picked = [entries[i] for i in sorted(chosen)][-len(diff_ids) :] if diff_ids else []
    missing = len(diff_ids) - len(picked)
    picked = [("", 0)] * missing + picked
    return [
        Layer(created_by=created_by, size=size, diff_id=diff_id)
        for diff_id, (created_by, size) in zip(diff_ids, picked, strict=True)
    ]


_DIGEST_LINE = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


def pushed_digest(event: dict[str, Any]) -> str:
    """The manifest digest a push event reports: the aux record (classic store), or the
    status line `TAG: digest: sha256:... size: N` (both stores print it); "" if neither."""
    aux = event.get("aux") or {}
    if isinstance(aux, dict) and aux.get("Digest"):
        return str(aux["Digest"])
    match = _DIGEST_LINE.search(str(event.get("status") or ""))
    return match.group(1) if match else ""


def start_error(image: str, exc: Exception) -> EngineError:
    said = str(getattr(exc, "explanation", None) or exc)
    if "executable file not found" in said:
        return EngineError(f"could not start {image}: the command is not in the image ({said})")
    return EngineError(f"could not start {image}: {said}")


def run_kwargs(options: RunOptions, api_version: str = "1.41") -> dict[str, Any]:
    from docker.types import DeviceRequest, EndpointConfig, Ulimit

    kwargs: dict[str, Any] = {"environment": dict(options.env)}
    for key in ("name", "hostname"):
        if getattr(options, key):
            kwargs[key] = getattr(options, key)
    if options.labels:
        kwargs["labels"] = dict(options.labels)
    if options.network:
        kwargs["network"] = options.network
        aliases = list(options.aliases) or None
        kwargs["networking_config"] = {options.network: EndpointConfig(api_version, aliases)}
    if options.ipc_host:
        kwargs["ipc_mode"] = "host"
    elif options.shm_size:
        kwargs["shm_size"] = options.shm_size
    if options.memlock_unlimited:
        kwargs["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1)]
    if options.gpus:
        ids = list(options.gpu_ids) or None
        count = None if ids else -1  # -1: every GPU; else the listed ones
        request = DeviceRequest(count=count, device_ids=ids, capabilities=[["gpu"]])
        kwargs["device_requests"] = [request]
    if options.volumes:
        kwargs["volumes"] = {h: {"bind": c, "mode": "rw"} for h, c in options.volumes.items()}
    if options.user:
        kwargs["user"] = options.user
    if options.entrypoint is not None:
        kwargs["entrypoint"] = list(options.entrypoint)
    return kwargs


def file_from_tar(data: bytes) -> bytes | None:
    """The one regular file of the tar the engine's archive endpoint returns for a path."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                return handle.read() if handle else None
    return None


def split_ref(ref: str) -> tuple[str, str]:
    """'host:5000/a/b:tag' -> ('host:5000/a/b', 'tag'); no tag means 'latest'."""
    reference = parse(ref)
    return reference.name, reference.tag or "latest"


def failure_lines(what: str, log: Sequence[str]) -> list[str]:
    """A failed command's error: what failed, then its last lines behind a gutter (the
    engine's words, a Dockerfile's too: shown, never taken as imagekit's own lines)."""
    if not log:
        return [f"{what} failed with no output"]
    return [f"{what} failed; its last lines:", *terminal.foreign(log[-40:])]


def _push_failure(ref: str, reason: str) -> str:
    registry = parse(ref).registry or "docker.io"
    return (
        f"push of {ref} failed: {reason}. The local image {ref} is kept; check that the "
        f"registry {registry} is reachable and that you are logged in (`docker login {registry}`)"
    )
