"""Which literals a Python fix edits (shapelint.fix.python_edits), without linting: the
argument followed to the one literal that sets it, companions only where the code
proves them, and the reason otherwise. Also the JSON scan and the pretrained recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES

from shapelint.fix.files import Doc, NotFixed
from shapelint.fix.python_edits import python_spans
from shapelint.load.json_tokens import int_keys, paths, scan
from shapelint.locate.pretrained import multiple, recipe


def edited(text: str, line: int, parameter: str, value: int, new: int, *, vocab: bool = False) -> str:
    """``text`` with the fix of ``parameter`` = ``value`` at ``line`` applied."""
    doc = Doc(Path("m.py"), text.encode(), text, "utf-8")
    for start, end in sorted(python_spans(doc, Path("m.py"), line, (parameter,), value, vocab=vocab, entry=True),
                             reverse=True):
        assert text[start:end] == str(value)
        text = text[:start] + str(new) + text[end:]
    return text


def refused(text: str, line: int, parameter: str, value: int) -> str:
    doc = Doc(Path("m.py"), text.encode(), text, "utf-8")
    with pytest.raises(NotFixed) as exc:
        python_spans(doc, Path("m.py"), line, (parameter,), value, vocab=False, entry=True)
    return str(exc.value)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_nanogpt_edits_the_default_that_reaches_the_head() -> None:
    """``config.vocab_size``: GPT(config) is built once, from GPTConfig(vocab_size=vocab_size),
    and vocab_size is shapelint_model's default; GPTConfig's own default never reaches it."""
    text = (EXAMPLES / "nanogpt.py").read_text()
    after = edited(text, line_of(text, "self.lm_head = nn.Linear("), "out_features", 50257, 50264, vocab=True)
    assert after == text.replace("vocab_size: int = 50257):", "vocab_size: int = 50264):")


SEQUENTIAL = '''\
import torch
import torch.nn as nn


def shapelint_model():
    model = nn.Sequential(nn.Conv2d(3, 30, 3), nn.BatchNorm2d(30), nn.ReLU(), nn.Conv2d(30, 64, 3))
    return model, torch.randn(8, 3, 32, 32)
'''


def test_a_sequential_chain_grows_the_norm_and_the_next_layer() -> None:
    after = edited(SEQUENTIAL, 6, "out_channels", 30, 32)
    assert after == SEQUENTIAL.replace("Conv2d(3, 30, 3), nn.BatchNorm2d(30), nn.ReLU(), nn.Conv2d(30,",
                                       "Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32,")


def test_a_layer_of_the_same_size_that_is_not_fed_is_a_reason() -> None:
    text = SEQUENTIAL.replace("    return model,", "    other = nn.Conv2d(30, 8, 1)\n    return model,")
    text = text.replace("nn.ReLU(), nn.Conv2d(30, 64, 3))", "nn.ReLU())")
    why = refused(text, 6, "out_channels", 30)
    assert "m.py:7 (`other = nn.Conv2d(30, 8, 1)`) has the same size 30 and may be the layer it feeds" in why


SWIGLU = '''\
import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(512, 1023)
        self.up = nn.Linear(512, 1023)
        self.down = nn.Linear(1023, 512)

    def forward(self, x):
        return self.down(torch.relu(self.gate(x)) * self.up(x))
'''


def test_two_branches_feeding_one_layer_are_not_one_chain() -> None:
    why = refused(SWIGLU, 8, "out_features", 1023)
    assert "m.py:10 (`self.down = nn.Linear(1023, 512)`) has the same size 1023 and may be the layer it feeds" in why


def test_a_forward_chain_grows_the_layer_it_feeds() -> None:
    text = SWIGLU.replace("self.down(torch.relu(self.gate(x)) * self.up(x))", "self.down(torch.relu(self.gate(x)))")
    text = text.replace("        self.up = nn.Linear(512, 1023)\n", "")
    assert edited(text, 8, "out_features", 1023, 1024) == text.replace("1023", "1024")


BLOCK = '''\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.fc = nn.Linear(256, self.width)


def shapelint_model():
    return Block(1023){rest}
'''


def test_a_parameter_is_the_argument_of_the_only_construction() -> None:
    text = BLOCK.format(rest="")
    assert edited(text, 8, "out_features", 1023, 1024) == text.replace("Block(1023)", "Block(1024)")


def test_a_class_built_twice_is_a_reason() -> None:
    text = BLOCK.format(rest=", Block(1023)")
    assert "Block (m.py:4) is called 2 times: shapelint cannot tell what it is called with" in \
        refused(text, 8, "out_features", 1023)


def test_names_bound_twice_in_loops_or_computed_are_reasons() -> None:
    twice = "import torch.nn as nn\nD = 1023\nD = 1023\n\n\ndef shapelint_model():\n    return nn.Linear(D, 8)\n"
    assert "`D` is set 2 times in the module m.py (lines 2, 3)" in refused(twice, 7, "in_features", 1023)
    loop = "import torch.nn as nn\n\n\ndef shapelint_model():\n    for d in [1023]:\n        return nn.Linear(d, 8)\n"
    assert "`d` read at m.py:6 is a loop variable at m.py:5" in refused(loop, 6, "in_features", 1023)
    computed = "import torch.nn as nn\nD = 1000 + 23\n\n\ndef shapelint_model():\n    return nn.Linear(D, 8)\n"
    assert "`D` at m.py:6 is computed (from `1000 + 23` at m.py:2), not a literal" in \
        refused(computed, 6, "in_features", 1023)


def test_a_global_declaration_reads_the_module() -> None:
    text = ("import torch.nn as nn\nD = 1023\n\n\ndef other():\n    D = 1023\n\n\ndef shapelint_model():\n"
            "    global D\n    return nn.Linear(D, 8)\n")
    assert edited(text, 11, "in_features", 1023, 1024) == text.replace("D = 1023\n\n\ndef other", "D = 1024\n\n\ndef other")


# -- the JSON scan and the pretrained recipe -------------------------------------------------


def test_json_scan_reads_as_json_loads_does() -> None:
    text = '{"s": "\\"vocab_size\\": 1", "a": {"x": 1}, "vocab\\u005fsize": 5, "a": {"y": 2}, "vocab_size": 7}'
    assert int_keys(text) == {"a.y": (2, 1), "vocab_size": (7, 1)}
    root = scan(text)
    assert root is not None and text[paths(root)["vocab_size"].start:paths(root)["vocab_size"].end] == "7"
    assert scan('{"a": 1} trailing') is None and scan('{"a": 01}') is None and scan("[" * 1000) is None
    assert int_keys('{"a": 1.0, "b": 1e3, "c": NaN, "d": -Infinity, "e": -4}') == {"e": (-4, 1)}


def test_pad_to_multiple_of_gives_exactly_the_suggestion() -> None:
    assert multiple(32001, 32008) == 8 and multiple(50257, 50304) == 128 and multiple(50257, 50280) is None
    assert "pad_to_multiple_of=128" in recipe(50257, 50304)
    assert "model.resize_token_embeddings(50280)" in recipe(50257, 50280)


def test_the_embedding_of_the_same_vocabulary_grows_with_the_head() -> None:
    text = ("import torch.nn as nn\nVOCAB = 5001\n\n\nclass LM(nn.Module):\n    def __init__(self) -> None:\n"
            "        super().__init__()\n        self.emb = nn.Embedding(VOCAB, 256)\n"
            "        self.head = nn.Linear(256, 5001)\n        self.pos = nn.Embedding(128, 256)\n")
    after = edited(text, 9, "out_features", 5001, 5008, vocab=True)
    assert after == text.replace("VOCAB = 5001", "VOCAB = 5008").replace("Linear(256, 5001)", "Linear(256, 5008)")
