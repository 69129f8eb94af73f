"""``--verify --step`` under a parallel layout, inside each ``torchrun`` worker: the
process group, and the model wrapped as the layout runs it.

- ``--dp N``: ``DistributedDataParallel`` with its defaults (25 MiB buckets);
- ``--fsdp N``: FSDP2 ``fully_shard`` on every block the lint grouped (each stack of
  repeated layers: an encoder's and a decoder's), then on the root, with the
  ``MixedPrecisionPolicy`` of ``--fsdp-param-dtype`` / ``--fsdp-reduce-dtype`` (none by
  default: fp32 collectives), the layout the step model prices;
- ``--tp N``: ``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel``
  on the lint's column- and row-parallel linear layers (DTensor's default plan: one
  backward all-reduce per column-parallel layer, where Megatron's count the estimate
  prices has two per block; ``docs/multi-gpu.md``). Only ``nn.Linear`` layers take
  these styles; a layer of another kind stays whole. A column-parallel layer with no
  row-parallel sibling (the LM head) gathers its output back
  (``output_layouts=Replicate()``), so that the model's own loss reads them whole.

The *after* step of a finding that changes the layout (``ParallelChange``,
:mod:`shapelint.measure.parallel_change`) runs it changed: SL603's ``k`` consecutive
blocks to one ``fully_shard`` group (a list of modules), SL602's attention projections
sharded beside the lint's layers (colwise q/k/v, rowwise output), the attention's input
replicated once as Megatron does (one backward all-reduce, not one per q/k/v: the count
the estimate prices for the change).

One engine at a time: a layout of two (``--fsdp 4 --tp 2``) is refused.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from shapelint.capture.replay.layers import stacks
from shapelint.errors import ShapelintError
from shapelint.model.dtypes import TORCH_DTYPE_NAMES
from shapelint.model.parallel import ParallelChange, ParallelPlan, fsdp_block_groups

Wrap = Callable[[torch.nn.Module], torch.nn.Module]


def init_process_group(want: str = "cuda") -> str:
    """Join torchrun's process group: NCCL on this rank's GPU where ``want`` is "cuda"
    and one is there, gloo on the CPU otherwise; this rank's device."""
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if want == "cuda" and torch.cuda.is_available():
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, as on the measured machines
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
        dist.init_process_group("nccl", device_id=torch.device(device))
    else:
        device = "cpu"
        dist.init_process_group("gloo")
    return device


@contextmanager
def process_group(want: str = "cuda") -> Iterator[str]:
    """A torchrun worker's body inside the process group (:func:`init_process_group`):
    its device; at the end every rank waits for the others, then the group is left
    (also where the body fails)."""
    import torch.distributed as dist

    device = init_process_group(want)
    try:
        yield device
        dist.barrier()
    finally:
        dist.destroy_process_group()


def rank_zero_writes(out: str, doc: Callable[[], Any]) -> None:
    """On rank 0, ``doc()`` written as JSON to ``out`` (what ``shapelint.measure.torchrun.
    ranks_json`` reads back); the other ranks build nothing."""
    import torch.distributed as dist

    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(doc()))


def rank_zero_log(prefix: str) -> Callable[[str], None]:
    """A worker's progress lines: on stderr from rank 0, each after ``prefix``; nothing
    from the other ranks."""
    import torch.distributed as dist

    if dist.get_rank() != 0:
        return lambda _msg: None
    return lambda msg: print(f"{prefix}: {msg}", file=sys.stderr, flush=True)


def layout_wrap(plan: ParallelPlan, device: str, change: ParallelChange | None = None) -> Wrap:
    """What wraps a variant's model (see the module docstring): the layout as the lint
    planned it, with ``change`` (the after-step's findings) made."""
    lay = plan.layout
    engines = [n for n in (lay.dp, lay.fsdp, lay.tp) if n > 1]
    if len(engines) > 1:
        raise ShapelintError(f"--verify --step measures one parallel engine at a time, not {lay.describe()}")
    kind = torch.device(device).type
    if lay.dp > 1:
        return lambda model: ddp(model, device)
    if lay.fsdp > 1:
        k = change.fsdp_blocks_per_group if change is not None else 1
        names = [g.name for g in plan.groups[1:]]
        policy = (lay.fsdp_param_dtype, lay.fsdp_reduce_dtype)
        return lambda model: fsdp(model, kind, lay.fsdp, names, k, policy)
    styles = {**dict(plan.tp_styles), **dict(change.tp_styles if change is not None else ())}
    must = dict(change.tp_styles) if change is not None else {}
    return lambda model: tensor_parallel(model, kind, lay.tp, styles, must)


