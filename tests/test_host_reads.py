"""Host reads on fake tensors (shapelint.capture.host_reads): validation checks answered
as a healthy step answers them and listed in the report, a boolean mask selects every
element, real inputs read exactly, a read that decides the step is one error line; and
the loaders' part: constructors that read values, labels a loss rejects."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from _cli_helpers import assert_one_error_line, run
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from shapelint.capture.host_reads import HostReadError, library_path
from shapelint.capture.recorder import RecordingFakeMode
from shapelint.capture.run import capture
from shapelint.errors import ShapelintError
from shapelint.load.fake import fake_construction
from shapelint.pipeline.run import trace

HERE = Path(__file__).name


def line_of(text: str) -> int:
    """The line of this file that holds ``text`` (the site a read must name)."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "line_of" not in line)


class Checks(nn.Module):
    """Library-style checks: a validation check, a padding test, a negated check, a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.isfinite(x).all():  # a healthy step: finite
            x = x.clamp(-1e4, 1e4)
        if (x == 0).any():  # a healthy step: no padding element
            raise ValueError("padded input")
        if torch.logical_not((x > 1e30).any()):  # negated: the check holds
            x = x * 2
        keep = x[:, 0] > 0
        return self.proj(x[keep])  # every row kept


def reads_of(model: nn.Module) -> list[Any]:
    mode = next(model.parameters()).fake_mode
    assert isinstance(mode, RecordingFakeMode)
    return mode.host_reads.reads


def test_checks_are_answered_as_a_healthy_step_and_recorded_with_their_line() -> None:
    cap, model = trace(lambda: (Checks(), torch.randn(40, 64)))
    # every row kept: the forward GEMM has all 40 rows, not an empty batch
    fwd = [g for g in cap.gemms if g.phase == "forward"]
    assert [(g.m, g.n, g.k) for g in fwd] == [(40, 48, 64)]
    assert len(cap.gemms) == 2  # forward + grad_weight (the input needs no gradient)
    got = [(r.file.endswith(HERE), r.line, r.answer) for r in cap.host_reads]
    assert got == [
        (True, line_of("if not torch.isfinite(x).all():"), "True"),
        (True, line_of("if (x == 0).any():"), "False"),
        (True, line_of("if torch.logical_not((x > 1e30).any()):"), "True"),
        (True, line_of("return self.proj(x[keep])"), "all selected"),
    ]
    assert cap.host_reads[0].source == "if not torch.isfinite(x).all():  # a healthy step: finite"
    assert reads_of(model) == list(cap.host_reads)
    # each answered read is where an eager GPU step waits for the GPU
    assert len(cap.syncs) == 4


def test_nonzero_of_a_fake_mask_selects_every_element() -> None:
    with fake_construction({}) as mode:
        mask = torch.randn(6, 7) > 0
        assert isinstance(mask, FakeTensor)
        idx = mask.nonzero()
        rows = torch.randn(6, 7, 5)[mask]
    assert tuple(idx.shape) == (42, 2)
    assert tuple(rows.shape) == (42, 5)
    assert [(r.line, r.answer) for r in mode.host_reads.reads] == [
        (line_of("idx = mask.nonzero()"), "all selected"), (line_of("rows = torch.randn(6, 7, 5)[mask]"), "all selected")]


def test_values_of_real_inputs_are_read_exactly() -> None:
    ids = torch.tensor([[5, 1, 7, 1], [2, 2, 2, 9]])  # real data, as shapelint's config inputs are
    with RecordingFakeMode() as mode:
        emb = nn.Embedding(10, 16)
        pad = ids.eq(1)
        assert not isinstance(pad, FakeTensor)  # an op on real tensors alone runs for real
        assert int(pad.sum()) == 2 and bool(pad.any()) is True
        picked = emb(ids)[ids == 2]  # a real mask: exactly its 3 rows
        assert tuple(picked.shape) == (3, 16) and isinstance(picked, FakeTensor)
        half = torch.div(ids.shape[1], 2, rounding_mode="trunc")  # a 0-d constant of Python numbers
        assert not isinstance(half, FakeTensor) and int(half) == 2
    assert mode.host_reads.reads == []  # nothing needed answering


def test_a_large_result_of_real_inputs_stays_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    from shapelint.capture import host_reads

    monkeypatch.setattr(host_reads, "REAL_NUMEL_CAP", 100)
    a = torch.ones(16, 1)
    with RecordingFakeMode():
        assert isinstance(a * a.T, FakeTensor)  # broadcast to 256 elements: over the cap
        assert not isinstance(a + 1, FakeTensor)  # 16 elements


class DecidesShape(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int((x > 0).sum())  # decides the shape: no answer is right
        return self.proj(x[:n])


def test_a_read_that_decides_the_step_names_its_line() -> None:
    with pytest.raises(HostReadError) as info:
        trace(lambda: (DecidesShape(), torch.randn(4, 8)))
    message = str(info.value)
    assert f"{HERE}:{line_of('n = int((x > 0).sum())')}: n = int((x > 0).sum())" in message
    assert "a value read on the host decides what the step runs" in message
    assert "\n" not in message


MODEL_PY = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x):
        if not torch.isfinite(x).all():
            x = x.clamp(-1, 1)
        return self.proj(x)


def shapelint_model():
    return M(), torch.randn(8, 64)
"""


