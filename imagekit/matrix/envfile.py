"""The matrix spec: `envs/*.yaml` loaded, validated and expanded into raw cell specs.

Validation collects every problem in every file before failing. Each message names the
file, the line, the field and the value, and says what would be valid.
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
import math
import re
import string
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StrictBool,
    ValidationError,
)

from imagekit.errors import Problem, SpecError, printable
from imagekit.matrix.ref_checks import REGISTRY, REPOSITORY, check_image_ref
from imagekit.matrix.yamlsrc import Located, YamlSyntaxError
from imagekit.matrix.yamlsrc import load as load_yaml
from imagekit.sizes import parse_size
from imagekit.urls import has_credentials, mask

AXES = ("cuda", "torch", "python", "os", "flavor")
TAG_FIELDS = ("id", "cuda", "variant", "torch", "python", "os", "flavor")

# -- value checks -------------------------------------------------------------------------
# Each rejects values that could break out of their Dockerfile line (newline, quote, shell
# metacharacters) with a message that says what is allowed.

_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]*(=[A-Za-z0-9.+~:-]+)?$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _not_a_number(value: Any) -> Any:
    # YAML reads 3.10 as the float 3.1: a silent wrong version. Demand quotes instead.
    if isinstance(value, bool | int | float):
        written = getattr(value, "raw", str(value))  # the text in the file, e.g. 3.10
        raise ValueError(
            f"YAML read {written} as the number {value!r}, which can drop digits (3.10 "
            f'becomes 3.1); quote it: "{written}"'
        )
    return value


def _listify(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


def _version(pattern: str, example: str) -> Any:
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"expected a version like {example}")
        return value

    return AfterValidator(check)


def _apt(value: str) -> str:
    if not _APT.fullmatch(value):
        raise ValueError(
            "an apt package is a Debian package name (lowercase letters, digits, + . -), "
            "optionally =version; spaces, quotes and newlines are not allowed"
        )
    return value


def _pip(value: str) -> str:
    if "\n" in value or "\r" in value or value.lstrip().startswith("-"):
        raise ValueError("a pip requirement is one PEP 508 line, not an option or several lines")
    try:
        requirement = Requirement(value)
    except InvalidRequirement as exc:
        raise ValueError(f"not a PEP 508 requirement ({mask(str(exc))})") from None
    if requirement.url and has_credentials(requirement.url.removeprefix("git+")):
        raise ValueError(
            "the credentials in this URL would be written into the committed Dockerfile and "
            "the image history; put the package on a private index passed with --index-url "
            "(a BuildKit secret) instead"
        )
    return value


# Names imagekit owns, or that break the image for everything in it. Why, for the message.
RESERVED_ENV = {
    "PATH": "the venv's bin must come first; add tools with apt or pip instead",
    "VIRTUAL_ENV": "imagekit's venv is /opt/venv",
    "LD_PRELOAD": "it is loaded into every process of the image, the self-check included",
    "OMP_NUM_THREADS": "it is computed at start from the container's CPUs (never baked)",
}
MAX_ENV_VALUE = 16_384  # BuildKit parses lines up to 64 KiB; ENV and LABEL repeat values
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def _env_key(value: str) -> str:
    if not _ENV_KEY.fullmatch(value):
        raise ValueError("an environment name is letters, digits and _, not starting with a digit")
    if value in RESERVED_ENV or value.startswith("IMAGEKIT_"):
        why = RESERVED_ENV.get(value, "IMAGEKIT_* variables are imagekit's own")
        raise ValueError(f"{value} cannot be set here: {why}")
    return value


def _env_value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f'write the value as a string, e.g. "{value}"')
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        raise ValueError(
            f"control character U+{ord(bad.group()):04X} at position {bad.start()}: an "
            "environment value must be one line of printable text"
        )
    if len(text) > MAX_ENV_VALUE:
        raise ValueError(f"{len(text)} characters; an environment value may have {MAX_ENV_VALUE}")
    return text


def _pattern(regex: re.Pattern[str], what: str) -> Any:
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"not a valid {what}")
        return value

    return AfterValidator(check)


CudaV = Annotated[str, BeforeValidator(_not_a_number), _version(r"cpu|\d+\.\d+", '"12.6" or "cpu"')]
TorchV = Annotated[str, BeforeValidator(_not_a_number), _version(r"\d+\.\d+(\.\d+)?", '"2.7.1"')]
PythonV = Annotated[str, BeforeValidator(_not_a_number), _version(r"3\.\d+", '"3.11"')]
Axis = Annotated[list[str], BeforeValidator(_listify)]
Flavor = Literal["nvidia", "slim"]

AptPackage = Annotated[str, AfterValidator(_apt)]
PipRequirement = Annotated[str, AfterValidator(_pip)]
EnvKey = Annotated[str, AfterValidator(_env_key)]
EnvValue = Annotated[str, BeforeValidator(_env_value)]
Size = Annotated[int, BeforeValidator(parse_size)]
ImageRef = Annotated[str, AfterValidator(check_image_ref)]


InheritField = Literal["apt", "build_apt", "pip", "features"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Options(_Strict):
    """Per-cell options. Lists replace, `env` merges, later layers win."""

    apt: list[AptPackage] | None = None
    # OS packages for the builder stage only (a compiler for sdists): never in the runtime.
    build_apt: list[AptPackage] | None = None
    pip: list[PipRequirement] | None = None
    features: list[Literal["flash-attn", "onnx", "onnx-tensorrt"]] | None = None
    profile: Literal["single-node", "multi-node-ib", "multi-node-ethernet"] | None = None
    env: dict[EnvKey, EnvValue] | None = None
    size_budget: Size | None = None
    installer: Literal["uv", "pip"] | None = None
    torchvision: StrictBool | None = None
    tf32: StrictBool | None = None
    # A C++ compiler and the Python headers in the runtime, which torch.compile needs there
    # (inductor on CPU, Triton's launcher on GPU); false saves their size.
    compile: StrictBool | None = None
    # The venv in layers by group (CUDA libraries, torch, features: shared across cells and
    # reproducible), or as one layer (what imagekit did before; for comparisons).
    venv_layers: Literal["split", "single"] | None = None
    base: ImageRef | None = None
    source: str | None = None
    # imagekit's default ignore list for source (.env*, .git, keys); false copies them too.
    source_default_ignore: StrictBool | None = None
    # How this layer's lists combine with the layer below (cibuildwheel's inherit rule):
    # replace them (default), or add to them: {apt: append, pip: prepend}.
    inherit: dict[InheritField, Literal["append", "prepend", "replace"]] | None = None


class Axes(_Strict):
    cuda: Annotated[list[CudaV], BeforeValidator(_listify)] | None = None
    torch: Annotated[list[TorchV], BeforeValidator(_listify)] | None = None
    python: Annotated[list[PythonV], BeforeValidator(_listify)] | None = None
    os: Annotated[list[str], BeforeValidator(_listify)] | None = None
    flavor: Annotated[list[Flavor], BeforeValidator(_listify)] | None = None


class Block(Axes, Options):
    """A product of axis values, with options for the cells it makes."""


class Match(_Strict):
    """Partial axes; values are exact or shell-style globs ("2.7*"), scalar or list."""

    cuda: Axis | None = None
    torch: Axis | None = None
    python: Axis | None = None
    os: Axis | None = None
    flavor: Axis | None = None


class Override(Options):
    match: Match


class EnvFile(_Strict):
    registry: Annotated[
        str,
        _pattern(
            REGISTRY,
            "registry: host[:port][/namespace] by the OCI reference grammar, e.g. ghcr.io/org "
            "or localhost:5000 (host labels of letters, digits and -, separated by .)",
        ),
    ] = "localhost"
    repository: Annotated[
        str,
        _pattern(
            REPOSITORY,
            "repository: lowercase name components of letters and digits, separated by "
            "/ . _ __ or -, e.g. team/train",
        ),
    ] = "imagekit"
    tag: str = "{torch}-{variant}-py{python}-{os}-{flavor}"
    extra_tags: list[str] = []
    defaults: Block = Block()
    matrix: list[Block] = []
    include: list[Block] = []
    exclude: list[Match] = []
    overrides: list[Override] = []


# -- raw cells ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class RawCell:
    """One matrix cell before completion: its axes, merged options and where it came from."""

    cuda: str
    torch: str
    python: str
    os: str
    flavor: str
    options: Options
    env_file: EnvFile
    origin: Origin
    base_dir: Path


def merge(base: Options, top: Options) -> Options:
    """`top` wins field by field; `env` maps merge; a list replaces the one below unless
    `top.inherit` says append or prepend. `inherit` itself applies to its own layer only."""
    values = base.model_dump(exclude_none=True)
    values.pop("inherit", None)
    rules = top.inherit or {}
    for key, value in top.model_dump(exclude_none=True, exclude={"inherit"}).items():
        below = values.get(key)
        if key == "env":
            values[key] = {**(below or {}), **value}
        elif rules.get(key) in ("append", "prepend") and below:
            first, then = (below, value) if rules[key] == "append" else (value, below)
            values[key] = list(dict.fromkeys([*first, *then]))
        else:
            values[key] = value
    return Options(**{k: v for k, v in values.items() if k in Options.model_fields})


def _options_of(model: BaseModel) -> Options:
    return Options(**model.model_dump(include=set(Options.model_fields), exclude_none=True))


# Work is bounded before it is done: a block's product is counted before it is expanded
# (20 values on each of four axes would be 160,000 cells), and so is the matrix's total.
MAX_BLOCK_CELLS = 1_000
MAX_CELLS = 5_000
_GLOB = frozenset("*?[")
_WARNINGS_SHOWN = 20  # per section and file: 10,000 unused excludes are one note, not a flood


class MatchIndex:
    """Which of `matches` select a cell, in time linear in their number: for each axis and
    each value the file uses, the bitmask of the matches that accept it (exact values by a
    dictionary, globs tried once per value); a cell's hits are the AND of its five masks."""

    def __init__(self, matches: list[Match], values: dict[str, set[str]]) -> None:
        self.none_excluded = (1 << len(matches)) - 1
        self.masks: dict[str, dict[str, int]] = {}
        for axis in AXES:
            unconstrained, exact, globs = 0, dict[str, int](), list[tuple[int, str]]()
            for i, match in enumerate(matches):
                patterns = getattr(match, axis)
                if patterns is None:
                    unconstrained |= 1 << i
                    continue
                for pattern in map(str, patterns):
                    if _GLOB.isdisjoint(pattern):
                        exact[pattern] = exact.get(pattern, 0) | 1 << i
                    else:
                        globs.append((i, pattern))
            self.masks[axis] = {
                value: unconstrained
                | exact.get(value, 0)
                | sum({1 << i for i, p in globs if fnmatch.fnmatchcase(value, p)})
                for value in values[axis]
            }

    def hits(self, axes: dict[str, str]) -> int:
        mask = self.none_excluded
        for axis in AXES:
            mask &= self.masks[axis][axes[axis]]
        return mask


