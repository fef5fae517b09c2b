"""sbom_writer.py, the in-build SBOM writer: run on a fake site-packages, dpkg status and lock, its
document checked with CycloneDX's own strict JSON schema validator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from imagekit.builder.context import script_text
from imagekit.buildtime import sbom_writer as sbom
from imagekit.supply.sbom_summary import summary_lines

EPOCH = 1_700_000_000
NAME = "cu126-torch2.13.0-py3.11-debian12"
HASH_A, HASH_B, HASH_C = "a" * 64, "b" * 64, "c" * 64

STATUS = """\
Package: libc6
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 2.36-9+deb12u4
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: old-tool
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0-1

Package: broken-pkg
Status: install reinstreq half-installed
Architecture: amd64
Version: 3.1-2

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2024a-0+deb12u1
"""

PURLS = {
    "pkg:pypi/torch@2.13.0%2Bcpu",
    "pkg:pypi/foo-bar@1.2.3",
    "pkg:pypi/nvidia-cublas-cu12@12.6.4.1",
    "pkg:pypi/numpy@2.1.0",
    "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12",
    "pkg:deb/debian/tzdata@2024a-0%2Bdeb12u1?arch=all&distro=debian-12",
}


def _dist(folder: Path, name: str, version: str) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    (info / "METADATA").write_text(text)


def _pin(name: str, version: str, *hashes: str) -> str:
    return " \\\n".join([f"{name}=={version}", *(f"    --hash=sha256:{h}" for h in hashes)])


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    site = tmp_path / "site-packages"
    _dist(site, "torch", "2.13.0+cpu")
    _dist(site, "Foo_Bar", "1.2.3")
    _dist(site, "numpy", "2.1.0")
    # the CUDA group's packages are links into a shared folder, as in the image
    _dist(tmp_path / "cuda-group", "nvidia_cublas_cu12", "12.6.4.1")
    target = tmp_path / "cuda-group" / "nvidia_cublas_cu12-12.6.4.1.dist-info"
    (site / target.name).symlink_to(target, target_is_directory=True)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "torch.txt").write_text(
        _pin("torch", "2.13.0+cpu", HASH_A, HASH_B) + "\n" + _pin("numpy", "2.0.0", HASH_C) + "\n"
    )
    (locked / "cuda.txt").write_text(_pin("nvidia-cublas-cu12", "12.6.4.1", HASH_C) + "\n")
    (locked / "features.txt").write_text(_pin("foo-bar", "1.2.3", HASH_B) + "\n")
    status = tmp_path / "status"
    status.write_text(STATUS)
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    return {"site": site, "locked": locked, "status": status, "release": release}


def _args(inputs: dict[str, Path], out: Path) -> list[str]:
    return [
        "--site", str(inputs["site"]), "--dpkg-status", str(inputs["status"]),
        "--os-release", str(inputs["release"]), "--locked", str(inputs["locked"]),
        "--name", NAME, "--epoch", str(EPOCH), "--out", str(out),
    ]  # fmt: skip


def _write(inputs: dict[str, Path], out: Path) -> str:
    assert sbom.main(_args(inputs, out)) == 0
    return out.read_text()


def _by_purl(doc: dict) -> dict[str, dict]:
    return {c["purl"]: c for c in doc["components"]}


def test_document_is_valid_cyclonedx_1_6(inputs: dict[str, Path], tmp_path: Path) -> None:
    text = _write(inputs, tmp_path / "sbom.cdx.json")
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    assert (doc["bomFormat"], doc["specVersion"], doc["version"]) == ("CycloneDX", "1.6", 1)
    assert doc["metadata"]["component"] == {"bom-ref": NAME, "name": NAME, "type": "container"}
    tools = doc["metadata"]["tools"]["components"]
    assert [(t["name"], t["version"]) for t in tools] == [("cyclonedx-python-lib", "11.12.0")]
    assert text.endswith("}\n") and text.startswith('{\n  "')  # indent 2, trailing newline


def test_validator_reports_a_broken_document(inputs: dict[str, Path], tmp_path: Path) -> None:
    """The validation above can fail: an unknown key, a bad enum value, a short hash."""
    doc = json.loads(_write(inputs, tmp_path / "sbom.cdx.json"))
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    for break_it in (
        lambda d: d["components"][0].update(colour="blue"),
        lambda d: d["components"][0].update(type="not-a-type"),
        lambda d: _by_purl(d)["pkg:pypi/torch@2.13.0%2Bcpu"]["hashes"][0].update(content="ab"),
    ):
        broken = json.loads(json.dumps(doc))
        break_it(broken)
        assert validator.validate_str(json.dumps(broken)) is not None


def test_purls_names_and_refs(inputs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(_write(inputs, tmp_path / "sbom.cdx.json"))
    components = _by_purl(doc)
    assert set(components) == PURLS  # deinstalled, half-installed and the tool's own: absent
    for purl, c in components.items():
        assert (c["bom-ref"], c["type"]) == (purl, "library")
    assert components["pkg:pypi/foo-bar@1.2.3"]["name"] == "Foo_Bar"  # as the metadata says
    assert components["pkg:pypi/torch@2.13.0%2Bcpu"]["version"] == "2.13.0+cpu"
    libc = components["pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12"]
    assert (libc["name"], libc["version"]) == ("libc6", "2.36-9+deb12u4")
    names = {c["name"] for c in doc["components"]}
    assert not names & {"cyclonedx-python-lib", "packageurl-python", "py-serializable", "pytest"}


def test_hashes_exactly_for_locked_pins(inputs: dict[str, Path], tmp_path: Path) -> None:
    components = _by_purl(json.loads(_write(inputs, tmp_path / "sbom.cdx.json")))
    hashes = {
        p: [(h["alg"], h["content"]) for h in c.get("hashes", [])] for p, c in components.items()
    }
    assert hashes["pkg:pypi/torch@2.13.0%2Bcpu"] == [("SHA-256", HASH_A), ("SHA-256", HASH_B)]
    assert hashes["pkg:pypi/nvidia-cublas-cu12@12.6.4.1"] == [("SHA-256", HASH_C)]
    assert hashes["pkg:pypi/foo-bar@1.2.3"] == [("SHA-256", HASH_B)]
    assert hashes["pkg:pypi/numpy@2.1.0"] == []  # the lock pins another version
    assert all(not v for p, v in hashes.items() if p.startswith("pkg:deb/"))


def test_unlocked_cell_has_no_hashes(inputs: dict[str, Path], tmp_path: Path) -> None:
    inputs["locked"] = tmp_path / "no-such-folder"
    doc = json.loads(_write(inputs, tmp_path / "sbom.cdx.json"))
    assert _by_purl(doc).keys() == PURLS
    assert not any("hashes" in c for c in doc["components"])


def test_same_inputs_same_bytes(inputs: dict[str, Path], tmp_path: Path) -> None:
    first = _write(inputs, tmp_path / "one.json")
    second = _write(inputs, tmp_path / "two.json")
    assert first == second
    doc = json.loads(first)
    assert doc["serialNumber"].startswith("urn:uuid:")
    assert datetime.fromisoformat(doc["metadata"]["timestamp"]).timestamp() == EPOCH
    assert os.stat(tmp_path / "one.json").st_mtime == EPOCH


def test_dependencies_name_every_component(inputs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(_write(inputs, tmp_path / "sbom.cdx.json"))
    root = next(d for d in doc["dependencies"] if d["ref"] == NAME)
    assert set(root["dependsOn"]) == PURLS


def test_no_dpkg_status_gives_python_only(inputs: dict[str, Path], tmp_path: Path) -> None:
    inputs["status"] = tmp_path / "missing-status"
    text = _write(inputs, tmp_path / "sbom.cdx.json")
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    purls = set(_by_purl(json.loads(text)))
    assert purls == {p for p in PURLS if p.startswith("pkg:pypi/")}


def test_os_release_without_version_id(inputs: dict[str, Path], tmp_path: Path) -> None:
    inputs["release"].write_text("ID=debian\nVERSION_CODENAME=trixie\n")
    purls = set(_by_purl(json.loads(_write(inputs, tmp_path / "a.json"))))
    assert "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-trixie" in purls
    inputs["release"].write_text("ID=ubuntu\n")
    purls = set(_by_purl(json.loads(_write(inputs, tmp_path / "b.json"))))
    assert "pkg:deb/ubuntu/libc6@2.36-9%2Bdeb12u4?arch=amd64" in purls


def test_missing_site_is_one_clear_line(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs["site"] = tmp_path / "nowhere"
    assert sbom.main(_args(inputs, tmp_path / "out.json")) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "nowhere") in err
    assert not (tmp_path / "out.json").exists()


@pytest.mark.subprocess
def test_script_as_the_build_runs_it(inputs: dict[str, Path], tmp_path: Path) -> None:
    """By its path as the build context carries it, with the writer's own packages on
    PYTHONPATH (and no imagekit): they are not listed."""
    script = tmp_path / "sbom_writer.py"
    script.write_text(script_text("sbom_writer.py"))
    tool = tmp_path / "sbom-tool"
    _dist(tool, "writer_only", "9.9")
    out = tmp_path / "opt" / "imagekit" / "sbom.cdx.json"
    env = {**os.environ, "PYTHONPATH": str(tool)}
    run = subprocess.run(
        [sys.executable, script, *_args(inputs, out)],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert set(_by_purl(json.loads(out.read_text()))) == PURLS
    assert out.read_text() == _write(inputs, tmp_path / "in-process.json")


def test_summary_reads_the_written_document(inputs: dict[str, Path], tmp_path: Path) -> None:
    lines = summary_lines(json.loads(_write(inputs, tmp_path / "sbom.cdx.json")))
    assert lines[0] == f"{NAME}: CycloneDX 1.6, 4 Python packages, 2 OS packages"
    assert [line.split() for line in lines[1:]] == [
        ["kind", "name", "version", "hashes"],
        ["python", "Foo_Bar", "1.2.3", "1"],
        ["python", "numpy", "2.1.0", "0"],
        ["python", "nvidia_cublas_cu12", "12.6.4.1", "1"],
        ["python", "torch", "2.13.0+cpu", "2"],
        ["os", "libc6", "2.36-9+deb12u4", "0"],
        ["os", "tzdata", "2024a-0+deb12u1", "0"],
    ]
