"""Completion: a RawCell plus the compatibility data -> a Cell with everything resolved."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from imagekit import __version__
from imagekit.contract import labels as label
from imagekit.contract.refs import parse
from imagekit.errors import CompatError, Problem, SpecError
from imagekit.matrix import requirements as requirements_mod
from imagekit.matrix import source as source_mod
from imagekit.matrix.cascade import merge
from imagekit.matrix.cell_installs import (
    compile_needs,
    feature_steps,
    pip_key,
    torch_requirements,
)
from imagekit.matrix.cells import Cell, cell_id, sort_key, stack_id
from imagekit.matrix.compat import CPU, Compat, CudaRelease, OsRelease, TorchRelease, variant_of
from imagekit.matrix.envfile import AXES, Options
from imagekit.matrix.expand import RawCell, format_specs
from imagekit.matrix.profiles import image_env
from imagekit.matrix.ref_checks import check_tag, pinned
from imagekit.platforms import AMD64, ARM64, PLATFORMS

DEFAULT_SIZE_BUDGET = 20 * 10**9


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
    opts = merge(BUILTIN, raw.options)  # installer, profile, size_budget, ... always set
    features = tuple(sorted(set(opts.features or ())))
    _check_cell(raw, rec, compat, features, str(opts.installer), raw.python == rec.os.python)
    platforms = tuple(p for p in PLATFORMS if p in (opts.platform or ()))
    for platform in platforms:
        _check_platform(raw, compat, features, platform)
    stack = stack_id(raw.cuda, rec.torch.version, raw.python, raw.os, raw.flavor)
    repo = f"{raw.env_file.registry}/{raw.env_file.repository}"
    # In the order their errors are found: tags, archs, the source folder, the team's layer.
    cell = Cell(
        id=cell_id(raw.env_file.repository, stack),
        labels=(),
        tags=_tags(raw, rec, stack, repo),
        **_stack_fields(raw, rec, opts),
        **_image_fields(raw, rec, compat, features, pins or {}),
        **_install_fields(raw, rec, compat, opts, features, platforms),
        **_settings_fields(raw, rec, opts),
        **_team_layer(raw, opts),
    )
    return _with_labels(cell, repo)


def _tags(raw: RawCell, rec: Records, stack: str, repo: str) -> tuple[str, ...]:
    """The cell's image names: its file's tag templates rendered, in the file's order."""
    fields = {
        "id": stack,  # a tag's {id}: the repository is already the image's name
        "cuda": raw.cuda,
        "variant": variant_of(raw.cuda),
        "torch": rec.torch.version,
        "python": raw.python,
        "os": raw.os,
        "flavor": raw.flavor,
    }
    templates = [raw.env_file.tag, *raw.env_file.extra_tags]
    return tuple(f"{repo}:{render_tag(t, fields)}" for t in templates)


def _stack_fields(raw: RawCell, rec: Records, opts: Options) -> dict[str, object]:
    """The Cell fields that name its stack and how its Python is installed."""
    return {
        "cuda": raw.cuda,
        "torch": rec.torch.version,
        "python": raw.python,
        "os": raw.os,
        "flavor": raw.flavor,
        "variant": variant_of(raw.cuda),
        "installer": str(opts.installer),
        "system_python": raw.python == rec.os.python,
        "os_family": "debian" if raw.os.startswith("debian") else "ubuntu",
    }


def _image_fields(
    raw: RawCell, rec: Records, compat: Compat, features: tuple[str, ...], pins: dict[str, str]
) -> dict[str, object]:
    """The Cell fields of its base images (pinned where images.lock pins them) and the
    driver they need."""
    needs_devel = any(compat.features[f].needs_devel for f in features)
    runtime_image, builder_image = _images(raw, rec, needs_devel)
    forward = raw.flavor == "nvidia"  # its images carry CUDA's forward-compatibility package
    return {
        "runtime_image": pinned(runtime_image, pins),
        "builder_image": pinned(builder_image, pins) if builder_image else None,
        "needs_devel": needs_devel,
        "min_driver": rec.cuda.min_driver if rec.cuda else None,
        "forward_branches": rec.cuda.forward_branches if rec.cuda and forward else (),
    }


def _install_fields(
    raw: RawCell,
    rec: Records,
    compat: Compat,
    opts: Options,
    features: tuple[str, ...],
    platforms: tuple[str, ...],
) -> dict[str, object]:
    """The Cell fields of what it installs, for which platforms and GPU archs."""
    torch = rec.torch
    installer = str(opts.installer)
    needs_devel = any(compat.features[f].needs_devel for f in features)
    by_platform = {p: _archs_on(raw, compat, p) for p in platforms}
    archs, arm64_archs = by_platform[platforms[0]], _arm64_archs(by_platform)
    return {
        "torch_index": compat.torch_index(raw.cuda, torch.version, platforms[0]),
        "torch_requirements": torch_requirements(
            torch.version, torch.torchvision, opts.torchvision, cuda=raw.cuda != CPU
        )
        + compile_needs(raw, installer, bool(opts.compile)),
        "feature_steps": feature_steps(compat, features, raw.cuda, archs, arm64_archs),
        "apt": tuple(sorted(set(opts.apt or ()))),
        "build_apt": tuple(sorted(set(opts.build_apt or ()))),
        "pip": tuple(sorted(set(opts.pip or ()), key=str.lower)),
        "features": features,
        "compile": bool(opts.compile),
        "venv_layers": _venv_layers(str(opts.venv_layers), needs_devel, bool(opts.build_apt)),
        "archs": archs,
        "platforms": platforms,
        "arm64_torch_index": _arm64_index(compat, raw, platforms),
        "arm64_archs": arm64_archs,
    }


def _settings_fields(raw: RawCell, rec: Records, opts: Options) -> dict[str, object]:
    """The Cell fields of its environment, size budget and `source:` folder."""
    forward = raw.flavor == "nvidia"
    env = image_env(
        str(opts.profile),
        cuda=raw.cuda != CPU,
        tf32=bool(opts.tf32),
        require_cuda=rec.cuda.require_cuda(forward) if rec.cuda else None,
    )
    env.update(opts.env or {})
    ignore = bool(opts.source_default_ignore)
    return {
        "profile": str(opts.profile),
        "env": tuple(sorted(env.items())),
        "size_budget": int(opts.size_budget or 0),
        "source": source_mod.checked(raw.base_dir, opts.source, ignore) if opts.source else None,
        "source_default_ignore": ignore,
        "origin": str(raw.origin),
    }


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
    key = pip_key(raw.cuda)
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
