"""Every relative link in README.md and docs/*.md leads somewhere: the file exists, and a
``#anchor`` names a heading of that file (as GitHub makes anchors from headings).

The docs moved out of one long README into a page per topic; a link that a move broke would
otherwise go unnoticed until a reader clicks it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); the text may run over lines, the target may not
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def links(text: str) -> list[str]:
    """The link targets of a Markdown page, outside code blocks and code spans."""
    text = FENCE.sub("", text)
    text = "\n".join(line for line in text.split("\n") if not line.startswith("    "))
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = anchor(heading)
        name, n = base, 1
        while name in found:  # a repeated heading gets -1, -2, ...
            name, n = f"{base}-{n}", n + 1
        found.add(name)
    return found


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading #{fragment} in {dest.name}")
    return bad


def test_the_check_reads_links_and_anchors() -> None:
    """Guards the check below against passing on a reading that finds no link."""
    text = "see [a](a.md#x-y) and ![pic\nof it](p.svg), not `[b](b.md)`\n\n```\n[c](c.md)\n```\n"
    assert links(text) == ["a.md#x-y", "p.svg"]
    assert anchor("Replay: `backstep show`, `backstep diff`") == "replay-backstep-show-backstep-diff"
    assert anchor("From inside a running script: `backstep.attach()` and `breakpoint()`") == \
        "from-inside-a-running-script-backstepattach-and-breakpoint"
    assert len(links((ROOT / "README.md").read_text())) > 10


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n[gone](b.md) [no heading](a.md#nope) [fine](#title) [ok](a.md)\n")
    assert broken(page) == ["b.md: no such file", "a.md#nope: no heading #nope in a.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    assert not broken(page)
