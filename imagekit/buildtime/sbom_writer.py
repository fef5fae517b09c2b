"""Write the image's SBOM: a CycloneDX 1.6 JSON document of its Python and OS packages.

Runs inside the build with the image's Python, the writer library mounted for this step only:

    PYTHONPATH=/run/imagekit/sbom-tool /opt/venv/bin/python sbom.py --site SITE
        [--dpkg-status FILE] [--os-release FILE] [--locked DIR]
        --name CELL_ID --epoch SECONDS --out FILE

Python packages are the distributions in SITE (never sys.path: the writer's own packages are
not the image's), each with every sha256 the package lock (DIR/{cuda,torch,features,team}.txt;
an aarch64 build's in DIR/linux-arm64/) allows for its pin (the team's packages and the
source package are distributions of SITE like any other); OS packages are dpkg's installed
ones. The same packages give the same bytes: no clock, no random serial number or bom-ref;
the timestamp and the file's mtime are --epoch. See docs/sbom.md. The one buildtime script
beyond the standard library: it needs cyclonedx-python-lib and packageurl-python, which the
build mounts and no layer keeps.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import cyclonedx
from cyclonedx.model import HashAlgorithm, HashType
from cyclonedx.model.bom import Bom
from cyclonedx.model.bom_ref import BomRef
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

# The package lock's layout, which the host imports too: this script's copy in the build
# context has lockfile.py's lines in place of this import (lockfile.py says why).
from imagekit.buildtime.lockfile import HASH, LOCK_GROUPS, LOCKED_FOLDERS, PIN, normalize


def machine_locked(locked: Path | None, machine: str) -> Path | None:
    """The folder of `machine`'s lock under --locked (LOCKED_FOLDERS: an arm64 image's SBOM
    gets arm64's hashes, never amd64's wheels' of the same version); None: no lock can be
    this machine's."""
    if locked is None or machine not in LOCKED_FOLDERS:
        return None
    return locked / LOCKED_FOLDERS[machine]


def locked_hashes(locked: Path | None) -> dict[tuple[str, str], list[str]]:
    """(normalized name, version) -> the sha256 digests the lock allows for that pin. A
    missing folder or group file: an unlocked cell, no hashes."""
    hashes: dict[tuple[str, str], list[str]] = {}
    for group in LOCK_GROUPS:
        path = locked / f"{group}.txt" if locked else None
        if path is None or not path.is_file():
            continue
        key = None
        for line in path.read_text(encoding="utf-8").splitlines():
            if pin := PIN.match(line):
                key = (normalize(pin[1]), pin[2])
                hashes.setdefault(key, [])
            if key is not None:
                hashes[key].extend(HASH.findall(line))
            if not line.rstrip().endswith("\\"):
                key = None  # the pin's continuation lines end here
    return hashes


def component(name: str, purl: PackageURL, version: str, hashes: list[str]) -> Component:
    ref = purl.to_string()
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version,
        purl=purl,
        bom_ref=ref,  # fixed, never the library's random one
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in sorted(set(hashes))],
    )


def python_components(site: Path, locked: Path | None) -> list[Component]:
    hashes = locked_hashes(locked)
    found: dict[tuple[str, str], Component] = {}
    for dist in importlib.metadata.distributions(path=[str(site)]):
        name, version = dist.metadata.get("Name"), dist.metadata.get("Version")
        if not name or not version:
            continue  # a broken *.dist-info: nothing to name
        key = (normalize(name), version)
        purl = PackageURL(type="pypi", name=key[0], version=version)
        found.setdefault(key, component(name, purl, version, hashes.get(key, [])))
    return list(found.values())


def read_stanzas(text: str) -> list[dict[str, str]]:
    """dpkg's status file: RFC 822-style stanzas, a line that starts with a blank continues
    the field before it."""
    stanzas: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    key = ""
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if fields:
                stanzas.append(fields)
            fields, key = {}, ""
        elif line[0] in " \t":
            if key:
                fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return stanzas


def os_release(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    values = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("\"'")  # ID and VERSION_ID: no escapes
    return values


def os_components(status: Path, release: dict[str, str]) -> list[Component]:
    if not status.is_file():
        return []  # not a Debian base: no dpkg, no OS packages to list
    distro_id = release.get("ID") or None
    distro_version = release.get("VERSION_ID") or release.get("VERSION_CODENAME")
    found: dict[str, Component] = {}
    for fields in read_stanzas(status.read_text(encoding="utf-8", errors="replace")):
        name, version = fields.get("Package"), fields.get("Version")
        if fields.get("Status") != "install ok installed" or not name or not version:
            continue
        qualifiers = {"arch": fields.get("Architecture", "")}
        if distro_id and distro_version:
            qualifiers["distro"] = f"{distro_id}-{distro_version}"
        qualifiers = {k: v for k, v in qualifiers.items() if v}
        purl = PackageURL("deb", distro_id, name, version, qualifiers)
        found.setdefault(purl.to_string(), component(name, purl, version, []))
    return list(found.values())


def build_bom(name: str, epoch: int, components: list[Component]) -> Bom:
    purls = sorted(str(c.bom_ref.value) for c in components)
    # A serial number from the contents, not uuid4: the same packages give the same file.
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "\n".join([f"imagekit-sbom:{name}", *purls]))
    bom = Bom(serial_number=serial, components=components)
    bom.metadata.timestamp = datetime.fromtimestamp(epoch, tz=timezone.utc)
    image = Component(type=ComponentType.CONTAINER, name=name, bom_ref=BomRef(name))
    bom.metadata.component = image
    tool_purl = PackageURL(type="pypi", name="cyclonedx-python-lib", version=cyclonedx.__version__)
    tool = Component(
        type=ComponentType.LIBRARY,
        group="CycloneDX",
        name="cyclonedx-python-lib",
        version=cyclonedx.__version__,
        purl=tool_purl,
        bom_ref=tool_purl.to_string(),
    )
    bom.metadata.tools.components.add(tool)
    # The image contains every package: without this edge the library warns that the graph
    # is incomplete.
    bom.register_dependency(image, components)
    return bom


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, required=True)
    parser.add_argument("--dpkg-status", type=Path, default=Path("/var/lib/dpkg/status"))
    parser.add_argument("--os-release", type=Path, default=Path("/etc/os-release"))
    parser.add_argument("--locked", type=Path, default=None)
    parser.add_argument("--name", required=True)
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.site.is_dir():
        print(f"sbom: no site-packages directory at {args.site}", file=sys.stderr)
        return 1
    locked = machine_locked(args.locked, platform.machine())
    components = python_components(args.site, locked)
    components += os_components(args.dpkg_status, os_release(args.os_release))
    text = JsonV1Dot6(build_bom(args.name, args.epoch, components)).output_as_string(indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    os.utime(args.out, (args.epoch, args.epoch))
    n_py = sum(c.purl is not None and c.purl.type == "pypi" for c in components)
    print(f"sbom: {n_py} Python and {len(components) - n_py} OS packages -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
