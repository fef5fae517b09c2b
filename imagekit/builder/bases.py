"""Base images without a container registry, and base digests where there is one.

`bootstrap` makes a real Debian base with debootstrap from a package mirror and imports it
into the engine under the name the matrix uses (debian:bookworm-slim by default), so the
slim Debian cells build where no registry is reachable. `lock` pins bases by digest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from imagekit import terminal
from imagekit.builder import oci_layout
from imagekit.contract.refs import parse
from imagekit.engine.emulation import DEBIAN_ARCH, host_platform
from imagekit.engine.interface import BuildEngine, BuildRegistryEngine, RegistryEngine
from imagekit.errors import EngineError, ImagekitError, UsageError
from imagekit.locks.images import Lock, lacking
from imagekit.matrix.cells import Cell
from imagekit.platforms import AMD64
from imagekit.render.dockerfile import base_packages

DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Trimmed like the official -slim images: no docs, man pages or apt lists.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "var/lib/apt/lists", "var/cache/apt")


def debootstrap(
    suite: str,
    mirror: str,
    target: Path,
    variant: str = "minbase",
    arch: str = "",
    include: Sequence[str] = (),
) -> None:
    """A Debian root filesystem in `target`; `arch` (Debian's name, arm64) where it is not
    this host's: its second stage runs under QEMU (binfmt_misc). `include`: packages
    installed into it as well (`--bake-packages`)."""
    if not shutil.which("debootstrap"):
        raise EngineError(
            "debootstrap is not installed; install it with `apt-get install debootstrap`"
        )
    if os.geteuid() != 0:
        raise EngineError("debootstrap needs root; run `imagekit base bootstrap` with sudo")
    on = [f"--arch={arch}"] if arch else []
    on += [f"--include={','.join(include)}"] if include else []
    args = ["debootstrap", *on, f"--variant={variant}", suite, str(target), mirror]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = terminal.split((result.stdout + result.stderr).strip())[-15:]
        raise EngineError(
            f"debootstrap {' '.join(on)} {suite} from {mirror} failed; its last lines:",
            *terminal.foreign(tail),
        )
    for rel in TRIM:
        path = target / rel
        if path.is_dir():
            for child in path.iterdir():
                shutil.rmtree(
                    child
                ) if child.is_dir() and not child.is_symlink() else child.unlink()


def bootstrap(
    engine: BuildEngine,
    suite: str,
    tag: str,
    mirror: str = DEFAULT_MIRROR,
    platforms: Sequence[str] = (),
    include: Sequence[str] = (),
) -> str:
    """debootstrap a root filesystem here for each platform (none named: this host's), then
    the engine imports it as `tag`: one platform by `docker import`, several as one index
    (an OCI layout, `docker load`), which needs a store that holds one. `include`: packages
    baked in (`baked_packages`)."""
    check_platforms(engine, platforms)
    with tempfile.TemporaryDirectory(prefix="imagekit-rootfs-") as tmp:
        if len(platforms) < 2:
            root = Path(tmp) / "rootfs"
            foreign = next((p for p in platforms if p != host_platform()), "")
            debootstrap(suite, mirror, root, arch=DEBIAN_ARCH.get(foreign, ""), include=include)
            return engine.import_rootfs(root, tag, foreign)
        roots = {p: Path(tmp) / DEBIAN_ARCH[p] for p in platforms}
        for platform, root in roots.items():
            debootstrap(suite, mirror, root, arch=DEBIAN_ARCH[platform], include=include)
        oci_layout.write(roots, tag, Path(tmp) / "layout")
        engine.load_layout(Path(tmp) / "layout")
        return tag


def add_platforms(
    engine: BuildEngine,
    suite: str,
    tag: str,
    platforms: Sequence[str],
    mirror: str = DEFAULT_MIRROR,
) -> str:
    """debootstrap `platforms` into the local image `tag`, which has others: saved as an OCI
    layout, the new platforms' manifests added beside its own (kept byte for byte, so their
    digests and BuildKit's cache of them stay), and loaded again as one index."""
    check_emulation(engine, platforms)
    with tempfile.TemporaryDirectory(prefix="imagekit-rootfs-") as tmp:
        layout = Path(tmp) / "layout"
        engine.save_layout(tag, layout)
        roots = {p: Path(tmp) / DEBIAN_ARCH[p] for p in platforms}
        for platform, root in roots.items():
            debootstrap(suite, mirror, root, arch=DEBIAN_ARCH[platform])
        oci_layout.extend(layout, roots, tag)
        engine.load_layout(layout)
    return tag


def baked_packages(cells: Sequence[Cell], images: Iterable[str]) -> list[str]:
    """The OS packages the os-base stage of the cells built on any of `images` (the tag being
    made, and the suite's image the matrix names) installs, for `imagekit base bootstrap
    --bake-packages`: in the base, that step installs nothing (it checks dpkg's database
    first, so a base without them still builds). No such cell: refused (exit 2), naming the
    bases the cells do use."""
    wanted = set(images)
    mine = [cell for cell in cells if unpinned(cell.runtime_image) in wanted]
    if not mine:
        used = ", ".join(sorted({unpinned(cell.runtime_image) for cell in cells})) or "none"
        raise UsageError(
            f"--bake-packages: no cell of the matrix builds on {' or '.join(sorted(wanted))} "
            f"(its cells' bases: {used}). Fix: name the matrix with --envs, or the --suite "
            "its cells use"
        )
    return sorted({name for cell in mine for name in base_packages(cell)})


def check_emulation(engine: BuildEngine, platforms: Iterable[str]) -> None:
    """A platform this engine's containers cannot run (no QEMU for it), refused with the fix
    before anything is made or built."""
    for platform in platforms:
        if problem := engine.emulation_problem(platform):
            raise UsageError(f"--platform {platform}: {problem}")


def check_platforms(engine: BuildEngine, platforms: Sequence[str]) -> None:
    """What this engine cannot do for these platforms, said before anything is made."""
    check_emulation(engine, platforms)
    if len(platforms) > 1 and not engine.holds_multi_platform():
        raise UsageError(
            f"--platform {','.join(platforms)}: {engine.describe()} cannot hold an image of "
            "several platforms under one name (the classic image store, Docker 20.10). Fix: "
            'turn on the containerd image store (dockerd\'s {"features": '
            '{"containerd-snapshotter": true}}, Docker 29\'s default), or one platform at a time'
        )


def bootstrappable() -> dict[str, str]:
    """Base images debootstrap can make here: image name -> Debian suite."""
    from imagekit.matrix import compat

    return {o.image: str(o.suite) for o in compat.load().os.values() if o.suite}


def unpinned(ref: str) -> str:
    return str(parse(ref).without_digest())


def base_refs(cell: Cell) -> list[str]:
    """The cell's base images as it names them (a digest pinned where images.lock has one):
    its runtime's, and its builder's where it has one of its own."""
    return [ref for ref in (cell.runtime_image, cell.builder_image) if ref]


def bases_of(cells: Sequence[Cell]) -> list[str]:
    """Distinct base references of the cells, without any digest already pinned."""
    return sorted({unpinned(ref) for cell in cells for ref in base_refs(cell)})


@dataclass(frozen=True)
class BaseFound:
    """Where a base image is had and which platforms it has there: `local` (the engine's
    own store: BuildKit builds from it whatever platform it is, FACTS 10), `registry` (its
    registry's index, which BuildKit pulls a platform of), or `missing` with why (`to
    bootstrap`: missing, and this run makes it)."""

    where: str
    platforms: tuple[str, ...] = ()
    why: str = ""

    def lacks(self, needed: Iterable[str]) -> list[str]:
        """The platforms of `needed` it does not have; none where it is not known which it
        has (a registry that does not say, an engine older than the list: BuildKit then
        warns where it builds on another platform, and build_runner.py fails the cell)."""
        if not self.platforms:
            return []
        return [p for p in needed if p not in self.platforms]


def find_bases(
    engine: BuildRegistryEngine,
    refs: Sequence[str],
    bootstrappable: set[str],
    pinned: Mapping[str, str] | None = None,
) -> dict[str, BaseFound]:
    """Where each base image can be had and with which platforms: on the engine, else in its
    registry, else nowhere (unless it is to be bootstrapped in this run). A base pinned by
    digest (`pinned`: name -> name@digest, images.lock) is looked up by that digest, the
    image BuildKit builds from. Asked once per distinct base, side by side (an unreachable
    registry answers in seconds)."""

    def find(ref: str) -> BaseFound:
        exact = (pinned or {}).get(ref, ref)
        local = engine.image_platforms(exact)
        if local is not None:
            return BaseFound("local", local)
        if ref in bootstrappable:
            return BaseFound("missing", why="to bootstrap")
        try:
            return BaseFound("registry", engine.registry_image_platforms(exact))
        except ImagekitError:  # no daemon (exit 5), not a base the registry lacks
            raise
        except Exception as exc:  # the SDK's errors for "no registry / no such tag / no DNS"
            return BaseFound(
                "missing", why=f"not on this engine; its registry: {short_reason(str(exc))}"
            )

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(refs, pool.map(find, refs), strict=True))


_REASON = re.compile(
    r"(dial tcp[^\")]*|[^\"(]*no such host|[^\"(]*connection refused|manifest unknown[^\")]*|"
    r"unauthorized[^\")]*|[^\"(]*not found[^\")]*)"
)


def short_reason(text: str) -> str:
    """The words of a registry error that say why (the SDK wraps them in an HTTP 500)."""
    match = _REASON.search(text)
    return (match.group(1) if match else text[-120:]).strip(" :")


def fixes_for(ref: str, suites: dict[str, str]) -> str:
    """What would make a missing base available here."""
    if ref in suites:
        return "add --bootstrap-base (debootstrap from a Debian mirror, no registry needed)"
    ways = [
        "a registry mirror the engine can reach (dockerd's registry-mirrors)",
        "`docker load` of a saved copy",
        "a `base:` override naming an image this engine has",
    ]
    if ref.startswith(("nvidia/cuda:", "ubuntu:")):
        ways.append("or cells that need no registry: --os debian12 --flavor slim --bootstrap-base")
    return "; ".join(ways)


def lock(engine: RegistryEngine, cells: Sequence[Cell], current: Lock) -> tuple[Lock, list[str]]:
    """Resolve each base tag to its registry digest, and for the bases of cells built for
    another platform than amd64 alone, each platform's manifest in that index. Unreachable
    ones keep their old pin. A base whose index lacks a platform its cells are built for is
    refused (exit 2): nothing is written."""
    pins, platforms = dict(current.pins), dict(current.platforms)
    notes: list[str] = []
    needs = platforms_needed(cells)
    for ref in bases_of(cells):
        try:
            digest = engine.registry_digest(ref)
        except ImagekitError:
            raise
        except Exception as exc:  # the SDK's errors for "no registry / no such tag"
            kept = f"; kept {pins[ref]}" if ref in pins else ""
            notes.append(f"{ref}: not resolved ({type(exc).__name__}: {str(exc)[:120]}){kept}")
            continue
        if pins.get(ref) != digest:
            notes.append(f"{ref}: {pins.get(ref, 'unpinned')} -> {digest}")
            platforms.pop(ref, None)  # the old index's manifests are not the new one's
        pins[ref] = digest
        if ref in needs:
            found, note = _platforms_of(engine, ref, digest)
            if found:
                platforms[ref] = found
            if note:
                notes.append(note)
    new = Lock(pins=pins, platforms=platforms)
    problems = lacking(new, cells)
    if problems:
        raise UsageError(
            "a base's index in its registry lacks a platform its cells are built for; "
            "images.lock was not written:",
            *problems,
        )
    return new, notes


def platforms_needed(cells: Sequence[Cell]) -> set[str]:
    """The bases (unpinned) of the cells built for another platform than amd64 alone: those
    whose index's platforms images.lock records."""
    return {
        unpinned(ref) for cell in cells if cell.platforms != (AMD64,) for ref in base_refs(cell)
    }


def _platforms_of(engine: RegistryEngine, ref: str, digest: str) -> tuple[dict[str, str], str]:
    """The manifests of the index `ref` is pinned to, by platform; else {} and a note. Read
    by digest, so they are that index's even if the tag moved since. A failed read keeps
    the pin: the build still starts from the pinned index, only unchecked."""
    try:
        return engine.registry_platforms(ref, digest), ""
    except Exception as exc:  # oras missing, or a registry that refuses this read
        why = " ".join(str(exc).split())[:200]
        return {}, f"{ref}: its platforms not read ({why}); run `imagekit lock` again to check"
