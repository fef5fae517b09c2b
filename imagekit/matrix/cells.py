"""A Cell: one image of the matrix, with everything resolved, and its id.

The plain data that rendering, building and CI emission need: images, the torch index,
package lists, environment, labels and tags. Lists are sorted tuples, so rendering is
deterministic and nobody can mutate a shared cell. completion.py makes cells from the
matrix files' entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from imagekit.contract import labels as label
from imagekit.contract.refs import parse
from imagekit.matrix.compat import CPU, variant_of
from imagekit.platforms import AMD64, ARM64

USER = ("imagekit", 1000)


@dataclass(frozen=True)
class FeatureStep:
    """One feature's install step; CUDA extensions build against the installed torch."""

    name: str
    requirements: tuple[str, ...]
    build_isolation: bool
    # For a CUDA extension compiled in the builder: its build environment (the arch list of
    # this cell only, compile jobs) and the packages a wheelhouse wheel may stand in for.
    env: tuple[tuple[str, str], ...] = ()
    prebuilt: tuple[str, ...] = ()
    # What differs in that environment on arm64 (its arch list), where the cell builds arm64
    # beside amd64: the build step picks it by BuildKit's TARGETARCH.
    arm64_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Cell:
    id: str
    cuda: str
    torch: str
    python: str
    os: str
    flavor: str
    variant: str
    installer: str
    system_python: bool
    runtime_image: str
    builder_image: str | None  # None: the builder starts from the runtime's OS stage
    os_family: str  # "debian" or "ubuntu"
    torch_index: str | None
    torch_requirements: tuple[str, ...]
    feature_steps: tuple[FeatureStep, ...]
    needs_devel: bool
    apt: tuple[str, ...]
    build_apt: tuple[str, ...]
    pip: tuple[str, ...]
    features: tuple[str, ...]
    compile: bool
    # "split": the venv in one layer per package group (CUDA libraries, torch, features);
    # "single": one layer. Cells that compile in the builder (a CUDA extension, build_apt)
    # keep one: their packages are built against the builder's installed torch.
    venv_layers: str
    profile: str
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    tags: tuple[str, ...]
    size_budget: int
    source: Path | None
    source_default_ignore: bool
    min_driver: str | None
    forward_branches: tuple[int, ...]  # host branches the image's cuda-compat package serves
    archs: tuple[str, ...]  # the GPU archs of the torch wheel of the cell's first platform
    origin: str
    platforms: tuple[str, ...] = (AMD64,)  # in PLATFORMS order
    # Where arm64's torch comes from when it is not where amd64's does (PyPI's aarch64 wheel
    # is the CPU build up to torch 2.10): "" for PyPI; None where nothing differs
    arm64_torch_index: str | None = None
    # arm64's archs where the cell builds arm64 beside amd64 and they differ (PyTorch compiles
    # its aarch64 wheels for fewer GPUs); None where nothing differs
    arm64_archs: tuple[str, ...] | None = None
    # The team's own layer (docs/your-layer.md). `requirements`: the lines of the
    # `requirements:` files, in order, without duplicates; `requirement_files`: those files,
    # relative to the repository. `source_dependencies`: the source package's
    # [project].dependencies, None where they are not static (then the lock holds the stack's
    # groups only, and the team's packages install unhashed under the stack's constraints).
    requirements: tuple[str, ...] = ()
    requirement_files: tuple[str, ...] = ()
    source_package: bool = False
    source_dependencies: tuple[str, ...] | None = ()
    run: tuple[str, ...] = ()
    workdir: str = "/workspace"
    command: tuple[str, ...] = ("python",)

    @property
    def repository(self) -> str:
        return parse(self.tags[0]).name

    @property
    def python_bin(self) -> str:
        return f"python{self.python}"

    @property
    def pip_stage(self) -> str | None:
        """Where the pip packages install: straight into the runtime, whose layer then holds
        exactly what they add; or, when they need `build_apt` (a compiler for sdists), in a
        `packages` stage on the builder, whose changes the runtime copies as a delta."""
        if not self.team_packages:
            return None
        return "packages" if self.build_apt else "runtime"

    @property
    def team_packages(self) -> bool:
        """Whether the team installs packages of its own (pip, requirements, source)."""
        return bool(self.pip or self.requirements or self.source_package)

    @property
    def team_requirements(self) -> tuple[str, ...]:
        """What the team's packages step installs (the source package aside): `pip:`, then
        the requirements files' lines that `pip:` does not already hold."""
        return self.pip + tuple(r for r in self.requirements if r not in self.pip)

    @property
    def command_json(self) -> str:
        """The CMD's exec form: a JSON array, so no word can end the instruction."""
        return json.dumps(list(self.command))

    def label(self, key: str) -> str:
        return dict(self.labels)[key]

    def archs_on(self, platform: str) -> tuple[str, ...]:
        """The archs of the cell's torch wheel for one of its platforms."""
        return (
            self.arm64_archs if platform == ARM64 and self.arm64_archs is not None else self.archs
        )

    @property
    def arm64_labels(self) -> tuple[tuple[str, str], ...]:
        """The labels whose value differs on arm64 (the image of that platform carries these
        instead); empty where every platform's image carries `labels` alone."""
        if self.arm64_archs is None:
            return ()
        return ((label.ARCHS, " ".join(self.arm64_archs)),)


def stack_id(cuda: str, torch: str, python: str, os_name: str, flavor: str) -> str:
    """The stack part of a cell id: cu126-torch2.7.1-py3.11-debian12-slim."""
    return f"{variant_of(cuda)}-torch{torch}-py{python}-{os_name}-{flavor}"


def cell_id(repository: str, stack: str) -> str:
    """<repository>-<stack>: unique per image, so a training and an inference image of one
    stack live side by side. The repository's slashes become '-' (a folder, file and bake
    target name holds none); its other characters (letters, digits, . _ -) stay."""
    return f"{repository.replace('/', '-')}-{stack}"


def stack_of(cell: Cell) -> str:
    """The stack part of the cell's id (what `--cell` globs may match alone)."""
    return stack_id(cell.cuda, cell.torch, cell.python, cell.os, cell.flavor)


def sort_key(cell: Cell) -> tuple[object, ...]:
    """Numeric version order (2.10 after 2.9), CPU cells first."""
    cuda = Version("0") if cell.cuda == CPU else Version(cell.cuda)
    return (cuda, Version(cell.torch), Version(cell.python), cell.os, cell.flavor)
