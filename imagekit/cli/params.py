"""Typed click parameters: each option's value is checked at the edge against the grammar of
the place it lands (a folder imagekit writes into, a tag, a URL, an image reference ...).

A value that does not fit is click's BadParameter: exit 2, naming the option and the value,
with what would be valid. Nothing is written or contacted before every option is checked.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from imagekit.matrix.ref_checks import check_image_ref
from imagekit.urls import mask

CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


class OutDir(click.ParamType):
    """A folder imagekit writes into: it, or the nearest folder above it that exists, must be
    a folder (a file where a folder is expected is refused before anything is written)."""

    name = "folder"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        found = _nearest_existing(path)
        if not found.is_dir():
            what = "is" if found == path else f"is below {found}, which is"
            self.fail(
                f"{str(path)!r} {what} not a folder; name a folder (it is made if missing)",
                param,
                ctx,
            )
        return path


class OutFile(click.ParamType):
    """A file imagekit writes: not a folder, and in a folder (made if missing)."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        if path.is_dir():
            self.fail(f"{str(path)!r} is a folder; name a file to write", param, ctx)
        found = _nearest_existing(path.parent)
        if not found.is_dir():
            self.fail(
                f"{str(path)!r} is below {found}, which is not a folder; name a file in a folder",
                param,
                ctx,
            )
        return path


OUT_DIR = OutDir()
OUT_FILE = OutFile()


class Checked(click.ParamType):
    """A text option checked by `check`, which returns the value or raises ValueError saying
    what would be valid. The value is shown as repr (a newline shows as \\n), credentials
    masked."""

    def __init__(self, name: str, check: Callable[[str], str]) -> None:
        self.name = name
        self.check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.check(value)
        except ValueError as exc:
            self.fail(f"{mask(_short(value))}: {mask(str(exc))}", param, ctx)


def _short(value: str) -> str:
    shown = repr(value)
    return shown if len(shown) <= 100 else f"{shown[:100]}... ({len(value)} characters)"


def one_line(value: str, what: str) -> str:
    """No control character (a newline would start a line of its own where it lands)."""
    bad = CONTROL.search(value)
    if bad:
        raise ValueError(
            f"control character U+{ord(bad.group()):04X} at position {bad.start()}; "
            f"{what} is one line of printable text"
        )
    return value


_SUFFIX = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def tag_suffix(value: str) -> str:
    if value and not _SUFFIX.fullmatch(value):
        raise ValueError(
            "a tag suffix is appended to Docker tags: up to 64 letters, digits, _ . and -, "
            "e.g. -candidate-42"
        )
    return value


def url(value: str, schemes: tuple[str, ...] = ("http", "https", "file")) -> str:
    """An absolute URL without whitespace or control characters (it lands in a pip.conf
    line, a build argument or apt sources, where either would start something new)."""
    if any(c.isspace() for c in value) or CONTROL.search(value):
        raise ValueError("a URL has no whitespace or control characters; percent-encode them")
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if parts.scheme not in schemes or (parts.scheme != "file" and not parts.hostname):
        raise ValueError(f"expected {' or '.join(schemes)}://host/path")
    if any(c in value for c in "\"'`\\"):
        raise ValueError("a URL has no quotes or backslashes; percent-encode them")
    return value


def url_or_none(value: str) -> str:
    return value if value == "none" else url(value)


def image_ref(value: str) -> str:
    return check_image_ref(value)


_CACHE = re.compile(r"[A-Za-z0-9_./:@=,+-]+")


def cache_spec(value: str) -> str:
    """An image reference, or buildx's key=value,... cache spec."""
    if "=" not in value:
        return check_image_ref(value)
    if not _CACHE.fullmatch(value):
        raise ValueError(
            "a cache spec is key=value pairs separated by commas "
            "(e.g. type=registry,ref=REPO:buildcache,mode=max), no spaces or quotes"
        )
    return value


_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def runner_label(value: str, examples: str = "gpu or linux-a100") -> str:
    if not _LABEL.fullmatch(value):
        raise ValueError(f"a runs-on label is letters, digits, _ . and -, e.g. {examples}")
    return value


# GitHub's hosted runners that cannot build arm64 natively: x86-64 Linux, and Windows and
# macOS (no Linux containers). Labels are matched without regard to case.
_NOT_ARM64_LINUX = re.compile(
    r"ubuntu-(latest|\d+\.\d+)|ubuntu-slim|(windows|macos)-.*", re.IGNORECASE
)


