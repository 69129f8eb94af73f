"""Replay of repeated identical layers (shapelint.capture.replay): the records of a capture
with replay are exactly those of a full trace (every Gemm field, every Op after
numbering tensors in order of first appearance, the parameters), on models where
replay copies layers and on models where it must decline or trace again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from shapelint.capture.precision import to_precision
from shapelint.capture.replay.stats import STATS, Stats
from shapelint.capture.run import Capture, Op, capture
from shapelint.load.fake import fake_construction

#: whole models, subprocesses or dynamo: the full suite's tier (pytest -m 'not slow' skips them)
pytestmark = pytest.mark.slow

transformers = pytest.importorskip("transformers")

Build = Callable[[], tuple[nn.Module, Any]]


def _capture(build: Build, replay_on: bool, precision: str = "bf16", training: bool = True
             ) -> tuple[Capture, list[Any]]:
    """The capture, and each parameter's gradient layout afterwards (None: no gradient)."""
    defined: dict[Any, Any] = {}
    with fake_construction(defined) as mode:
        model, inputs = build()
    with mode:
        inputs = to_precision(model, inputs, precision)
        cap = capture(model, inputs, precision=precision, training=training, defined_at=defined, replay=replay_on)
    grads = [None if p.grad is None else (p.grad.shape, p.grad.stride(), p.grad.dtype) for p in model.parameters()]
    return cap, grads


def _canonical(ops: list[Op]) -> list[Op]:
    """Serials renumbered in order of first appearance (only which reads and writes
    share a tensor is a fact of the step; the numbers themselves are not)."""
    seen: dict[int, int] = {}

    def number(pairs: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        return tuple((seen.setdefault(s, len(seen)), b) for s, b in pairs)

    return [dataclasses.replace(op, reads=number(op.reads), writes=number(op.writes)) for op in ops]


def exact(build: Build, **kwargs: Any) -> Stats:
    """Capture with and without replay, assert identical records, and return what replay did."""
    replayed, grads = _capture(build, True, **kwargs)
    stats = dataclasses.replace(STATS, declined=list(STATS.declined))
    full, full_grads = _capture(build, False, **kwargs)
    assert grads == full_grads
    assert len(replayed.gemms) == len(full.gemms) and len(replayed.ops) == len(full.ops)
    for a, b in zip(replayed.gemms, full.gemms):
        assert a == b
    for a, b in zip(_canonical(replayed.ops), _canonical(full.ops)):
        assert a == b
    assert replayed.params == full.params
    assert (replayed.syncs, replayed.breaks) == (full.syncs, full.breaks)  # host reads and graph breaks too
    assert (replayed.training, replayed.precision) == (full.training, full.precision)
    return stats


def tokens(batch: int = 2, seq: int = 16, vocab: int = 256) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


def lm(model: Callable[[], nn.Module], *, cache_off: bool = True, seq: int = 16) -> Build:
    """A causal LM's step as shapelint lints it: labels, and ``use_cache=False``."""
    def build() -> tuple[nn.Module, Any]:
        ids = tokens(seq=seq)
        inputs: dict[str, Any] = {"input_ids": ids, "labels": ids}
        if cache_off:
            inputs["use_cache"] = False
        return model(), inputs
    return build


SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)


# -- Hugging Face models --------------------------------------------------------------


def test_llama_replays_every_layer_after_the_first_two() -> None:
    config = transformers.LlamaConfig(**SMALL, num_hidden_layers=6)
    stats = exact(lm(lambda: transformers.LlamaForCausalLM(config)))
    assert (stats.groups, stats.templates, stats.replayed, stats.fell_back) == (1, 1, 4, "")


def test_llama_inference_does_not_replay_and_is_exact() -> None:
    config = transformers.LlamaConfig(**SMALL, num_hidden_layers=4)
    stats = exact(lm(lambda: transformers.LlamaForCausalLM(config)), training=False)
    assert stats.replayed == 0


@pytest.mark.parametrize("precision", ["fp32"])
def test_llama_in_other_precisions(precision: str) -> None:
    config = transformers.LlamaConfig(**SMALL, num_hidden_layers=4)
    assert exact(lm(lambda: transformers.LlamaForCausalLM(config)), precision=precision).replayed == 2


def test_gpt2() -> None:
    config = transformers.GPT2Config(n_embd=64, n_layer=5, n_head=4, vocab_size=256, n_positions=64)
    assert exact(lm(lambda: transformers.GPT2LMHeadModel(config))).replayed == 3


def test_gpt2_with_a_kv_cache_argument_declines() -> None:
    """use_cache left on: each block gets the DynamicCache it would write to."""
    config = transformers.GPT2Config(n_embd=64, n_layer=4, n_head=4, vocab_size=256, n_positions=64)
    stats = exact(lm(lambda: transformers.GPT2LMHeadModel(config), cache_off=False))
    assert stats.replayed == 0
    assert any("DynamicCache" in why for why in stats.declined)