def ddp(model: torch.nn.Module, device: str) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ids = [torch.device(device).index] if torch.device(device).type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def fsdp(model: torch.nn.Module, kind: str, n: int, names: list[str], per_group: int = 1,
         policy: tuple[str, str] = ("fp32", "fp32")) -> torch.nn.Module:
    """``fully_shard`` on every ``per_group`` consecutive blocks (one module, or a list of
    them: one group), then on the root, with a ``MixedPrecisionPolicy`` of ``policy``
    (the parameters' dtype, the gradients' reduce dtype) where it is not fp32's. The blocks are the plan's groups, the ones the
    estimate priced (every stack's: an encoder's and a decoder's), grouped as the pricer
    merges them (:func:`shapelint.model.parallel.fsdp_block_groups`); a plan without them
    (or naming a module this model lacks) takes the longest stack."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(kind, (n,))
    extra: dict[str, Any] = {}
    if policy != ("fp32", "fp32"):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        param, reduce = (getattr(torch, TORCH_DTYPE_NAMES[d]) for d in policy)
        extra["mp_policy"] = MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce)
    for part in fsdp_block_groups(_blocks(model, names), per_group):
        fully_shard(part[0] if len(part) == 1 else list(part), mesh=mesh, **extra)
    fully_shard(model, mesh=mesh, **extra)
    return model


def _blocks(model: torch.nn.Module, names: list[str]) -> list[torch.nn.Module]:
    modules = dict(model.named_modules())
    if names and all(name in modules for name in names):
        return [modules[name] for name in names]
    found = stacks(model)
    return [block for _, block in (max(found, key=lambda s: len(s[1]))[1] if found else [])]


def tensor_parallel(model: torch.nn.Module, kind: str, n: int, styles: dict[str, str],
                     must: dict[str, str] | None = None) -> torch.nn.Module:
    """DTensor styles on ``styles``' linear layers. The layers of ``must`` (a finding's
    change: an attention sharded) must be ``nn.Linear`` (else the variant fails rather
    than measure it whole), and the module holding their column layers takes its input
    replicated once (:mod:`shapelint.measure.replicate_input`)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh(kind, (n,))
    linears = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    missing = [name for name in must or {} if name not in linears]
    if missing:
        raise ShapelintError(f"--verify --step --tp: {missing[0]} is not an nn.Linear layer, which DTensor's styles "
                             "take: the change's attention cannot be sharded for the measurement")
    plan = _dtensor_plan({name: style for name, style in styles.items() if name in linears})
    if not plan:
        raise ShapelintError("--verify --step --tp: no nn.Linear layer to shard (DTensor's styles take nn.Linear only)")
    if must:
        from shapelint.measure.replicate_input import ReplicateInput

        for attention in {name.rpartition(".")[0] for name, style in must.items() if style == "column"}:
            plan[attention] = ReplicateInput()
    parallelize_module(model, mesh, plan)
    return model


def _dtensor_plan(styles: dict[str, str]) -> dict[str, Any]:
    """``ColwiseParallel`` / ``RowwiseParallel`` per layer; a column layer without a row
    sibling (the LM head) gathers its output."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    rows = {name.rpartition(".")[0] for name, style in styles.items() if style == "row"}
    plan: dict[str, Any] = {}
    for name, style in styles.items():
        if style == "row":
            plan[name] = RowwiseParallel()
        elif name.rpartition(".")[0] in rows:
            plan[name] = ColwiseParallel()
        else:
            plan[name] = ColwiseParallel(output_layouts=Replicate())
    return plan


__all__ = ["Wrap", "ddp", "fsdp", "init_process_group", "layout_wrap", "rank_zero_log", "tensor_parallel"]
