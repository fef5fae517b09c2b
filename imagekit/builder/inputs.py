"""Build inputs from outside the matrix: CA bundle, package index, wheelhouse.

All are checked before any build starts. The CA bundle and the index URL (which may hold
credentials) travel as BuildKit secrets: mounted for one RUN, never written to a layer.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import UsageError
from imagekit.urls import mask

CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


@dataclass(frozen=True)
class Inputs:
    ca_bundle: Path | None
    ca_source: str
    index_url: str | None
    wheelhouse: Path | None


def pip_config_files() -> list[Path]:
    if os.environ.get("PIP_CONFIG_FILE"):
        return [Path(os.environ["PIP_CONFIG_FILE"])]
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME", home / ".config"))
    return [Path("/etc/pip.conf"), home / ".pip" / "pip.conf", xdg / "pip" / "pip.conf"]


def pip_config_cert() -> tuple[str, str] | None:
    found = None
    for path in pip_config_files():  # later files win, as in pip
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_option(section, "cert"):
                found = (parser.get(section, "cert"), f"{path} [{section}] cert")
    return found


def find_ca_bundle(explicit: Path | None) -> tuple[Path | None, str]:
    """--ca-bundle, else the usual pip/requests settings. Returns (path, where it came from)."""
    if explicit is not None:
        return _existing(explicit, "--ca-bundle"), "--ca-bundle"
    for name in CA_ENV:
        if os.environ.get(name):
            return _existing(Path(os.environ[name]), f"${name}"), f"${name}"
    config = pip_config_cert()
    if config:
        return _existing(Path(config[0]), config[1]), config[1]
    return None, "none"


def _existing(path: Path, source: str) -> Path:
    if not path.is_file():
        raise UsageError(
            f"CA bundle {path} (from {source}) is not a readable file; pass an existing PEM "
            "bundle with --ca-bundle, or unset the setting"
        )
    return path.resolve()


def check_wheelhouse(path: Path | None) -> Path | None:
    if path is None:
        return None
    if not path.is_dir():
        raise UsageError(f"--wheelhouse {path} is not a directory; pass a folder of .whl files")
    if not any(path.glob("*.whl")):
        raise UsageError(f"--wheelhouse {path} holds no .whl files; put the wheels to offer there")
    return path.resolve()


def check_index_url(url: str | None) -> str | None:
    if url is None:
        return None
    if not url.startswith(("http://", "https://", "file://")) or any(c.isspace() for c in url):
        raise UsageError(f"--index-url {mask(url)!r} is not a URL; expected https://host/simple")
    return url


def resolve(ca_bundle: Path | None, index_url: str | None, wheelhouse: Path | None) -> Inputs:
    ca, source = find_ca_bundle(ca_bundle)
    return Inputs(
        ca_bundle=ca,
        ca_source=source,
        index_url=check_index_url(index_url or os.environ.get("IMAGEKIT_INDEX_URL")),
        wheelhouse=check_wheelhouse(wheelhouse),
    )
