"""The generated reference pages are up to date."""

from pathlib import Path

from shapelint.docs import main, render, render_settings
from shapelint.settings import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_rules_doc_is_current() -> None:
    assert (DOCS / "rules.md").read_text() == render(), "run: python -m shapelint.docs rules > docs/rules.md"


def test_settings_doc_is_current() -> None:
    assert (DOCS / "settings.md").read_text() == render_settings(), \
        "run: python -m shapelint.docs settings > docs/settings.md"


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
