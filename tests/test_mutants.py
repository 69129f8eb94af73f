"""Issue 25: lines whose hand-made mutation the suite used to survive. Each test names
the branch it pins and fails when that branch is removed or inverted: alignment, the
pricer's two-findings and two-rules cases, the step-share gate, and the fix writer's
several edits of one file, overlapping edits and two fixes of one token."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from shapelint.rules import sl101_misaligned_leading_dim as sl101

from shapelint.check.rule_api import RuleContext
from shapelint.fix import plan as fix_plan
from shapelint.fix.edits import Edit, apply_text, conflicts
from shapelint.fix.files import Doc
from shapelint.fix.plan import CONFLICT, Planned
from shapelint.fix.run import edited_texts
from shapelint.hardware import resolve
from shapelint.model.records import Finding, Operand, Suggestion
from shapelint.physics.alignment import gemm_alignment, is_aligned, misaligned_leading_dims, operand_alignment
from shapelint.pipeline.run import trace
from shapelint.price import Policy, StepModel, best_after, deduplicated, price
from shapelint.price.step import Step

H100 = resolve("h100")


# -- alignment: pointer offset, batch stride, single-row operands ---------------------


def test_a_misaligned_pointer_offset_breaks_an_aligned_leading_dimension() -> None:
    aligned = Operand(rows=4096, cols=4096, ld=4096)
    assert operand_alignment(aligned, 2, 16) == 16
    assert operand_alignment(replace(aligned, offset=1), 2, 16) == 2  # one bf16 element: 2 bytes
    assert operand_alignment(replace(aligned, offset=4), 2, 16) == 8
    assert operand_alignment(replace(aligned, offset=8), 2, 16) == 16


def test_a_misaligned_batch_stride_breaks_an_aligned_leading_dimension() -> None:
    aligned = Operand(rows=64, cols=128, ld=128, batch_stride=64 * 128)
    assert operand_alignment(aligned, 2, 16) == 16
    assert operand_alignment(replace(aligned, batch_stride=64 * 128 + 2), 2, 16) == 4
    assert operand_alignment(replace(aligned, batch_stride=0), 2, 16) == 16  # not batched: no stride to check


def test_a_single_row_has_no_leading_dimension_to_misalign() -> None:
    one_row = Operand(rows=1, cols=1023, ld=1023)
    assert one_row.single_line and operand_alignment(one_row, 2, 16) == 16
    one_column = Operand(rows=1023, cols=1, ld=1023, transposed=True)
    assert one_column.single_line and operand_alignment(one_column, 2, 16) == 16
    two_rows = Operand(rows=2, cols=1023, ld=1023)
    assert not two_rows.single_line and operand_alignment(two_rows, 2, 16) == 2
    assert operand_alignment(replace(two_rows, in_memory=False), 2, 16) == 16  # on chip: never loaded


def test_gemm_alignment_takes_the_worst_operand() -> None:
    cap, _ = trace(lambda: (nn.Linear(1024, 1024, bias=False), torch.randn(4096, 1024)), training=False)
    (g,) = cap.gemms
    assert is_aligned(g, H100) and gemm_alignment(g, H100) == 16 and misaligned_leading_dims(g, H100) == set()
    for field in ("a", "b", "out"):
        shifted = replace(g, **{field: replace(getattr(g, field), offset=3)})
        assert gemm_alignment(shifted, H100) == 2 and not is_aligned(shifted, H100), field
    odd = replace(g, a=replace(g.a, ld=1023))
    assert misaligned_leading_dims(odd, H100) == {1023}
    assert misaligned_leading_dims(replace(odd, a=replace(odd.a, rows=1)), H100) == set()


# -- the pricer: two findings on one GEMM, two rules on one change, the step share ------


def _finding(code: str, gemms: tuple[int, ...], est_ms: float, after: float, **kw: object) -> Finding:
    return Finding(code=code, name="x", severity="warning", module="m", message="", gemms=gemms, est_ms=est_ms,
                   est_ms_after=after * len(gemms), gemm_ms_after=(after,) * len(gemms),
                   suggestion=Suggestion("out_features", 1023, 1024), modules=("m",), **kw)  # type: ignore[arg-type]


def test_a_gemm_two_findings_cover_keeps_the_best_time() -> None:
    slow, fast = _finding("SL101", (0, 1), 4.0, 2.0), _finding("SL202", (1, 2), 4.0, 1.0)
    for order in ([slow, fast], [fast, slow]):
        assert best_after(order) == {0: 2.0, 1: 1.0, 2: 1.0}
    assert best_after([slow, replace(fast, suppressed=True)]) == {0: 2.0, 1: 2.0}


def test_two_rules_proposing_one_change_keep_the_larger_saving() -> None:
    small, large = _finding("SL101", (0,), 4.0, 3.0), _finding("SL202", (0,), 4.0, 1.0)
    for order in ([small, large], [large, small]):
        assert deduplicated(order) == [large]
    elsewhere = replace(small, modules=("other",))
    assert deduplicated([small, large, elsewhere]) == [large, elsewhere]


def test_the_step_share_gate_measures_the_whole_step() -> None:
    """On the step path a finding must save ``min_step_share`` of the step's GPU time,
    not of its GEMM time: a threshold between the two shares drops it."""
    cap, _ = trace(lambda: (nn.Sequential(nn.Linear(1023, 1024), nn.GELU(), nn.Linear(1024, 1024)),
                            torch.randn(8192, 1023)))
    model = StepModel(Step(cap.gemms, cap.ops, cap.params, True), H100)
    proposals = list(sl101.check(cap.gemms, H100, RuleContext(tokens=8192)))
    (kept,) = price(proposals, cap.gemms, H100, Policy(min_step_share=0.0), on=model)
    saved = model.before.gpu_ms - model.after([kept]).gpu_ms
    gemm_ms = model.before.gemm_ms
    step_share, gemm_share = saved / model.before.ms, saved / gemm_ms
    assert 0 < step_share < gemm_share
    between = (step_share + gemm_share) / 2
    assert price(proposals, cap.gemms, H100, Policy(min_step_share=between), on=model) == []
    assert price(proposals, cap.gemms, H100, Policy(min_step_share=step_share * 0.99), on=model) == [kept]
    # without a step model the share is of the GEMM time: the same threshold keeps it
    assert [f.code for f in price(proposals, cap.gemms, H100, Policy(min_step_share=between))] == ["SL101"]


# -- the fix writer: several edits of one file, overlapping edits, one token twice ----------


def _doc(tmp_path: Path, text: str, name: str = "model.py") -> Doc:
    path = tmp_path / name
    path.write_text(text)
    return Doc(path, text.encode(), text, "utf-8")


def _edit(doc: Doc, start: int, end: int, new: str) -> Edit:
    return Edit(doc.path, start, end, new, doc)


def _planned(*edits: Edit, reason: str = "") -> Planned:
    return Planned(_finding("SL101", (0,), 2.0, 1.0), "model.py", tuple(edits), reason)


def _plan(monkeypatch: pytest.MonkeyPatch, proposed: list[Planned]) -> list[Planned]:
    """``fix.plan.plan`` over findings whose own plans are ``proposed``, in that order."""
    by_finding = {id(p.finding): p for p in proposed}
    monkeypatch.setattr(fix_plan, "plan_one", lambda r, f, unsafe, files: by_finding[id(f)])
    result = SimpleNamespace(target="model.py", config_file=None, findings=[p.finding for p in proposed])
    return fix_plan.plan([result], unsafe=False)  # type: ignore[list-item]


def test_the_edits_of_one_file_apply_from_the_last_to_the_first(tmp_path: Path) -> None:
    """Each edit is an offset into the text as read: applied first to last, an edit that
    lengthens its token (99 → 100) would move every later one."""
    text = "a = 99\nb = 99\nc = 99\n"
    spans = [(4, 6), (11, 13), (18, 20)]
    for order in (spans, spans[::-1], [spans[1], spans[0], spans[2]]):
        assert apply_text(text, {span: "100" for span in order}) == "a = 100\nb = 100\nc = 100\n"
    assert apply_text(text, {(4, 6): "7", (18, 20): "1000"}) == "a = 7\nb = 99\nc = 1000\n"
    doc = _doc(tmp_path, text)
    planned = [_planned(_edit(doc, 18, 20, "100"), _edit(doc, 4, 6, "100")), _planned(_edit(doc, 11, 13, "100"))]
    assert edited_texts(planned) == {doc.path: (text, "a = 100\nb = 100\nc = 100\n")}


def test_an_edit_that_overlaps_another_fixs_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc, other = _doc(tmp_path, "x = 1023 + 1023\n"), _doc(tmp_path, "x = 1023 + 1023\n", "other.py")
    taken: dict[tuple[Path, int, int], str] = {(doc.path, 4, 8): "1024"}
    assert conflicts([_edit(doc, 5, 9, "1024")], taken) and conflicts([_edit(doc, 2, 5, "1024")], taken)
    assert conflicts([_edit(doc, 0, 20, "y")], taken) and conflicts([_edit(doc, 5, 6, "1")], taken)
    assert not conflicts([_edit(doc, 8, 9, " ")], taken) and not conflicts([_edit(doc, 0, 4, "y = ")], taken)
    assert not conflicts([_edit(other, 5, 9, "1024")], taken)  # another file's offsets
    first, overlapping, apart = (_planned(_edit(doc, 4, 8, "1024")), _planned(_edit(doc, 6, 10, "9999")),
                                 _planned(_edit(doc, 11, 15, "1024")))
    planned = _plan(monkeypatch, [first, overlapping, apart])
    assert [p.reason for p in planned] == ["", CONFLICT, ""]
    assert edited_texts(planned) == {doc.path: (doc.text, "x = 1024 + 1024\n")}


def test_two_fixes_of_one_token_agree_or_the_later_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two findings of one value (two rules, or a layer and its companion) edit the same
    token: to the same text it is one edit; to another text, the later fix is dropped
    with the reason, never written over the first."""
    doc = _doc(tmp_path, "n = 50257\n")
    same = _plan(monkeypatch, [_planned(_edit(doc, 4, 9, "50304")), _planned(_edit(doc, 4, 9, "50304"))])
    assert [p.fixable for p in same] == [True, True]
    assert edited_texts(same) == {doc.path: (doc.text, "n = 50304\n")}
    other = _plan(monkeypatch, [_planned(_edit(doc, 4, 9, "50304")), _planned(_edit(doc, 4, 9, "50264"))])
    assert [(p.fixable, p.reason) for p in other] == [(True, ""), (False, CONFLICT)]
    assert edited_texts(other) == {doc.path: (doc.text, "n = 50304\n")}
    # a fix that is not applied (unsafe without --unsafe-fixes) takes no token from a later one
    unsafe = _plan(monkeypatch, [_planned(_edit(doc, 4, 9, "50000"), reason="unsafe fix"),
                                 _planned(_edit(doc, 4, 9, "50304"))])
    assert [p.fixable for p in unsafe] == [False, True]
    assert edited_texts(unsafe) == {doc.path: (doc.text, "n = 50304\n")}
