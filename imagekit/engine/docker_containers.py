"""DockerEngine's containers and networks: the self-check's runs, the detached nodes of a
multi-node check, and what a run leaves behind, through the Docker SDK.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from imagekit.engine.docker_daemon import DockerConnection, split_ref
from imagekit.engine.interface import (
    ContainerState,
    Labelled,
    RunOptions,
    RunResult,
    Started,
    SubnetTaken,
)
from imagekit.errors import EngineError


class DockerContainers(DockerConnection):
    """Running images (RunEngine's part of DockerEngine)."""

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
