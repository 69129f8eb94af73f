"""Shared physics: facts about how GPUs run GEMMs and kernels, each defined once.

- ``alignment``: the 16-byte rule for leading dimensions, pointers and batch strides;
- ``quantization``: tile and wave quantization of a GEMM's output over the SMs;
- ``reshape``: a GEMM record with a layer size changed (padding, sharding);
- ``attention``: fused attention kernels and hand-written attention;
- ``conv``: a convolution's implicit GEMMs and their geometry;
- ``gemm_shapes``: the GEMMs each aten op runs (capture's only source of shapes);
- ``kernels``: which kernel class an op launches and the bytes it reads;
- ``roofline``: whether a GEMM waits on memory or on the math units.

Rules detect with these; the pricer (``shapelint.price``) times with them. Nothing
here estimates a step's time, and there is no entry: it is a library the stages read.
"""
