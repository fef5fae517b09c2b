"""Credentials in URLs: found, refused where they would persist, masked wherever printed."""

from __future__ import annotations

import re
import urllib.parse

from imagekit.errors import UsageError

# The userinfo runs to the LAST @ of the authority (which ends at / ? # or whitespace): a
# password may hold an @ of its own (https://alice:p@ss@host), and stopping at the first one
# would print the rest of it.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")
_SECRET_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|_KEY$|^KEY$|AUTH", re.I)


def mask(text: str) -> str:
    """Every URL in `text` with its password replaced by ***; a user name alone is masked
    whole, since tokens are often passed as the user name (https://TOKEN@host)."""

    def hide(m: re.Match[str]) -> str:
        user, sep, _ = m["userinfo"].partition(":")
        return f"{m['scheme']}{user if sep else '***'}:***@"

    return _USERINFO.sub(hide, text)


def mask_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment with credentials hidden: a variable named like a secret (…TOKEN,
    …PASSWORD, …_KEY, …) shown as ***, URLs in the others masked."""
    return {k: "***" if _SECRET_NAME.search(k) else mask(v) for k, v in sorted(env.items())}


def has_credentials(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def refuse_credentials(url: str | None, option: str, where: str) -> str | None:
    """`url` unchanged, or UsageError when it holds credentials that would end up in `where`."""
    if url and has_credentials(url):
        raise UsageError(
            f"{option} {mask(url)}: the credentials in it would be written into {where}. "
            "Pass a private index with --index-url (a BuildKit secret, never in a layer), "
            "or drop the credentials from the URL"
        )
    return url