def arm64_runner_label(value: str) -> str:
    """The runs-on label of a native Linux arm64 runner (hosted or self-hosted)."""
    runner_label(value, "ubuntu-24.04-arm or linux-arm64")
    if _NOT_ARM64_LINUX.fullmatch(value):
        raise ValueError(
            f"GitHub's hosted {value} runner does not build linux/arm64 natively; name a "
            "Linux arm64 runner (GitHub's hosted ubuntu-24.04-arm, or your self-hosted "
            "runners' label), or leave the option out to build arm64 under QEMU"
        )
    return value


_SUITE = re.compile(r"[a-z][a-z0-9-]{0,31}")


def debian_suite(value: str) -> str:
    if not _SUITE.fullmatch(value):
        raise ValueError("a Debian suite is a lowercase name, e.g. bookworm or trixie")
    return value


_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")


def torch_version(value: str) -> str:
    if not _VERSION.fullmatch(value):
        raise ValueError("expected a torch version like 2.7.1")
    return value


def env_assignment(value: str) -> str:
    """NAME=VALUE: a shell name, a one-line value."""
    name, sep, text = value.partition("=")
    if not sep or not ENV_NAME.fullmatch(name):
        raise ValueError("write NAME=VALUE, NAME letters, digits and _ (not first a digit)")
    one_line(text, "an environment value")
    return value


TAG_SUFFIX = Checked("suffix", tag_suffix)
URL = Checked("url", url)
URL_OR_NONE = Checked("url|none", url_or_none)
IMAGE_REF = Checked("image", image_ref)
CACHE_SPEC = Checked("ref|spec", cache_spec)
RUNNER_LABEL = Checked("label", runner_label)
ARM64_RUNNER_LABEL = Checked("label", arm64_runner_label)
DEBIAN_SUITE = Checked("suite", debian_suite)
TORCH_VERSION = Checked("version", torch_version)
ENV = Checked("name=value", env_assignment)


class PlatformList(click.ParamType):
    """linux/amd64,linux/arm64: platforms imagekit builds, as a tuple in one order."""

    name = "platforms"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, ...]:
        from imagekit.platforms import PLATFORMS

        if isinstance(value, tuple):
            return value
        names = [n.strip() for n in str(value).split(",") if n.strip()]
        unknown = [n for n in names if n not in PLATFORMS]
        if unknown or not names:
            self.fail(
                f"{mask(str(value))!r}: name platforms from {', '.join(PLATFORMS)}, "
                "comma-separated (e.g. linux/amd64,linux/arm64)",
                param,
                ctx,
            )
        return tuple(p for p in PLATFORMS if p in names)


PLATFORM_LIST = PlatformList()


def merge_platforms(
    ctx: click.Context, param: click.Parameter, value: Any
) -> tuple[str, ...] | None:
    """--platform given once (a comma list) or repeated: one tuple in PLATFORMS' order; None
    where it was not given (the command's default)."""
    from imagekit.platforms import PLATFORMS

    named = {p for group in value or () for p in group}
    return tuple(p for p in PLATFORMS if p in named) or None


class CommaList(click.ParamType):
    """A list option's value: items separated by commas, each stripped and checked by `item`
    (click's own type: a Choice, a version ...). The option is also repeatable, so
    `--cuda 12.8,13.0` and `--cuda 12.8 --cuda 13.0` are the same: `flatten` joins them."""

    def __init__(self, item: click.ParamType = click.STRING) -> None:
        self.item = item
        self.name = f"{item.name} list"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[Any, ...]:
        if isinstance(value, tuple):  # a default, converted already
            return value
        if value == "":  # an empty CI variable, `--require "$REQUIRE"`: nothing asked
            return ()
        items = [part.strip(" ") for part in str(value).split(",")]  # not a control character
        if not all(items):
            self.fail(
                f"{mask(_short(str(value)))}: an empty item; separate the items with single "
                "commas, e.g. 12.8,13.0 (or repeat the option)",
                param,
                ctx,
            )
        return tuple(self.item.convert(item, param, ctx) for item in items)


def flatten(ctx: click.Context, param: click.Parameter, value: Any) -> tuple[Any, ...]:
    """A repeated list option's values as one tuple, each item once, in the order given."""
    items = [item for group in value or () for item in group]
    return tuple(dict.fromkeys(items))
