"""`imagekit init [DIR]`: a working start for a repository that builds its images with
imagekit: one matrix file with a single cell, the images workflow, a .dockerignore.

The workflow is imagekit's own .github/workflows/images.yml (shipped in the wheel), adapted:
it installs imagekit from IMAGEKIT_INSTALL where imagekit's runs `pip install .` (there the
repository is imagekit; here it is the team's), and logs in to the matrix's registry. Every
file is checked before any is written, and each is written whole or not at all.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jinja2

from imagekit import __version__, terminal
from imagekit.cli.common import examples
from imagekit.cli.params import OUT_DIR, Checked, one_line
from imagekit.contract.refs import COMPONENT, REGISTRY
from imagekit.errors import UsageError
from imagekit.paths import write_all_or_none
from imagekit.resources import INIT_DIR, images_workflow
from imagekit.urls import has_credentials

LOCAL_REGISTRY = "127.0.0.1:5000"  # the local registry scripts/quickstart.sh starts
MATRIX_DIR = Path("envs")
WORKFLOW = Path(".github") / "workflows" / "images.yml"
DOCKERIGNORE = Path(".dockerignore")
_NAME = re.compile(COMPONENT)


def check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            "the name is the image repository and the matrix file's name: lowercase letters "
            f"and digits, separated by . _ or -, e.g. {sanitized(value)}"
        )
    return value


def check_registry(value: str) -> str:
    if not REGISTRY.fullmatch(value):
        raise ValueError(
            "a registry is host[:port][/namespace], e.g. ghcr.io/your-org or 127.0.0.1:5000"
        )
    return value


def check_install(value: str) -> str:
    """What `pip install` is given in the workflow: one line, no expression GitHub would
    evaluate, no option, no credentials (the workflow is committed)."""
    one_line(value, "a pip requirement")
    if not value.strip() or value.lstrip().startswith("-"):
        raise ValueError('name a requirement, e.g. "git+https://git.example.com/you/imagekit@v1"')
    if "${{" in value:
        raise ValueError("GitHub Actions would evaluate ${{ ... }} in it; write the value itself")
    if has_credentials(value.removeprefix("git+").split(" @ ")[-1]):
        raise ValueError(
            "the credentials in this URL would be committed with the workflow; give the "
            "runner access another way (a deploy key, PIP_INDEX_URL in a secret)"
        )
    return value


NAME = Checked("name", check_name)
REGISTRY_HOST = Checked("registry", check_registry)
INSTALL = Checked("spec", check_install)


@click.command(
    epilog=examples(
        "imagekit init                           # here; the name is this folder's",
        "imagekit init train-images --name train",
        "imagekit init --registry ghcr.io/acme   # push to your team's registry",
        "imagekit init --install 'git+https://git.example.com/acme/imagekit@v0.1.0'",
    )
)
@click.argument("directory", metavar="[DIR]", default=Path("."), type=OUT_DIR, required=False)
@click.option(
    "--name",
    type=NAME,
    default=None,
    help="The image repository, and the matrix file envs/NAME.yaml. "
    "Default: DIR's folder name, made a valid repository name.",
)
@click.option(
    "--registry",
    type=REGISTRY_HOST,
    default=LOCAL_REGISTRY,
    metavar="REG",
    show_default=True,
    help="Where the images are pushed (the matrix's `registry:`): the default is the local "
    "registry the quickstart starts; name your team's, e.g. ghcr.io/your-org.",
)
@click.option(
    "--install",
    type=INSTALL,
    default=None,
    metavar="SPEC",
    help="What the workflow pip-installs imagekit from (its IMAGEKIT_INSTALL): imagekit is "
    f"not on PyPI. Default: imagekit=={__version__}, for a team index.",
)
@click.option("--force", is_flag=True, help="Overwrite the files init writes that are there.")
def init(directory: Path, force: bool, **kwargs: Any) -> None:
    """Start a matrix: envs/NAME.yaml with one cell, the images workflow, .dockerignore."""
    options = init_options_from(directory, kwargs)
    files = planned(directory, options)
    refuse_existing(files, force)
    tag = write_all(files, directory / options.matrix_file)
    terminal.echo(next_steps(directory, options, tag, other_matrices(directory, options)))


def init_options_from(directory: Path, values: Mapping[str, Any]) -> InitOptions:
    """What init writes its files with, from init's options and DIR."""
    return InitOptions(
        name=values["name"] or sanitized(Path(os.path.abspath(directory)).name),
        registry=values["registry"],
        install=values["install"] or default_install(),
    )


