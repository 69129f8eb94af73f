"""--verify --step builds a config's model and inputs under ``torch.device("cuda")``;
the seeded inputs are drawn with a CPU generator, which CUDA refuses: they are drawn on
the CPU whatever the default device (and moved after). Every DDP/FSDP/TP and one-GPU
``--verify --step`` of a config failed on the GPU with "Expected a 'cuda' device type
for generator but found 'cpu'"."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from shapelint.load.hf_inputs import hf_inputs


def test_inputs_are_drawn_on_the_cpu_under_another_default_device() -> None:
    config = GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=128, n_positions=64)
    model = GPT2LMHeadModel(config)
    with torch.device("meta"):  # stands in for cuda here: the draws must not follow it
        inputs = hf_inputs(model, config, "config.json", 2, 16)
    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert inputs["input_ids"].shape == (2, 16)
