"""One rank of tests/test_verify_parallel_findings.py, under torchrun on gloo: build the
*before* and *after* models of ``--verify --step`` for a linted result (its findings all
applied), wrap each as the worker does, and write what the wrapping made of them
(``fully_shard`` groups, each attention projection's weight, the DTensor collectives of
one training step) as JSON on rank 0.

    torchrun --standalone --nproc_per_node 2 tests/_parallel_after_probe.py RESULT.json OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def described(model: torch.nn.Module) -> dict[str, Any]:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    weights = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and name.rpartition(".")[2] in ("q_proj", "k_proj", "v_proj", "out_proj"):
            w = m.weight
            weights[name] = {"dtensor": isinstance(w, DTensor), "shape": list(w.shape),
                             "local": list(w.to_local().shape) if isinstance(w, DTensor) else list(w.shape),
                             "placements": [str(p) for p in w.placements] if isinstance(w, DTensor) else []}
    groups: dict[int, list[str]] = {}  # the modules of one fully_shard call share its state
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            groups.setdefault(id(m._get_fsdp_state()), []).append(name)
    heads = {name: m.num_heads for name, m in model.named_modules() if hasattr(m, "num_heads")}
    return {"fsdp_groups": sorted(groups.values()), "weights": weights, "heads": heads}


def collectives(r: Any, built: Any, wrap: Any) -> tuple[dict[str, int], torch.nn.Module]:
    """The DTensor collectives of one training step of ``built`` wrapped by ``wrap``
    (forward and backward, by op; tensor parallelism only), and the wrapped model."""
    from torch.distributed.tensor.debug import CommDebugMode

    from shapelint.measure.step_train import make_trainer

    t = make_trainer("probe", built, built.inputs, device="cpu", precision="fp32", training=True,
                     optimizer="none", compile=False, wrap=wrap)
    if r.parallel.layout.tp <= 1:  # FSDP2 issues c10d collectives, which DTensor's debug mode does not count
        t.step()
        return {}, t.built.model
    mode = CommDebugMode()
    with mode:
        t.step()
    counts = {str(op).rpartition(".")[2]: n for op, n in mode.get_comm_counts().items()}
    return counts, t.built.model


def main(result_json: str, out: str) -> None:
    from shapelint.measure import step_variants as sv
    from shapelint.measure.parallel_change import layout_change
    from shapelint.measure.parallel_wrap import layout_wrap
    from shapelint.pipeline.result import result_from_data

    dist.init_process_group("gloo")
    r = result_from_data(json.loads(Path(result_json).read_text()))
    assert r.parallel is not None
    applied, _ = sv.plan(r)
    findings = [f for f, _ in applied]
    comm_before, before = collectives(r, sv.build_original(r, "cpu"), layout_wrap(r.parallel, "cpu"))
    root = sv.scratch_root(Path(r.target))
    built = sv.build_copy(r, sv.write_copy(r, sv.merged_texts(r, findings), root), "cpu")
    comm_after, after = collectives(r, built, layout_wrap(r.parallel, "cpu", layout_change(findings)))
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps({"before": {**described(before), "collectives": comm_before},
                                         "after": {**described(after), "collectives": comm_after},
                                         "applied": [f.code for f in findings]}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
