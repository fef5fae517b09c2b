"""Image references and digests, parsed by Docker's grammar (distribution/reference)."""

from __future__ import annotations

import re
from collections.abc import Mapping

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]+))?"
)
TAG = re.compile(_TAG)
# registry: and repository: of a matrix file, by the same grammar (a registry may carry a
# namespace: ghcr.io/org); together with a tag they always make a valid reference.
REGISTRY = re.compile(rf"{_DOMAIN}(?:/{_COMPONENT})*")
REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
# Names a FROM would read as a stage of imagekit's own Dockerfile, or as no image at all.
RESERVED = {"os-base", "builder", "packages", "runtime", "scratch"}


def check_image_ref(text: str) -> str:
    """`text`, or ValueError saying what is wrong with it as an image reference."""
    if text in RESERVED:
        raise ValueError(
            f"{text!r} is a stage of imagekit's Dockerfile or no image at all; name an image "
            "such as debian:bookworm-slim or registry.example.com/team/base:1"
        )
    match = _REFERENCE.fullmatch(text)
    first = text.split("/", 1)[0]
    looks_like_domain = "/" in text and ("." in first or ":" in first or first == "localhost")
    if not match or (match["domain"] is None and looks_like_domain):
        raise ValueError(
            "not an image reference: [registry[:port]/]name[:tag][@sha256:<64 hex>], "
            "name in lowercase letters, digits and . _ -"
        )
    if match["digest"] and not DIGEST.fullmatch(match["digest"]):
        raise ValueError(f"digest {match['digest']!r} is not sha256: followed by 64 hex digits")
    return text


def check_tag(tag: str) -> str:
    if not TAG.fullmatch(tag):
        raise ValueError(
            f"{_short(tag)} is not a valid Docker tag: 1 to 128 letters, digits, _ . -, "
            "not starting with . or -"
        )
    return tag


def _short(text: str) -> str:
    """`text` as repr, cut to 100 characters (a hostile value may be a megabyte)."""
    shown = repr(text)
    return shown if len(shown) <= 100 else f"{shown[:100]}... ({len(text)} characters)"


def pinned(ref: str, pins: Mapping[str, str]) -> str:
    """`ref`, plus @digest where a lock pins it (a ref with a digest is taken as it is)."""
    digest = pins.get(ref)
    return f"{ref}@{digest}" if digest and "@" not in ref else ref
