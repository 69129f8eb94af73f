"""Findings cross the stages as typed data (issue 25): what locate, price and --fix say
about a finding is a typed field (``ConfigLocation``, ``Pretrained``, ``vocab``,
``recorded_ms``, ``not_fixed``), which the JSON writes under its public ``details``
keys in the order it always had, and which the result cache carries exactly."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

from shapelint.locate.config_keys import locate_in_config, with_pretrained
from shapelint.model import serial
from shapelint.model.locations import ConfigKey, ConfigLocation, Pretrained, Source
from shapelint.model.records import Finding, Suggestion

ROOT = Path(__file__).resolve().parent.parent
#: the stages that make and read findings: none reads a fact another wrote by its key
STAGES = ("price", "locate", "report", "fix", "pipeline", "measure", "app")

LIBRARY = "/usr/lib/python3/site-packages/transformers/models/gpt2/modeling_gpt2.py"
KEYS = {"vocab_size": (50257, 3), "n_embd": (768, 5), "n_head": (12, 6), "decoder_vocab_size": (50257, 7)}


def _finding(**kw: object) -> Finding:
    base = Finding("SL501", "vocab-padding", "error", "lm_head", "msg", (0, 1), 2.0, 1.0,
                   suggestion=Suggestion("out_features", 50257, 50304), source=Source(LIBRARY, 187),
                   facts=(("extra_rows", 47), ("tp", 1)), gemm_ms_after=(0.5, 0.5), vocab=50257)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_finding_at_a_config_key_carries_it_typed_and_writes_the_public_keys_in_order() -> None:
    f = locate_in_config(_finding(recorded_ms=3.0, reference_ms=(("math_kernel", 9.0),)), KEYS, "config.json")
    assert f.source == Source("config.json", 3) and f.suggestion == Suggestion("vocab_size", 50257, 50304)
    assert f.location == ConfigLocation("vocab_size", "vocab_size", (ConfigKey("vocab_size", 3, 50257),),
                                        together=(ConfigKey("decoder_vocab_size", 7, 50257),),
                                        code_parameter="out_features", library_source=Source(LIBRARY, 187))
    assert f.code_parameter == "out_features"
    f = replace(with_pretrained(f, "model.safetensors is beside config.json"), not_fixed="a pretrained checkpoint")
    details = f.to_json()["details"]
    assert list(details) == ["vocab", "extra_rows", "tp", "recorded_ms", "math_kernel_ms", "code_parameter",
                             "config_key", "config_keys", "config_formula", "config_together", "library_source",
                             "pretrained", "pretrained_fix", "not_fixed", "gemm_ms_after"]
    assert details["config_keys"] == [{"key": "vocab_size", "line": 3, "value": 50257}]
    assert details["library_source"] == {"file": LIBRARY, "line": 187}
    assert f.fact("math_kernel_ms") == 9.0 and f.fact("vocab") == 50257
    assert isinstance(f.pretrained, Pretrained) and "pad in the training code" in f.pretrained.recipe


def test_a_size_no_key_gives_says_why_and_names_the_other_keys_without_value() -> None:
    f = locate_in_config(_finding(suggestion=Suggestion("out_features", 1000, 1024), vocab=None), KEYS, "config.json",
                         anchor=2)
    assert f.source == Source("config.json", 2) and f.location is not None and f.location.key is None
    assert list(f.to_json()["details"]) == ["extra_rows", "tp", "config_key", "config_note", "library_source",
                                            "gemm_ms_after"]
    also = ConfigLocation("n_embd", "n_embd", (ConfigKey("n_embd", 5, 768),), also=(ConfigKey("d_model", 9, 768),))
    assert also.details()["config_also"] == [{"key": "d_model", "line": 9}]


def test_the_result_cache_carries_the_typed_fields_exactly() -> None:
    f = with_pretrained(locate_in_config(_finding(recorded_ms=3.0, reference_ms=(("flash", 1.5),)), KEYS,
                                         "config.json"), "config.json has _name_or_path, the mark of a downloaded model")
    f = replace(f, not_fixed="")
    back = serial.decode(Finding, json.loads(json.dumps(serial.encode(f))))
    assert back == f and back.to_json() == f.to_json()


def test_no_stage_reads_a_fact_another_stage_wrote() -> None:
    """Stages read typed fields: ``Finding.fact(key)`` and ``Finding.facts`` are the
    report's view of what a rule states, for display and tests."""
    readers = []
    for stage in STAGES:
        for path in sorted((ROOT / "shapelint" / stage).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr == "fact":
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []


def _passed_on_whole(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """``node`` is (inside) the value of a ``facts=`` keyword: carried to the next record whole."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.keyword):
            return node.arg == "facts"
    return False


def test_no_stage_but_the_report_reads_a_findings_facts_by_key() -> None:
    """A rule's ``facts`` (and the ``details()`` built from them) are what the report
    shows: a stage outside report/ may carry them on whole (the pricer copies a change's
    facts onto its finding), never read one by its key to decide anything; what it needs
    is a typed field (SL602's head counts: ``ParallelChange.heads``)."""
    readers = []
    for stage in (s for s in STAGES if s != "report"):
        for path in sorted((ROOT / "shapelint" / stage).rglob("*.py")):
            tree = ast.parse(path.read_text())
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in ("facts", "details") \
                        and not (node.attr == "facts" and _passed_on_whole(node, parents)):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert readers == []


def test_reporters_render_what_the_pricer_computed() -> None:
    """The verbose GEMM table and the roofline plot read each GEMM's estimate from the
    result (``Result.gemm_times``): no reporter imports the pricer."""
    importers = []
    for path in sorted((ROOT / "shapelint" / "report").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            importers += [f"{path.name}: {n}" for n in names if n.startswith("shapelint.price")]
    assert importers == []


def test_the_result_holds_each_gemms_estimate_in_capture_order() -> None:
    import torch
    from torch import nn

    from shapelint.hardware import resolve
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_module
    from shapelint.price.gemm import gemm_time
    from shapelint.report.plot import points

    r = lint_module(nn.Sequential(nn.Linear(1000, 1023), nn.Linear(1023, 64)), torch.randn(512, 1000), Options(),
                    resolve("h100"), [])
    assert r.gemm_times == tuple(gemm_time(g, r.hardware) for g in r.capture.gemms) and len(r.gemm_times) == 5
    slow = replace(r, gemm_times=tuple(replace(t, seconds=2 * t.seconds) for t in r.gemm_times))
    assert [p["flops_s"] for p in points(slow)] == [p["flops_s"] / 2 for p in points(r)]
