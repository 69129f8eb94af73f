"""Price: every proposal of the rules becomes a finding with its estimated before and
after times, or is dropped, by one reporting policy (``shapelint.price.policy``); and
the step estimate.

- ``gemm``: the time of one GEMM record on a GPU profile;
- ``kernels``, ``inductor``, ``host``, ``step``: the whole training step, eager or as
  torch.compile runs it;
- ``policy``: the reporting policy, and pricing a proposal into a finding;
- ``grouping``: repeated layers as one finding;
- ``saving``: what a finding saves on the step.

The names rule authors and the pipeline use are importable from here.
"""

from __future__ import annotations

from shapelint.price.grouping import deduplicated, group, module_glob
from shapelint.price.policy import NEAR_BEST, STEP_NOISE_MS, Policy, near_best, price, price_one
from shapelint.price.saving import StepEstimate, StepModel, best_after, inductor_note, step_estimate

__all__ = ["NEAR_BEST", "STEP_NOISE_MS", "Policy", "StepEstimate", "StepModel", "best_after", "deduplicated", "group",
           "inductor_note", "module_glob", "near_best", "price", "price_one", "step_estimate"]
