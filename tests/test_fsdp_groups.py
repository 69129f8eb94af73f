"""FSDP2 groups of one block each (SL603): the pricer re-plans the step's communication
with k blocks per fully_shard group and picks the smallest k within 1% of the best step
saving, no merged group larger than the root group."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from shapelint.check.run import builtin_rules
from shapelint.hardware import resolve
from shapelint.model.parallel import Layout, ParallelChange, ParallelPlan, ParamGroup, grouped_blocks
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target
from shapelint.price.communication import applied, blocks_per_group_options, communication
from shapelint.price.step import StepTime

MIB = 1 << 20
GPT2 = Path(__file__).parent / "corpus" / "gpt2" / "config.json"


def _plan(blocks: int = 12, block: int = 27 * MIB, root: int = 150 * MIB) -> ParallelPlan:
    groups = (ParamGroup("<root>", root, 4), *(ParamGroup(f"h.{i}", block, 12) for i in range(blocks)))
    return ParallelPlan(Layout(fsdp=8), groups=groups)


def test_options_stop_where_a_group_would_outgrow_the_root_group() -> None:
    assert blocks_per_group_options(_plan()) == [2, 3, 4]  # 5 x 27 MiB fits 150 but makes 3 groups, as 4 does
    assert blocks_per_group_options(_plan(root=1000 * MIB)) == [2, 3, 4, 6, 12]
    assert blocks_per_group_options(_plan(root=40 * MIB)) == []
    assert blocks_per_group_options(_plan(blocks=1)) == []


def test_grouped_blocks_merge_consecutive_blocks() -> None:
    merged = grouped_blocks(_plan(blocks=5).groups, 2)
    assert [(g.name, g.nbytes, g.tensors) for g in merged] == [
        ("<root>", 150 * MIB, 4), ("h.0..h.1", 54 * MIB, 24), ("h.2..h.3", 54 * MIB, 24), ("h.4", 27 * MIB, 12)]


#: 4 blocks a group: runs of 4 in forward order, the remainder last
GROUPS_OF_24 = [[f"h.{i}" for i in range(j, j + 4)] for j in range(0, 24, 4)]
GROUPS_OF_25 = [*GROUPS_OF_24, ["h.24"]]


@pytest.mark.parametrize(("blocks", "want"), [(24, GROUPS_OF_24), (25, GROUPS_OF_25)])
def test_the_pricer_and_the_measured_wrapper_group_the_same_blocks(blocks: int, want: list[list[str]],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One grouping (``model.parallel.fsdp_block_groups``): the step the pricer plans at 4
    blocks a group and the ``fully_shard`` calls ``--verify --step`` makes for it."""
    import torch
    import torch.distributed.device_mesh
    import torch.distributed.fsdp

    from shapelint.measure.parallel_wrap import layout_wrap

    plan = _plan(blocks=blocks)
    priced = applied(plan, [ParallelChange(fsdp_blocks_per_group=4)]).groups
    assert [g.name for g in priced] == ["<root>", *(f"{w[0]}..{w[-1]}" if len(w) > 1 else w[0] for w in want)]
    assert [g.nbytes for g in priced[1:]] == [len(w) * 27 * MIB for w in want]

    model = torch.nn.Module()
    model.h = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(blocks))
    names = {id(m): name for name, m in model.named_modules()}
    calls: list[list[str]] = []

    def fully_shard(modules: object, mesh: object) -> object:
        calls.append([names[id(m)] for m in (modules if isinstance(modules, list) else [modules])])
        return modules

    monkeypatch.setattr(torch.distributed.device_mesh, "init_device_mesh", lambda kind, shape: "mesh")
    monkeypatch.setattr(torch.distributed.fsdp, "fully_shard", fully_shard)
    layout_wrap(plan, "cpu", ParallelChange(fsdp_blocks_per_group=4))(model)
    assert calls == [*want, [""]]  # each group, then the root


def test_fewer_groups_cost_less_host_work_and_fewer_all_gathers() -> None:
    hw = resolve("h100")
    one = StepTime(ms=50.0, gpu_ms=30.0, host_ms=50.0, gemm_ms=20.0, kernels=500, mode="eager")
    before = communication(_plan(), one, hw)
    after = communication(applied(_plan(), [ParallelChange(fsdp_blocks_per_group=4)]), one, hw)
    gathers = {c.op: c.count for c in after.collectives}
    assert gathers == {"all_gather": 1 + 2 * 3, "reduce_scatter": 4}
    assert {c.op: c.count for c in before.collectives} == {"all_gather": 1 + 2 * 12, "reduce_scatter": 13}
    assert before.host_ms - after.host_ms == pytest.approx(9 * hw.collectives.host.fsdp_group * 1e-3, rel=1e-9)
    assert sum(c.nbytes for c in before.collectives) == sum(c.nbytes for c in after.collectives)  # same bytes


def test_gpt2_small_at_fsdp8_wraps_4_blocks_per_group() -> None:
    pytest.importorskip("transformers")
    rules = [r for r in builtin_rules() if r.code == "SL603"]
    r = lint_target(GPT2, Options(batch=1, seq=1024, fsdp=8), None, rules)
    (f,) = r.findings
    assert (f.suggestion.parameter, f.suggestion.from_, f.suggestion.to) == ("blocks per fully_shard group", 1, 4)
    assert f.parallel == ParallelChange(fsdp_blocks_per_group=4) and f.gemms == () and f.module == "transformer.h"
    assert f.location is not None and f.location.key is None  # the training script's fully_shard calls
    model = r.step_model
    saved = {k: model.before.ms - model.after([replace(f, parallel=ParallelChange(fsdp_blocks_per_group=k))]).ms
             for k in (2, 3, 4)}
    assert f.step_ms_saved == pytest.approx(saved[4], rel=1e-9)
    assert saved[3] < 0.99 * saved[4] and saved[2] < saved[3]  # 4 is the smallest within 1% of the best
    assert r.step_time_after.ms == pytest.approx(model.before.ms - saved[4], rel=1e-9)
    assert [g.name for g in r.parallel.groups][:2] == ["<root>", "transformer.h.0"]
    assert r.parallel.groups[1].nbytes == 7087872 * 4  # one block's fp32 parameters: 27 MiB


def test_no_fsdp_no_finding() -> None:
    pytest.importorskip("transformers")
    rules = [r for r in builtin_rules() if r.code == "SL603"]
    assert lint_target(GPT2, Options(batch=1, seq=1024, dp=8), None, rules).findings == []
