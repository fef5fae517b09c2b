"""Image references, parsed by one grammar: the OCI distribution reference grammar, as Docker's
distribution/reference writes it:

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] path-component [ "/" path-component ]*
    domain     := host [ ":" port ]     (a hostname, or an IPv6 address in brackets)

The first component of a name is its registry when it has a "." or a ":", is "localhost", or
has an uppercase letter (a path component cannot); otherwise the name is on Docker Hub and
has no registry here (nothing is filled in: `str(parse(text)) == text`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
TAG_TEXT = r"[\w][\w.-]{0,127}"
DIGEST_TEXT = r"[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]+"  # algorithm:hex, as the grammar allows
TAG = re.compile(TAG_TEXT)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")  # the only digests imagekit writes or accepts
# registry: and repository: of a matrix file, by the same grammar (a registry may carry a
# namespace: ghcr.io/org); together with a tag they always make a valid reference.
REGISTRY = re.compile(rf"{DOMAIN}(?:/{COMPONENT})*")
REPOSITORY = re.compile(rf"{COMPONENT}(?:/{COMPONENT})*")
_DOMAIN = re.compile(DOMAIN)
_REST = re.compile(
    rf"(?P<repository>{COMPONENT}(?:/{COMPONENT})*)"
    rf"(?::(?P<tag>{TAG_TEXT}))?(?:@(?P<digest>{DIGEST_TEXT}))?"
)

INVALID = (
    "not an image reference: [registry[:port]/]name[:tag][@sha256:<64 hex>], "
    "name in lowercase letters, digits and . _ -"
)


@dataclass(frozen=True)
class Reference:
    registry: str | None  # "ghcr.io", "registry.example.com:5000", "localhost"; None: Docker Hub
    repository: str  # "team-a/train", "library/debian", "debian"
    tag: str | None = None
    digest: str | None = None  # "sha256:<64 hex>"

    @property
    def name(self) -> str:
        """The reference without tag and digest: [registry/]repository."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.name}{tag}{digest}"

    def without_tag(self) -> Reference:
        return replace(self, tag=None)

    def without_digest(self) -> Reference:
        return replace(self, digest=None)

    def with_tag(self, tag: str) -> Reference:
        return replace(self, tag=tag)

    def pinned(self, digest: str) -> Reference:
        """The same image by digest: tag kept, as `docker pull name:tag@digest` takes it."""
        return replace(self, digest=digest)

    def normalized(self) -> Reference:
        """As containerd names it: docker.io/library/debian for Docker Hub's debian."""
        if self.registry:
            return self
        repository = self.repository if "/" in self.repository else f"library/{self.repository}"
        return replace(self, registry="docker.io", repository=repository)

    def by_digest(self, digest: str) -> Reference:
        """name@digest, no tag: what a registry holds under that digest."""
        return replace(self, tag=None, digest=digest)


def is_registry(first: str) -> bool:
    """Docker's rule (splitDockerDomain) for the first component of a name with a slash."""
    return "." in first or ":" in first or first == "localhost" or first != first.lower()


def parse(text: str) -> Reference:
    """`text` as a Reference, or ValueError naming the grammar."""
    first, slash, rest = text.partition("/")
    registry = None
    if slash and is_registry(first):
        if not _DOMAIN.fullmatch(first):
            raise ValueError(INVALID)
        registry, text = first, rest
    match = _REST.fullmatch(text)
    if not match:
        raise ValueError(INVALID)
    return Reference(registry, match["repository"], match["tag"], match["digest"])
