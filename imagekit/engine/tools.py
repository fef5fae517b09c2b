"""The registry tools imagekit runs: cosign (signs and verifies the self-check attestation)
and oras (reads pushed images back, attaches the SBOM to one as a referrer and reads it back).

Here, below supply/, so that the engine's registry reads (engine/image_registry.py) and supply/
share one way to find and run them.

Both are found on PATH, or where $IMAGEKIT_COSIGN / $IMAGEKIT_ORAS point. A missing tool is a
usage error (exit 2) naming the package that brings it, never a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagekit import terminal
from imagekit.contract import refs
from imagekit.errors import ImagekitError, UsageError

TIMEOUT = 300.0  # seconds for one call: a registry that hangs fails here, with its words


@dataclass(frozen=True)
class Tool:
    name: str
    variable: str  # the environment variable that names its path
    package: str  # Debian's package (unstable or Debian 13: both run on Debian 12)
    why: str  # what imagekit needs it for, for the message


COSIGN = Tool("cosign", "IMAGEKIT_COSIGN", "cosign", "signs and verifies the attestation")
ORAS = Tool("oras", "IMAGEKIT_ORAS", "oras", "attaches and reads the SBOM in the registry")


def find(tool: Tool, needed_for: str) -> str:
    """The tool's path, or a usage error naming the package to install."""
    named = os.environ.get(tool.variable)
    path = shutil.which(named) if named else shutil.which(tool.name)
    if path:
        return path
    where = f"not at ${tool.variable}={named!r}" if named else "not on PATH"
    raise UsageError(
        f"{needed_for} needs {tool.name} ({tool.why}), which is {where}: install it "
        f"(Debian 13 or newer: `apt-get install {tool.package}`; this repository's "
        f"`bash .ci/engines.sh install` installs it on Debian 12), or set ${tool.variable} "
        "to its path"
    )


def run(
    tool: Tool,
    args: Sequence[str],
    needed_for: str,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the tool; its output is returned whatever its exit code (callers judge it)."""
    command = [find(tool, needed_for), *args]
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=timeout,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ImagekitError(
            f"{needed_for}: `{tool.name} {' '.join(args[:2])}` did not finish in {timeout:.0f}s "
            "(is the registry reachable?)"
        ) from None


def failed(tool: Tool, what: str, result: subprocess.CompletedProcess[str]) -> list[str]:
    """A failed call's lines: what failed, then the tool's own last lines behind a gutter."""
    said = (result.stderr or result.stdout).strip().splitlines()[-8:]
    return [f"{what}: {tool.name} exited {result.returncode}", *terminal.foreign("\n".join(said))]


def oras_http(reference: str) -> list[str]:
    """oras's flag for a registry reached over plain HTTP (plain_http), else none."""
    return ["--plain-http"] if plain_http(reference) else []


def plain_http(reference: str) -> bool:
    """A registry on the loopback address is reached over plain HTTP, as Docker does
    (127.0.0.0/8 is an insecure registry by default); every other one over HTTPS."""
    registry = refs.parse(reference).registry or ""
    host = registry if registry.endswith("]") else registry.rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.") or host == "[::1]"
