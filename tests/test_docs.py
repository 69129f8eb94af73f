"""docs/rules.md is generated from the rule modules and must be up to date."""

from pathlib import Path

from shapelint.docs import render

ROOT = Path(__file__).resolve().parent.parent


def test_rules_doc_is_current() -> None:
    assert (ROOT / "docs" / "rules.md").read_text() == render(), "run: python -m shapelint.docs > docs/rules.md"