def test_bert() -> None:
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=5, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=256)
    build = lambda: (transformers.BertForMaskedLM(config), {"input_ids": tokens(), "labels": tokens()})
    assert exact(build).replayed == 3


def test_mixtral_moe() -> None:
    config = transformers.MixtralConfig(**SMALL, num_hidden_layers=5, num_local_experts=4, num_experts_per_tok=2)
    assert exact(lm(lambda: transformers.MixtralForCausalLM(config))).replayed == 3


def test_qwen2_mixed_layer_types_replays_only_alike_layers() -> None:
    """Sliding layers 0, 2, 4, 5 are one group (2 real, 4 and 5 replayed); the two
    full-attention layers are too few to replay."""
    types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
             "sliding_attention", "sliding_attention"]
    config = transformers.Qwen2Config(**SMALL, num_hidden_layers=6, use_sliding_window=True, sliding_window=8,
                                      layer_types=types)
    stats = exact(lm(lambda: transformers.Qwen2ForCausalLM(config)))
    assert (stats.groups, stats.replayed) == (1, 2)


def test_gemma3_alternating_layer_types() -> None:
    config = transformers.Gemma3TextConfig(**SMALL, num_hidden_layers=6, head_dim=16, sliding_window=8,
                                           layer_types=["sliding_attention", "sliding_attention",
                                                        "full_attention"] * 2)
    stats = exact(lm(lambda: transformers.Gemma3ForCausalLM(config)))
    assert (stats.groups, stats.replayed) == (1, 2)


def test_t5_position_bias_needs_grad_so_it_declines() -> None:
    config = transformers.T5Config(d_model=64, d_ff=128, num_layers=4, num_heads=4, d_kv=16, vocab_size=256)
    build = lambda: (transformers.T5ForConditionalGeneration(config),
                     {"input_ids": tokens(), "labels": tokens(), "decoder_input_ids": tokens()})
    stats = exact(build)
    assert stats.replayed == 0
    assert any("2 input tensors require grad" in why for why in stats.declined)


def test_hf_gradient_checkpointing_traces_again_in_full() -> None:
    config = transformers.LlamaConfig(**SMALL, num_hidden_layers=4)

    def model() -> nn.Module:
        m = transformers.LlamaForCausalLM(config)
        m.activation_checkpointing_enable({"use_reentrant": False})
        return m

    stats = exact(lm(model))
    assert stats.replayed == 0 and "recompute" in stats.fell_back


# -- plain PyTorch ------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_sequential_of_mlp_blocks() -> None:
    """The input needs no grad, so block 0 is not like the rest: blocks 1 and 2 run,
    3, 4 and 5 are replayed."""
    build = lambda: (nn.Sequential(*(Block() for _ in range(6))), torch.randn(4, 16, 64))
    assert exact(build).replayed == 3


def test_input_that_requires_grad() -> None:
    build = lambda: (nn.Sequential(*(Block() for _ in range(6))), torch.randn(4, 16, 64, requires_grad=True))
    assert exact(build).replayed == 4


def test_a_layer_of_another_width_is_not_replayed() -> None:
    build = lambda: (Stack([Block(hidden=96 if i == 3 else 128) for i in range(6)]), torch.randn(4, 16, 64))
    stats = exact(build)
    assert (stats.groups, stats.replayed) == (1, 2)  # 1 and 2 run, 3 is another group of one, 4 and 5 replayed


