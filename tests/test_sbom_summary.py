"""sbom_summary: an image's CycloneDX SBOM as a heading and a table; anything else refused."""

from __future__ import annotations

import copy

import pytest

from imagekit.errors import UsageError
from imagekit.supply.sbom_summary import Entry, check_document, components, summary_lines

DOC = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.6",
    "version": 1,
    "metadata": {"component": {"type": "container", "name": "cu126-torch2.7.1-py3.11"}},
    "components": [
        {
            "type": "library",
            "name": "torch",
            "version": "2.7.1+cpu",
            "purl": "pkg:pypi/torch@2.7.1%2Bcpu",
            "hashes": [
                {"alg": "SHA-256", "content": "a" * 64},
                {"alg": "SHA-256", "content": "b" * 64},
            ],
        },
        {
            "type": "library",
            "name": "libc6",
            "version": "2.36-9+deb12u4",
            "purl": "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12",
        },
        {"type": "library", "name": "Foo_Bar", "version": "1.0", "purl": "pkg:pypi/foo-bar@1.0"},
        {"type": "library", "name": "zlib", "version": "1.3", "purl": "pkg:generic/zlib@1.3"},
    ],
}


def test_summary_heading_and_table() -> None:
    assert summary_lines(DOC) == [
        "cu126-torch2.7.1-py3.11: CycloneDX 1.6, 2 Python packages, 1 OS package, 1 other component",
        "kind    name     version         hashes",
        "python  Foo_Bar  1.0                  0",
        "python  torch    2.7.1+cpu            2",
        "os      libc6    2.36-9+deb12u4       0",
        "other   zlib     1.3                  0",
    ]


def test_components_by_kind() -> None:
    assert components(DOC)[1] == Entry("python", "torch", "2.7.1+cpu", 2)
    assert [e.kind for e in components(DOC)] == ["python", "python", "os", "other"]


def test_an_empty_document_and_an_unnamed_image() -> None:
    doc = {"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}
    assert (
        summary_lines(doc)[0] == "(unnamed image): CycloneDX 1.6, 0 Python packages, 0 OS packages"
    )
    assert components({"bomFormat": "CycloneDX", "specVersion": "1.6"}) == []


def test_a_name_cannot_add_a_line() -> None:
    doc = copy.deepcopy(DOC)
    doc["metadata"]["component"]["name"] = "img\nfake: line"
    doc["components"][0]["name"] = "torch\n\x1b[31m"
    lines = summary_lines(doc)
    assert len(lines) == 6
    assert lines[0].startswith("img\\nfake: line: ")
    assert "torch\\n\\x1b[31m" in lines[3]


def _broken(path: tuple[object, ...], value: object) -> dict:
    doc = copy.deepcopy(DOC)
    target: object = doc
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([DOC], "a JSON list, not an object"),
        (_broken(("bomFormat",), "SPDX"), "bomFormat is 'SPDX', not 'CycloneDX'"),
        ({k: v for k, v in DOC.items() if k != "specVersion"}, "specVersion is missing"),
        (_broken(("components",), {"torch": {}}), "components is not a list"),
        (_broken(("components", 1), "libc6"), "components[1] is not an object with a name"),
        (_broken(("components", 0, "hashes"), "sha256"), "components[0].hashes is not a list"),
        (_broken(("components", 2, "version"), 1.0), "components[2].version is not a string"),
        (_broken(("metadata",), []), "metadata or metadata.component is not an object"),
    ],
)
def test_a_malformed_document_is_refused(doc: object, message: str) -> None:
    with pytest.raises(UsageError, match="^not a CycloneDX document: ") as refused:
        summary_lines(doc)
    assert message in str(refused.value)
    with pytest.raises(UsageError):
        check_document(doc)


def test_a_valid_document_is_returned_as_it_is() -> None:
    assert check_document(DOC) is DOC
