"""The build's provenance labels (created, revision, source), read from git and CI's variables."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from datetime import datetime, timezone


def build_labels(env: dict[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """Provenance labels, set at build time so they never bust the cache. None of them comes
    from the clock: a no-op rebuild must give the same image ID (and digest)."""
    env = dict(os.environ) if env is None else env
    labels = []
    created = source_date(env.get("SOURCE_DATE_EPOCH"), git_output("log", "-1", "--format=%ct"))
    if created:
        labels.append(("org.opencontainers.image.created", created))
    revision = git_output("rev-parse", "HEAD")
    if revision:
        labels.append(("org.opencontainers.image.revision", revision))
    source = source_url(env, git_output("remote", "get-url", "origin"))
    if source:
        labels.append(("org.opencontainers.image.source", source))
    return tuple(labels)


def source_date(epoch: str | None, commit_time: str) -> str | None:
    """SOURCE_DATE_EPOCH (reproducible-builds.org), else the commit time, else none."""
    for value in (epoch, commit_time):
        if value and value.strip().isdigit():
            stamp = datetime.fromtimestamp(int(value.strip()), timezone.utc)
            return stamp.isoformat(timespec="seconds")
    return None


def source_url(env: dict[str, str], remote: str) -> str | None:
    """The repository's public URL: GitHub Actions' variables, else the git remote, with any
    credentials in it dropped (a token in a remote URL must never reach a label)."""
    if env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{env['GITHUB_REPOSITORY']}"
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(.+?)(\.git)?/?", remote)
    if scp:
        return f"https://{scp.group(1)}/{scp.group(2)}"
    parsed = urllib.parse.urlsplit(remote)
    if parsed.scheme not in ("https", "http", "ssh", "git") or not parsed.hostname:
        return None
    path = parsed.path.removesuffix("/").removesuffix(".git")
    port = f":{parsed.port}" if parsed.port and parsed.scheme in ("https", "http") else ""
    return f"https://{parsed.hostname}{port}{path}"


def git_output(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""
