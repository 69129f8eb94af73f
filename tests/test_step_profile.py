"""benchmarks/step_profile.py on the CPU: the class it gives each kernel of a real
profile (names from the H100 profiles in docs/data and from cuDNN's convolution and
batch-norm kernels), and the per-step sums it makes of a Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


BENCH = load_benchmark("step_profile")

#: (kernel name as torch.profiler gives it, class, detail)
KERNELS = [
    # cuBLAS / cuBLASLt / cutlass GEMMs
    ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_bias_TNT", "gemm", "matmul"),
    ("nvjet_sm90_tst_128x128_64x6_2x2_h_bz_splitK_NTT", "gemm", "matmul"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel"
     "__5x_cublas", "gemm", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_nn_align2>(cutlass_80_tensorop_bf16_"
     "s16816gemm_bf16_128x256_64x3_nn_align2::Params)", "gemm", "matmul"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float>",
     "gemm", "matmul"),
    # convolutions: PyTorch's depthwise kernel, cuDNN's implicit GEMMs, its layout transposes
    ("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, c10::BFloat16, int>(at::GenericPacked"
     "TensorAccessor<c10::BFloat16 const, 4ul>)", "gemm", "conv:depthwise"),
    ("void at::native::(anonymous namespace)::conv_depthwise2d_grad_weight_kernel<c10::BFloat16, float, int>(at::",
     "gemm", "conv:depthwise"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", "gemm", "conv:cudnn"),
    ("sm80_xmma_dgrad_implicit_gemm_indexed_wo_smem_bf16bf16_bf16f32_f32_nhwckrsc_nchw_tilesize128x32x64_stage4_"
     "warpsize4x1x1_g1_tensor16x8x16_execute_kernel__5x_cudnn", "gemm", "conv:cudnn"),
    ("sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x128x64_kernel__5x_cudnn",
     "gemm", "conv:cudnn"),
    ("void cudnn::ops::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, (cudnnKernelDataType_t)0>"
     "(cudnn::ops::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)", "copy", "conv:transposes"),
    ("void cudnn::ops::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false, (cudnnKernelDataType_t)0>",
     "copy", "conv:transposes"),
    # batch norm (cuDNN's and PyTorch's channels-last kernels), layer norm: reductions
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__nv_bfloat16, float, 512, true, 1>(cudnnTensorStruct, __nv_bfloat16 const*)",
     "reduction", "norm"),
    ("void cudnn::bn_bw_1C11_kernel_new<__nv_bfloat16, float, float2, 512, true, 1>(float, float, float, float)",
     "reduction", "norm"),
    ("void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, c10::BFloat16, float, 4>",
     "reduction", "norm"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*)",
     "reduction", "norm"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, false>",
     "reduction", "norm"),
    # softmax and other reductions
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 9, false, false>(float*, float const*, int)",
     "reduction", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<8, c10::BFloat16, float, c10::BFloat16, at::native::",
     "reduction", "softmax"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16,"
     " at::native::sum_functor<c10::BFloat16, float", "reduction", "reduction"),
    ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::detail::radix::",
     "reduction", "reduction"),
    ("void at::native::(anonymous namespace)::atomic_adaptive_average_gradinput<c10::BFloat16>(c10::BFloat16*)",
     "reduction", "reduction"),
    # attention: cuDNN's SDPA (and its helpers), flash, memory-efficient
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
     "attention", "attention:cudnn"),
    ("void cudnn::fusion::compute_dot_do_o<true>(void const*, void const*, void*, void*, unsigned int, unsigned int)",
     "attention", "attention:cudnn"),
    ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, unsigned int)",
     "attention", "attention:cudnn"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>",
     "attention", "attention:flash"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80>)",
     "attention", "attention:efficient"),
    # the optimizer
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizer"
     "TensorListMetadata<4>, at::native::(anonymous", "optimizer", "optimizer"),
    # Inductor's kernels
    ("triton_poi_fused__unsafe_view_mul_silu_11", "fused", "fused:pointwise"),
    ("triton_poi_fused_mm_view_1", "fused", "fused:pointwise"),  # pad_mm's pad copy, not a GEMM
    ("triton_red_fused__to_copy_add_native_layer_norm_backward_view_14", "fused", "fused:reduction"),
    ("triton_per_fused__safe_softmax__softmax_backward_data__to_copy_add_transpose_view_12", "fused", "fused:reduction"),
    ("triton_tem_fused_mm_0", "gemm", "triton_template"),
    # copies, casts, concatenation, gathers
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda(float)#1}, std::array<char*, 2ul> >(in", "copy", "copy"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda"
     "()#3}::operator()() const::{lambda()#7}::opera", "copy", "copy"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 4, 64, 64>", "copy", "copy"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>",
     "copy", "copy"),
    # fills
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, "
     "at::native::FillFunctor<float>, std::array<char*", "fill", "fill"),
    ("void at::native::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&)::{lambda()#1}",
     "fill", "fill"),
    # the rest: pointwise
    ("void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::silu_kernel(at::TensorIterator"
     "Base&)::{lambda()#1}::operator()() const::{la", "pointwise", "pointwise"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, "
     "float, at::native::binary_internal::MulFunctor<f", "pointwise", "pointwise"),
    ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 8, bool>"
     "(at::cuda::detail::TensorInfo<c10::BFloat16 cons", "pointwise", "dropout"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_scale_kernel<bool, "
     "float, float>(at::Tensor&, at::Tensor const&, at:", "pointwise", "pointwise"),
]


@pytest.mark.parametrize(("name", "kind", "detail"), KERNELS, ids=[k[0][:60] for k in KERNELS])
def test_classify_kernel_by_name(name: str, kind: str, detail: str) -> None:
    assert BENCH.classify_kernel(name) == (kind, detail)


def test_memcpy_and_memset_by_their_category() -> None:
    assert BENCH.classify_kernel("Memcpy DtoD (Device -> Device)", "gpu_memcpy") == ("copy", "memcpy")
    assert BENCH.classify_kernel("Memset (Device)", "gpu_memset") == ("fill", "memset")


def _profiled_names() -> set[str]:
    """Every kernel name in the H100 profiles of docs/data that name their kernels."""
    names: set[str] = set()

    def walk(x: object) -> None:
        if isinstance(x, dict):
            if isinstance(x.get("name"), str) and "class" in x:
                names.add(x["name"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in sorted((ROOT / "docs" / "data").glob("step_h100_*.json")):
        walk(json.loads(path.read_text()))
    return names


def test_every_kernel_of_the_measured_steps_has_a_class() -> None:
    names = _profiled_names()
    assert len(names) > 200  # GPT-2, OPT, BERT, Llama, Qwen2.5 steps, eager and compiled
    unknown = sorted(n for n in names if BENCH.classify_kernel(n)[0] == "other")
    assert unknown == []
    classes = {BENCH.classify_kernel(n)[0] for n in names}
    assert classes == {"gemm", "attention", "pointwise", "reduction", "copy", "fill", "fused", "optimizer"}


def test_the_profile_table_of_attention_kernels_classifies_as_its_classes() -> None:
    """docs/data/attention_kernels_h100_2026-11-26.txt (names truncated by the profiler's
    table): the fp32 math attention's softmax, its GEMMs and copies."""
    rows = [line for line in (ROOT / "docs" / "data" / "attention_kernels_h100_2026-11-26.txt").read_text().splitlines()
            if line.strip() and line.split()[-1].isdigit()]
    got = {}
    for line in rows:
        name = line[:70].strip()
        got[name] = BENCH.classify_kernel(name)[0]
    assert got["void (anonymous namespace)::softmax_warp_backward<float, float, flo..."] == "reduction"
    assert got["nvjet_sm90_tst_64x256_64x5_1x2_h_bz_NNN"] == "gemm"
    assert got["void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::nat..."] == "copy"
    assert got["void at::native::unrolled_elementwise_kernel<at::native::direct_cop..."] == "copy"
    assert got["Memcpy DtoD (Device -> Device)"] == "copy"
    assert "other" not in got.values()


