"""The matrix file's schema: the `envs/*.yaml` fields, their value checks, and the messages
for what fails validation (file, line, field, value, and what would be valid).

Expansion into raw cells is in `expand.py`; loading the files in `load.py`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StrictBool,
)

from imagekit.errors import Problem
from imagekit.matrix.ref_checks import REGISTRY, REPOSITORY, check_image_ref
from imagekit.matrix.yaml_located import Located
from imagekit.platforms import PLATFORMS
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


# The common requirement, a name with release bounds ("numpy<3", "tqdm>=4.66,<5"): every
# string this matches is a PEP 508 line packaging accepts (a test checks it), and matching
# it costs a tenth of packaging's parse, which 10,000 overrides' pip lists would pay.
_BOUND = r"(?:==|!=|<=|>=|<|>)[0-9]+(?:\.[0-9]+)*"  # [0-9]: \d is any Unicode digit
_SIMPLE_PIP = re.compile(rf"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:{_BOUND}(?:,{_BOUND})*)?")


def _pip(value: str) -> str:
    if _SIMPLE_PIP.fullmatch(value):
        return value
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


check_pip = _pip  # requirements files' lines are checked as `pip:` entries are


# -- the team's own layer -----------------------------------------------------------------
# Values that land in the Dockerfile as they are written (a `run:` step, the WORKDIR) or in
# its JSON CMD: one line of printable text each, so none can end its instruction early.
MAX_STEP = 16_384  # BuildKit parses lines up to 64 KiB
_WORKDIR = re.compile(r"/(?:[A-Za-z0-9._@+-]+/?)*")


def _one_line(what: str, value: str) -> str:
    bad = _CONTROL.search(value)
    if bad:
        name = {"\x00": "a NUL", "\n": "a newline", "\r": "a carriage return"}.get(
            bad.group(), f"control character U+{ord(bad.group()):04X}"
        )
        raise ValueError(
            f"{name} at position {bad.start()}: {what} is one line of printable text (write "
            "several steps as several entries, or chain commands with &&)"
        )
    if len(value) > MAX_STEP:
        raise ValueError(f"{len(value)} characters; {what} may have {MAX_STEP}")
    return value


def _run_step(value: str) -> str:
    if not value.strip():
        raise ValueError('an empty step; write the shell command, e.g. "python -m app.setup"')
    return _one_line("a run step", value)


def _workdir(value: str) -> str:
    if not _WORKDIR.fullmatch(value) or "/../" in f"{value}/" or "/./" in f"{value}/":
        raise ValueError(
            "an absolute path of letters, digits and . _ @ + - between slashes, without . or "
            "..; e.g. /workspace or /app"
        )
    return value.rstrip("/") or "/"


def _command_word(value: str) -> str:
    if not value:
        raise ValueError(
            'an empty word; write the program and its arguments, e.g. ["python", "-m", "app"]'
        )
    return _one_line("a command word", value)


def _command_list(value: Any) -> Any:
    if isinstance(value, str):
        raise ValueError(
            f"write the command as a list, e.g. {json.dumps(value.split() or ['python'])}: the "
            "image runs it without a shell (exec form), behind imagekit's entrypoint"
        )
    return value


def _command(value: list[str]) -> list[str]:
    if not value:
        raise ValueError('name the program and its arguments, e.g. ["python", "-m", "app"]')
    return value


def _requirements_path(value: str) -> str:
    if not value.strip() or _CONTROL.search(value):
        raise ValueError(
            "a path relative to the matrix file, e.g. ../requirements.txt or ../pyproject.toml"
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


# What people also write for the platform names (imagekit.platforms), for the message.
_PLATFORM_ALIASES = {"amd64": "linux/amd64", "x86_64": "linux/amd64", "arm64": "linux/arm64"}
_PLATFORM_ALIASES |= {"aarch64": "linux/arm64", "linux/aarch64": "linux/arm64"}


def _platform(value: Any) -> str:
    if not isinstance(value, str) or value not in PLATFORMS:
        meant = _PLATFORM_ALIASES.get(str(value).lower())
        hint = f"; write {meant!r}" if meant else ""
        raise ValueError(f"a platform is one of {', '.join(PLATFORMS)}{hint}")
    return value


def _platforms(value: list[str]) -> list[str]:
    if not value:
        raise ValueError(f"name at least one platform ({', '.join(PLATFORMS)})")
    return value


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
Platform = Annotated[str, BeforeValidator(_platform)]
Platforms = Annotated[list[Platform], BeforeValidator(_listify), AfterValidator(_platforms)]
RunStep = Annotated[str, AfterValidator(_run_step)]
WorkDir = Annotated[str, AfterValidator(_workdir)]
CommandWord = Annotated[str, AfterValidator(_command_word)]
Command = Annotated[list[CommandWord], BeforeValidator(_command_list), AfterValidator(_command)]
RequirementsPath = Annotated[str, AfterValidator(_requirements_path)]


InheritField = Literal["apt", "build_apt", "pip", "features", "requirements", "run"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Options(_Strict):
    """Per-cell options. Lists replace, `env` merges, later layers win."""

    apt: list[AptPackage] | None = None
    # OS packages for the builder stage only (a compiler for sdists): never in the runtime.
    build_apt: list[AptPackage] | None = None
    pip: list[PipRequirement] | None = None
    features: list[Literal["flash-attn", "onnx", "onnx-tensorrt"]] | None = None
    profile: (
        Literal["single-node", "multi-node-ib", "multi-node-ethernet", "multi-node-nvlink"] | None
    ) = None
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
    # What the cell's image is built for: one OCI index per cell holds an image for each
    # (`imagekit build --platform`); linux/amd64 alone unless a layer says otherwise.
    platform: Platforms | None = None
    source: str | None = None
    # imagekit's default ignore list for source (.env*, .git, keys); false copies them too.
    source_default_ignore: StrictBool | None = None
    # How this layer's lists combine with the layer below (cibuildwheel's inherit rule):
    # replace them (default), or add to them: {apt: append, pip: prepend}.
    inherit: dict[InheritField, Literal["append", "prepend", "replace"]] | None = None
    # The team's own layer (docs/your-layer.md): requirements files (or pyproject.toml
    # files) relative to the matrix file, installed with `pip` under the cell's stack;
    # `source:` installed as a package; shell steps after the packages; the folder the
    # image starts in; its CMD (imagekit's entrypoint stays in front).
    requirements: Annotated[list[RequirementsPath], BeforeValidator(_listify)] | None = None
    source_package: StrictBool | None = None
    run: Annotated[list[RunStep], BeforeValidator(_listify)] | None = None
    workdir: WorkDir | None = None
    command: Command | None = None


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


def describe(error: Any, located: Located) -> Problem:
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
