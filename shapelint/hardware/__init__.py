"""GPU profiles: every hardware number, read from one YAML file per GPU, and their checks.

``Hardware`` and ``StepProfile`` (:mod:`.profile`) are what the stages price on; the
profiles are found, read and checked by :mod:`.registry` (the entry:
:func:`~shapelint.hardware.registry.resolve` a GPU by name,
:func:`~shapelint.hardware.registry.load_profile_file` a profile file) and
:mod:`.check`. The public names are re-exported here:
``from shapelint.hardware import Hardware, resolve``.
"""

from shapelint.hardware.profile import STEP_KEYS, Hardware, StepProfile, ceil_div
from shapelint.hardware.registry import (
    DEFAULT_GPU,
    PROFILE_DIR,
    builtin_profiles,
    default_gpu,
    known_names,
    load_profile_file,
    local_gpu,
    profile_from_dict,
    resolve,
)

__all__ = ["DEFAULT_GPU", "PROFILE_DIR", "STEP_KEYS", "Hardware", "StepProfile", "builtin_profiles", "ceil_div",
           "default_gpu", "known_names", "load_profile_file", "local_gpu", "profile_from_dict", "resolve"]