def bits(mask: int) -> Iterator[int]:
    """The indices of the set bits of `mask`, lowest first (the order overrides apply in)."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def matches(match: Match, axes: dict[str, str]) -> bool:
    for axis in AXES:
        patterns = getattr(match, axis)
        if patterns is not None and not any(
            fnmatch.fnmatchcase(axes[axis], str(p)) for p in patterns
        ):
            return False
    return True


def _product(block: Block, defaults: Block) -> Iterator[dict[str, str]]:
    values = [getattr(block, a) or getattr(defaults, a) or [] for a in AXES]
    for combo in itertools.product(*values):
        yield dict(zip(AXES, combo, strict=True))


def _size(block: Block, defaults: Block) -> tuple[int, str]:
    """How many cells the block makes, and the product written out (20 x 20 x 20 x 20 x 1)."""
    counts = [len(getattr(block, a) or getattr(defaults, a) or []) for a in AXES]
    return math.prod(counts), " x ".join(map(str, counts))


def _missing_axes(block: Block, defaults: Block) -> list[str]:
    return [a for a in AXES if not (getattr(block, a) or getattr(defaults, a))]


def expand(
    doc: EnvFile,
    located: Located,
    base_dir: Path,
    indices: dict[str, list[int]] | None = None,
    budget: int = MAX_CELLS,
) -> tuple[list[RawCell], list[Problem]]:
    """Blocks -> cells. Returns the cells and the problems found (missing axes, tags, a block
    or a matrix too large). `budget`: how many cells the matrix may still make."""
    problems = _check_tags(doc, located)
    cells: list[RawCell] = []
    groups = [("matrix", b, True) for b in doc.matrix] + [
        ("include", b, False) for b in doc.include
    ]
    values = {
        a: {v for _, b, _ in groups for v in getattr(b, a) or getattr(doc.defaults, a) or []}
        for a in AXES
    }
    excludes = MatchIndex(doc.exclude, values)
    overrides = MatchIndex([o.match for o in doc.overrides], values)
    counters = {"matrix": 0, "include": 0}
    used = {"exclude": 0, "overrides": 0}
    for section, block, excludable in groups:
        index = counters[section]
        counters[section] += 1
        if indices:  # blocks were left out: the file's own index, for the line
            index = indices[section][index]
        origin = Origin(located.file, located.line_of((section, index)))
        missing = _missing_axes(block, doc.defaults)
        if missing:
            problems.append(
                Problem(
                    f"no value for {', '.join(missing)}; set it in the block or in defaults",
                    origin.file,
                    origin.line,
                    f"{section}[{index}]",
                )
            )
            continue
        size, product = _size(block, doc.defaults)
        limit = min(MAX_BLOCK_CELLS, budget - len(cells))
        if size > limit:
            whole = size <= MAX_BLOCK_CELLS  # then it is the matrix's total that is too large
            problems.append(
                Problem(
                    f"{product} = {size:,} cells; "
                    + (
                        f"the matrix may make at most {MAX_CELLS:,} cells in all"
                        if whole
                        else f"a block may make at most {MAX_BLOCK_CELLS:,}"
                    )
                    + " (split it into blocks of the combinations you build, or use exclude)",
                    origin.file,
                    origin.line,
                    f"{section}[{index}]",
                )
            )
            continue
        for axes in _product(block, doc.defaults):
            hits = excludes.hits(axes) if excludable else 0
            used["exclude"] |= hits
            if hits:
                continue
            options = merge(_options_of(doc.defaults), _options_of(block))
            applied = overrides.hits(axes)
            used["overrides"] |= applied
            for i in bits(applied):
                options = merge(options, _options_of(doc.overrides[i]))
            cells.append(
                RawCell(**axes, options=options, env_file=doc, origin=origin, base_dir=base_dir)
            )
    _warn_unused(doc, located, used)
    return cells, problems


def _warn_unused(doc: EnvFile, located: Located, used: dict[str, int]) -> None:
    """An exclude or override that selects no cell is almost always a typo: say so."""
    for section, count in (("exclude", len(doc.exclude)), ("overrides", len(doc.overrides))):
        unused = [i for i in range(count) if not used[section] >> i & 1]
        if len(unused) > _WARNINGS_SHOWN:
            print(
                f"imagekit: warning: {printable(located.file)}: {len(unused)} {section} entries "
                f"match no cell of this file; the first {_WARNINGS_SHOWN}:",
                file=sys.stderr,
            )
        for i in unused[:_WARNINGS_SHOWN]:
            line = located.line_of((section, i))
            print(
                f"imagekit: warning: {printable(located.file)}:{line}: {section}[{i}] "
                "matches no cell of this file; check its values",
                file=sys.stderr,
            )


def _check_tags(doc: EnvFile, located: Located) -> list[str]:
    problems = []
    for where, template in [("tag", doc.tag)] + [
        (f"extra_tags[{i}]", t) for i, t in enumerate(doc.extra_tags)
    ]:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            fields, bad = [], str(exc)
        else:
            bad = ", ".join(f"{{{f}}}" for f in fields if f not in TAG_FIELDS)
            bad = bad or format_specs(template)
        if bad:
            path = ("tag",) if where == "tag" else ("extra_tags", int(where[11:-1]))
            allowed = ", ".join("{" + f + "}" for f in TAG_FIELDS)
            problems.append(
                Problem(
                    f"{template!r} uses {bad}; a tag template may use {allowed}",
                    located.file,
                    located.line_of(path),
                    where,
                )
            )
    return problems


def format_specs(template: str) -> str:
    """A field with a format spec or conversion ({torch:>999999999}, {torch!r}): a tag needs
    neither, and a width asks for memory the size of the width."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:  # reported as a template that does not parse
        return ""
    specs = [
        "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        for _, name, spec, conv in parsed
        if name is not None and (spec or conv)
    ]
    return f"{', '.join(specs)[:80]} (a field takes no format spec or conversion)" if specs else ""


