"""The README stays a ten-minute read and the documents stay reachable (issue 50): README.md
is at most 350 lines and carries no per-change CI timings, every page in docs/ is listed in
docs/README.md, and every relative link in README.md and docs/*.md names a file that exists
and, for a Markdown file, a heading it has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted([README, *DOCS.glob("*.md")])

# [text](target): a target without spaces; images (![..](..)) are links too
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a link shown in code is not a link)."""
    kept, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            kept.append(line)
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped but `-` and `_`, each
    space a hyphen."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")  # GitHub's repeats: -1, -2
    return found


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text()))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # no https:, mailto:


def test_readme_is_a_ten_minute_read() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 350, (
        f"README.md has {len(lines)} lines; at most 350 (move reference to docs/)"
    )


def test_readme_has_no_per_change_ci_timings() -> None:
    """Timings of a change's CI run belong in docs/benchmarks.md, dated."""
    timed = re.compile(r"\b(minutes?|min|seconds?)\b", re.IGNORECASE)
    change = re.compile(r"\b(issue|PR|pull request)\s*#?\d+|#\d+\b", re.IGNORECASE)
    bad = [
        line
        for line in README.read_text().splitlines()
        if timed.search(line) and change.search(line)
    ]
    assert not bad, f"README.md times a change's CI run (move it to docs/benchmarks.md): {bad}"


def test_every_doc_is_in_the_index() -> None:
    index = (DOCS / "README.md").read_text()
    listed = {t.split("#")[0].rstrip("/") for t in relative_links(DOCS / "README.md")}
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in listed]
    missing += [f"{d.name}/" for d in DOCS.iterdir() if d.is_dir() and d.name not in listed]
    assert not missing, f"docs/README.md does not list {missing}"
    assert "../README.md" in index  # and the index leads back to the way in


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_slug_is_githubs() -> None:
    assert slug("Grace nodes (arm64)") == "grace-nodes-arm64"
    assert slug("CI and arm64: native runners or QEMU") == "ci-and-arm64-native-runners-or-qemu"
    assert slug("`imagekit test --nodes 2`, 2026-11-23") == "imagekit-test---nodes-2-2026-11-23"
    assert slug("The nvidia flavor's base (`python bench/bench_nvidia_base.py`)") == (
        "the-nvidia-flavors-base-python-benchbench_nvidia_basepy"
    )
