"""Suppression comments written carelessly: a malformed bracket suppresses nothing,
and every unknown, lowercase or empty code is reported (``suppress.problems``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _hostile import hostile_settings
from hypothesis import given
from hypothesis import strategies as st

from shapelint.check.run import builtin_rules
from shapelint.locate.suppress import (
    ALL,
    LineReader,
    codes_on_line,
    comments,
    line_problems,
    problems,
)

KNOWN = frozenset({r.code for r in builtin_rules()} | {r.name for r in builtin_rules()})


def test_a_bracket_without_its_end_suppresses_nothing_and_is_reported() -> None:
    """Issue 13: ``# shapelint: ignore[SL202`` suppressed every rule on the line."""
    line = "x = nn.Linear(1023, 64)  # shapelint: ignore[SL202"
    assert codes_on_line(line) == frozenset()
    (problem,) = line_problems(line, KNOWN)
    assert "no closing ']'" in problem


@pytest.mark.parametrize("code,expected", [
    ("SL999", "unknown rule 'SL999'"),
    ("sl101", "codes are upper case (SL101)"),
    ("misaligned-leading", "unknown rule 'misaligned-leading'"),
])
def test_unknown_and_lowercase_codes_are_reported(code: str, expected: str) -> None:
    """Issue 13: unknown or lowercase codes in ``ignore[...]`` were silently ignored."""
    line = f"x  # shapelint: ignore[SL101, {code}]"
    assert codes_on_line(line) == frozenset({"SL101", code})  # the known code still suppresses
    (problem,) = line_problems(line, KNOWN)
    assert expected in problem


def test_known_codes_and_names_are_no_problem() -> None:
    assert line_problems("x  # shapelint: ignore[SL101 misaligned-leading-dim,SL2]", KNOWN) == [
        "unknown rule 'SL2' in '# shapelint: ignore[...]' (it suppresses nothing)"]
    assert line_problems("x  # shapelint: ignore", KNOWN) == []
    assert line_problems("x  # shapelint: ignore[]", KNOWN) == [
        "'# shapelint: ignore[]' names no rule (it suppresses nothing)"]


def test_problems_name_file_and_line(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("a = 1\nb = 2  # shapelint: ignore[SL101\nc = 3  # shapelint: ignore[SL101]\n")
    (p,) = problems(str(src), KNOWN)
    assert (p.file, p.line) == (str(src), 2)
    assert str(p).startswith(f"{src}:2: malformed")


def test_reader_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "model.py"
    os.mkfifo(fifo)
    assert LineReader().line(str(fifo), 1) is None


CODE = st.one_of(st.sampled_from(sorted(KNOWN)), st.from_regex(r"[A-Za-z]{0,3}[0-9]{0,4}", fullmatch=True),
                 st.text(alphabet="SLsl0123456789-[], *", max_size=8))
COMMENT = st.builds(
    lambda head, codes, sep, close, tail: f"x = 1  {head}{'[' + sep.join(codes) + close if codes is not None else ''}{tail}",
    st.sampled_from(["# shapelint: ignore", "#shapelint:ignore", "# SHAPELINT: IGNORE", "# shapelint : ignore "]),
    st.one_of(st.none(), st.lists(CODE, max_size=3)),
    st.sampled_from([",", ", ", " "]),
    st.sampled_from(["]", ""]),
    st.sampled_from(["", "  # noqa: E501", " because", "]"]),
)


@hostile_settings(200)
@given(COMMENT)
def test_random_comments_suppress_only_what_they_name(line: str) -> None:
    """A comment suppresses every rule only when bare; otherwise only the codes it
    names between a '[' and its ']'; anything else it names is reported."""
    codes = codes_on_line(line)
    found = comments(line)
    assert found, line
    reported = line_problems(line, KNOWN)
    if codes is ALL:
        assert any(c.codes is None for c in found)
        return
    assert codes is not None
    for c in found:
        if c.malformed:
            assert any("no closing" in p for p in reported)
    for code in codes:
        assert code in KNOWN or any(f"'{code}'" in p for p in reported), (line, reported)
