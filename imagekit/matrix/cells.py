"""Completion: a RawCell plus the compatibility data -> a Cell with everything resolved.

A Cell is the plain data that rendering, building and CI emission need: images, the torch
index, package lists, environment, labels and tags. Lists are sorted tuples, so rendering
is deterministic and nobody can mutate a shared cell.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from imagekit import __version__
from imagekit.contract import labels as label
from imagekit.contract.refs import parse
from imagekit.errors import CompatError, Problem, SpecError
from imagekit.matrix import requirements as requirements_mod
from imagekit.matrix import source as source_mod
from imagekit.matrix.compat import (
    CPU,
    Compat,
    CudaRelease,
    Feature,
    OsRelease,
    TorchRelease,
    variant_of,
)
from imagekit.matrix.envfile import AXES, Options
from imagekit.matrix.expand import RawCell, format_specs, merge
from imagekit.matrix.profiles import image_env
from imagekit.matrix.ref_checks import check_tag, pinned
from imagekit.platforms import AMD64, ARM64, PLATFORMS

DEFAULT_SIZE_BUDGET = 20 * 10**9
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


# The first layer of the options cascade: built-in defaults, then the file's defaults, its
# block, and the overrides that match, each layer winning over the one below.
BUILTIN = Options(
    installer="uv",
    profile="single-node",
    tf32=True,
    compile=True,
    venv_layers="split",
    size_budget=DEFAULT_SIZE_BUDGET,
    source_default_ignore=True,
    platform=[AMD64],
)


@dataclass(frozen=True)
class Records:
    """A cell's rows of the compatibility data, looked up once."""

    torch: TorchRelease
    os: OsRelease
    cuda: CudaRelease | None  # None for CPU cells


def records_of(raw: RawCell, compat: Compat) -> Records:
    compat.check_combination(raw.cuda, raw.torch, raw.python, raw.os)
    cuda = compat.cuda_release(raw.cuda) if raw.cuda != CPU else None
    return Records(compat.torch_release(raw.torch), compat.os_release(raw.os), cuda)


