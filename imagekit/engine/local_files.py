"""A local image's files, read through a container that is created and never started: the
engine's archive endpoint (`GET /containers/{id}/archive?path=`) streams one path as a tar,
and only as much of it is read as the question needs (a file's first bytes, a folder's first
ELF file), so proving a 9 GB image reads kilobytes of it. Nothing runs in the image: an image
of another platform is read without QEMU.
"""

from __future__ import annotations

import base64
import json
import posixpath
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any

from imagekit.engine.image_files import TEXT_LIMIT, Entry, member_path, read_member, resolve
from imagekit.errors import EngineError, ImagekitError


def stat(response: Any) -> dict[str, Any]:
    """The engine's stat of the archived path (`X-Docker-Container-Path-Stat`, base64 JSON:
    name, size, mode, mtime, linkTarget: a link's target with every link on the way followed)."""
    header = response.headers.get("X-Docker-Container-Path-Stat") or ""
    try:
        found = json.loads(base64.b64decode(header))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


class LocalFiles:
    """engine/image_files.py's ImageFiles over a local image (of `platform`, where the
    store holds several)."""

    def __init__(self, client: Any, image: str, platform: str = "") -> None:
        self.client, self.image, self.platform = client, image, platform
        self.container: Any = None

    def __enter__(self) -> LocalFiles:
        extra = {"platform": self.platform} if self.platform else {}
        with self._said("creating a container of it"):
            self.container = self.client.containers.create(
                self.image, command=["true"], entrypoint=[], **extra
            )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.container is None:
            return
        try:
            self.container.remove(force=True)
        except Exception as exc:  # the SDK's errors; never in place of the one in flight
            if error is None:
                raise self._error("removing its container", exc) from None

    @contextmanager
    def _said(self, doing: str) -> Iterator[None]:
        """The engine's and the SDK's errors (a daemon gone, a path it refuses) as imagekit's
        own, naming the image; a tar that ends early likewise."""
        try:
            yield
        except ImagekitError:
            raise
        except Exception as exc:  # docker.errors, requests' errors, tarfile's, OSError
            raise self._error(doing, exc) from None

    def _error(self, doing: str, exc: Exception) -> EngineError:
        said = " ".join(str(getattr(exc, "explanation", None) or exc).split())[:300]
        return EngineError(
            f"reading the files of {self.image} ({self.platform or 'this host'}'s) to prove "
            f"its platform: {doing} failed: {type(exc).__name__}: {said}"
        )

    def _archive(self, path: str) -> Any:
        """The engine's tar stream of `path`, unread; None where the image has no such path."""
        api = self.client.api
        url = api._url("/containers/{0}/archive", self.container.id)
        # identity: Docker 28 gzips the archive for a client that accepts it, which would
        # compress a whole folder's bytes to read its first ELF header
        headers = {"Accept-Encoding": "identity"}
        with self._said(f"reading {path}"):
            response = api._get(url, params={"path": path}, stream=True, headers=headers)
            if response.status_code == 404:
                response.close()
                return None
            api._raise_for_status(response)
        response.raw.decode_content = True  # an engine that gzips all the same
        return response

    def entry(self, path: str) -> Entry | None:
        return self._read(posixpath.normpath(path), text=False)

    def _read(self, path: str, text: bool) -> Entry | None:
        response = self._archive(path)
        if response is None:
            return None
        try:
            with (
                self._said(f"reading {path}"),
                tarfile.open(fileobj=response.raw, mode="r|") as archive,
            ):
                member = archive.next()
                if member is None:
                    return None
                found = read_member(archive, member, path, text=text)
        finally:
            response.close()
        if found.kind == "link":  # where the engine resolved it: /bin/sh -> /usr/bin/dash
            target = stat(response).get("linkTarget") or found.target
            found = replace(found, target=str(target))
        return found

    def first_native(self, folder: str) -> Entry | None:
        found = resolve(self, folder)  # a folder that is a link: where it points
        if found is None or found.kind != "dir":
            return None
        response = self._archive(found.path)
        if response is None:
            return None
        parent = posixpath.dirname(found.path)
        try:
            with (
                self._said(f"reading {found.path}"),
                tarfile.open(fileobj=response.raw, mode="r|") as archive,
            ):
                for member in archive:
                    if not member.isfile() or member.size < 20:
                        continue
                    path = member_path(posixpath.join(parent, member.name))
                    entry = read_member(archive, member, path)
                    if entry.native:
                        return entry
        finally:
            response.close()  # the rest of the folder is never read
        return None

    def text(self, path: str) -> str | None:
        found = resolve(self, path)
        if found is None or found.kind != "file" or found.size > TEXT_LIMIT:
            return None
        read = self._read(found.path, text=True)
        return read.text if read is not None else None