def test_the_report_lists_the_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    rc, out, _ = run(["--no-cache", "--no-isolate", "--format", "json", path], capsys)
    assert rc == 0
    summary = json.loads(out)["summary"]
    assert summary["host_reads"] == [
        {"file": str(path), "line": 11, "source": "if not torch.isfinite(x).all():", "answer": "True"}]
    assert summary["trace_notes"] == []
    rc, out, _ = run(["--no-cache", "--no-isolate", path], capsys)
    assert f"note: assumed `if not torch.isfinite(x).all():` reads True ({path}:11)" in out


def test_a_read_that_decides_the_step_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY.replace("if not torch.isfinite(x).all():\n            x = x.clamp(-1, 1)",
                                     "x = x[: int(x.sum())]"))
    rc, _, err = run(["--no-cache", "--no-isolate", path], capsys)
    assert rc == 2
    assert_one_error_line(err)
    assert f"{path}:11: x = x[: int(x.sum())]" in err


def test_library_files_are_named_from_their_package() -> None:
    assert library_path("/venv/lib/python3.11/site-packages/transformers/models/fsmt/modeling_fsmt.py") == \
        "transformers/models/fsmt/modeling_fsmt.py"


class PickyLoss(nn.Module):
    """A model whose loss wants labels of another shape than its input tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.head = nn.Linear(32, 100)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        logits = self.head(self.emb(input_ids))
        if labels is not None:
            if labels.dim() != 3:
                raise ValueError(f"labels must be (batch, seq, codebooks), got {tuple(labels.shape)}")
            return {"loss": logits.float().mean()}
        return {"logits": logits}


def test_a_step_whose_loss_rejects_the_labels_runs_without_them_and_says_so() -> None:
    with fake_construction({}) as mode:
        model = PickyLoss()
    ids = torch.randint(0, 100, (2, 16))
    with mode:
        cap = capture(model, {"input_ids": ids, "labels": ids})
    assert [(g.phase, g.m, g.n, g.k) for g in cap.gemms] == [
        ("forward", 32, 100, 32), ("grad_input", 32, 32, 100), ("grad_weight", 100, 32, 32)]
    (note,) = cap.notes
    # its forward raised (no frame named like a loss): the note says the step failed, not the loss
    assert note.startswith("traced without labels: the step failed with the labels shapelint made "
                           "(ValueError: labels must be (batch, seq, codebooks), got (2, 16))")


def test_a_failure_without_labels_too_is_the_first_failure() -> None:
    class Broken(PickyLoss):
        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
            raise RuntimeError("always")

    with fake_construction({}) as mode:
        model = Broken()
    with mode, pytest.raises(ShapelintError, match="cannot trace the model: RuntimeError: always"):
        capture(model, {"input_ids": torch.zeros(2, 4, dtype=torch.long), "labels": torch.zeros(2, 4)})


CONSTRUCTION = textwrap.dedent("""\
    class Net(nn.Module):
        def __init__(self, depths=(2, 3)):
            super().__init__()
            # timm: drop-path rates on the CPU, read back as floats
            rates = [x.tolist() for x in torch.linspace(0, 0.1, sum(depths), device="cpu").split(list(depths))]
            assert len(rates[1]) == 3 and abs(rates[1][-1] - 0.1) < 1e-6
            # torchvision RegNet: stage boundaries from a tensor of Python data
            splits = [True, False, True, True]
            starts = torch.diff(torch.tensor([d for d, t in enumerate(splits) if t])).int().tolist()
            # timm RegNet: distinct widths
            widths = len(torch.unique(torch.arange(4, device="cpu") // 2))
            self.layers = nn.Sequential(*[nn.Linear(16, 16) for _ in range(sum(starts) + widths)])

        def forward(self, x):
            return self.layers(x)
""")


def test_constructors_that_read_values_build() -> None:
    scope: dict[str, Any] = {"torch": torch, "nn": nn}
    exec(CONSTRUCTION, scope)
    cap, model = trace(lambda: (scope["Net"](), torch.randn(4, 16)))
    assert len(model.layers) == 2 + 1 + 2  # diff([0, 2, 3]) = [2, 1]; unique([0, 0, 1, 1]) = 2 widths
    assert sum(1 for g in cap.gemms if g.phase == "forward") == 5


class Experts(nn.Module):
    """Mixture-of-experts code that picks each expert's tokens with a mask of the routing."""

    def __init__(self, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(16, experts)
        self.experts = nn.ModuleList(nn.Linear(16, 16) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, chosen = self.router(x).topk(2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, _ = torch.where(chosen == e)  # each expert's tokens: a share no answer gets right
            out = out.index_add(0, rows, expert(x[rows]))
        return out


def test_a_routing_mask_is_an_error_not_every_token_for_every_expert() -> None:
    with pytest.raises(HostReadError) as info:
        trace(lambda: (Experts(), torch.randn(32, 16)))
    message = str(info.value)
    assert message.startswith("a routing decision read on the host decides the shapes: ")
    assert f"{HERE}:{line_of('rows, _ = torch.where(chosen == e)')}: rows, _ = torch.where(chosen == e)" in message


class Distinct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kinds = torch.unique(x.round())  # its size depends on the values
        return self.proj(x) + kinds.sum()


def test_an_op_whose_output_size_depends_on_values_names_its_line() -> None:
    with pytest.raises(HostReadError) as info:
        trace(lambda: (Distinct(), torch.randn(4, 8)))
    message = str(info.value)
    assert message.startswith("the size of _unique2's output depends on values: ")
    assert f"{HERE}:{line_of('kinds = torch.unique(x.round())')}: kinds = torch.unique(x.round())" in message


class CastToNumber(nn.Module):
    """An answered check cast to a number: it may become a size."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.isfinite(x).all().long().item()  # a number, not a check
        return self.proj(x[: n + 1])


class ChangedInPlace(nn.Module):
    """A check an in-place op made depend on values."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ok = torch.isfinite(x).all()
        ok &= x.sum() > 3  # no longer the validation check's answer
        if ok:
            x = x * 2
        return self.proj(x)


class NoneExceptional(nn.Module):
    """``any(dim)`` answered "no exceptional element": its nonzero selects none."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bad = torch.isnan(x).any(dim=1)
        return self.proj(x) + bad.nonzero().numel()


@pytest.mark.parametrize("model", [CastToNumber, ChangedInPlace], ids=["cast", "in-place"])
def test_an_answer_does_not_outlive_its_check(model: type[nn.Module]) -> None:
    with pytest.raises(HostReadError, match="a value read on the host decides what the step runs"):
        trace(lambda: (model(), torch.randn(4, 8)))


def test_nonzero_of_a_no_exceptional_element_mask_selects_none() -> None:
    _, m = trace(lambda: (NoneExceptional(), torch.randn(4, 8)))
    assert [r.answer for r in reads_of(m)] == ["none selected"]
