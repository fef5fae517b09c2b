"""A small PyPI mirror on 127.0.0.1 (or `host`) for tests and benchmarks (stdlib only).

It serves PEP 503 simple pages and files fetched from pypi.org, rewriting file links to
itself, and behaves like the real index where it matters to an installer:

- HTTP Basic auth when `credentials` is set (401 otherwise), like a private mirror;
- PyPI's cache headers (files immutable for a year, pages 10 minutes), so pip's and uv's
  HTTP caches work as they do against pypi.org. The TLS-intercepting proxy on the
  project's CI machine strips them, which leaves pip's cache unable to store anything;
- an optional bandwidth limit, to stand in for a real link to the index.

Files are kept in `cache_dir` after the first upstream fetch, so a benchmark's timings
depend on the limit, not on the upstream.
"""

from __future__ import annotations

import base64
import hashlib
import re
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

UPSTREAM_PAGES = "https://pypi.org/simple/"
UPSTREAM_FILES = "https://files.pythonhosted.org/"
FILE_HEADERS = {"Cache-Control": "max-age=365000000, immutable, public"}
PAGE_HEADERS = {"Cache-Control": "max-age=600, public"}
CHUNK = 64 * 1024


@dataclass
class Stats:
    files: list[str] = field(default_factory=list)  # names of the files served
    lock: threading.Lock = field(default_factory=threading.Lock)


class Link:
    """One shared link: parallel downloads split its bandwidth, as on a real line."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self._free_at = 0.0
        self._lock = threading.Lock()

    def send(self, nbytes: int) -> None:
        """Wait until `nbytes` would have crossed the link after what was sent before."""
        with self._lock:
            start = max(time.monotonic(), self._free_at)
            self._free_at = start + nbytes / self.rate
            done = self._free_at
        time.sleep(max(0.0, done - time.monotonic()))


class Mirror:
    def __init__(
        self,
        cache_dir: Path,
        ca_bundle: Path | None,
        credentials: tuple[str, str] | None = None,
        bytes_per_second: float | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.cache_dir = cache_dir
        self.host = host  # where it listens: a build's RUN reaches the bridge's gateway
        self.ssl = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
        self.credentials = credentials
        self.link = Link(bytes_per_second) if bytes_per_second else None
        self.stats = Stats()
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def index_url(self, with_credentials: bool = True) -> str:
        auth = ""
        if self.credentials and with_credentials:
            auth = f"{self.credentials[0]}:{self.credentials[1]}@"
        return f"http://{auth}{self.host}:{self.port}/simple/"

    def __enter__(self) -> Mirror:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def authorized(self, header: str | None) -> bool:
        if self.credentials is None:
            return True
        token = base64.b64encode(":".join(self.credentials).encode()).decode()
        return header == f"Basic {token}"

    def page(self, project: str) -> bytes:
        with urllib.request.urlopen(UPSTREAM_PAGES + project + "/", context=self.ssl) as resp:
            html = resp.read().decode()
        local = f"http://{self.host}:{self.port}/files/"
        return html.replace(UPSTREAM_FILES, local).encode()

    def file(self, path: str) -> Path:
        name = hashlib.sha256(path.encode()).hexdigest()[:16] + "-" + Path(path).name
        cached = self.cache_dir / name
        if not cached.exists():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(".part")
            with urllib.request.urlopen(UPSTREAM_FILES + path, context=self.ssl) as resp:
                tmp.write_bytes(resp.read())
            tmp.replace(cached)
        return cached


def _handler(mirror: Mirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the stats say what was served

        def do_HEAD(self) -> None:  # uv asks before range requests
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            if not mirror.authorized(self.headers.get("Authorization")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path = self.path.split("#", 1)[0].split("?", 1)[0]
            if m := re.fullmatch(r"/simple/([A-Za-z0-9._-]+)/?", path):
                self._send(mirror.page(m.group(1).lower()), "text/html", PAGE_HEADERS, head)
            elif path.startswith("/files/"):
                self._send_file(mirror.file(path.removeprefix("/files/")), head)
            else:
                self.send_error(404)

        def _ok(self, content_type: str, length: int, headers: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(length))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()

        def _send(
            self, body: bytes, content_type: str, headers: dict[str, str], head: bool
        ) -> None:
            self._ok(content_type, len(body), headers)
            if not head:
                self.wfile.write(body)

        def _send_file(self, file: Path, head: bool) -> None:
            self._ok("application/octet-stream", file.stat().st_size, FILE_HEADERS)
            if head:
                return
            try:
                with file.open("rb") as fh:
                    while chunk := fh.read(CHUNK):
                        if mirror.link:
                            mirror.link.send(len(chunk))
                        self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                # uv asks for ranges, which this mirror answers with the whole file: it
                # hangs up once it has the bytes it wanted. Not a file served.
                self.close_connection = True
                return
            with mirror.stats.lock:
                mirror.stats.files.append(file.name.split("-", 1)[1])

    return Handler
