"""The connection to a Docker daemon and its BuildKit builder, which every part of
DockerEngine shares; nothing here contacts the daemon until it is first used.
"""

from __future__ import annotations

import json
import subprocess
import threading
from typing import Any

from imagekit.contract.refs import parse
from imagekit.engine.discover import (
    Builder,
    check_engine_version,
    daemon_hint,
    find_builder,
    use_engine,
)
from imagekit.errors import EngineError


class DockerConnection:
    """The daemon (through the Docker SDK), the builder (the docker CLI), and the CLI
    processes a build has running (stopped by stop_all)."""

    def __init__(self, docker_cli: str | None = None) -> None:
        self._chosen_cli = docker_cli
        self._builder: Builder | None = None
        self._client: Any = None
        self._server_version = "?"
        self._server_go = ""
        self._containerd_store: bool | None = None
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()

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


def split_ref(ref: str) -> tuple[str, str]:
    """'host:5000/a/b:tag' -> ('host:5000/a/b', 'tag'); no tag means 'latest'."""
    reference = parse(ref)
    return reference.name, reference.tag or "latest"