# -- errors -------------------------------------------------------------------------------


def _dotted(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel]:
    """The model whose keys are valid at `loc` (for did-you-mean)."""
    model: type[BaseModel] = EnvFile
    for part in loc:
        if isinstance(part, int):
            continue
        annotation = model.model_fields.get(str(part))
        inner = _model_in(annotation.annotation) if annotation else None
        if inner is None:
            break
        model = inner
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found:
            return found
    return None


def _describe(error: Any, located: Located) -> Problem:
    loc = tuple(error["loc"])
    # pydantic appends validator names like "function-before[...]"; drop them.
    loc = tuple(p for p in loc if isinstance(p, int) or not str(p).startswith("function-"))
    at = {
        "file": located.file,
        "line": located.line_of(loc),
        "field": _dotted(loc) or "(top level)",
    }
    if error["type"] == "extra_forbidden":
        key = str(loc[-1])
        valid = list(_model_at(loc[:-1]).model_fields)
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return Problem(f"unknown key {key!r}{hint} Valid keys: {', '.join(valid)}", **at)
    if error["type"] == "missing":
        return Problem("required", **at)
    message = str(error["msg"]).removeprefix("Value error, ")
    return Problem(mask(message), value=mask(repr(error["input"])), **at)


# -- loading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    files: tuple[str, ...]
    cells: tuple[RawCell, ...]
    problems: tuple[Problem, ...] = ()  # reported together with completion's problems


