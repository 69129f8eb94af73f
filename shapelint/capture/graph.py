"""The joint forward + backward graph as a torch.fx GraphModule (``--dump-graph``).

``make_fx`` traces one training step (forward, then ``torch.autograd.grad`` of the
outputs with respect to parameters and inputs) with parameters passed in as graph
inputs, on fake tensors. The GEMM nodes of that graph go through the same shape
extraction as the eager capture, so the two can be checked against each other.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from shapelint.capture.run import output_tensors, split_inputs
from shapelint.capture.sdpa import fused_attention
from shapelint.physics.gemm_shapes import GEMM_OPS, GemmShape, extract


def joint_graph(model: torch.nn.Module, inputs: Any, training: bool = True) -> torch.fx.GraphModule:
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())

    def step(flat_params: list[torch.Tensor], flat_inputs: Any) -> Any:
        state = {**buffers, **params, **dict(zip(names, flat_params))}
        args, kwargs = split_inputs(flat_inputs)
        with fused_attention():
            out = torch.func.functional_call(model, state, args, kwargs)
        outs = [t for t in output_tensors(out) if t.requires_grad and t.is_floating_point()]
        if not training or not outs:
            return outs
        wrt = list(flat_params) + [t for t in output_tensors(flat_inputs) if t.requires_grad]
        grads = torch.autograd.grad(outs, wrt, [torch.ones_like(t) for t in outs], allow_unused=True)
        return outs, [g for g in grads if g is not None]

    model.train(training)
    trainable = [params[n] for n in names]
    # the inputs are already fake tensors of the active FakeTensorMode: trace them as they are
    return make_fx(step, tracing_mode="real", _allow_non_fake_inputs=True)(trainable, inputs)


def graph_gemms(gm: torch.fx.GraphModule) -> list[GemmShape]:
    """The GEMMs of every matmul-class node, in graph order."""
    def val(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return a.meta.get("val")
        if isinstance(a, (list, tuple)):
            return type(a)(val(x) for x in a)
        return a

    shapes: list[GemmShape] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = node.target.overloadpacket.__name__
        if name in GEMM_OPS:
            shapes += extract(name, val(node.args), {k: val(v) for k, v in node.kwargs.items()}, node.meta["val"])
    return shapes


def dump_graph(model: torch.nn.Module, inputs: Any, path: str, training: bool = True) -> torch.fx.GraphModule:
    gm = joint_graph(model, inputs, training)
    with open(path, "w") as f:
        f.write(gm.print_readable(print_output=False))
    return gm
