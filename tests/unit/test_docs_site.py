"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`: a dead link, a missing anchor
or a page left out of the navigation fails it; and README.md stays short, its links landing on pages that
exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        # Material prints a banner about its successor: not a finding of the build
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_site_builds_strict(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "reference/flags/index.html", "map/index.html", "backends/cpu/index.html"):
        assert (tmp_path / "site" / page).exists(), page


def test_a_dead_link_fails_the_build(tmp_path):
    """The check above is worth something: the same site with a link to a page that does not exist and one to
    an anchor that does not exist fails, each named in a warning (a strict build reports every warning before
    it aborts: one build checks both)."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "index.md").open("a", encoding="utf-8") as f:
        f.write("\n[gone](no-such-page.md)\n\n[gone](security.md#no-such-section)\n")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0, "the dead links did not fail the build"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    for dead in ("no-such-page.md", "#no-such-section"):  # each a warning, which fails a strict build
        assert any(dead in line for line in warnings), done.stderr[-2000:]


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md is {len(lines)} lines: move the detail to docs/"


def test_the_readmes_relative_links_land_on_files_and_headings_that_exist():
    """GitHub shows README.md's links into docs/ as they are; mkdocs does not build the README, so its links
    are checked here: the file exists, and an anchor is one of that page's headings."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert any(link.startswith("docs/") for link in relative)
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"README.md links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README.md links to {link}: {path} has no heading {anchor!r}"


def test_every_backend_readme_points_to_its_page():
    """The backends' READMEs moved to docs/backends/: each folder keeps a README that names its page, and
    every in-tree backend has one."""
    for folder in sorted((ROOT / "src" / "tgi" / "backends").iterdir()):
        readme = folder / "README.md"
        if not readme.exists():
            continue
        page = f"docs/backends/{folder.name}.md"
        assert page in readme.read_text(encoding="utf-8") and (ROOT / page).exists(), folder.name
        assert len(readme.read_text(encoding="utf-8").splitlines()) < 10, (
            f"{readme} says twice what {page} says"
        )
