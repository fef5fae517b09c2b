"""Finding a way to build with BuildKit, and the daemon to build on.

Which docker CLI (`choose`): --docker; else $IMAGEKIT_DOCKER; else, where the user set
DOCKER_HOST, DOCKER_CONFIG or DOCKER_CONTEXT themselves, each `docker` found; else the engine
`.ci/engines.sh start` recorded (its engine.env: docs/doctor.md), while its client exists and
its socket answers; else each `docker` found (PATH, then CANDIDATES). Of those, the first with
the buildx plugin, else a pre-23 CLI driven with DOCKER_BUILDKIT=1. Never the classic builder.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from imagekit import terminal
from imagekit.engine.interface import Compression, is_inline_cache
from imagekit.errors import EngineError
from imagekit.paths import read_regular

MIN_ENGINE = Version("20.10")
CANDIDATES = ("/usr/bin/docker", "/usr/local/bin/docker")
HOW_TO_GET = (
    "install the buildx plugin (https://docs.docker.com/go/buildx/), or point --docker "
    "(or IMAGEKIT_DOCKER) at a Docker CLI older than 23, which runs BuildKit itself when "
    "DOCKER_BUILDKIT=1; imagekit never falls back to the classic builder"
)
# Where no CLI tried is a Docker CLI at all (a wrong --docker path): point at one.
HOW_TO_POINT = (
    "point --docker (or IMAGEKIT_DOCKER) at a Docker CLI: one with the buildx plugin "
    "(https://docs.docker.com/go/buildx/), or one older than 23, which runs BuildKit itself "
    "when DOCKER_BUILDKIT=1; imagekit never falls back to the classic builder"
)


class NoBuilder(EngineError):
    """No CLI tried can build with BuildKit: `problem` says what each answered, `fix` only
    the fix (doctor shows them on their own lines); the message is both."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}. To fix: {fix}")
        self.problem, self.fix = problem, fix


@dataclass(frozen=True)
class Builder:
    cli: str
    kind: str  # "buildx" or "buildkit" (pre-23 CLI with DOCKER_BUILDKIT=1)
    cli_version: str
    # buildx only: the selected builder's driver ("docker", "docker-container", ...)
    driver: str = ""

    def pushes_layers(self, containerd_store: bool) -> bool:
        """Whether BuildKit itself writes and pushes the layers (buildx, except the docker
        driver on the classic store, whose push is the engine's gzip `docker push`)."""
        return self.kind == "buildx" and (self.driver != "docker" or containerd_store)

    def holds_multi_platform(self, containerd_store: bool) -> bool:
        """An image of several platforms under one name: the containerd image store holds
        one; so does a builder of its own (docker-container, remote) in what it pushes."""
        return containerd_store or (self.kind == "buildx" and self.driver != "docker")

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.kind == "buildkit":
            env["DOCKER_BUILDKIT"] = "1"
        return env


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def cli_version(cli: str) -> Version | None:
    return _version_of(_run([cli, "--version"]))  # client only: works with the daemon down


def _version_of(result: subprocess.CompletedProcess[str]) -> Version | None:
    match = re.search(r"version (\d+\.\d+(?:\.\d+)?)", result.stdout)
    try:
        return Version(match.group(1)) if match else None
    except InvalidVersion:
        return None


def _answered(result: subprocess.CompletedProcess[str]) -> str:
    """What `CLI --version` answered, for a message: its exit status and first line (escaped,
    cut), or that it printed nothing."""
    lines = (result.stdout or result.stderr or "").strip().splitlines()
    said = f"printed {lines[0][:80]!r}" if lines else "printed nothing"
    return f"exited {result.returncode} and {said}" if result.returncode else said


def has_buildx(cli: str) -> bool:
    return _run([cli, "buildx", "version"]).returncode == 0


def buildx_driver(cli: str) -> str:
    """The selected buildx builder's driver, from `docker buildx inspect` ("" if unknown)."""
    match = re.search(r"^Driver:\s*(\S+)", _run([cli, "buildx", "inspect"]).stdout, re.M)
    return match.group(1) if match else ""


def buildx_version(cli: str) -> str:
    """buildx's version ("0.29.1"), "" where the plugin does not answer."""
    match = re.search(r"\sv?(\d+\.\d+(?:\.\d+)?)", _run([cli, "buildx", "version"]).stdout)
    return match.group(1) if match else ""


