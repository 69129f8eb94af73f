#!/usr/bin/env python3
"""Measure the eager training step under no parallelism, DDP, FSDP2 and tensor
parallelism, plus NCCL collective bandwidth, compute/communication contention and
DTensor host overhead, on the GPUs of one machine.

    torchrun --standalone --nproc_per_node 2 multi_gpu_bench.py            # default set
    torchrun --standalone --nproc_per_node 2 multi_gpu_bench.py --quick    # fewer rounds
    torchrun --standalone --nproc_per_node 2 multi_gpu_bench.py --smoke    # CPU/gloo, tiny

Self-contained: torch + transformers only, models built from configs with random
weights (nothing is downloaded).  Rank 0 prints tables and writes
``$OUT/multi_gpu_bench.json`` (or ``./multi_gpu_bench.json`` when OUT is unset).

The step is shapelint's documented default (``shapelint/verify_step.py``): fp32
parameters, forward under ``torch.autocast(bf16)``, the model's own loss,
``backward``, ``AdamW(fused=True)``, ``zero_grad(set_to_none=True)``.  ``--batch`` is
per GPU in every layout (DDP/FSDP: global batch = world × batch; TP: every rank sees
the same batch).

Timing follows ``benchmarks/step_gpu.py``: per model, the *none* baseline and one
parallel layout alternate in blocks (A B A B ..., ``--rounds`` blocks each of
``--steps`` steps) after ``--warmup`` untimed steps; a pair of CUDA events brackets
every step, nothing synchronises inside a block, a barrier aligns the ranks before
each block.  A layout's time is the median of its steps, the maximum over ranks.
The host time of each step (wall time of the Python call, no synchronisation) is
recorded too: when it is close to the GPU time the step is host-bound.

Layouts (``--modes``):
  none      one GPU's step on every rank (the baseline)
  ddp       DistributedDataParallel defaults (25 MiB buckets, first 1 MiB,
            gradient_as_bucket_view=False, broadcast_buffers=True)
  ddp_gbv   DDP with gradient_as_bucket_view=True
  fsdp      fully_shard per block + root, defaults (reshard_after_forward: True for
            blocks, False for the root; no MixedPrecisionPolicy: fp32 all-gather and
            fp32 reduce-scatter, compute under autocast)
  fsdp_mp   fsdp with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
  fsdp_nr   fsdp with reshard_after_forward=False on the blocks (no backward AG)
  tp        ColwiseParallel q/k/v/gate/up (fc1), RowwiseParallel o/down (fc2) on
            every block; embedding, norms and LM head stay whole (replicated).
            Backward all-reduces the input grad once per column-parallel Linear.
  tp_pmi    tp plus PrepareModuleInput(Replicate) on self_attn and mlp, so the
            input-grad all-reduce happens once per sub-block (Megatron's f/g):
            2 all-reduces forward + 2 backward per block.
GPT-2 (HF Conv1D, fused c_attn) cannot take ColwiseParallel; "opt125m" (OPT with
GPT-2 small's shapes: 12 x 768, 12 heads, FFN 3072, vocab 50272) is the GPT-2-sized
model that runs every layout.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# NVLink multicast (NVLS) stays off on the lent machines: never turn it on.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.tensor.parallel import ParallelStyle  # noqa: E402

MIB = 1 << 20
DEFAULT_MODES = ["none", "ddp", "fsdp", "tp", "tp_pmi"]
ALL_MODES = ["none", "ddp", "ddp_gbv", "fsdp", "fsdp_mp", "fsdp_nr", "tp", "tp_pmi"]

# name -> (family, batch per GPU, sequence length); tiny shapes for --smoke
MODELS = {
    "gpt2": ("gpt2", 8, 1024),
    "opt125m": ("opt", 8, 1024),
    "llama1b": ("llama", 4, 1024),
    # held out: not used to fit shapelint's host costs (multi_gpu_estimate.py --heldout);
    # their configs are benchmarks/heldout_models/<name>/config.json
    "qwen2_0_5b": ("qwen2", 8, 1024),
    "pythia_410m": ("neox", 8, 1024),
    "bert_large": ("bert", 16, 512),
    # the second held-out set (added 2026-11-26 after the first was used to refit)
    "pythia_160m": ("neox", 8, 1024),
    "tinyllama_1_1b": ("llama", 4, 1024),
    "qwen3_0_6b": ("qwen2", 8, 1024),  # family: Qwen2's layer names (the TP plan, FSDP's blocks)
}
SMOKE_SHAPE = (2, 32)
HELDOUT_DIR = Path(__file__).resolve().parent / "heldout_models"
#: the held-out families' tiny --smoke shapes (config attribute overrides)
SMOKE_OVERRIDES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64}


# --------------------------------------------------------------------------- models
def make_config(name: str, smoke: bool):
    family = MODELS[name][0]
    if (HELDOUT_DIR / name / "config.json").exists():
        from transformers import AutoConfig
        cfg = AutoConfig.from_pretrained(HELDOUT_DIR / name)
        if smoke:
            for key, value in SMOKE_OVERRIDES.items():
                if hasattr(cfg, key):
                    setattr(cfg, key, value)
        return cfg
    if family == "gpt2":
        from transformers import GPT2Config
        if smoke:
            return GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4)
        return GPT2Config()  # GPT-2 small: 12 x 768, 12 heads, vocab 50257, 124M
    if family == "opt":
        from transformers import OPTConfig
        if smoke:
            return OPTConfig(vocab_size=256, hidden_size=64, ffn_dim=256, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=64,
                             word_embed_proj_dim=64)
        return OPTConfig(vocab_size=50272, hidden_size=768, ffn_dim=3072, num_hidden_layers=12,
                         num_attention_heads=12, max_position_embeddings=2048,
                         word_embed_proj_dim=768, do_layer_norm_before=True,
                         tie_word_embeddings=True)
    from transformers import LlamaConfig
    if smoke:
        return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           tie_word_embeddings=True)
    # Llama-3.2-1B's shapes (rope scaling omitted: it changes no kernel's shape)
    return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                       num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                       head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                       max_position_embeddings=131072, tie_word_embeddings=True)


def build_model(name: str, device: torch.device, smoke: bool) -> nn.Module:
    """The model ``name``: a held-out config's own architecture (``architectures[0]``:
    the class shapelint lints it as; Qwen3's config had been built as Qwen2ForCausalLM,
    q/k/v biases and no q/k norms, until 2026-11-26), else the family's class."""
    import transformers
    cfg = make_config(name, smoke)
    own = (getattr(cfg, "architectures", None) or [None])[0]
    cls = getattr(transformers, own or {"gpt2": "GPT2LMHeadModel", "opt": "OPTForCausalLM", "llama": "LlamaForCausalLM",
                                        "qwen2": "Qwen2ForCausalLM", "neox": "GPTNeoXForCausalLM",
                                        "bert": "BertForMaskedLM"}[MODELS[name][0]])
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(cfg)
    model.train()
    return model


