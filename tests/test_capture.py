"""Capture: exact GEMM counts, shapes, layouts, phases, owners and FLOPs."""

from __future__ import annotations

import resource

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from shapelint.capture.precision import to_precision
from shapelint.pipeline.run import trace


def mlp(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


WIDTHS = [24, 40, 16, 56, 8, 72, 32]
TOKENS = 5


@pytest.mark.parametrize("n", range(1, 7))
@pytest.mark.parametrize("input_grad", [False, True])
def test_mlp_gemm_count_and_every_shape(n: int, input_grad: bool) -> None:
    widths = WIDTHS[: n + 1]
    cap, _ = trace(lambda: (mlp(widths), torch.randn(TOKENS, widths[0], requires_grad=input_grad)))
    phases = [g.phase for g in cap.gemms]
    assert phases.count("forward") == n
    assert phases.count("grad_weight") == n
    assert phases.count("grad_input") == (n if input_grad else n - 1)
    assert len(cap.gemms) == (3 * n if input_grad else 3 * n - 1)

    forward = [g for g in cap.gemms if g.phase == "forward"]
    for i, g in enumerate(forward):  # y = x Wᵀ: tokens x out, contracting over in
        assert (g.op, g.m, g.n, g.k, g.batch, g.module) == ("addmm", TOKENS, widths[i + 1], widths[i], 1, str(2 * i))
    by_module = {(g.module, g.phase): g for g in cap.gemms}
    for i in range(n):
        gw = by_module[(str(2 * i), "grad_weight")]  # dW = dyᵀ x: out x in, contracting over tokens
        assert (gw.m, gw.n, gw.k) == (widths[i + 1], widths[i], TOKENS)
        if i > 0 or input_grad:
            gi = by_module[(str(2 * i), "grad_input")]  # dx = dy W: tokens x in, contracting over out
            assert (gi.m, gi.n, gi.k) == (TOKENS, widths[i], widths[i + 1])
    assert all(g.dtype == "bf16" for g in cap.gemms)
    assert all(g.flops == 2 * g.m * g.n * g.k * g.batch for g in cap.gemms)


def test_linear_layouts_follow_memory_not_shapes() -> None:
    """The leading dimensions of nn.Linear(768, 50257)'s GEMMs are 768 and 50257,
    never the token count."""
    cap, _ = trace(lambda: (nn.Linear(768, 50257, bias=False), torch.randn(12287, 768, requires_grad=True)))
    g = {x.phase: x for x in cap.gemms}
    fwd, dx, dw = g["forward"], g["grad_input"], g["grad_weight"]
    assert (fwd.a.ld, fwd.a.transposed, fwd.b.ld, fwd.b.transposed, fwd.out.ld) == (768, False, 768, True, 50257)
    assert (dx.m, dx.n, dx.k) == (12287, 768, 50257)
    assert (dx.a.ld, dx.a.transposed, dx.b.ld, dx.b.transposed, dx.out.ld) == (50257, False, 768, False, 768)
    assert (dw.m, dw.n, dw.k) == (50257, 768, 12287)
    assert (dw.a.ld, dw.a.transposed, dw.b.ld, dw.out.ld) == (50257, True, 768, 768)
    for x in cap.gemms:
        assert 12287 not in (x.a.ld, x.b.ld, x.out.ld)


class TwiceCalled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(16, 16)
        self.other = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.other(self.shared(self.shared(x)))


def test_backward_gemms_belong_to_the_module_whose_forward_made_them() -> None:
    cap, _ = trace(lambda: (TwiceCalled(), torch.randn(4, 16)))
    shared = [g for g in cap.gemms if g.module == "shared"]
    other = [g for g in cap.gemms if g.module == "other"]
    assert sorted(g.phase for g in shared) == ["forward", "forward", "grad_input", "grad_weight", "grad_weight"]
    assert sorted(g.phase for g in other) == ["forward", "grad_input", "grad_weight"]
    assert {g.module_type for g in cap.gemms} == {"Linear"}
    assert dict(shared[0].module_params) == {"in_features": 16, "out_features": 16}


def test_source_and_definition_lines_point_at_user_code() -> None:
    cap, _ = trace(lambda: (TwiceCalled(), torch.randn(4, 16)))
    here = __file__.rsplit("/", 1)[-1]
    fwd = [g for g in cap.gemms if g.phase == "forward"]
    assert all(g.source is not None and g.source.file.endswith(here) for g in cap.gemms)
    assert {g.source.line for g in fwd} == {_line_of("return self.other(self.shared(self.shared(x)))")}
    assert {g.defined_at.line for g in cap.gemms if g.module == "other"} == {_line_of("self.other = nn.Linear(16, 8)")}


def _line_of(text: str) -> int:
    lines = open(__file__).read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(lambda y: self.b(torch.relu(self.a(y))), x, use_reentrant=False)


def test_activation_checkpointing_shows_recompute() -> None:
    cap, _ = trace(lambda: (Checkpointed(), torch.randn(8, 32, requires_grad=True)))
    counts = {p: sum(1 for g in cap.gemms if g.phase == p) for p in ("forward", "recompute", "grad_input", "grad_weight")}
    # non-reentrant checkpointing stops recomputing once every saved tensor is back:
    # b's backward needs only its input, so only a's GEMM runs again
    assert counts == {"forward": 2, "recompute": 1, "grad_input": 2, "grad_weight": 2}
    assert [(g.module, g.m, g.n, g.k) for g in cap.gemms if g.phase == "recompute"] == [("a", 8, 64, 32)]


@pytest.mark.parametrize("precision,expected", [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("tf32", "tf32")])
def test_records_carry_the_compute_dtype(precision: str, expected: str) -> None:
    cap, _ = trace(lambda: (mlp([16, 32, 8]), torch.randn(4, 16)), precision=precision)
    assert {g.dtype for g in cap.gemms} == {expected}


def test_inference_is_forward_only() -> None:
    cap, _ = trace(lambda: (mlp([16, 32, 8]), torch.randn(4, 16)), training=False)
    assert [g.phase for g in cap.gemms] == ["forward", "forward"]


# -- FLOPs against torch.utils.flop_counter ------------------------------------


def oracle_flops(build, on_meta: bool = True) -> int:
    """FlopCounterMode's total for forward + backward, on meta tensors (where SDPA
    decomposes into visible bmm's) or under FakeTensorMode."""
    torch.manual_seed(0)
    ctx = torch.device("meta") if on_meta else torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)
    with ctx:
        model, inputs = build()
        inputs = to_precision(model, inputs, "bf16")
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(inputs)
            out = out.logits if hasattr(out, "logits") else out
            out.backward(torch.ones_like(out))
    return counter.get_total_flops()


