"""The compile probe (shapelint.load.compile_probe): the graphs torch.compile calls in a training
step and the ops it runs eagerly between them, counted by running dynamo on real CPU models;
their extrapolation to a config's depth, and what the step model charges for them."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from shapelint import hardware
from shapelint.load.compile_probe import (
    GRAPH_RANGE,
    _Counts,
    _cut_depth,
    _is_view,
    _summed,
    at_depth,
    count_step,
    eager_ops,
    layer_stacks,
    probe_hf,
)
from shapelint.load.run import load
from shapelint.model.records import GraphBreaks
from shapelint.price.step import Step, between_graphs, step_time

#: whole models, subprocesses or dynamo: the full suite's tier (pytest -m 'not slow' skips them)
pytestmark = pytest.mark.slow

H100 = hardware.resolve("h100")


def _constant(linear: nn.Linear) -> nn.Linear:
    """Weights 1/8, no bias: an input of ones gives ones, so every branch below goes one known way."""
    with torch.no_grad():
        linear.weight.fill_(0.125)
        linear.bias.zero_()
    return linear


class Plain(nn.Module):
    """Two constant Linear layers; the modules below differ only in their forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = _constant(nn.Linear(8, 8)), _constant(nn.Linear(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class Branchy(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.sum() > 0:  # a Python branch on a value: dynamo cannot trace through it
            h = h * 2
        return self.b(h)


class TwoReads(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        top = h.abs().max().item()
        low = h.min().item()
        return self.b(h * (top - low + 1))


def _counts(model: nn.Module, dtype: torch.dtype = torch.float32) -> tuple[tuple[int, int, int], tuple[str, ...]]:
    counts, reasons = count_step(model.to(dtype), {"x": torch.ones(4, 8, dtype=dtype)})
    return (counts.forward, counts.backward, counts.eager), reasons


# Outside every graph, the step of a module returning a tensor runs (views and allocations
# apart) one op: the gradient of ones its output is given, as capture differentiates a model
# without a loss (`ones_like`: its `fill_`), in fp32 and bf16 alike.
PLAIN_EAGER = {torch.float32: 1, torch.bfloat16: 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_module_without_a_break_is_one_forward_and_one_backward_graph(dtype: torch.dtype) -> None:
    assert _counts(Plain(), dtype) == ((1, 1, PLAIN_EAGER[dtype]), ())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_data_dependent_branch_splits_the_step_in_two_graphs_each_way(dtype: torch.dtype) -> None:
    # forward: graph 1 is `a(x)`, `sum`, `> 0`; the branch is taken eagerly (`bool()` reads the
    # value: `is_nonzero` -> `item` -> `_local_scalar_dense`, one eager op more than Plain);
    # graph 2, dynamo's resume function, is `h * 2` and `b(h)`. Both forward graphs' outputs
    # carry a gradient, so each has its backward graph.
    counts, reasons = _counts(Branchy(), dtype)
    assert counts == (2, 2, PLAIN_EAGER[dtype] + 1)
    assert reasons == ("Data-dependent branching",)


def test_a_graph_whose_outputs_get_no_gradient_has_no_backward_graph() -> None:
    # two `.item()` reads: graph 1 `a(x)`, `abs`, `max`; graph 2 `min` alone; graph 3 the rest.
    # Graph 2's one output is read by `.item()`, so autograd never calls its backward: 3
    # forward graphs, 2 backward. Eager: Plain's 1, the two reads (`_local_scalar_dense`) and,
    # in graph 1's backward wrapper, a zero gradient for `max` (`zeros`: its `zero_`).
    counts, reasons = _counts(TwoReads())
    assert counts == (3, 2, 1 + 2 + 1)
    assert reasons == ("Unsupported Tensor.item() call with capture_scalar_outputs=False",)


class Stack(nn.Module):
    """``layers`` blocks of a Linear and a branch on its value: two graphs each."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(_constant(nn.Linear(8, 8)) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fc in self.fcs:
            x = self._block(fc, x)
        return x

    @staticmethod
    def _block(fc: nn.Module, x: torch.Tensor) -> torch.Tensor:
        h = fc(x)
        if h.sum() > 0:
            h = h * 2
        return h


def test_probe_hf_extrapolates_the_one_and_two_layer_counts_to_the_config_depth() -> None:
    from transformers import PretrainedConfig

    def build(config: Any) -> tuple[nn.Module, dict[str, Any]]:
        return Stack(config.num_hidden_layers), {"x": torch.ones(2, 8, dtype=torch.bfloat16)}

    # bf16 (probe_hf casts the model): 1 layer 2 + 2 graphs and 1 + 1 eager ops, 2 layers 4 + 4
    # and 3; each layer after the first adds 2 + 2 graphs and one read of the branch's value
    # (a forward op: the backward's one op, the seed, stays one)
    probed = probe_hf(PretrainedConfig.from_dict({"num_hidden_layers": 12}), build)
    assert probed == GraphBreaks(2 + 2 * 11, 2 + 2 * 11, 2 + 11, ("Data-dependent branching",), 1)
    # ... which is what the 12-layer stack itself counts
    counts, _ = count_step(Stack(12).to(torch.bfloat16), {"x": torch.ones(2, 8, dtype=torch.bfloat16)})
    assert (counts.forward, counts.backward, counts.eager, counts.eager_backward) == (24, 24, 13, 1)


def _tuple(c: _Counts) -> tuple[int, int, int, int]:
    return c.forward, c.backward, c.eager, c.eager_backward


def test_at_depth_adds_what_the_second_layer_added_once_per_further_layer() -> None:
    one, two = _Counts(3, 2, 10, 4), _Counts(5, 3, 14, 5)
    assert _tuple(at_depth(one, two, 12)) == (3 + 2 * 11, 2 + 1 * 11, 10 + 4 * 11, 4 + 11) == (25, 13, 54, 15)
    assert _tuple(at_depth(one, two, 2)) == (5, 3, 14, 5)
    assert _tuple(at_depth(one, two, 1)) == (3, 2, 10, 4)
    assert _tuple(at_depth(one, one, 40)) == (3, 2, 10, 4)  # nothing per layer: the same at any depth
    # a second layer with fewer eager ops than the first extrapolates down, never below zero
    assert _tuple(at_depth(_Counts(1, 1, 10), _Counts(1, 1, 6), 12)) == (1, 1, 0, 0)


def test_stacks_of_different_depths_grow_one_at_a_time() -> None:
    # an encoder of 12 layers and a decoder of 2 (distil-whisper-like): the base at 1 + 1
    # layers, plus what each stack's second layer adds, times its further layers
    base = _Counts(4, 3, 10, 2)
    encoder_two, decoder_two = _Counts(6, 5, 12, 2), _Counts(7, 5, 13, 3)
    total = _summed(base, [(encoder_two, 12), (decoder_two, 2)])
    assert _tuple(total) == (4 + 2 * 11 + 3, 3 + 2 * 11 + 2, 10 + 2 * 11 + 3, 2 + 0 + 1) == (29, 27, 35, 3)


class EncoderDecoder(nn.Module):
    """Two stacks of branching blocks (Stack's), of the config's two depths."""

    def __init__(self, encoder: int, decoder: int) -> None:
        super().__init__()
        self.encoder, self.decoder = Stack(encoder), Stack(decoder)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def test_probe_hf_counts_an_encoder_and_a_decoder_of_different_depths() -> None:
    from transformers import PretrainedConfig

    class Config(PretrainedConfig):
        attribute_map = {"num_hidden_layers": "encoder_layers"}

    def build(config: Any) -> tuple[nn.Module, dict[str, Any]]:
        return (EncoderDecoder(config.encoder_layers, config.decoder_layers),
                {"x": torch.ones(2, 8, dtype=torch.bfloat16)})

    config = Config(encoder_layers=12, decoder_layers=2)
    assert layer_stacks(config) == {((), "encoder_layers"): 12, ((), "decoder_layers"): 2}
    probed = probe_hf(config, build)
    counts, _ = count_step(EncoderDecoder(12, 2).to(torch.bfloat16), {"x": torch.ones(2, 8, dtype=torch.bfloat16)})
    assert probed is not None
    # what the 12 + 2 layers count themselves: 2 + 2 graphs and a read a block, one seed
    assert (probed.forward_graphs, probed.backward_graphs, probed.eager_ops, probed.backward_eager_ops) == \
        (counts.forward, counts.backward, counts.eager, counts.eager_backward) == (28, 28, 15, 1)


def test_the_probe_leaves_the_global_rng_as_it_was_and_feeds_float_inputs_in_bf16() -> None:
    from transformers import PretrainedConfig

    def build(config: Any) -> tuple[nn.Module, dict[str, Any]]:
        # fp32 features (a speech model's, pixels) for a model the probe runs in bf16
        return Stack(config.num_hidden_layers), {"x": torch.ones(2, 8)}

    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    probed = probe_hf(PretrainedConfig.from_dict({"num_hidden_layers": 2}), build)
    assert torch.equal(torch.rand(3), expected)
    assert probed == GraphBreaks(4, 4, 3, ("Data-dependent branching",), 1)


def test_graph_breaks_counts_the_graphs_beyond_one_forward_and_one_backward() -> None:
    marian = GraphBreaks(18, 13, 63, ("Data-dependent branching",), 20)
    assert (marian.breaks, marian.extra_graphs()) == (17, 17 + 12)
    assert (marian.extra_graphs(training=False), marian.step_eager_ops(training=False)) == (17, 43)
    assert (GraphBreaks(1, 1, 5).breaks, GraphBreaks(1, 1, 5).extra_graphs()) == (0, 0)
    assert (GraphBreaks(3, 2, 0).breaks, GraphBreaks(3, 2, 0).extra_graphs()) == (2, 3)
    assert (GraphBreaks(0, 0, 0).breaks, GraphBreaks(0, 0, 0).extra_graphs()) == (0, 0)
    assert json.loads(json.dumps(marian.to_json())) == {
        "forward_graphs": 18, "backward_graphs": 13, "eager_ops": 63, "backward_eager_ops": 20,
        "reasons": ["Data-dependent branching"]}


def test_between_graphs_prices_each_eager_op_and_each_extra_graph_on_h100() -> None:
    s = H100.step
    assert (s.host_us_per_kernel, s.compile_host_us_per_graph, s.min_kernel_us) == (34.0, 250.0, 1.15)
    kernel_ms, kernels, host_ms = between_graphs(GraphBreaks(19, 13, 104), H100)
    assert kernels == 104
    assert kernel_ms == pytest.approx(104 * 1.15e-3)  # 0.1196: the shortest kernel each
    assert host_ms == pytest.approx((104 * 34.0 + 30 * 250.0) / 1000)  # 3.536 + 7.5 = 11.036
    # an inference step: the forward's 18 extra graphs and 104 - 40 ops
    assert between_graphs(GraphBreaks(19, 13, 104, (), 40), H100, training=False) == pytest.approx(
        (64 * 1.15e-3, 64, (64 * 34.0 + 18 * 250.0) / 1000))
    # one forward and one backward graph: the eager ops alone
    assert between_graphs(GraphBreaks(1, 1, 5), H100) == pytest.approx((5 * 1.15e-3, 5, 5 * 0.034))
    assert between_graphs(GraphBreaks(1, 1, 0), H100) == (0.0, 0, 0.0)


def test_a_compiled_step_pays_its_graph_breaks_on_the_host() -> None:
    # parameters only: a host-bound step (160 us a tensor under compile against a short optimizer)
    params = [(768 * 768, 4)] * 40 + [(768, 4)] * 40
    graphs = GraphBreaks(19, 13, 104)
    plain = step_time(Step([], [], params, training=True), H100, "compile")
    broken = step_time(Step([], [], params, training=True, graphs=graphs), H100, "compile")
    assert plain.bound == broken.bound == "host"
    assert plain.graphs_host_ms == 0.0 and "between_graphs" not in dict(plain.by_class)
    assert broken.graphs_host_ms == pytest.approx(11.036)
    assert broken.host_ms - plain.host_ms == pytest.approx(11.036)
    assert broken.ms - plain.ms == pytest.approx(11.036)
    assert broken.kernels - plain.kernels == 104
    assert dict(broken.by_class)["between_graphs"] == pytest.approx(0.1196)
    assert broken.gpu_ms - plain.gpu_ms == pytest.approx(104 * (1.15 + H100.step.kernel_gap_us) * 1e-3)
    # eager runs no graphs: the probe's counts change nothing
    assert step_time(Step([], [], params, graphs=graphs), H100, "eager") == step_time(Step([], [], params), H100, "eager")


def _write(tmp_path: Any, doc: dict[str, Any]) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


def test_gpt2_compiles_to_two_graphs_each_way_at_its_loss_warning(tmp_path) -> None:
    # transformers 5.24's GPT-2 warns in its loss function that `loss_type` is unset; dynamo
    # breaks the graph at that logging call: the model and the loss are two graphs, each way.
    # Eager (at 1 and 2 layers alike): the loss's `ones_like` seed (its `fill_`) and a zero
    # gradient for the logits in the backward wrapper (`zeros`: its `zero_`).
    import io

    from shapelint.app.api import lint_target
    from shapelint.report import text

    path = _write(tmp_path, {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 64,
                             "vocab_size": 128, "architectures": ["GPT2LMHeadModel"]})
    report = lint_target(path, compile=True, batch=2, seq=16)
    assert report.result.step_model is not None
    probed = report.result.step_model.step.graphs
    assert probed is not None
    assert (probed.forward_graphs, probed.backward_graphs, probed.eager_ops) == (2, 2, 2)
    assert (probed.breaks, probed.extra_graphs()) == (1, 2)
    assert len(probed.reasons) == 1 and "logging" in probed.reasons[0]
    # priced: 2 extra graphs at 250 us and 2 eager ops at 34 us
    assert report.step_time is not None
    assert report.step_time.graphs_host_ms == pytest.approx(2 * 0.250 + 2 * 0.034)
    summary = report.to_json()["summary"]
    assert summary["compile_graphs"] == {"forward_graphs": 2, "backward_graphs": 2, "eager_ops": 2,
                                         "backward_eager_ops": 2, "reasons": list(probed.reasons),
                                         "host_ms": 0.568}
    out = io.StringIO()
    text.render([report.result], out, color=False)
    assert (f"  torch.compile splits this step into 2 forward + 2 backward graphs ({probed.reasons[0]}), with 2 ops "
            "run eagerly between them: est. 0.6 ms of host time per step, in the estimate\n") in out.getvalue()
    # eager mode neither probes nor reports graphs
    eager = lint_target(path, batch=2, seq=16)
    assert eager.result.step_model is not None and eager.result.step_model.step.graphs is None
    assert "compile_graphs" not in eager.to_json()["summary"]


def test_bert_compiles_to_one_graph_each_way(tmp_path) -> None:
    loaded = load(_write(tmp_path, {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64,
                                    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 128,
                                    "max_position_embeddings": 64, "architectures": ["BertForMaskedLM"]}),
                  batch=2, seq=16)
    assert loaded.compile_probe is not None
    # the same two eager ops as GPT-2's (both the backward's), no break
    assert loaded.compile_probe() == GraphBreaks(1, 1, 2, (), 2)


def test_only_aliasing_ops_are_views() -> None:
    assert _is_view("aten::view")
    assert _is_view("aten::as_strided") and _is_view("aten::detach") and _is_view("aten::t")
    assert not _is_view("aten::add")
    assert not _is_view("aten::add_")  # in place: it writes its input
    assert not _is_view("aten::relu_")  # in place, found by its schema (Tensor(a!): a write)
    assert not _is_view("aten::fill_")
    assert _is_view("aten::to") and _is_view("aten::transpose")  # every overload aliases
    assert not _is_view("aten::no_such_op")


def _event(name: str, parent: Any = None) -> Any:
    ev = SimpleNamespace(name=name, cpu_parent=parent, cpu_children=[])
    if parent is not None:
        parent.cpu_children.append(ev)
    return ev


def test_eager_ops_counts_the_innermost_aten_ops_outside_the_graphs() -> None:
    graph = _event(GRAPH_RANGE, _event("Torch-Compiled Region: 0/0"))
    inside = _event("aten::mm", graph)
    linear = _event("aten::linear")
    t, addmm = _event("aten::t", linear), _event("aten::addmm", linear)
    backward = _event("autograd::engine::evaluate_function: AddBackward0")
    add, view = _event("aten::add", backward), _event("aten::view", backward)
    # counted: `addmm` and `add` (innermost ATen ops, outside every graph); not the `mm` in the
    # graph, not `linear` (it has ATen children), not the views `t` and `view`
    events = [graph.cpu_parent, graph, inside, linear, t, addmm, backward, add, view]
    assert eager_ops(events) == 2
    assert eager_ops([graph, inside]) == 0


def test_the_probe_cuts_a_large_vocabulary_and_moves_special_tokens_inside() -> None:
    from transformers import MarianConfig

    # opus-mt-en-de's: 58101 tokens under two keys, pad and decoder start at 58100
    config = MarianConfig(vocab_size=58101, decoder_vocab_size=58101, pad_token_id=58100,
                          decoder_start_token_id=58100, eos_token_id=0, encoder_layers=6, decoder_layers=6)
    cut = _cut_depth(config, {((), "encoder_layers"): 1, ((), "decoder_layers"): 2})
    assert (cut.vocab_size, cut.decoder_vocab_size, cut.pad_token_id, cut.decoder_start_token_id) == (4096, 4096, 4095, 4095)
    assert (cut.eos_token_id, cut.encoder_layers, cut.decoder_layers) == (0, 1, 2)
    assert (config.vocab_size, config.encoder_layers) == (58101, 6)  # a copy: the config itself is unchanged