@dataclass(frozen=True)
class InitOptions:
    """The answers the files are written with: the name, the registry, the install spec."""

    name: str
    registry: str
    install: str

    @property
    def host(self) -> str:
        return self.registry.split("/")[0]

    @property
    def matrix_file(self) -> Path:
        return MATRIX_DIR / f"{self.name}.yaml"


def default_install() -> str:
    return f"imagekit=={__version__}"


def sanitized(folder_name: str) -> str:
    """`folder_name` as a repository name: lowercase, each run of other characters one -."""
    name = re.sub(r"[^a-z0-9]+", "-", folder_name.lower()).strip("-")
    return name or "images"


def planned(directory: Path, options: InitOptions) -> dict[Path, str]:
    """Each file init writes, in DIR, and its text."""
    texts = {
        options.matrix_file: _template("matrix.yaml.j2").render(
            name=options.name,
            registry=options.registry,
            local_registry=options.registry == LOCAL_REGISTRY,
            version=__version__,
        ),
        WORKFLOW: workflow(images_workflow().read_text(encoding="utf-8"), options),
        DOCKERIGNORE: (INIT_DIR / "dockerignore").read_text(encoding="utf-8"),
    }
    return {directory / path: text for path, text in texts.items()}


def _template(name: str) -> jinja2.Template:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    return env.from_string((INIT_DIR / name).read_text(encoding="utf-8"))


def refuse_existing(files: dict[Path, str], force: bool) -> None:
    """Exit 2 naming every file already there (without --force), or, with --force, any that
    is not a file init could replace. Checked before anything is written."""
    there = [path for path in files if os.path.lexists(path)]
    if not there:
        return
    if not force:
        raise UsageError(
            f"init writes nothing over files already there: {', '.join(map(str, there))}; "
            "pass --force to overwrite them"
        )
    blocked = [p for p in there if p.is_dir() or (p.exists() and not p.is_file())]
    if blocked:
        raise UsageError(
            f"cannot overwrite {', '.join(map(str, blocked))}: not a file; move it away first"
        )


def write_all(files: dict[Path, str], matrix: Path) -> str:
    """Every file into a temp file beside it, the matrix loaded from its temp file, then all
    renamed into place: a failure before the renames (a full disk, a folder it may not write,
    a matrix that does not load) leaves nothing behind, not even the folders it made. The
    tag of the matrix's first cell."""
    tags: list[str] = []
    write_all_or_none(files, check=lambda temps: tags.append(first_tag(temps[matrix])))
    return tags[0]


def first_tag(matrix: Path) -> str:
    """The matrix's first cell's tag; the matrix is validated as any command would."""
    from imagekit.locks.pinned import load_cells

    return load_cells([matrix])[0].tags[0]


def other_matrices(directory: Path, options: InitOptions) -> list[Path]:
    """Matrix files already in DIR/envs besides the one init wrote: the matrix is all of them."""
    folder = directory / MATRIX_DIR
    found = [*folder.glob("*.yaml"), *folder.glob("*.yml")]
    return sorted(p for p in found if p.name != options.matrix_file.name)


