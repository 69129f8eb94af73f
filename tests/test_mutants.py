"""Issue 25: lines whose hand-made mutation the suite used to survive. Each test names
the branch it pins and fails when that branch is removed or inverted."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn as nn
from shapelint.rules import sl101_misaligned_leading_dim as sl101

from shapelint.check.rule_api import RuleContext
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