def env_files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            # not only regular files: a FIFO or a link named *.yaml is refused, not skipped
            found.extend(sorted(p for p in path.glob("*.yaml") if not p.is_dir()))
            found.extend(sorted(p for p in path.glob("*.yml") if not p.is_dir()))
        else:
            found.append(path)
    return found


def load_spec(paths: Iterable[Path], root: Path | None = None) -> Spec:
    """Load and validate every file. Problems are collected in `Spec.problems` so that the
    caller can report them together with those found when completing the cells."""
    problems: list[Problem] = []
    cells: list[RawCell] = []
    files = env_files(paths)
    if not files:
        listed = ", ".join(map(str, paths))
        raise SpecError([Problem(f"no matrix files (*.yaml) found in {listed}")])
    for path in files:
        display = _display(path, root)
        file_cells, file_problems = _load_one(path, display, MAX_CELLS - len(cells))
        cells.extend(file_cells)
        problems.extend(file_problems)
    return Spec(
        files=tuple(_display(p, root) for p in files), cells=tuple(cells), problems=tuple(problems)
    )


def _display(path: Path, root: Path | None) -> str:
    try:
        return str(path.resolve().relative_to((root or Path.cwd()).resolve()))
    except ValueError:
        return str(path)


def _load_one(path: Path, display: str, budget: int) -> tuple[list[RawCell], list[Problem]]:
    try:
        located = load_yaml(path, display)
    except YamlSyntaxError as exc:
        return [], [exc.problem]
    if not isinstance(located.data, dict):
        return [], [Problem("the file must be a mapping with a `matrix` list", display, 1)]
    try:
        doc = EnvFile.model_validate(located.data)
    except ValidationError as exc:
        problems = [_describe(e, located) for e in exc.errors()]
        cells, more = _expand_valid_blocks(located, exc, path.resolve().parent, budget)
        return cells, problems + more
    return expand(doc, located, path.resolve().parent, budget=budget)


def _expand_valid_blocks(
    located: Located, exc: ValidationError, base_dir: Path, budget: int
) -> tuple[list[RawCell], list[Problem]]:
    """When every schema problem sits inside matrix/include blocks, the other blocks still
    expand, so their compatibility problems are shown in the same run, not the next."""
    bad: dict[str, set[int]] = {"matrix": set(), "include": set()}
    for error in exc.errors():
        loc = error["loc"]
        if len(loc) < 2 or loc[0] not in bad or not isinstance(loc[1], int):
            return [], []  # a problem outside the blocks: nothing can be trusted
        bad[str(loc[0])].add(loc[1])
    data = dict(located.data)
    kept: dict[str, list[int]] = {}
    for section, skip in bad.items():
        items = data.get(section) or []
        kept[section] = [i for i in range(len(items)) if i not in skip]
        data[section] = [items[i] for i in kept[section]]
    try:
        doc = EnvFile.model_validate(data)
    except ValidationError:
        return [], []
    return expand(doc, located, base_dir, kept, budget)
