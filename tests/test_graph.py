"""The FX joint graph (--dump-graph) and the eager capture agree GEMM for GEMM."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from shapelint.app.cli import main
from shapelint.capture.graph import graph_gemms, joint_graph
from shapelint.capture.precision import to_precision
from shapelint.capture.run import capture
from shapelint.load.run import load

#: whole models, subprocesses or dynamo: the full suite's tier (pytest -m 'not slow' skips them)
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _agree(target: Path, **kw: int) -> tuple[int, int]:
    loaded = load(target, **kw)
    with loaded.fake_mode:
        inputs = to_precision(loaded.model, loaded.inputs, "bf16")
        cap = capture(loaded.model, inputs, precision="bf16")
        gm = joint_graph(loaded.model, inputs)
    eager = Counter((g.op.split(".")[0], g.m, g.n, g.k, g.batch) for g in cap.gemms)
    graph = Counter((s.op, s.m, s.n, s.k, s.batch) for s in graph_gemms(gm))
    assert eager == graph
    mm_nodes = [n for n in gm.graph.nodes if n.op == "call_function" and "mm" in str(n.target)]
    return sum(eager.values()), len(mm_nodes)


def test_mlp_graph_matches_records() -> None:
    count, nodes = _agree(EXAMPLES / "mlp.py", batch=64)
    assert count == nodes == 3 * 4 - 1


def test_nanogpt_graph_matches_records() -> None:
    count, _ = _agree(EXAMPLES / "nanogpt.py", batch=2, seq=64)
    # 12 blocks x (4 linear x 3 + 7 attention GEMMs) + LM head (3)
    assert count == 12 * (4 * 3 + 7) + 3


def test_convnet_graph_matches_records() -> None:
    _agree(EXAMPLES / "convnet.py", batch=2)


def test_dump_graph_writes_graph_module_code(tmp_path: Path, capsys) -> None:
    out = tmp_path / "graph.py"
    main([str(EXAMPLES / "mlp.py"), "--batch", "32", "--dump-graph", str(out), "--format", "json"])
    code = out.read_text()
    assert "class " in code and "def forward" in code
    assert code.count("torch.ops.aten.addmm.default") == 4
    assert code.count("torch.ops.aten.mm.default") == 7


def test_graph_of_a_module_with_requires_grad_input() -> None:
    model = nn.Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    gm = joint_graph(model, x)
    assert len(graph_gemms(gm)) == 3
