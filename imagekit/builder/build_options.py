"""What `imagekit build` builds and how (BuildOptions), and how one run goes (BuildRun)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from imagekit import paths
from imagekit.engine.interface import Compression


@dataclass(frozen=True)
class BuildOptions:
    target: str = "runtime"
    push: bool = False
    jobs: int = 1
    keep_going: bool = False
    no_cache: bool = False
    network: str = ""  # "" (the engine's default), "host" or "none"
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    # e.g. "-candidate-123": CI pushes candidates and promotes them after the self-check
    tag_suffix: str = ""
    torch_index: str | None = None  # None: as rendered; "": none (wheelhouse/PyPI only)
    work_dir: Path = paths.WORK
    package_locks: Path | None = None  # packages.lock/ (`imagekit lock --packages`)
    report_dir: Path = paths.REPORTS
    labels: tuple[tuple[str, str], ...] = ()  # build-time labels, see build_labels()
    # of pushed layers; anything but gzip at the engine's level needs buildx
    compression: Compression = field(default_factory=Compression)
    # On --push (the CLI turns both on; --no-provenance, --no-attach-sbom turn them off):
    # BuildKit's SLSA provenance where the engine can hold it, and the image's SBOM attached
    # to the pushed digest as an OCI referrer (supply/sbom.py).
    provenance: bool = False
    attach_sbom: bool = False
    # With --push: also keep the image in the engine's store. Without it, where BuildKit
    # pushes (BuildEngine.pushes_from_builder), the build goes straight to the registry.
    load: bool = False
    # --platform: what to build of each cell (empty: this host's platform where the cell
    # has it, else the cell's first); several make one image index, which is pushed.
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildRun:
    """How this run goes, beside what it builds: a dry run, base bootstrapping, the display."""

    dry_run: bool = False
    bootstrap_base: bool = False
    mirror: str | None = None
    progress: str = "auto"