def test_mlp_flops_match_flop_counter() -> None:
    build = lambda: (mlp([64, 128, 96, 32]), torch.randn(10, 64))
    cap, _ = trace(build)
    assert sum(g.flops for g in cap.gemms) == oracle_flops(build)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        self.t = nn.ConvTranspose2d(24, 8, 2, stride=2)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.t(torch.relu(self.c2(torch.relu(self.c1(x)))))
        return self.fc(x.mean((2, 3)))


def test_conv_net_flops_match_flop_counter() -> None:
    build = lambda: (ConvNet(), torch.randn(2, 3, 16, 16))
    cap, _ = trace(build)
    convs = [g for g in cap.gemms if g.role == "conv"]
    # 3 forward convs, 3 weight grads, 2 input grads (the stem's input needs none)
    assert sorted(g.phase for g in convs) == ["forward"] * 3 + ["grad_input"] * 2 + ["grad_weight"] * 3
    c1 = next(g for g in convs if g.module == "c1" and g.phase == "forward")
    assert (c1.m, c1.n, c1.k) == (2 * 8 * 8, 16, 3 * 9)  # N·Ho·Wo x C_out x C_in·R·S
    assert sum(g.flops for g in cap.gemms) == oracle_flops(build)


class TinyTransformer(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ff = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.ff(x)


def test_sdpa_transformer_flops_match_flop_counter_plus_the_named_recompute() -> None:
    b, t, dim, heads = 2, 16, 32, 4
    build = lambda: (TinyTransformer(dim, heads), torch.randn(b, t, dim))
    cap, _ = trace(build)
    attn = [g for g in cap.gemms if g.op.startswith("sdpa")]
    assert sorted(g.op for g in attn) == sorted(
        ["sdpa.qk", "sdpa.pv", "sdpa.qk_recompute", "sdpa.dv", "sdpa.dp", "sdpa.dq", "sdpa.dk"])
    qk = next(g for g in attn if g.op == "sdpa.qk")
    assert (qk.m, qk.n, qk.k, qk.batch) == (t, t, dim // heads, b * heads)
    # The fused kernels recompute S = QKᵀ in backward (flop_counter's sdpa_backward_flop
    # counts it too); on meta tensors SDPA decomposes into the math path, which does not.
    recompute = 2 * b * heads * t * t * (dim // heads)
    assert sum(g.flops for g in cap.gemms) == oracle_flops(build) + recompute


@pytest.mark.slow
def test_gpt2_from_config_flops_match_flop_counter() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config()  # GPT-2 small: 12 layers, 768 wide, 12 heads, vocab 50257
    cfg = dict(n_layer=config.n_layer, n_embd=config.n_embd, n_head=config.n_head)
    b, t = 2, 32

    def build(impl: str):
        return lambda: (transformers.GPT2LMHeadModel(transformers.GPT2Config(attn_implementation=impl)),
                        torch.randint(0, 50257, (b, t)))

    cap, _ = trace(build("sdpa"))
    # Oracle: the eager attention (explicit matmuls) under FakeTensorMode: it misses
    # nothing there; our capture runs SDPA fused, which recomputes QKᵀ in backward.
    oracle = oracle_flops(build("eager"), on_meta=False)
    recompute = cfg["n_layer"] * 2 * b * cfg["n_head"] * t * t * (cfg["n_embd"] // cfg["n_head"])
    assert sum(g.flops for g in cap.gemms) == oracle + recompute
    lm = [g for g in cap.gemms if g.module == "lm_head"]
    assert sorted((g.phase, g.m, g.n, g.k) for g in lm) == [
        ("forward", b * t, 50257, 768), ("grad_input", b * t, 768, 50257), ("grad_weight", 50257, 768, b * t)]
    assert len(cap.gemms) == 12 * (4 * 3 + 7) + 3


def test_llama_70b_width_allocates_nothing() -> None:
    transformers = pytest.importorskip("transformers")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    config = transformers.LlamaConfig(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                                      num_key_value_heads=8, num_hidden_layers=2, vocab_size=32000)
    cap, model = trace(lambda: (transformers.LlamaForCausalLM(config), torch.randint(0, 32000, (1, 4096))))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    params = sum(p.numel() for p in model.parameters())
    assert params > 2_000_000_000  # 4 GiB in bf16 had it been allocated
    assert grown_mib < 400
    # per layer: q, k, v, o, gate, up, down + 2 attention GEMMs forward; plus the LM head
    assert sum(1 for g in cap.gemms if g.phase == "forward") == 2 * 9 + 1
    kv = [g for g in cap.gemms if g.module.endswith("k_proj") and g.phase == "forward"]
    assert {(g.m, g.n, g.k) for g in kv} == {(4096, 1024, 8192)}


class _LayerDropBlock(torch.nn.Module):
    """LayerDrop as transformers before 5.2x wrote it: drawn even when the rate is 0."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.layerdrop = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.rand([]) < self.layerdrop:
            return x
        return self.fc(x)


def test_a_scalar_random_draw_runs_every_layer() -> None:
    """``torch.rand([]) < p`` needs a fake tensor's value; under the trace the draw is 1.0,
    so both blocks run: 3n - 1 = 5 GEMMs (BART, OPT, Whisper and wav2vec2 on transformers 5.17)."""
    cap, _ = trace(lambda: (torch.nn.Sequential(_LayerDropBlock(), _LayerDropBlock()), torch.randn(128, 64)))
    assert len(cap.gemms) == 5
    assert torch.rand([]).shape == () and torch.rand([]).item() < 1.0  # outside the trace: a real draw
