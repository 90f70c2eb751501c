"""The README stays an entry page: short, and every page and image it names exists.

The reference lives in docs/ (built by `make docs` with mkdocs --strict, which fails on a
broken link inside the site); the README's own links are checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

#: Relative Markdown links and images of the README: ``[text](path)``, ``[text](path#x)``,
#: ``![alt](path)``.
LINK = re.compile(r"\[[^\]]*\]\((?!https?:|mailto:|#)([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_an_entry_page() -> None:
    assert len(README.splitlines()) <= 250


def test_every_page_and_image_the_readme_links_exists() -> None:
    targets = LINK.findall(README)
    assert targets, "the README links no page"
    missing = sorted({target for target in targets if not (ROOT / target).exists()})
    assert not missing, missing


def test_the_readme_links_every_page_of_the_site() -> None:
    pages = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")}
    assert pages <= set(LINK.findall(README)), sorted(pages - set(LINK.findall(README)))
