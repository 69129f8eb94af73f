"""The reporting thresholds' defaults, once: the pricer's ``Policy`` (``shapelint.price``)
and the settings table (``--min-speedup`` ...; ``shapelint.pipeline.settings``) both read
them. They live at the bottom of the layers so that the settings table, which every
command reads, does not import the pricer."""

from __future__ import annotations

#: a finding's speedup on the work it covers must reach this (``--min-speedup``)
MIN_SPEEDUP = 1.05
#: ... and save at least this fraction of that work's time (``--min-loss``)
MIN_LOSS = 0.05
#: a group of findings must save at least this fraction of the step (``--min-step-share``)
MIN_STEP_SHARE = 0.01
#: an ``error`` needs at least this speedup on the work it covers; below it, a warning
ERROR_SPEEDUP = 1.25
#: of the options the pricer picks from (a padded size, FSDP2 blocks per group), the
#: first whose cost is within this fraction of the best counts as reaching it
NEAR_BEST = 0.01
