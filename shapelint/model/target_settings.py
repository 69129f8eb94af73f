"""The settings a target may carry itself, once: the YAML loader reads them from the
target (``shapelint.load.yaml_target``), and the application, which must not import the
loader (it imports torch), asks which of them a target sets so that they win over the
configuration file (``shapelint.app.lint_plan``). Each is a setting of the settings table
(``shapelint.pipeline.settings``), spelt with underscores; ``training`` is the inverse of
its ``inference``.
"""

from __future__ import annotations

#: the settings a shapelint YAML target can carry (the run's flags win over them; they win
#: over the configuration file)
TARGET_SETTINGS = ("dtype", "gpu", "training", "tp", "batch", "seq", "dp", "fsdp", "sp", "gpus_per_node",
                   "fsdp_param_dtype", "fsdp_reduce_dtype")

#: GPUs per machine where nothing says (``--gpus-per-node``'s default and ``Layout``'s):
#: an HGX/DGX node of 8 GPUs on NVLink
GPUS_PER_NODE = 8

__all__ = ["GPUS_PER_NODE", "TARGET_SETTINGS"]