def register_variant(name: str, base: str, edit: Callable[[Any, bool], None]) -> None:
    """A model this harness builds as ``base`` with its config changed by ``edit(config,
    smoke)``, under ``name`` (its own models are unchanged)."""
    global make_config
    if name in MODELS:
        return
    MODELS[name] = MODELS[base]
    original = make_config

    def variant(model: str, smoke: bool):  # type: ignore[no-untyped-def]
        if model != name:
            return original(model, smoke)
        cfg = original(base, smoke)
        edit(cfg, smoke)
        return cfg

    make_config = variant


def blocks_of(model: nn.Module, family: str) -> list[nn.Module]:
    if family == "gpt2":
        return list(model.transformer.h)
    if family == "opt":
        return list(model.model.decoder.layers)
    if family == "neox":
        return list(model.gpt_neox.layers)
    if family == "bert":
        return list(model.bert.encoder.layer)
    return list(model.model.layers)  # llama, qwen2


#: where each family's blocks live (the rest of the parameters is FSDP's root group)
BLOCK_PREFIXES = ("transformer.h.", "model.decoder.layers.", "model.layers.", "gpt_neox.layers.", "bert.encoder.layer.")


class ReplicateInput(ParallelStyle):
    """What ``PrepareModuleInput(Replicate)`` does (Megatron's f: the sub-block's input a
    replicated DTensor, so its backward all-reduces the input gradient once), for the
    module's first positional argument or, where it has none, its ``hidden_states``
    keyword: the held-out families call their attention and MLP either way."""

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        from torch.distributed.tensor import DTensor, Replicate

        def replicate(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, DTensor):
                return DTensor.from_local(x, device_mesh, (Replicate(),), run_check=False)
            return x

        def hook(_module, args, kwargs):
            if args:
                return (replicate(args[0]), *args[1:]), kwargs
            if "hidden_states" in kwargs:
                return args, {**kwargs, "hidden_states": replicate(kwargs["hidden_states"])}
            return None

        module.register_forward_pre_hook(hook, with_kwargs=True)
        return module


