"""Every relative link in README.md, docs/*.md and docker/README.md points at a file that
exists, and its `#anchor` at a heading of that page (GitHub's heading slugs): the front
page sends readers to the pages that hold the rest, so a broken link loses them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "docker" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCED = re.compile(r"```.*?```", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(path: Path) -> str:
    return _FENCED.sub("", path.read_text())


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+\s+(.*)$", _prose(path), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_somewhere(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # a URL or mailto: not ours to check offline
        path, _, fragment = target.partition("#")
        full = (page.parent / path).resolve() if path else page
        if not full.exists():
            broken.append(f"{target}: no such file")
        elif fragment and full.suffix == ".md" and fragment not in _anchors(full):
            broken.append(f"{target}: no heading #{fragment} in {full.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