# -- the engine .ci/engines.sh started, recorded for a new shell ------------------------------
ENGINE_FILE = "IMAGEKIT_ENGINE_FILE"  # names the record elsewhere (the tests, another place)
SYSTEM_RECORD = Path("/etc/imagekit/engine.env")  # engines.sh runs as root: read by every user
RECORD_KEYS = ("IMAGEKIT_ENGINE", "IMAGEKIT_DOCKER", "DOCKER_HOST", "DOCKER_CONFIG")
RECORD_LIMIT = 64 * 1024  # a few lines; anything larger is not engines.sh's
# The user's own choice of engine (their shell, or the README's eval): no record overrides it.
EXPLICIT = ("DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT")


@dataclass(frozen=True)
class Recorded:
    """One engine.env: the client of the engine `.ci/engines.sh start` started."""

    path: Path
    engine: str  # containerd, classic or docker20 ("" where not said)
    docker: str  # the docker CLI (with buildx, through `config`, for Docker 28)
    host: str  # DOCKER_HOST: the daemon's socket
    config: str  # DOCKER_CONFIG: its buildx plugin and credentials; "": the CLI's default

    def environment(self) -> dict[str, str]:
        """What `eval "$(bash .ci/engines.sh env)"` sets, and the socket."""
        env = {"IMAGEKIT_DOCKER": self.docker, "DOCKER_HOST": self.host}
        if self.engine:
            env["IMAGEKIT_ENGINE"] = self.engine
        if self.config:
            env["DOCKER_CONFIG"] = self.config
        return env


@dataclass(frozen=True)
class Choice:
    """Which docker CLI to try, and why."""

    cli: str | None  # None: each `docker` found (candidates)
    source: str  # how it was chosen, as messages and `imagekit doctor` say it
    env: Mapping[str, str] = field(default_factory=dict)  # set before the CLI runs
    note: str = ""  # a record passed over, and why


def record_path(env: Mapping[str, str]) -> Path:
    """$IMAGEKIT_ENGINE_FILE; else the user's own ${XDG_CONFIG_HOME:-~/.config}/imagekit/
    engine.env where it exists (engines.sh run without root writes there); else /etc's."""
    if env.get(ENGINE_FILE):
        return Path(env[ENGINE_FILE])
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    own = config / "imagekit" / "engine.env"
    return own if own.is_file() else SYSTEM_RECORD