def heldout_tp_plan(model: nn.Module, family: str, pmi: bool) -> dict:
    """Column-parallel q/k/v (GPT-NeoX's fused query_key_value: its rows are head-major,
    so a shard holds whole heads) and up, row-parallel out and down, per block; with
    ``pmi`` the attention's and the MLP's input replicated (:class:`ReplicateInput`)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan: dict = {}
    for i in range(model.config.num_hidden_layers):
        if family == "neox":
            p = f"gpt_neox.layers.{i}."
            cols, rows = ["attention.query_key_value", "mlp.dense_h_to_4h"], ["attention.dense", "mlp.dense_4h_to_h"]
            inputs = ["attention", "mlp"]
        else:  # bert: the residual add sits inside attention.output and output, after the row-parallel dense
            p = f"bert.encoder.layer.{i}."
            cols = ["attention.self.query", "attention.self.key", "attention.self.value", "intermediate.dense"]
            rows, inputs = ["attention.output.dense", "output.dense"], ["attention.self", "intermediate"]
        plan.update({p + n: ColwiseParallel() for n in cols})
        plan.update({p + n: RowwiseParallel() for n in rows})
        if pmi:
            plan.update({p + n: ReplicateInput() for n in inputs})
    return plan


def tp_plan(model: nn.Module, family: str, pmi: bool, tp: int) -> dict:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel
    cfg = model.config
    if family == "gpt2":
        raise NotImplementedError("GPT-2's Conv1D (fused c_attn) cannot take ColwiseParallel; use opt125m")
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", heads) or heads
    ffn = cfg.ffn_dim if family == "opt" else cfg.intermediate_size
    for what, n in (("heads", heads), ("kv heads", kv), ("ffn", ffn)):
        if n % tp:
            raise ValueError(f"{what} {n} not divisible by TP {tp}")
    if family in ("neox", "bert"):
        return heldout_tp_plan(model, family, pmi)
    plan: dict = {}
    if family in ("llama", "qwen2"):  # Qwen2 names its layers as Llama does
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            for n in ("q_proj", "k_proj", "v_proj"):
                plan[p + "self_attn." + n] = ColwiseParallel()
            plan[p + "self_attn.o_proj"] = RowwiseParallel()
            for n in ("gate_proj", "up_proj"):
                plan[p + "mlp." + n] = ColwiseParallel()
            plan[p + "mlp.down_proj"] = RowwiseParallel()
            if pmi:
                plan[p + "self_attn"] = PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Replicate()},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()})
                plan[p + "mlp"] = PrepareModuleInput(input_layouts=(Replicate(),),
                                                     desired_input_layouts=(Replicate(),))
    else:  # opt
        for i in range(cfg.num_hidden_layers):
            p = f"model.decoder.layers.{i}."
            for n in ("q_proj", "k_proj", "v_proj"):
                plan[p + "self_attn." + n] = ColwiseParallel()
            plan[p + "self_attn.out_proj"] = RowwiseParallel()
            plan[p + "fc1"] = ColwiseParallel()
            plan[p + "fc2"] = RowwiseParallel()
            if pmi:
                plan[p + "self_attn"] = PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Replicate()},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()})
    return plan


def wrap(mode: str, model: nn.Module, family: str, device: torch.device, world: int):
    """Apply a layout in place; returns (module to call, info dict)."""
    info: dict = {}
    if mode == "none":
        return model, info
    if mode in ("ddp", "ddp_gbv"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [device.index] if device.type == "cuda" else None
        ddp = DDP(model, device_ids=ids, gradient_as_bucket_view=(mode == "ddp_gbv"))
        info["bucket_cap_bytes"] = ddp.bucket_bytes_cap
        return ddp, info
    if mode.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh(device.type, (world,))
        kw: dict = {"mesh": mesh}
        if mode == "fsdp_mp":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        blocks = blocks_of(model, family)
        for b in blocks:
            fully_shard(b, reshard_after_forward=(False if mode == "fsdp_nr" else None), **kw)
        fully_shard(model, **kw)
        info["group_param_bytes_unsharded"] = [sum(p.numel() * 4 for p in b.parameters()) for b in blocks[:1]]
        info["root_param_bytes_unsharded"] = sum(
            p.numel() * 4 for n, p in model.named_parameters()
            if not any(n.startswith(pref) for pref in BLOCK_PREFIXES))
        return model, info
    if mode in ("tp", "tp_pmi"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module
        mesh = init_device_mesh(device.type, (world,))
        parallelize_module(model, mesh, tp_plan(model, family, mode == "tp_pmi", world))
        return model, info
    raise ValueError(mode)


def make_optimizer(model: nn.Module, device: torch.device) -> torch.optim.Optimizer:
    from torch.distributed.tensor import DTensor
    params = [p for p in model.parameters() if p.requires_grad]
    dt = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    groups = [g for g in ({"params": dt}, {"params": plain}) if g["params"]]  # no mixed lists
    if device.type == "cuda":
        return torch.optim.AdamW(groups, lr=1e-4, fused=True)
    return torch.optim.AdamW(groups, lr=1e-4, foreach=True)


class Trainer:
    def __init__(self, module: nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor, device: torch.device):
        self.module, self.opt, self.ids, self.device = module, opt, ids, device

    def step(self) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = self.module(input_ids=self.ids, labels=self.ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


# --------------------------------------------------------------------------- timing
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_block(step, n: int, device: torch.device) -> tuple[list[float], list[float]]:
    """GPU ms (CUDA events) and host ms (wall time of the call) of n steps."""
    host, marks = [], []
    for _ in range(n):
        if device.type == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
        t0 = time.perf_counter()
        step()
        host.append((time.perf_counter() - t0) * 1e3)
        if device.type == "cuda":
            e.record()
            marks.append((s, e))
    sync(device)
    if device.type == "cuda":
        return [s.elapsed_time(e) for s, e in marks], host
    return list(host), host


def gather_max(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=_DEV)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def comm_counts(trainer: Trainer) -> dict:
    """One untimed step under CommDebugMode (collectives that go through the
    dispatcher: functional collectives of DTensor, c10d ops of FSDP2; DDP's Reducer
    calls the ProcessGroup from C++ and is not seen)."""
    try:
        from torch.distributed.tensor.debug import CommDebugMode
        cm = CommDebugMode()
        with cm:
            trainer.step()
        sync(trainer.device)
        return {str(k): v for k, v in cm.get_comm_counts().items()}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def bench_model(name: str, modes: list[str], args, device, world: int, rank: int) -> list[dict]:
    family, batch, seq = MODELS[name]
    if args.smoke:
        batch, seq = SMOKE_SHAPE
    batch = args.batch or batch
    seq = args.seq or seq
    out: list[dict] = []
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    base_model = build_model(name, device, args.smoke)
    vocab = base_model.config.vocab_size
    ids_dp = torch.randint(0, vocab, (batch, seq), generator=g).to(device)        # per-rank data
    g0 = torch.Generator(device="cpu").manual_seed(1234)
    ids_same = torch.randint(0, vocab, (batch, seq), generator=g0).to(device)     # TP: same on all ranks
    base = Trainer(base_model, make_optimizer(base_model, device), ids_dp, device)
    for _ in range(args.warmup + 1):
        base.step()
    sync(device)
    n_params = sum(p.numel() for p in base_model.parameters())
    attn = getattr(base_model.config, "_attn_implementation", None)
    for mode in modes:
        if mode == "none":
            continue
        rec = {"model": name, "mode": mode, "batch_per_gpu": batch, "seq": seq, "world": world,
               "params": n_params, "attn_impl": attn}
        trainer = model = None
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            model = build_model(name, device, args.smoke)
            module, info = wrap(mode, model, family, device, world)
            rec.update(info)
            ids = ids_same if mode.startswith("tp") else ids_dp
            trainer = Trainer(module, make_optimizer(model, device), ids, device)
            t0 = time.perf_counter()
            trainer.step()
            sync(device)
            rec["first_step_s"] = time.perf_counter() - t0
            for _ in range(args.warmup):
                trainer.step()
            sync(device)
            if mode.startswith(("tp", "fsdp")):
                rec["comm_counts_per_step"] = comm_counts(trainer)
            a_gpu, a_host, b_gpu, b_host = [], [], [], []
            for _ in range(args.rounds):
                dist.barrier()
                g_, h_ = time_block(base.step, args.steps, device)
                a_gpu += g_
                a_host += h_
                dist.barrier()
                g_, h_ = time_block(trainer.step, args.steps, device)
                b_gpu += g_
                b_host += h_
            rec["baseline_ms"] = gather_max(med(a_gpu))
            rec["step_ms"] = gather_max(med(b_gpu))
            rec["host_ms"] = gather_max(med(b_host))
            rec["baseline_host_ms"] = gather_max(med(a_host))
            rec["step_ms_rank_local"] = med(b_gpu)
            rec["ratio"] = rec["step_ms"] / rec["baseline_ms"]
            # half-range of per-round block means of the ratio, as verify_step's noise
            k = args.steps
            ratios = [statistics.mean(b_gpu[i * k:(i + 1) * k]) / statistics.mean(a_gpu[i * k:(i + 1) * k])
                      for i in range(args.rounds)]
            rec["ratio_noise"] = (max(ratios) - min(ratios)) / 2
            if device.type == "cuda":
                rec["peak_mem_gib"] = gather_max(torch.cuda.max_memory_allocated(device) / 2**30)
            if mode.startswith("ddp"):
                try:
                    ld = module._get_ddp_logging_data()
                    rec["ddp_logging"] = {k: v for k, v in ld.items()
                                          if "bucket" in k or "comm" in k or "compute" in k or "overlap" in k}
                except Exception as exc:  # noqa: BLE001
                    rec["ddp_logging"] = {"error": str(exc)[:200]}
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"{type(exc).__name__}: {exc}"[:500]
            if rank == 0:
                traceback.print_exc()
        finally:
            trainer = module = model = None
            free()
            if dist.is_initialized():
                dist.barrier()
        out.append(rec)
        if rank == 0:
            print_row(rec)
    if "none" in modes:
        g_, h_ = time_block(base.step, args.steps, device)
        out.append({"model": name, "mode": "none", "batch_per_gpu": batch, "seq": seq, "world": world,
                    "params": n_params, "step_ms": gather_max(med(g_)), "host_ms": gather_max(med(h_)),
                    "note": "standalone block after the comparisons; compare modes to their own baseline_ms"})
    base = base_model = None
    free()
    return out


def print_row(r: dict) -> None:
    if "error" in r:
        print(f"{r['model']:9s} {r['mode']:8s} ERROR {r['error']}", flush=True)
        return
    print(f"{r['model']:9s} {r['mode']:8s} step {r['step_ms']:8.2f} ms  baseline {r['baseline_ms']:8.2f} ms  "
          f"x{r['ratio']:.3f} (+-{r['ratio_noise']:.3f})  host {r['host_ms']:7.2f} ms  "
          f"peak {r.get('peak_mem_gib', float('nan')):5.1f} GiB", flush=True)


# ------------------------------------------------------------------ collectives
def bench_collectives(args, device, world: int, rank: int) -> list[dict]:
    rows = []
    lo, hi = (12, 20) if args.smoke else (args.coll_min_log2, args.coll_max_log2)
    ops = [("all_reduce", torch.float32), ("all_reduce", torch.bfloat16),
           ("all_gather", torch.float32), ("reduce_scatter", torch.float32)]
    for op, dtype in ops:
        for lg in range(lo, hi + 1):
            nbytes = 1 << lg                     # nccl-tests S: the whole array
            esz = torch.tensor([], dtype=dtype).element_size()
            n = nbytes // esz
            n -= n % world
            try:
                big = torch.empty(n, dtype=dtype, device=device).normal_()
                small = torch.empty(n // world, dtype=dtype, device=device).normal_()
                if op == "all_reduce":
                    fn = lambda: dist.all_reduce(big)  # noqa: E731
                elif op == "all_gather":
                    fn = lambda: dist.all_gather_into_tensor(big, small)  # noqa: E731
                else:
                    fn = lambda: dist.reduce_scatter_tensor(small, big)  # noqa: E731
                for _ in range(3):
                    fn()
                sync(device)
                iters = max(5, min(50, int(2e8 // max(nbytes, 1)) + 5))
                dist.barrier()
                ts, hs = time_block(fn, iters, device)
                t_ms = gather_max(med(ts))
                algbw = nbytes / (t_ms * 1e-3) / 1e9
                factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
                rows.append({"op": op, "dtype": str(dtype).replace("torch.", ""), "bytes": n * esz,
                             "world": world, "time_us": t_ms * 1e3, "algbw_GBps": algbw,
                             "busbw_GBps": algbw * factor, "iters": iters,
                             "host_us": gather_max(med(hs)) * 1e3})
            except Exception as exc:  # noqa: BLE001
                rows.append({"op": op, "dtype": str(dtype), "bytes": nbytes, "error": str(exc)[:200]})
            finally:
                big = small = None
        free()
    if rank == 0:
        print("\ncollective      dtype     bytes        time_us   algbw   busbw (GB/s)")
        for r in rows:
            if "error" in r:
                print(f"{r['op']:14s} {r['dtype']:9s} {r['bytes']:>11d}  ERROR {r['error']}")
            else:
                print(f"{r['op']:14s} {r['dtype']:9s} {r['bytes']:>11d} {r['time_us']:10.1f} "
                      f"{r['algbw_GBps']:7.1f} {r['busbw_GBps']:7.1f}")
    return rows


def bench_contention(args, device, rank: int) -> dict:
    """bf16 GEMMs alone, all-reduces alone, then both at once (all-reduces issued
    from a side stream, GEMMs on the current stream), sized so that the two runs
    last about as long; both ranks do the same. Gives the slowdown each inflicts
    on the other when they overlap."""
    if device.type != "cuda":
        return {"skipped": "needs CUDA"}
    res: dict = {}
    try:
        m, n_gemm, n_ar = 8192, 20, 24
        a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
        b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
        buf = torch.randn(64 * MIB, device=device, dtype=torch.float32)   # 256 MiB all-reduce
        side = torch.cuda.Stream(device)

        def gemms():
            for _ in range(n_gemm):
                torch.mm(a, b)

        def ars():
            for _ in range(n_ar):
                dist.all_reduce(buf)   # the issuing stream waits on NCCL's stream

        def timed(fn, stream):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                s.record()
                fn()
                e.record()
            return s, e

        main = torch.cuda.current_stream(device)
        gemms()
        ars()
        sync(device)
        g_alone, a_alone, g_over, a_over = [], [], [], []
        for _ in range(3):
            dist.barrier()
            sync(device)
            s, e = timed(gemms, main)
            sync(device)
            g_alone.append(s.elapsed_time(e))
            dist.barrier()
            s, e = timed(ars, side)
            sync(device)
            a_alone.append(s.elapsed_time(e))
            dist.barrier()
            sync(device)
            sa, ea = timed(ars, side)
            sg, eg = timed(gemms, main)
            sync(device)
            a_over.append(sa.elapsed_time(ea))
            g_over.append(sg.elapsed_time(eg))
        flops = 2 * m ** 3 * n_gemm
        res = {"gemm": f"{m}^3 bf16 x{n_gemm}", "allreduce": f"256 MiB fp32 x{n_ar}",
               "gemm_alone_ms": gather_max(med(g_alone)), "gemm_overlapped_ms": gather_max(med(g_over)),
               "allreduce_alone_ms": gather_max(med(a_alone)),
               "allreduce_overlapped_ms": gather_max(med(a_over))}
        res["gemm_alone_tflops"] = flops / (res["gemm_alone_ms"] * 1e-3) / 1e12
        res["gemm_slowdown"] = res["gemm_overlapped_ms"] / res["gemm_alone_ms"] - 1
        res["allreduce_slowdown"] = res["allreduce_overlapped_ms"] / res["allreduce_alone_ms"] - 1
        res["note"] = "slowdowns are over the whole runs; they overlap fully only if the alone times match"
    except Exception as exc:  # noqa: BLE001
        res = {"error": str(exc)[:300]}
    free()
    if rank == 0:
        print("\ncontention:", json.dumps(res))
    return res


def bench_dtensor_overhead(args, device, world: int, rank: int) -> dict:
    """Host microseconds per call: a Linear on plain tensors against the same
    Linear as ColwiseParallel (from_local + DTensor linear + to_local), tiny
    shapes so the GPU never limits; and sharding-propagation cache hits."""
    res: dict = {}
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
        mesh = init_device_mesh(device.type, (world,))
        w = distribute_tensor(torch.randn(64 * world, 64, device=device), mesh, [Shard(0)])
        xl = torch.randn(8, 64, device=device)
        wl = torch.randn(64, 64, device=device)
        a = DTensor.from_local(xl, mesh, [Replicate()], run_check=False)
        cases = {
            "plain_linear": lambda: torch.nn.functional.linear(xl, wl),
            "dtensor_linear": lambda: torch.nn.functional.linear(a, w),
            "colwise_linear_roundtrip": lambda: torch.nn.functional.linear(
                DTensor.from_local(xl, mesh, [Replicate()], run_check=False), w).to_local(),
            "plain_add": lambda: xl + xl,
            "dtensor_add": lambda: a + a,
        }
        for k, f in cases.items():
            for _ in range(100):
                f()
            sync(device)
            n = 2000
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            res[k + "_us"] = (time.perf_counter() - t0) / n * 1e6
            sync(device)
    except Exception as exc:  # noqa: BLE001
        res = {"error": str(exc)[:300]}
    if rank == 0:
        print("\ndtensor host overhead:", json.dumps({k: round(v, 1) if isinstance(v, float) else v
                                                     for k, v in res.items()}))
    return res


# --------------------------------------------------------------------------- main
_DEV = torch.device("cpu")


def init_ranks(use_cuda: bool) -> tuple[torch.device, int, int]:
    """This rank's process group (NCCL on its own GPU, else gloo on the CPU) and the
    device the benchmark's tensors go to: (device, rank, world size)."""
    global _DEV
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    _DEV = device
    return device, dist.get_rank(), dist.get_world_size()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2,opt125m,llama1b")
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES), help="any of " + ",".join(ALL_MODES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=0, help="per-GPU batch (0: the model's default)")
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--coll-min-log2", type=int, default=16, help="smallest collective, log2 bytes")
    ap.add_argument("--coll-max-log2", type=int, default=30, help="largest collective, log2 bytes")
    ap.add_argument("--skip", default="", help="comma list of: steps,collectives,contention,dtensor")
    ap.add_argument("--quick", action="store_true", help="rounds 3, steps 5, warmup 2")
    ap.add_argument("--smoke", action="store_true", help="tiny models, CPU/gloo allowed")
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps, args.warmup = 3, 5, 2
    skip = set(filter(None, args.skip.split(",")))

    use_cuda = torch.cuda.is_available() and not (args.smoke and os.environ.get("BENCH_CPU") == "1")
    device, rank, world = init_ranks(use_cuda)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "torch": torch.__version__, "world": world,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_NCCL", "CUDA_DEVICE_MAX"))},
        "args": vars(args),
    }
    try:
        import transformers
        meta["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        pass
    if rank == 0:
        print(json.dumps({k: meta[k] for k in ("date", "torch", "transformers", "device", "nccl", "world")
                          if k in meta}), flush=True)

    result: dict = {"meta": meta, "steps": [], "collectives": [], "contention": {}, "dtensor": {}}
    t_start = time.perf_counter()
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad:
        raise SystemExit(f"unknown modes {bad}")
    if "steps" not in skip:
        for name in [m for m in args.models.split(",") if m]:
            ms = [m for m in modes if not (MODELS[name][0] == "gpt2" and m.startswith("tp"))]
            if rank == 0:
                print(f"\n== {name}: {', '.join(ms)}", flush=True)
            result["steps"] += bench_model(name, ms, args, device, world, rank)
            _write(result, args, rank)
    if "collectives" not in skip:
        result["collectives"] = bench_collectives(args, device, world, rank)
        _write(result, args, rank)
    if "contention" not in skip:
        result["contention"] = bench_contention(args, device, rank)
    if "dtensor" not in skip:
        result["dtensor"] = bench_dtensor_overhead(args, device, world, rank)
    result["meta"]["wall_s"] = time.perf_counter() - t_start
    _write(result, args, rank)
    if rank == 0:
        print("\nsummary (step ms = median, max over ranks; ratio = layout / none in the same rounds)")
        print(f"{'model':9s} {'mode':8s} {'step':>9s} {'none':>9s} {'ratio':>7s} {'host':>8s} {'GiB':>6s}")
        for r in result["steps"]:
            if "error" in r or r["mode"] == "none":
                continue
            print(f"{r['model']:9s} {r['mode']:8s} {r['step_ms']:9.2f} {r['baseline_ms']:9.2f} "
                  f"{r['ratio']:7.3f} {r['host_ms']:8.2f} {r.get('peak_mem_gib', float('nan')):6.1f}")
        print(f"wall {result['meta']['wall_s']:.0f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _write(result: dict, args, rank: int) -> None:
    if rank != 0:
        return
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "multi_gpu_bench.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    sys.exit(main())