class Checkpointed(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + checkpoint(lambda h: self.down(torch.relu(self.up(self.norm(h)))), x, use_reentrant=False)


def test_checkpoint_inside_layers_traces_again_in_full() -> None:
    stats = exact(lambda: (Stack([Checkpointed() for _ in range(5)]), torch.randn(4, 16, 64, requires_grad=True)))
    assert stats.replayed == 0 and "recompute" in stats.fell_back


class CheckpointedStack(Stack):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


def test_checkpointed_layers_are_declined() -> None:
    stats = exact(lambda: (CheckpointedStack([Block() for _ in range(5)]), torch.randn(4, 16, 64, requires_grad=True)))
    assert stats.replayed == 0 and stats.fell_back == ""
    assert any("activation checkpointing" in why for why in stats.declined)


class EveryHidden(Stack):
    """Returns every layer's output: each gets a gradient from outside the next layer too."""

    def forward(self, x: torch.Tensor) -> Any:
        hidden = []
        for block in self.blocks:
            x = block(x)
            hidden.append(x)
        return self.head(x), hidden


def test_inputs_read_elsewhere_trace_again_in_full() -> None:
    stats = exact(lambda: (EveryHidden([Block() for _ in range(5)]), torch.randn(4, 16, 64)))
    assert stats.replayed == 0 and "gradient from elsewhere" in stats.fell_back


class Stashing(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stash = self.up(self.norm(x))
        return x + self.down(torch.relu(self.stash))


class ReadsStash(Stack):
    def __init__(self, blocks: list[nn.Module], detach: bool) -> None:
        super().__init__(blocks)
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        stash = self.blocks[1].stash
        return self.head(x) + (stash.detach() if self.detach else stash).sum()


@pytest.mark.parametrize("detach", [False, True])
def test_a_tensor_leaving_a_layer_traces_again_in_full(detach: bool) -> None:
    """A layer's tensor read after it (with its gradient, or detached: then only the
    check that nothing outside a real layer touches what it made sees it)."""
    stats = exact(lambda: (ReadsStash([Stashing() for _ in range(5)], detach), torch.randn(4, 16, 64)))
    assert stats.replayed == 0
    assert ("made inside it" if detach else "backward gradients differ") in stats.fell_back


class ByIndex(Block):
    """Layers behave by their index: the first is unlike the second."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y * 2 if self.layer_idx == 0 else y


def test_layers_0_and_1_unlike_replay_nothing() -> None:
    stats = exact(lambda: (Stack([ByIndex(i) for i in range(5)]), torch.randn(4, 16, 64, requires_grad=True)))
    assert (stats.groups, stats.templates, stats.replayed) == (1, 0, 0)


class InPlace(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + self.down(torch.relu(self.up(self.norm(x))))


def test_in_place_on_the_input_traces_again_in_full() -> None:
    def build() -> tuple[nn.Module, Any]:
        model = nn.Sequential(nn.Linear(64, 64), *(InPlace() for _ in range(5)))
        return model, torch.randn(4, 16, 64)

    stats = exact(build)
    assert stats.replayed == 0 and "in place" in stats.fell_back


def test_hooks_decline() -> None:
    def build() -> tuple[nn.Module, Any]:
        model = Stack([Block() for _ in range(5)])
        model.blocks[3].up.register_forward_hook(lambda *_: None)
        return model, torch.randn(4, 16, 64, requires_grad=True)

    stats = exact(build)
    assert stats.replayed == 2  # blocks 2 and 4; 3 has a hook
    assert any("hooks" in why for why in stats.declined)


def test_global_module_hooks_decline() -> None:
    """A hook on every module would also run inside the layers a replay skips."""
    from torch.nn.modules.module import register_module_forward_hook

    handle = register_module_forward_hook(lambda *_: None)
    try:
        stats = exact(lambda: (Stack([Block() for _ in range(5)]), torch.randn(4, 16, 64, requires_grad=True)))
    finally:
        handle.remove()
    assert (stats.groups, stats.replayed) == (0, 0) and stats.declined == ["global module hooks are set"]


def test_tied_parameters_decline() -> None:
    def build() -> tuple[nn.Module, Any]:
        model = Stack([Block() for _ in range(5)])
        model.blocks[4].up.weight = model.blocks[0].up.weight
        return model, torch.randn(4, 16, 64, requires_grad=True)

    stats = exact(build)
    assert stats.replayed == 1  # blocks 0 and 4 share a weight: 1 and 2 run, 3 is replayed


class WithWeights(Block):
    """Returns (hidden, attention-like weights), as BLOOM, GPT-J and MPT layers do."""

    def forward(self, x: torch.Tensor) -> Any:  # type: ignore[override]
        weights = torch.softmax(x @ x.transpose(-1, -2), dim=-1)
        return (super().forward(weights @ x), weights, None)


class UsesWeights(Stack):
    def __init__(self, blocks: list[nn.Module], use: bool) -> None:
        super().__init__(blocks)
        self.use = use

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = 0
        for block in self.blocks:
            x, weights, _ = block(x)
            if self.use:
                out = out + weights.sum()
        return self.head(x) + out


@pytest.mark.parametrize("use", [False, True])
def test_a_second_output_tensor_is_replayed_unless_read(use: bool) -> None:
    stats = exact(lambda: (UsesWeights([WithWeights() for _ in range(5)], use), torch.randn(4, 16, 64)))
    if use:
        assert stats.replayed == 0 and "another output" in stats.fell_back
    else:
        assert stats.replayed == 2 and stats.fell_back == ""


class ViewOut(Block):
    """Returns a view of its result, as OPT's decoder layer does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.reshape(-1, 64)).view(x.shape)


def test_an_output_that_is_a_view() -> None:
    assert exact(lambda: (Stack([ViewOut() for _ in range(5)]), torch.randn(4, 16, 64))).replayed == 2