def complete(raw: RawCell, compat: Compat, pins: dict[str, str] | None = None) -> Cell:
    """Resolve one cell. Raises CompatError when the combination does not exist."""
    rec = records_of(raw, compat)
    torch = rec.torch
    opts = merge(BUILTIN, raw.options)  # installer, profile, size_budget, ... always set
    ignore = bool(opts.source_default_ignore)
    features = tuple(sorted(set(opts.features or ())))
    installer = str(opts.installer)
    system_python = raw.python == rec.os.python
    needs_devel = any(compat.features[f].needs_devel for f in features)
    _check_cell(raw, rec, compat, features, installer, system_python)
    platforms = tuple(p for p in PLATFORMS if p in (opts.platform or ()))
    for platform in platforms:
        _check_platform(raw, compat, features, platform)

    stack = stack_id(raw.cuda, torch.version, raw.python, raw.os, raw.flavor)
    ident = cell_id(raw.env_file.repository, stack)
    runtime_image, builder_image = _images(raw, rec, needs_devel)
    pins = pins or {}
    forward = raw.flavor == "nvidia"  # its images carry CUDA's forward-compatibility package
    env = image_env(
        str(opts.profile),
        cuda=raw.cuda != CPU,
        tf32=bool(opts.tf32),
        require_cuda=rec.cuda.require_cuda(forward) if rec.cuda else None,
    )
    env.update(opts.env or {})
    fields = {
        "id": stack,  # a tag's {id}: the repository is already the image's name
        "cuda": raw.cuda,
        "variant": variant_of(raw.cuda),
        "torch": torch.version,
        "python": raw.python,
        "os": raw.os,
        "flavor": raw.flavor,
    }
    repo = f"{raw.env_file.registry}/{raw.env_file.repository}"
    tags = tuple(
        f"{repo}:{render_tag(t, fields)}" for t in [raw.env_file.tag, *raw.env_file.extra_tags]
    )
    by_platform = {p: _archs_on(raw, compat, p) for p in platforms}
    archs, arm64_archs = by_platform[platforms[0]], _arm64_archs(by_platform)
    cell = Cell(
        id=ident,
        cuda=raw.cuda,
        torch=torch.version,
        python=raw.python,
        os=raw.os,
        flavor=raw.flavor,
        variant=variant_of(raw.cuda),
        installer=installer,
        system_python=system_python,
        runtime_image=pinned(runtime_image, pins),
        builder_image=pinned(builder_image, pins) if builder_image else None,
        os_family="debian" if raw.os.startswith("debian") else "ubuntu",
        torch_index=compat.torch_index(raw.cuda, torch.version, platforms[0]),
        torch_requirements=_torch_requirements(
            torch.version, torch.torchvision, opts.torchvision, cuda=raw.cuda != CPU
        )
        + _compile_needs(raw, installer, bool(opts.compile)),
        feature_steps=_feature_steps(compat, features, raw.cuda, archs, arm64_archs),
        needs_devel=needs_devel,
        apt=tuple(sorted(set(opts.apt or ()))),
        build_apt=tuple(sorted(set(opts.build_apt or ()))),
        pip=tuple(sorted(set(opts.pip or ()), key=str.lower)),
        features=features,
        compile=bool(opts.compile),
        venv_layers=_venv_layers(str(opts.venv_layers), needs_devel, bool(opts.build_apt)),
        profile=str(opts.profile),
        env=tuple(sorted(env.items())),
        labels=(),
        tags=tags,
        size_budget=int(opts.size_budget or 0),
        source=source_mod.checked(raw.base_dir, opts.source, ignore) if opts.source else None,
        source_default_ignore=ignore,
        min_driver=rec.cuda.min_driver if rec.cuda else None,
        forward_branches=rec.cuda.forward_branches if rec.cuda and forward else (),
        archs=archs,
        origin=str(raw.origin),
        platforms=platforms,
        arm64_torch_index=_arm64_index(compat, raw, platforms),
        arm64_archs=arm64_archs,
        **_team_layer(raw, opts),
    )
    return _with_labels(cell, repo)


def _team_layer(raw: RawCell, opts: Options) -> dict[str, object]:
    """The Cell fields of the team's own layer; RequirementsError names a file or line that
    cannot be used."""
    read = [requirements_mod.read(raw.base_dir, entry) for entry in opts.requirements or ()]
    fields: dict[str, object] = {
        "requirements": tuple(dict.fromkeys(line for r in read for line in r.lines)),
        "requirement_files": tuple(dict.fromkeys(r.shown for r in read)),
        "run": tuple(opts.run or ()),
    }
    if opts.source_package:
        if not opts.source:
            raise requirements_mod.RequirementsError(
                "true installs the `source:` folder as a package, and this cell has no "
                "`source:`; set it to the folder of its pyproject.toml or setup.py",
                "source_package",
            )
        source = source_mod.resolve_source(raw.base_dir, opts.source)
        fields["source_package"] = True
        fields["source_dependencies"] = requirements_mod.source_package(source)
    if opts.workdir:
        fields["workdir"] = opts.workdir
    if opts.command:
        fields["command"] = tuple(opts.command)
    return fields


def render_tag(template: str, fields: dict[str, str]) -> str:
    """One tag of a cell; CompatError when the template does not render to a valid Docker
    tag (a comma would split CI's tag list, a colon or slash would name another image)."""
    specs = format_specs(template)
    if specs:  # a width would be rendered before the tag's length is checked
        raise CompatError(f"tag template {template[:80]!r} does not render: {specs}")
    try:
        tag = template.format(**fields)
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise CompatError(f"tag template {template!r} does not render: {exc}") from None
    try:
        return check_tag(tag)
    except ValueError as exc:
        raise CompatError(f"tag template {template!r} gives {exc}") from None


