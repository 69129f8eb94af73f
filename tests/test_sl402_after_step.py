"""SL402's after-step is the step with the whole model channels-last (issue 26): batch
norms and pointwise ops change kernels with the convolutions, so the step after the
change is the model traced again channels-last (``shapelint.price.relaid``), and it
equals the estimate of the same model written channels-last."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from shapelint.app import api
from shapelint.physics.conv_kernels import BATCH_NORM
from shapelint.pipeline.result import result_from_data, result_to_data

ROOT = Path(__file__).resolve().parent.parent


class Block(nn.Module):
    """Conv-BN-SiLU twice and a residual add: the ops whose kernels change with the layout."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.SiLU())
        self.b = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.b(self.a(x)))


def _model(channels_last: bool) -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU(), Block(), Block())
    x = torch.randn(32, 3, 224, 224, device="meta")
    model = model.to("meta")
    if channels_last:
        return model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    return model, x


def _sl402(report: api.Report):
    return next(f for f in report.findings if f.code == "SL402")


@pytest.fixture(scope="module")
def eager() -> tuple[api.Report, api.Report]:
    return api.lint(*_model(False), gpu="h100"), api.lint(*_model(True), gpu="h100")


def test_the_after_step_is_the_model_traced_channels_last(eager: tuple[api.Report, api.Report]) -> None:
    nchw, cl = eager
    f = _sl402(nchw)
    assert f.memory_format == "channels_last"
    model = nchw.result.step_model
    assert model is not None and model.relaid is not None and model.relaid.aligned
    # the relaid step runs every batch norm on its channels-last kernels, as the channels-last model does
    bns = [op for op in model.relaid.step.ops if op.name in BATCH_NORM]
    assert len(bns) == 10 and all(op.channels_last for op in bns)
    assert not any(op.channels_last for op in model.step.ops if op.name in BATCH_NORM)
    assert cl.step_time is not None and f.step_ms is not None and f.step_ms_saved is not None
    after = f.step_ms - f.step_ms_saved
    assert after == pytest.approx(cl.step_time.ms, rel=0.03)
    assert after == pytest.approx(model.after([f]).ms)
    # the batch norms alone, by shape: 64 channels at 112^2 ran 3.74x (batch 8) and 3.95x
    # (batch 64) faster channels-last on an H100 (docs/data/bn_shape_rates_h100_2026-11-26.json)
    nchw_bn = dict(model.before.by_class)["reduction"]
    relaid_bn = dict(model.after([f]).by_class)["reduction"]
    assert nchw_bn / relaid_bn == pytest.approx(3.85, rel=0.15)
    assert "channels_last" in f.step_note


def test_the_convolutions_alone_would_say_less(eager: tuple[api.Report, api.Report]) -> None:
    """Without the relaid step (a model that cannot run channels-last) the finding is
    priced on its convolutions alone: a smaller saving than the whole model's."""
    nchw, _ = eager
    f = _sl402(nchw)
    model = nchw.result.step_model
    assert model is not None and f.step_ms_saved is not None
    model_without = type(model)(model.step, model.hw, model.mode, model.optimizer, model.parallel)
    convs_only = model_without.after([f])
    assert model.before.ms - convs_only.ms < 0.8 * f.step_ms_saved


def test_compiled_the_after_step_is_the_compiled_channels_last_step(eager: tuple[api.Report, api.Report]) -> None:
    """Under torch.compile Inductor already runs an NCHW graph's convolutions channels-last:
    the after-step is still the channels-last model's compiled step."""
    f = _sl402(eager[0])
    nchw = api.lint(*_model(False), gpu="h100", compile=True)
    cl = api.lint(*_model(True), gpu="h100", compile=True)
    model = nchw.result.step_model
    assert model is not None and model.relaid is not None and cl.step_time is not None
    assert model.after([f]).ms == pytest.approx(cl.step_time.ms, rel=0.03)


def test_the_relaid_step_survives_the_result_cache(eager: tuple[api.Report, api.Report]) -> None:
    result = eager[0].result
    back = result_from_data(result_to_data(result))
    assert back.step_model is not None and back.step_model.relaid is not None
    f = _sl402(eager[0])
    assert back.step_model.after([f]).ms == pytest.approx(result.step_model.after([f]).ms)