def parse_record(text: str, path: Path) -> Recorded:
    """engine.env's KEY=VALUE lines (values shell-quoted, as `printf %q` writes them; `#`
    starts a comment line). ValueError names the line and what is wrong with it."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        if not sep or key not in RECORD_KEYS:
            raise ValueError(f"line {number} ({line[:60]!r}) is not {'|'.join(RECORD_KEYS)}=VALUE")
        try:
            words = shlex.split(raw)
        except ValueError as exc:
            raise ValueError(f"line {number}: {key}'s value {raw[:60]!r}: {exc}") from None
        if len(words) > 1:
            raise ValueError(f"line {number}: {key}'s value {raw[:60]!r} is not one word")
        values[key] = words[0] if words else ""
    missing = [key for key in ("IMAGEKIT_DOCKER", "DOCKER_HOST") if not values.get(key)]
    if missing:
        raise ValueError(f"it has no {' and no '.join(missing)}")
    return Recorded(
        path=path,
        engine=values.get("IMAGEKIT_ENGINE", ""),
        docker=values["IMAGEKIT_DOCKER"],
        host=values["DOCKER_HOST"],
        config=values.get("DOCKER_CONFIG", ""),
    )


def read_record(path: Path) -> tuple[Recorded | None, str]:
    """The record at `path`, or None and why it is not used ("" where there is none)."""
    try:
        # the user's own file, not a checkout's: a link to it is followed
        data, size = read_regular(path, RECORD_LIMIT)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"the engine record {path} cannot be read: {exc.strerror or exc}; ignored"
    try:
        if max(size, len(data)) > RECORD_LIMIT:
            raise ValueError(f"it is over {RECORD_LIMIT} bytes")
        return parse_record(data.decode("utf-8"), path), ""
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"the engine record {path} is not engines.sh's: {exc}"


def socket_answers(host: str, timeout: float = 2.0) -> bool:
    """Whether something accepts a connection at DOCKER_HOST `host` (unix:// or tcp://; any
    other scheme, ssh:// say, is left to the CLI)."""
    scheme, _, rest = host.partition("://")
    try:
        if scheme == "unix":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(timeout)
                sock.connect(rest)
        elif scheme == "tcp":
            name, _, port = rest.rpartition(":")
            socket.create_connection((name, int(port.split("/")[0])), timeout).close()
    except (OSError, ValueError):
        return False
    return True


def unusable(record: Recorded, answers: Callable[[str], bool] = socket_answers) -> str:
    """Why the recorded engine cannot serve now ("" where it can): its client gone (the
    engines folder removed), or nothing answering on its socket (stopped, or a reboot)."""
    client = Path(record.docker)
    if not (client.is_absolute() and client.is_file() and os.access(client, os.X_OK)):
        return f"its client {record.docker} is gone"
    if not answers(record.host):
        return f"nothing answers on {record.host}"
    return ""


def usable_record(env: Mapping[str, str]) -> tuple[Recorded | None, str]:
    """The recorded engine where it can serve; else None and the note saying why not."""
    record, why_not = read_record(record_path(env))
    if record is None:
        return None, why_not and f"{why_not}; using the docker CLI on PATH"
    stale = unusable(record)
    if stale:
        name = f" ({record.engine})" if record.engine else ""
        said = f"the engine record {record.path}{name} is stale: {stale}"
        return None, f"{said}; using the docker CLI on PATH"
    return record, ""


def choose(
    chosen: str | None,
    env: Mapping[str, str],
    recorded: Callable[[], tuple[Recorded | None, str]],
) -> Choice:
    """The discovery order (this module's docstring). `recorded` is asked last, and only
    where nothing before it decided: it reads a file and tries a socket."""
    if chosen:
        return Choice(chosen, "--docker")
    if env.get("IMAGEKIT_DOCKER"):
        return Choice(env["IMAGEKIT_DOCKER"], "$IMAGEKIT_DOCKER")
    explicit = [name for name in EXPLICIT if env.get(name)]
    if explicit:
        return Choice(None, f"PATH (${explicit[0]} is set, so no engine record is read)")
    record, note = recorded()
    if record is not None:
        name = f"{record.engine} " if record.engine else ""
        return Choice(record.docker, f"{name}recorded in {record.path}", record.environment())
    return Choice(None, "PATH", note=note)


def engine_choice(chosen: str | None = None) -> Choice:
    return choose(chosen, os.environ, lambda: usable_record(os.environ))


_NOTED: set[str] = set()


def adopt(choice: Choice, say_note: bool = True) -> None:
    """Use the chosen engine's environment in this process, as the README's eval would have
    in the shell: the Docker SDK (DOCKER_HOST), the docker CLI and oras (DOCKER_CONFIG's
    buildx plugin and registry credentials) all read it from there. A stale record's note
    is said once."""
    os.environ.update(choice.env)
    if choice.note and choice.note not in _NOTED:
        _NOTED.add(choice.note)
        if say_note:
            terminal.echo(f"imagekit: {choice.note}", err=True)


def use_engine(chosen: str | None = None) -> Choice:
    """Choose the engine's client and adopt its environment (before the SDK or CLI runs)."""
    choice = engine_choice(chosen)
    adopt(choice)
    return choice


def candidates(chosen: str | None) -> list[str]:
    if chosen:
        return [chosen]
    found: list[str] = []
    for path in [shutil.which("docker"), *CANDIDATES]:
        if (
            path
            and Path(path).exists()
            and Path(path).resolve() not in {Path(f).resolve() for f in found}
        ):
            found.append(path)
    return found


def find_builder(chosen: str | None = None) -> Builder:
    choice = use_engine(chosen)
    tried: list[str] = []
    some_docker = False  # whether any CLI tried answered as a Docker CLI
    for cli in candidates(choice.cli):
        if not shutil.which(cli):
            tried.append(f"{cli} ({choice.source}): not found or not executable")
            continue
        answer = _run([cli, "--version"])  # client only: works with the daemon down
        version = _version_of(answer)
        if has_buildx(cli):
            return Builder(cli, "buildx", str(version), buildx_driver(cli))
        if version is not None and version < Version("23"):
            return Builder(cli, "buildkit", str(version))
        if version is None:
            tried.append(
                f"{cli} ({choice.source}) is not a Docker CLI: `{cli} --version` "
                f"{_answered(answer)}, and `{cli} buildx version` failed"
            )
            continue
        some_docker = True
        tried.append(
            f"{cli}: Docker CLI {version} without the buildx plugin "
            "(CLIs 23+ build only through buildx)"
        )
    if not tried:
        tried.append("no docker CLI on PATH")
    fix = HOW_TO_GET if some_docker or not choice.cli else HOW_TO_POINT
    raise NoBuilder("cannot build with BuildKit: " + "; ".join(tried), fix)


def daemon_hint(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    host = env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    hint = (
        f"cannot reach the Docker daemon at {host}. Start it (`sudo systemctl start docker`, "
        "or `sudo dockerd &` where there is no systemd), or set DOCKER_HOST to a running engine"
    )
    record, _ = read_record(record_path(env))
    if record is not None and record.engine and record.host == host:
        # the engine imagekit's own setup started there, and stopped since (or a reboot)
        hint += (
            f"; {record.path} says .ci/engines.sh started {record.engine} there: "
            f"`sudo bash .ci/engines.sh start {record.engine}` in imagekit's checkout"
        )
    return hint


def check_engine_version(version: str) -> None:
    try:
        ok = Version(version.split("+")[0].split("-")[0]) >= MIN_ENGINE
    except InvalidVersion:
        ok = True  # unknown scheme (a dev build): let BuildKit itself decide
    if not ok:
        raise EngineError(
            f"Docker engine {version} is too old: imagekit needs {MIN_ENGINE} or newer for "
            "BuildKit cache and secret mounts; upgrade the engine"
        )


CONTAINER_BUILDER = "docker buildx create --use --driver docker-container"


def unsupported(
    builder: Builder, cache_to: Sequence[str], compression: Compression, containerd_store: bool
) -> list[str]:
    """What this builder cannot do of what was asked, each with the option, the value and
    the fix. Docker 20.10's built-in BuildKit exports gzip layers into the engine and inline
    cache only; buildx's `docker` driver writes into the engine's image store too (unless
    that store is containerd's), so layer compression and cache export need another driver."""
    problems = []
    if builder.kind == "buildkit":
        what = (
            f"{builder.cli} {builder.cli_version} builds with Docker's built-in BuildKit "
            "(DOCKER_BUILDKIT=1, no buildx)"
        )
        fix = (
            "install the buildx plugin (https://docs.docker.com/go/buildx/) and "
            f"`{CONTAINER_BUILDER}`"
        )
    elif builder.driver == "docker" and not containerd_store:
        what = "the selected buildx builder uses the docker driver (the engine's own image store)"
        fix = f"`{CONTAINER_BUILDER}`, or turn on the engine's containerd image store"
    else:
        return []
    for spec in cache_to:
        # both write inline cache only (the built-in BuildKit through BUILDKIT_INLINE_CACHE)
        if not is_inline_cache(spec):
            problems.append(
                f"--cache-to {spec}: {what}, which exports inline cache only. Fix: {fix}; "
                "or --cache-to type=inline (read back with --cache-from IMAGE)"
            )
    if not compression.default:
        problems.append(
            f"{compression.as_options()}: {what}, which pushes gzip layers at the engine's "
            f"level only. Fix: {fix}; "
            "or use --compression gzip without a level (the default)"
        )
    return problems


# Daemons built with Go 1.27 or newer panic while exporting eStargz ("footer buffer = 48,
# not 51"): the stargz-snapshotter they vendor writes a gzip footer Go 1.27's gzip no
# longer pads (containerd/stargz-snapshotter#2330, fixed by #2333). Seen with Debian's
# docker.io 28.5.2 (go1.27.1); it takes the daemon and every build on it down.
ESTARGZ_SAFE_BELOW_GO = Version("1.27")
ALLOW_ESTARGZ = "IMAGEKIT_ALLOW_ESTARGZ"


def go_version(said: str) -> Version | None:
    """`docker version`'s GoVersion ("go1.27.1", "go1.24.9 X:nocoverageredesign") parsed."""
    match = re.match(r"go(\d+\.\d+(?:\.\d+)?)", said.strip())
    return Version(match.group(1)) if match else None


def estargz_crash(engine_version: str, go: str) -> list[str]:
    """The refusal of --compression estargz on a daemon whose eStargz export would crash it
    (empty where it is safe, where the Go version is unknown, or with the override set)."""
    built_with = go_version(go)
    if os.environ.get(ALLOW_ESTARGZ) == "1" or built_with is None:
        return []
    if built_with < ESTARGZ_SAFE_BELOW_GO:
        return []
    return [
        f"--compression estargz: Docker engine {engine_version} was built with {go.strip()}, "
        "whose eStargz export crashes the daemon (panic: footer buffer = 48, not 51; "
        "containerd/stargz-snapshotter#2330, fixed by #2333). Fix: use --compression zstd or "
        "gzip, or an engine built with Go older than 1.27 or carrying that fix; set "
        f"{ALLOW_ESTARGZ}=1 to try anyway"
    ]
