"""Shared physics: facts about how GPUs run GEMMs, each defined once.

- ``alignment``: the 16-byte rule for leading dimensions, pointers and batch strides;
- ``quantization``: tile and wave quantization of a GEMM's output over the SMs;
- ``reshape``: a GEMM record with a layer size changed (padding, sharding);
- ``attention``: fused attention kernels and hand-written attention;
- ``conv``: a convolution's implicit GEMMs and their geometry.

Rules detect with these; the pricer (``shapelint.price``) times with them. Nothing
here estimates a time.
"""
