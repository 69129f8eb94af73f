"""Issue 8: one pricer, rules that only detect; each defect of the old split has a
regression test here, and the reporting policy's gates are tested one by one."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn as nn
from _cli_helpers import run
from shapelint.rules import sl201_memory_bound_gemm as sl201

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.model.records import Change, Proposal, Suggestion
from shapelint.pipeline.run import trace
from shapelint.price import Policy, price, price_one
from shapelint.price.gemm import gemm_time, total_ms

RULES = Path(__file__).resolve().parent.parent / "rules"


def test_rules_import_no_other_rule_and_stay_small() -> None:
    for path in sorted(RULES.glob("sl*.py")):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m.startswith(("shapelint.rules", "rules")) for m in imported), path.name
        assert not any(m.startswith("shapelint.price") for m in imported), path.name  # rules never price
        assert len(path.read_text().splitlines()) < 150, path.name


def test_time_cache_is_keyed_by_value_not_identity() -> None:
    """Defect 1: times were cached by id(hw); a freed profile's address reused by
    another gave the old profile's times back."""
    cap, _ = trace(lambda: (nn.Linear(4096, 4096), torch.randn(8192, 4096)))
    g = cap.gemms[0]
    base = resolve("h100")
    for wave_weight in (0.1, 0.5, 0.9) * 30:  # profiles created and freed, as calibrate's fit does
        hw = replace(base, wave_weight=wave_weight, gemm_efficiency=wave_weight)
        expected = g.flops / (hw.peak_tflops("bf16") * 1e12 * wave_weight)
        assert abs(gemm_time(g, hw).compute_s / expected - 1) < 0.5
        assert gemm_time(g, hw) == gemm_time(g, replace(base, wave_weight=wave_weight, gemm_efficiency=wave_weight))
    assert hash(replace(base)) == hash(base) and replace(base) == base
    assert gemm_time(g, replace(base, gemm_efficiency=0.5)).seconds != gemm_time(g, base).seconds


def _stack(container: type, layers: int) -> nn.Module:
    return container(*[nn.Linear(4096, 4096) for _ in range(layers)]) if container is nn.Sequential \
        else Blocks(layers)


class Blocks(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.h = nn.ModuleList(nn.Linear(4096, 4096) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.h:
            x = layer(x)
        return x


def test_repeated_layers_group_the_same_in_sequential_and_module_list() -> None:
    """Defect 2: sixty identical Linear(4096, 4096) at 1 token gave 0 SL201 findings in
    an nn.Sequential and 60 in a ModuleList (two regexes for 'repeated layer')."""
    hw = resolve("h100")
    for container, module in ((nn.Sequential, "*"), (Blocks, "h.*")):
        cap, _ = trace(lambda c=container: (_stack(c, 60), torch.randn(1, 4096)), training=False)
        fs = price(sl201.check(cap.gemms, hw, RuleContext(training=False, tokens=1)), cap.gemms, hw)
        assert [(f.module, len(f.modules)) for f in fs] == [(module, 60)], container
        single = price_one(next(iter(sl201.check(cap.gemms[:1], hw, RuleContext(training=False)))), hw)
        assert abs(fs[0].est_ms - 60 * single.est_ms) < 1e-9  # the group sums its members


def test_tp_flag_one_overrides_a_yaml_target(tmp_path: Path, capsys) -> None:
    """Defect 3: `--tp 1` could not override a YAML target's `tp: 8` (1 meant 'not given')."""
    (tmp_path / "m.py").write_text(
        "import torch.nn as nn\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.up_proj = nn.Linear(4096, 4096)\n\n    def forward(self, x):\n        return self.up_proj(x)\n\n"
        "def build():\n    return M()\n")
    (tmp_path / "t.yaml").write_text(
        "model: m.py:build\ninputs:\n  - {shape: [8192, 4096]}\ntp: 8\n")
    import json

    for flags, tp, n in (([], 8, 512), (["--tp", "1"], 1, 4096)):
        code, out, _ = run([str(tmp_path / "t.yaml"), "--format", "json", "--no-config", *flags], capsys)
        doc = json.loads(out)
        assert doc["summary"]["tp"] == tp
        assert {g["n"] for g in doc["gemms"] if g["phase"] == "forward"} == {n}


def _proposal(before_ms: float, after_ms: float, hw) -> tuple[Proposal, list]:
    """A proposal whose covered GEMM takes ``before_ms`` and ``after_ms`` after (found by
    scaling a GEMM's token count)."""
    cap, _ = trace(lambda: (nn.Linear(4096, 4096), torch.randn(16384, 4096)), training=False)
    g = cap.gemms[0]
    scale = after_ms / before_ms
    after = replace(g, m=max(1, round(g.m * scale)), a=replace(g.a, rows=max(1, round(g.a.rows * scale))),
                    out=replace(g.out, rows=max(1, round(g.out.rows * scale))))
    change = Change(Suggestion("size", 1, 2), (after,), "m")
    return Proposal("SL999", "test", "error", (g,), change), cap.gemms


def test_policy_gates_one_by_one() -> None:
    hw = resolve("h100")
    p, gemms = _proposal(1.0, 0.5, hw)
    f = price_one(p, hw)
    assert f is not None and 1.9 < f.est_speedup < 2.1 and f.severity == "error"
    # rule 2: min_loss and min_speedup
    assert price_one(p, hw, Policy(min_loss=0.6)) is None
    assert price_one(p, hw, Policy(min_speedup=2.5)) is None
    # rule 4: an error that gains less than error_speedup is a warning
    assert price_one(p, hw, Policy(error_speedup=3.0)).severity == "warning"
    # rule 3: the step share, measured against the whole step's GEMM time
    step = total_ms(gemms, hw)
    assert price([p], gemms, hw, Policy(min_step_share=0.0))
    assert price([p], gemms, hw, Policy(min_step_share=min(0.99, f.saved_ms / step + 0.01))) == []
