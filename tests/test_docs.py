"""The documentation stays inside the repository: every relative link resolves, every page is reachable.

A clone carries no specification beside it, so a link that leaves the repository (or points at a
file that moved) is a broken promise to the reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(page: Path) -> list[str]:
    """Markdown link targets outside fenced code blocks."""
    return LINK.findall(FENCE.sub("", page.read_text()))


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    for target in links(page):
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        assert resolved.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in heading_anchors(resolved), f"{page.name}: no heading #{anchor} in {resolved.name}"


def test_every_doc_page_is_linked_from_the_readme() -> None:
    readme_targets = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    for page in (ROOT / "docs").glob("*.md"):
        assert page.resolve() in readme_targets, f"docs/{page.name} is not reachable from README.md"


def test_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](missing.md)\n```\n[in code](ignored.md)\n```\n")
    assert links(page) == ["page.md", "missing.md"]


def committed_files() -> list[Path]:
    """Every file of the repository (git's list when this is a checkout, else a walk without build folders)."""
    import subprocess

    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / name for name in listed.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "runs", "__pycache__", ".pytest_cache", ".hypothesis"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


# Spelled in pieces so that this file does not name them itself.
OUTSIDE_NAMES = ("SPEC" + ".md", "DESIGN" + ".md", "../" + "shared", "SPEC" + " §")


def test_no_committed_file_points_outside_the_repository() -> None:
    """The rules live in docs/dynamic-sampling.md; a clone has no specification or shared folder beside it."""
    offenders = []
    for path in committed_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary data
        offenders += [f"{path.relative_to(ROOT)}: {name}" for name in OUTSIDE_NAMES if name in text]
    assert not offenders, "references to files outside the repository:\n" + "\n".join(offenders)
