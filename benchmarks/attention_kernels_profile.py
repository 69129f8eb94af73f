"""The kernels a hand-written attention's training step runs on a GPU, with their times
(the SL302 gap of issue 26: shapelint estimates the unfused block 1.6x faster than it
measures). Prints the profiler's kernel table for SL302's BAD example
``ManualAttention(768, 12)`` on (8, 1024, 768) under bf16 autocast, forward + backward.

    python benchmarks/attention_kernels_profile.py
"""

from __future__ import annotations

import torch
from shapelint.rules.sl302_materialized_attention import ManualAttention
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    torch.set_default_device("cuda")  # the example builds its causal mask with torch.ones, as --verify runs it
    model = ManualAttention(768, 12)
    x = torch.randn(8, 1024, 768, device="cuda", requires_grad=True)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        y.float().sum().backward()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


if __name__ == "__main__":
    main()
