"""The generated reference pages are up to date, and the documentation site's pages
and navigation agree."""

import re
from pathlib import Path

import yaml

from shapelint.app.docs import main, render, render_settings
from shapelint.pipeline.settings import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_rules_doc_is_current() -> None:
    assert (DOCS / "rules.md").read_text() == render(), "run: python -m shapelint.app.docs rules > docs/rules.md"


def test_settings_doc_is_current() -> None:
    assert (DOCS / "settings.md").read_text() == render_settings(), \
        "run: python -m shapelint.app.docs settings > docs/settings.md"


def test_settings_doc_names_every_setting() -> None:
    page = render_settings()
    for s in SETTINGS:
        assert f"| `{s.key}` |" in page
        if s.flag:
            assert f"`--{s.key}" in page


def test_docs_command(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["settings"]) == 0
    assert capsys.readouterr().out == render_settings()
    assert main([]) == 0
    assert capsys.readouterr().out == render()
    assert main(["nothing"]) == 2


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_in_the_nav() -> None:
    """A page left out of mkdocs.yml's nav is built but unreachable; a nav entry without
    its page fails the build."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.parent.name != "data"}  # data/: raw tables
    assert listed == pages


def test_changelog_page_is_the_changelog() -> None:
    """The site's changelog page includes CHANGELOG.md at the root, not a copy of it."""
    assert (DOCS / "changelog.md").read_text() == '--8<-- "CHANGELOG.md"\n'
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")


def test_readme_starts_with_the_set_up_commands() -> None:
    """The README stays short and opens with the two commands CI runs (.ci/run)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    assert blocks[:2] == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e . && "
        "shapelint examples/nanogpt.py",
        "pip install -e '.[dev]' && python -m pytest -q",
    ]


def test_the_source_paths_the_docs_name_exist() -> None:
    """Every ``shapelint/...`` file or folder a page, the README or CONTRIBUTING.md names
    exists (the package was reorganised once: a stale path is a wrong map)."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *DOCS.glob("*.md")]
    # a path in the repository (not the cache key's ~/.cache/shapelint/...)
    named = {m for page in pages for m in re.findall(r"(?<![/\w.-])shapelint/[\w/]+(?:\.py)?", page.read_text())}
    assert named, "no page names a source path"
    missing = sorted(p for p in named if not (ROOT / p).exists() and not (ROOT / p).with_suffix("").exists())
    assert missing == []