class Flattened(nn.Module):
    """A forward that ``view``s a convolution's output: it raises on a channels-last tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)
        self.bn = nn.BatchNorm2d(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        return y.view(y.shape[0], -1).mean(-1)


def test_a_model_that_does_not_run_channels_last_is_priced_on_its_convolutions() -> None:
    report = api.lint(Flattened().to("meta"), torch.randn(64, 64, 56, 56, device="meta"), gpu="h100")
    f = _sl402(report)
    model = report.result.step_model
    assert model is not None and model.relaid is None
    assert f.step_ms_saved is not None and f.step_ms_saved > 0
    assert f.step_note.startswith("the model as written does not run channels_last (ValueError: Cannot view a tensor")
    assert f.step_note.endswith("priced on the convolutions alone")


@pytest.mark.slow
def test_mbconv_after_step_matches_the_channels_last_step() -> None:
    """The MBConv stack at batch 256, 224^2 (``benchmarks/real_models``): NCHW 134.4 ms
    estimated, the whole model channels-last 54.5 (measured on an H100 132.7 and 53.6,
    2.48x; docs/step-model.md)."""
    models = ROOT / "benchmarks" / "real_models"
    nchw = api.lint_target(models / "mbconv.py", gpu="h100", batch=256, seq=224)
    cl = api.lint_target(models / "mbconv_channels_last.py", gpu="h100", batch=256, seq=224)
    f = _sl402(nchw)
    assert cl.step_time is not None and f.step_ms is not None and f.step_ms_saved is not None
    after = f.step_ms - f.step_ms_saved
    assert after == pytest.approx(cl.step_time.ms, rel=0.03)
    assert f.step_ms / after == pytest.approx(132.74 / 53.59, rel=0.15)


CONVNET = '''\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean((2, 3)))


def shapelint_model(batch: int = 4, seq: int = 32):
    return Net(), torch.randn(batch, 32, seq, seq)
'''


class _Scripted:
    """A block timer that returns the given ms for every step of a label (the step is not run)."""

    def __init__(self, ms: dict[str, float]) -> None:
        self.ms, self.labels = ms, []

    def __call__(self, label, step, n):  # type: ignore[no-untyped-def]
        self.labels.append(label)
        return [self.ms[label]] * n


@pytest.mark.slow
def test_verify_step_applies_sl402_as_the_user_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--verify --step`` on the CPU: SL402 edits no file; its after-variant is the model
    built as written and converted channels-last, inputs included."""
    from shapelint.check.run import builtin_rules
    from shapelint.hardware import resolve
    from shapelint.measure import step as vs
    from shapelint.measure import step_blocks as blocks
    from shapelint.measure import step_variants as variants
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target
    from shapelint.price import Policy

    (tmp_path / "model.py").write_text(CONVNET)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    r = lint_target(tmp_path / "model.py", Options(dtype="tf32", policy=Policy(min_step_share=0.0)), resolve("h100"),
                    builtin_rules())
    (f,) = [f for f in r.findings if f.code == "SL402"]
    applied, not_applied = variants.plan(r)
    assert [(g.code, texts) for g, texts in applied] == [("SL402", {})] and not_applied == []
    built = variants.build_original(r, "cpu")
    inputs = variants.in_memory_formats(built, built.inputs, [f])
    assert inputs.is_contiguous(memory_format=torch.channels_last) and not inputs.is_contiguous()
    assert built.model.body[0].weight.is_contiguous(memory_format=torch.channels_last)
    timer = _Scripted({"before": 10.0, "after": 7.0})
    v = vs.verify_result(r, vs.RunOptions(device="cpu", schedule=blocks.Schedule(rounds=2, steps=2, warmup=1),
                                          timer=timer)).to_json()
    assert timer.labels == ["before", "after"] * 2
    assert v["measured_speedup"] == round(10 / 7, 4) and v["not_applied"] == []
    assert [e["code"] for e in v["findings"]] == ["SL402"]
    assert v["est_ms_after"] == round(r.step_model.after([f]).ms, 4)
    assert not [p for p in scratch.iterdir() if p.name.startswith("shapelint-step-")]  # the copies are gone


def test_the_message_names_what_runs_slower_on_nchw() -> None:
    """A depthwise convolution is not transposed: PyTorch runs its own NCHW kernel; a
    dense one is transposed by cuDNN; batch norms change kernels with the conversion."""
    depthwise = nn.Sequential(nn.Conv2d(144, 144, 3, padding=1, groups=144), nn.BatchNorm2d(144)).to("meta")
    f = _sl402(api.lint(depthwise, torch.randn(64, 144, 72, 72, device="meta"), gpu="h100"))
    assert "PyTorch runs the depthwise ones on its own NCHW kernel" in f.message
    assert "cuDNN transposes" not in f.message
    assert f.message.endswith("(its batch norms then run their channels-last kernels too)")
    dense = nn.Conv2d(64, 64, 3, padding=1).to("meta")
    f = _sl402(api.lint(dense, torch.randn(64, 64, 56, 56, device="meta"), gpu="h100"))
    assert "cuDNN transposes their activations to NHWC" in f.message and "depthwise" not in f.message
    assert f.message.endswith(".to(memory_format=torch.channels_last)")