def _check_cell(
    raw: RawCell,
    rec: Records,
    compat: Compat,
    features: tuple[str, ...],
    installer: str,
    system_python: bool,
) -> None:
    os_rel = rec.os
    if raw.flavor == "nvidia" and raw.cuda == CPU:
        raise CompatError("flavor nvidia needs a CUDA version; use flavor slim for cuda cpu")
    if raw.flavor == "nvidia" and not os_rel.nvidia:
        nvidia_os = [n for n, o in compat.os.items() if o.nvidia]
        raise CompatError(
            f"there are no nvidia/cuda images for {raw.os}; use flavor slim, or os "
            f"{', '.join(nvidia_os)}"
        )
    if not system_python and installer != "uv":
        raise CompatError(
            f"{raw.os} ships Python {os_rel.python}; Python {raw.python} needs installer uv "
            f"(it installs a managed CPython), or python {os_rel.python}"
        )
    for name in features:
        if compat.features[name].needs_devel and raw.flavor != "nvidia":
            raise CompatError(f"feature {name} compiles CUDA code; it needs flavor nvidia")
        if name == "flash-attn" and raw.cuda == CPU:
            raise CompatError("feature flash-attn needs a CUDA cell (cuda 12.x or 13.x)")


def _arm64_index(compat: Compat, raw: RawCell, platforms: tuple[str, ...]) -> str | None:
    if ARM64 not in platforms:
        return None
    arm64 = compat.torch_index(raw.cuda, raw.torch, ARM64) or ""
    if platforms == (ARM64,):
        return None  # the cell's one index is arm64's (torch_index)
    return arm64 if arm64 != (compat.torch_index(raw.cuda, raw.torch) or "") else None


def _archs_on(raw: RawCell, compat: Compat, platform: str) -> tuple[str, ...]:
    """The GPU archs of the cell's torch wheel on `platform`; CompatError where the data has
    none for it (never another platform's list)."""
    try:
        return compat.archs_for(raw.torch, raw.cuda, platform)
    except CompatError as exc:
        raise CompatError(
            f"platform {platform}: {exc}; drop {platform} from this cell's `platform`"
        ) from None