def next_steps(directory: Path, options: InitOptions, tag: str, others: list[Path]) -> list[str]:
    written = (options.matrix_file, WORKFLOW, DOCKERIGNORE)
    cd = [] if Path(os.path.abspath(directory)) == Path.cwd() else [f"  cd {directory}"]
    steps = [
        (f"edit {options.matrix_file}", "your code (requirements, source), more cells"),
        ("imagekit list", "the cells"),
        ("imagekit render", "dockerfiles/<cell>/Dockerfile: commit them"),
        ("imagekit build", "build the image with BuildKit"),
        (f"imagekit test {tag}", "self-check it on this host"),
        ("imagekit build --push", "build and push to the registry"),
    ]
    width = 22  # a longer command (the test's tag) pushes its comment out, no other
    lines = [
        f"wrote {', '.join(str(directory / p) for p in written)}",
        *(f"note: {p} is in the matrix too (every file in envs/ is)" for p in others),
        "next:",
        *cd,
        *(f"  {command.ljust(width)}  # {why}" for command, why in steps),
    ]
    if options.registry == LOCAL_REGISTRY:
        lines.append(
            f"the registry is {LOCAL_REGISTRY}, this machine's: for CI, set `registry:` in "
            f"{options.matrix_file} and the login steps of {WORKFLOW} to your team's"
        )
    if options.install == default_install():
        lines.append(
            f"the workflow installs imagekit with `pip install {options.install}`: imagekit is "
            f"not on PyPI, so set IMAGEKIT_INSTALL in {WORKFLOW} to where your team gets it"
        )
    return lines


# -- the workflow ------------------------------------------------------------------------

INSTALL_STEP = "      - run: pip install .\n"
GHCR_LOGIN = (
    "          registry: ghcr.io\n"
    "          username: ${{ github.actor }}\n"
    "          password: ${{ secrets.GITHUB_TOKEN }}\n"
)
_PATHS = re.compile(r"^    paths: \[.*\]\n", re.MULTILINE)


def workflow(source: str, options: InitOptions) -> str:
    """imagekit's images.yml for the team's repository. Each change asserts what it changes
    is there, so a change to imagekit's workflow breaks the tests, not a team's copy."""
    _, sep, body = source.partition("\nname: ")
    text = _header(options) + sep.lstrip("\n") + body
    text = _replace(text, INSTALL_STEP, '      - run: pip install "$IMAGEKIT_INSTALL"\n')
    text = _replace(text, "\nenv:\n", "\nenv:\n" + _install_env(options.install), count=1)
    text = _replace(text, GHCR_LOGIN, _login(options.host))
    text, dropped = _PATHS.subn("", text)  # the team's folders are not imagekit's
    if not sep or dropped != 2:
        raise RuntimeError(f"{images_workflow()} has not the shape init adapts")
    return text


def _replace(text: str, old: str, new: str, count: int | None = None) -> str:
    found = text.count(old)
    if found == 0 or (count is not None and found != count):
        raise RuntimeError(f"{images_workflow()}: {old.strip()!r} found {found} times")
    return text.replace(old, new)


def _header(options: InitOptions) -> str:
    if options.host == "ghcr.io":
        note = "with the job's GITHUB_TOKEN."
    else:
        note = "with the secrets REGISTRY_USERNAME and REGISTRY_PASSWORD."
    return _template("workflow-header.yml").render(
        version=__version__, registry_host=options.host, login_note=note
    )


def _install_env(spec: str) -> str:
    # JSON's string is a YAML double-quoted scalar; check_install refused control characters
    return (
        "  # pip's requirement for imagekit, in every job (see the top of this file)\n"
        f"  IMAGEKIT_INSTALL: {json.dumps(spec)}\n"
    )


def _login(host: str) -> str:
    if host == "ghcr.io":
        return GHCR_LOGIN
    return (
        f"          registry: {json.dumps(host)}\n"  # quoted: an IPv6 host starts with [
        "          username: ${{ secrets.REGISTRY_USERNAME }}\n"
        "          password: ${{ secrets.REGISTRY_PASSWORD }}\n"
    )
