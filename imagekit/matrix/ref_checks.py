"""Image references and tags as the matrix and the CLI accept them: the grammar and the
parser are contract/refs.py's; here what imagekit refuses beyond it."""

from __future__ import annotations

from collections.abc import Mapping

from imagekit.contract.refs import DIGEST, REGISTRY, REPOSITORY, TAG, parse

__all__ = ["DIGEST", "REGISTRY", "REPOSITORY", "RESERVED", "TAG", "check_image_ref", "pinned"]

# Names a FROM would read as a stage of imagekit's own Dockerfile, or as no image at all.
RESERVED = {"os-base", "builder", "packages", "runtime", "scratch"}


def check_image_ref(text: str) -> str:
    """`text`, or ValueError saying what is wrong with it as an image reference."""
    if text in RESERVED:
        raise ValueError(
            f"{text!r} is a stage of imagekit's Dockerfile or no image at all; name an image "
            "such as debian:bookworm-slim or registry.example.com/team/base:1"
        )
    reference = parse(text)  # ValueError: not the grammar
    if reference.digest and not DIGEST.fullmatch(reference.digest):
        raise ValueError(f"digest {reference.digest!r} is not sha256: followed by 64 hex digits")
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
