"""A person's view of an image's SBOM (/opt/imagekit/sbom.cdx.json, docs/sbom.md): a heading
and one row per package. Reads the JSON as it is, without the CycloneDX library (a build-only
tool, not one of imagekit's dependencies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagekit.contract.text import escape
from imagekit.errors import UsageError
from imagekit.text_table import render_table

# purl type -> the kind shown; any other type is "other"
KINDS = {"pypi": "python", "deb": "os"}
_ORDER = ("python", "os", "other")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    version: str
    hashes: int


def check_document(doc: object) -> dict[str, Any]:
    """`doc` as a CycloneDX document, or a UsageError naming the first thing that is not."""

    def refuse(what: str) -> UsageError:
        return UsageError(f"not a CycloneDX document: {what}")

    if not isinstance(doc, dict):
        raise refuse(f"a JSON {type(doc).__name__}, not an object")
    if doc.get("bomFormat") != "CycloneDX":
        raise refuse(f"bomFormat is {doc.get('bomFormat')!r}, not 'CycloneDX'")
    if not isinstance(doc.get("specVersion"), str):
        raise refuse("specVersion is missing or not a string")
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict) or not isinstance(metadata.get("component", {}), dict):
        raise refuse("metadata or metadata.component is not an object")
    if not isinstance(doc.get("components", []), list):
        raise refuse("components is not a list")
    for index, item in enumerate(doc.get("components", [])):
        where = f"components[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise refuse(f"{where} is not an object with a name")
        for key, kind in (("version", str), ("purl", str), ("hashes", list)):
            if key in item and not isinstance(item[key], kind):
                raise refuse(f"{where}.{key} is not a {'string' if kind is str else 'list'}")
    return doc


def _kind(purl: str) -> str:
    if not purl.startswith("pkg:"):
        return "other"
    purl_type = purl[len("pkg:") :].lstrip("/").split("/", 1)[0].lower()
    return KINDS.get(purl_type, "other")


def components(doc: object) -> list[Entry]:
    """The document's components, Python packages first, then OS packages, then the rest."""
    entries = [
        Entry(_kind(c.get("purl", "")), c["name"], c.get("version", ""), len(c.get("hashes", [])))
        for c in check_document(doc).get("components", [])
    ]
    return sorted(entries, key=lambda e: (_ORDER.index(e.kind), e.name.lower(), e.version))


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def summary_lines(doc: object) -> list[str]:
    """A heading (the image, the spec version, packages per kind), then a table of them."""
    checked = check_document(doc)
    entries = components(checked)
    image = checked.get("metadata", {}).get("component", {}).get("name")
    image = escape(image) if isinstance(image, str) else "(unnamed image)"
    counts = {kind: sum(e.kind == kind for e in entries) for kind in _ORDER}
    parts = [_count(counts["python"], "Python package"), _count(counts["os"], "OS package")]
    if counts["other"]:
        parts.append(_count(counts["other"], "other component"))
    heading = f"{image}: CycloneDX {checked['specVersion']}, {', '.join(parts)}"
    rows = [(e.kind, e.name, e.version, str(e.hashes)) for e in entries]
    return [heading, *render_table(("kind", "name", "version", "hashes"), rows, right=("hashes",))]
