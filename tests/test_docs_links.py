"""Every relative link and image in README.md and docs/*.md points to a file that exists in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # a command in a code block is not a link
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def relative_links(text: str) -> list[str]:
    """The targets of Markdown links and images that are files of this repository (no scheme, no bare anchor)."""
    return [t.split("#", 1)[0] for t in _links(text) if not t.startswith("#")]


def anchors(text: str) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def test_the_link_finder_sees_links_and_images_and_skips_urls():
    text = "[a](docs/x.md#part) ![b](docs/y.png) [c](https://e.org) [d](#here)\n```\n[e](nope.md)\n```"
    assert relative_links(text) == ["docs/x.md", "docs/y.png"]


def test_anchors_follow_githubs_rule():
    assert anchors("# The llama.cpp drafter (a first call)\n## Kernels: BLAS against oneDNN") == {
        "the-llamacpp-drafter-a-first-call", "kernels-blas-against-onednn"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_anchor_names_a_heading(page):
    broken = []
    for target in _links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        if not anchor or not (path == "" or path.endswith(".md")):
            continue
        file = page if path == "" else page.parent / path
        if file.exists() and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to headings that do not exist: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    links = relative_links(page.read_text(encoding="utf-8"))
    missing = [t for t in links if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_the_readme_shows_a_screenshot_and_links_the_docs():
    links = relative_links((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any(t.startswith("docs/") and t.endswith(".png") for t in links)
    for page in ("cli", "drafters", "replay", "vllm", "gpu", "measuring", "hardening", "results"):
        assert f"docs/{page}.md" in links, f"the README does not link docs/{page}.md"
