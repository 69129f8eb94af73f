"""Capture: run the training step on fake tensors and record every GEMM and every
kernel-launching op, in the step's precision, with attention as the GPU runs it.

Entry: :func:`shapelint.capture.run.capture` (a model and its inputs → a
:class:`shapelint.capture.run.Capture`). Inside: the recorder (:mod:`.recorder`, its
rows in :mod:`.rows`) sees each aten op; :mod:`.precision` and :mod:`.autocast` cast
the step as a mixed-precision GPU step does; :mod:`.sdpa` routes attention to the
kernel PyTorch would pick; :mod:`.sources` finds the user's line; :mod:`.replay` copies
the records of repeated identical layers instead of tracing them; :mod:`.traceable`,
:mod:`.graph` and :mod:`.tensor_parallel` serve the pipeline around it.
"""