def _arm64_archs(by_platform: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """arm64's archs where the cell also builds another platform, with other archs."""
    if ARM64 not in by_platform or len(set(by_platform.values())) == 1:
        return None
    return by_platform[ARM64]


def _check_platform(raw: RawCell, compat: Compat, features: tuple[str, ...], platform: str) -> None:
    """CompatError where upstream publishes no build of this cell for the platform; the
    message names the field and what would be valid."""
    if platform == AMD64:
        return  # the axes' own checks are amd64's
    fix = f"drop {platform} from this cell's `platform`"
    try:
        compat.check_combination(raw.cuda, raw.torch, raw.python, raw.os, platform)
    except CompatError as exc:
        raise CompatError(f"platform {platform}: {exc}; {fix}") from None
    key = _pip_key(raw.cuda)
    for name in features:
        feature = compat.features[name]
        if feature.pip_for(key, platform) is None:
            why = f" ({feature.arm64_note})" if feature.arm64_note else ""
            build = "CPU" if key == CPU else f"CUDA {key}"
            raise CompatError(
                f"platform {platform}: feature {name} has no {platform} packages for {build} "
                f"cells{why}; {fix}, or the feature"
            )


def _images(raw: RawCell, rec: Records, needs_devel: bool) -> tuple[str, str | None]:
    """(runtime base, builder base or None when the builder shares the runtime's OS stage).

    The nvidia flavor's runtime is nvidia/cuda's `-base` image: the driver-compatibility
    environment, labels and the forward-compatibility package, without a second copy of the
    CUDA libraries that torch's wheels already bring (cuBLAS, cuDNN, NCCL: several GB). nvcc
    (the `-devel` image, no cuDNN needed) is only for a builder that compiles CUDA code.
    """
    if raw.flavor == "slim" or rec.cuda is None:
        return raw.options.base or rec.os.image, None
    devel = f"nvidia/cuda:{rec.cuda.full}-devel-{rec.os.cuda_tag}" if needs_devel else None
    return raw.options.base or f"nvidia/cuda:{rec.cuda.full}-base-{rec.os.cuda_tag}", devel


def _venv_layers(wanted: str, needs_devel: bool, build_apt: bool) -> str:
    return "single" if needs_devel or build_apt else wanted


# pynvml for the self-check's hardware health (ECC, row remapping, links, clocks): pure
# Python, ~50 KB, talks to the host driver's libnvidia-ml that the NVIDIA runtime mounts.
# A floor, not a pin: uv takes a package from the PyTorch index first when that index has
# it at all, so an exact PyPI version could fail to resolve there; 12.535 has every call
# the self-check makes (older clock "throttle" names are read as a fallback).
NVML_REQUIREMENT = "nvidia-ml-py>=12.535"


def _torch_requirements(
    version: str, torchvision: str | None, wanted: bool | None, cuda: bool = False
) -> tuple[str, ...]:
    reqs = [f"torch=={version}"]
    if wanted and torchvision:
        reqs.append(f"torchvision=={torchvision}")
    if cuda:
        reqs.append(NVML_REQUIREMENT)
    return tuple(reqs)


def _compile_needs(raw: RawCell, installer: str, compile: bool) -> tuple[str, ...]:
    """setuptools, where torch.compile needs it and nothing else brings it: torch's C++
    extension loader imports it (torch 2.7's cpp_extension, at import), torch declares it
    only for Python 3.12 on, CUDA cells get it through triton, and pip's venv brings its own
    on Python 3.11 and older; uv's does not (found by the arm64 CPU cell's self-check)."""
    old_python = Version(raw.python) < Version("3.12")
    return (
        ("setuptools",) if compile and raw.cuda == CPU and installer == "uv" and old_python else ()
    )


def _pip_key(cuda: str) -> str:
    """A feature's package list for a cell: "cpu", or the CUDA major ("12")."""
    return CPU if cuda == CPU else cuda.split(".")[0]


def _feature_steps(
    compat: Compat,
    features: tuple[str, ...],
    cuda: str,
    archs: tuple[str, ...],
    arm64_archs: tuple[str, ...] | None = None,
) -> tuple[FeatureStep, ...]:
    """`archs`: the cell's first platform's; `arm64_archs`: arm64's where they differ."""
    key = _pip_key(cuda)
    steps = []
    for name in features:
        feature = compat.features[name]
        reqs = feature.pip_for(key) or ()
        if not feature.needs_devel:
            steps.append(FeatureStep(name, reqs, build_isolation=True))
            continue
        env = {**_arch_env(name, feature, archs), "MAX_JOBS": "${MAX_JOBS:-$(imagekit_max_jobs)}"}
        arm64 = _arch_env(name, feature, arm64_archs) if arm64_archs is not None else {}
        # Normalized, as a wheel's file name spells it (build-env.sh looks for NAME-*.whl).
        prebuilt = tuple(canonicalize_name(Requirement(r).name) for r in reqs)
        step = FeatureStep(name, reqs, False, tuple(env.items()), prebuilt, tuple(arm64.items()))
        steps.append(step)
    return tuple(steps)


def _arch_env(name: str, feature: Feature, archs: tuple[str, ...]) -> dict[str, str]:
    """A CUDA extension's arch settings for the GPUs of one torch wheel (its list less +PTX)."""
    env = {"TORCH_CUDA_ARCH_LIST": ";".join(a.removesuffix("+PTX") for a in archs)}
    if feature.cuda_archs:
        env[f"{_env_name(name)}_CUDA_ARCHS"] = ";".join(extension_archs(archs, feature))
    return env


def _env_name(feature: str) -> str:
    """'flash-attn' -> 'FLASH_ATTN' (its setup.py reads FLASH_ATTN_CUDA_ARCHS)."""
    return feature.upper().replace("-", "_")


def extension_archs(archs: tuple[str, ...], feature: Feature) -> list[str]:
    """The extension's own arch values that serve this cell's GPUs: its value for a major
    (SASS sm_80 runs on 8.6 and 8.9) wherever the cell targets that major."""
    majors = {a.split(".")[0] for a in archs}
    return [v for v in feature.cuda_archs if v[:-1] in majors]


def _with_labels(cell: Cell, repo: str) -> Cell:
    labels = {
        "org.opencontainers.image.title": repo.rsplit("/", 1)[-1],
        "org.opencontainers.image.description": (
            f"PyTorch {cell.torch} ({cell.variant}), Python {cell.python}, {cell.os}, "
            f"{cell.flavor} flavor; built by imagekit"
        ),
        "org.opencontainers.image.version": parse(cell.tags[0]).tag,
        "org.opencontainers.image.base.name": cell.runtime_image,
        label.CELL: cell.id,
        label.CUDA: cell.cuda,
        label.TORCH: cell.torch,
        label.PYTHON: cell.python,
        label.OS: cell.os,
        label.FLAVOR: cell.flavor,
        label.VARIANT: cell.variant,
        label.FEATURES: ",".join(cell.features),
        label.COMPILE: str(cell.compile).lower(),
        label.PROFILE: cell.profile,
        label.ARCHS: " ".join(cell.archs),
        label.MIN_DRIVER: cell.min_driver or "",
        label.FORWARD_BRANCHES: " ".join(map(str, cell.forward_branches)),
        label.VERSION: __version__,
    }
    return replace(cell, labels=tuple(sorted(labels.items())))


def complete_all(
    raws: Iterable[RawCell],
    compat: Compat,
    pins: dict[str, str] | None = None,
    problems: Iterable[Problem] = (),
) -> list[Cell]:
    """Complete every cell; raise one SpecError with every problem (earlier ones passed in,
    bad combinations, duplicates)."""
    cells: list[Cell] = []
    found: list[Problem] = list(problems)
    seen: dict[str, str] = {}
    for raw in raws:
        try:
            cell = complete(raw, compat, pins)
        except CompatError as exc:
            axes = " ".join(f"{a}={getattr(raw, a)}" for a in AXES)
            found.append(Problem(str(exc), raw.origin.file, raw.origin.line, axes))
            continue
        except requirements_mod.RequirementsError as exc:
            found.append(Problem(str(exc), raw.origin.file, raw.origin.line, exc.field))
            continue
        except source_mod.SourceError as exc:
            found.append(Problem(str(exc), raw.origin.file, raw.origin.line, "source"))
            continue
        if cell.id in seen:
            found.append(_duplicate(cell, raw, seen[cell.id]))
            continue
        seen[cell.id] = cell.origin
        cells.append(cell)
    if found:
        raise SpecError(found)
    return sorted(cells, key=sort_key)


def _duplicate(cell: Cell, raw: RawCell, first: str) -> Problem:
    """Two cells with one id: one image (repository) on one stack, twice. Within a file a
    block repeats another's combination; across files two images share a repository."""
    here = f"cell {cell.id} is already defined at {first}"
    if first.rsplit(":", 1)[0] == raw.origin.file:
        fix = "drop the combination from one of the blocks (or `exclude:` it)"
        return Problem(f"{here}; {fix}", raw.origin.file, raw.origin.line)
    fix = (
        f"both files build repository {raw.env_file.repository} on that stack: give one of "
        "the images its own `repository:` (a cell id is <repository>-<stack>), or drop the "
        "cell from one file"
    )
    return Problem(f"{here}; {fix}", raw.origin.file, raw.origin.line, "repository")


def sort_key(cell: Cell) -> tuple[object, ...]:
    """Numeric version order (2.10 after 2.9), CPU cells first."""
    cuda = Version("0") if cell.cuda == CPU else Version(cell.cuda)
    return (cuda, Version(cell.torch), Version(cell.python), cell.os, cell.flavor)
