"""End-to-end check: the median time of a real eager bf16 training step (forward,
backward, AdamW) of examples/nanogpt.py before and after shapelint's suggestion,
against shapelint's estimate. Needs a CUDA GPU.

The estimate is GEMM-only, so the prediction is: measured step before minus the
estimated GEMM time saved (est_ms - est_ms_after of the step).

    python benchmarks/e2e_step.py [--steps 30] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from shapelint.check.run import builtin_rules
from shapelint.hardware import default_gpu, resolve
from shapelint.padding import mask_padded_logits
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target

ROOT = Path(__file__).resolve().parent.parent


def load_example():
    spec = importlib.util.spec_from_file_location("nanogpt", ROOT / "examples" / "nanogpt.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def step_ms(vocab_padded: int, steps: int, batch: int, seq: int, vocab: int = 50257,
            profile: Path | None = None, masking: str = "slice") -> list[float]:
    ng = load_example()
    torch.manual_seed(0)
    model = ng.GPT(ng.GPTConfig(vocab_size=vocab_padded)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, vocab, (batch, seq), device="cuda")
    targets = torch.randint(0, vocab, (batch, seq), device="cuda")

    def step() -> None:
        with torch.autocast("cuda", torch.bfloat16):
            # the padded logits are sliced off: free here, since .float() copies anyway
            # (masking them to -inf instead costs a full extra pass over the logits)
            logits = model(idx)[..., :vocab] if masking == "slice" else mask_padded_logits(model(idx), vocab)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    if profile is not None:  # where the step's time goes, kernel by kernel
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        profile.write_text(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--gpu")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--profile", action="store_true", help="also write the top CUDA kernels of 3 steps")
    ap.add_argument("--masking", choices=("slice", "mask"), default="slice",
                    help="how the padded logits leave the loss: sliced off, or set to -inf")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    hw = resolve(args.gpu) if args.gpu else default_gpu()
    result = lint_target(ROOT / "examples" / "nanogpt.py", Options(batch=args.batch, seq=args.seq), hw, builtin_rules())
    vocab_fix = next(f for f in result.findings if f.code == "SL501")
    to = int(vocab_fix.suggestion.to)
    saved_ms = vocab_fix.est_ms - vocab_fix.est_ms_after  # the only change this benchmark applies
    before = step_ms(50257, args.steps, args.batch, args.seq,
                     profile=out / "e2e_profile_before.txt" if args.profile else None, masking=args.masking)
    after = step_ms(to, args.steps, args.batch, args.seq,
                    profile=out / "e2e_profile_after.txt" if args.profile else None, masking=args.masking)
    mb, ma = statistics.median(before), statistics.median(after)
    predicted_after = mb - saved_ms
    doc = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
        "profile": hw.key, "batch": args.batch, "seq": args.seq, "vocab_to": to, "masking": args.masking,
        "est_gemm_ms": result.step.ms, "est_gemm_ms_after": result.step.ms_after, "est_saved_ms": saved_ms,
        "findings": [(f.code, f.module, str(f.suggestion)) for f in result.findings],
        "measured_step_ms": mb, "measured_step_ms_after": ma,
        "measured_speedup": mb / ma, "predicted_step_ms_after": predicted_after,
        "predicted_speedup": mb / predicted_after,
        "prediction_error": abs((mb / predicted_after) / (mb / ma) - 1),
        "step_spread_ms": [min(before), max(before), min(after), max(after)],
    }
    (out / f"e2e_step_{hw.key}.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