def _event(name: str, ts: float, dur: float, cat: str = "kernel") -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_kernels_of_trace_sums_per_step() -> None:
    gemm, silu = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", "void at::native::vectorized_elementwise_kernel<8, silu_kernel>"
    events = [
        _event(gemm, 0, 300), _event(silu, 310, 50), _event("Memset (Device)", 400, 10, "gpu_memset"),
        _event("aten::mm", 0, 900, "cpu_op"), {"ph": "i", "cat": "kernel", "name": gemm},  # neither is a GPU activity
        _event(gemm, 1000, 500), _event(silu, 1510, 70), _event("Memset (Device)", 1600, 10, "gpu_memset"),
    ]
    got = BENCH.kernels_of_trace(events, steps=2)
    assert got["by_class"] == pytest.approx({"gemm": 0.4, "pointwise": 0.06, "fill": 0.01})
    assert got["kernels_by_class"] == {"gemm": 1.0, "pointwise": 1.0, "fill": 1.0}
    assert got["busy_ms"] == pytest.approx(0.47)
    assert got["span_ms"] == pytest.approx(1.61 / 2)
    assert got["kernels"] == 3.0
    assert [k["name"] for k in got["top"]] == [gemm, silu, "Memset (Device)"]
    assert got["top"][0]["ms"] == pytest.approx(0.4)


def test_comparison_rows_cover_both_sides() -> None:
    est = {"by_class": {"gemm": 2.0, "fused": 1.0}, "kernels_by_class": {"gemm": 4, "fused": 10}}
    meas = {"by_class": {"gemm": 4.0, "copy": 0.5}, "kernels_by_class": {"gemm": 6.0, "copy": 2.0}}
    rows = BENCH.comparison(est, meas, "by_class")
    assert [r["class"] for r in rows] == ["gemm", "fused", "copy"]
    assert rows[0]["ratio"] == pytest.approx(0.5)
    assert rows[1]["meas_ms"] is None and rows[1]["ratio"] is None
    assert (rows[2]["est_kernels"], rows[2]["meas_kernels"]) == (None, 2.0)
