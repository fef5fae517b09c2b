"""docs/build-report.md documents every key of build.json, every status and every value of
its enumerations (CellReport in imagekit/builder/build_report.py)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from imagekit.builder import platform_proof
from imagekit.builder.build_report import CellReport

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "build-report.md").read_text()
# every module of the builder: the runner, the SBOM attach and orchestrate.py set statuses
BUILDER = "\n".join(p.read_text() for p in sorted((ROOT / "imagekit" / "builder").glob("*.py")))


def documented_keys() -> set[str]:
    return set(re.findall(r"^\| `([\w-]+)` \|", DOC, re.M))


def test_every_key_of_the_report_is_documented() -> None:
    keys = {f.name for f in fields(CellReport)}
    assert keys - documented_keys() == set()


def test_every_status_the_builder_sets_is_documented() -> None:
    statuses = set(re.findall(r'status = "([\w-]+)"', BUILDER)) | set(
        re.findall(r'(?:status=|_mark_unfinished\()"([\w-]+)"', BUILDER)
    )
    statuses -= {"pending"}  # while a cell builds; never what a finished report says
    assert {"built", "failed", "wrong-platform", "over-budget", "push-failed"} <= statuses
    assert statuses - documented_keys() == set()


def test_every_content_key_and_machine_is_documented() -> None:
    check = platform_proof.Check("w", "/p", "x86_64", "aarch64").as_dict()
    assert set(check) - documented_keys() == set()
    for machine in platform_proof.ELF_MACHINES.values():
        assert f"`{machine}`" in DOC
    for what in [w for _, w in platform_proof.NATIVE] + ["the venv's Python", "torch's wheel tag"]:
        assert f"`{what}`" in DOC
