"""The Python API: lint() on a model the user holds leaves it untouched and allocates
nothing; the Report's JSON and HTML; the notebook session of docs/api.md runs as written."""

from __future__ import annotations

import doctest
import re

import pytest
import torch
import torch.nn as nn
from conftest import EXAMPLES, ROOT

import shapelint
from shapelint.errors import ShapelintError


def test_lint_leaves_the_users_model_as_it_was() -> None:
    model = nn.Sequential(nn.Linear(1023, 4096), nn.ReLU(), nn.Linear(4096, 1000)).eval()
    before = {name: (p, p.detach().clone(), p.requires_grad) for name, p in model.named_parameters()}
    x = torch.randn(8192, 1023)
    report = shapelint.lint(model, x, gpu="h100", dtype="bf16")
    assert [(f.code, f.module, str(f.suggestion)) for f in report.findings] == [
        ("SL101", "0", "in_features: 1023 → 1024")]
    assert len(report.gemms) == 5 and report.step.ms > report.step.ms_after > 0  # 3n−1 GEMMs, n = 2, training
    assert not model.training  # capture trained a copy
    for name, p in model.named_parameters():
        same, values, grad = before[name]
        assert p is same and p.dtype == torch.float32 and p.requires_grad == grad and torch.equal(p, values)
    assert x.dtype == torch.float32 and x.grad is None
    doc = report.to_json()
    assert doc["summary"]["gemm_count"] == 5 and doc["findings"][0]["suggestion"]["to"] == 1024


def test_lint_on_meta_and_inference() -> None:
    model = nn.Linear(4096, 50257, device="meta")
    report = shapelint.lint(model, torch.randn(8192, 4096, device="meta"), training=False)
    assert model.weight.device.type == "meta"
    assert len(report.gemms) == 1 and report.findings[0].suggestion == shapelint.Suggestion("out_features", 50257, 50264)


def test_lint_target_and_errors() -> None:
    report = shapelint.lint_target(EXAMPLES / "mlp.yaml")
    assert {str(f.suggestion) for f in report.findings} == {"out_features: 5461 → 5464", "in_features: 5461 → 5464"}
    with pytest.raises(ShapelintError, match="unknown GPU"):
        shapelint.lint(nn.Linear(8, 8), torch.randn(8, 8), gpu="tpu")
    with pytest.raises(ShapelintError, match="dtype="):
        shapelint.lint(nn.Linear(8, 8), torch.randn(8, 8), dtype="int4")


def test_readme_notebook_session() -> None:
    """The notebook session of the Python API page (docs/api.md; it was the README's)."""
    page = (ROOT / "docs" / "api.md").read_text()
    block = re.search(r"<!-- the test suite runs this session \(tests/test_api.py\) -->\n```python\n(.*?)```",
                      page, re.S)
    assert block is not None
    test = doctest.DocTestParser().get_doctest(block.group(1), {}, "api", "docs/api.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, clear_globs=False)
    assert runner.summarize(verbose=False).failed == 0
    assert runner.summarize(verbose=False).attempted == 9
    html = test.globs["report"]._repr_html_()
    # the finding's code, module and suggestion, in cells of the table
    for cell in ("SL101", "2", "out_features: 50257 → 50264"):
        assert f'<td style="text-align:left;vertical-align:top">{cell}</td>' in html


def test_select_as_one_code_and_every_error_a_shapelint_error() -> None:
    model, x = nn.Linear(1023, 4096), torch.randn(8192, 1023)
    assert [f.code for f in shapelint.lint(model, x, select="SL101").findings] == ["SL101"]
    assert [f.code for f in shapelint.lint(model, x, select="SL501,SL1").findings] == ["SL101"]
    assert shapelint.lint(model, x, ignore="SL101").findings == []
    with pytest.raises(ShapelintError, match="unknown rule code 'X'"):
        shapelint.lint(model, x, select=["X", "Y"])  # a list is a list of codes
    with pytest.raises(ShapelintError, match=r"gpu=: expected a GPU name, got an integer \(3\)"):
        shapelint.lint(model, x, gpu=3)  # type: ignore[arg-type]
    with pytest.raises(ShapelintError, match="select=: expected a list of rule codes"):
        shapelint.lint(model, x, select=5)  # type: ignore[arg-type]
    with pytest.raises(ShapelintError, match="path must be a str or a Path, got int"):
        shapelint.lint_target(42)  # type: ignore[arg-type]


def test_a_shape_error_is_one_clean_error(capfd: pytest.CaptureFixture[str]) -> None:
    """torch's fake-tensor logger printed ~20 lines of traceback into the cell first."""
    model = nn.Sequential(nn.Linear(10, 20), nn.Linear(30, 5))
    with pytest.raises(ShapelintError, match=r"cannot trace the model: RuntimeError: a and b must have same reduction "
                                             r"dim, but got \[4, 20\] X \[30, 5\]"):
        shapelint.lint(model, torch.randn(4, 10))
    out, err = capfd.readouterr()
    assert "fake_tensor" not in err and "Traceback" not in err, err


def test_html_messages_are_left_aligned() -> None:
    html = shapelint.lint(nn.Linear(1023, 4096), torch.randn(8192, 1023))._repr_html_()
    cells = re.findall(r'<td style="([^"]*)">', html)
    assert len(cells) == 7 and cells.count("text-align:left;vertical-align:top") == 6  # the number: right
