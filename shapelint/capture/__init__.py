"""Capture: run the step on fake tensors and record every GEMM and kernel-launching op."""
