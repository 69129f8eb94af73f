"""The settings a target carries itself are one list (``shapelint.model.target_settings``)
that the YAML loader reads and the application consults without importing the loader,
each a setting of the settings table; the GPUs per node default is one number."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shapelint.app import lint_plan
from shapelint.load import yaml_target
from shapelint.model.parallel import Layout
from shapelint.model.target_settings import GPUS_PER_NODE, TARGET_SETTINGS
from shapelint.pipeline.settings import SETTINGS, default


def test_one_list_of_target_settings_each_a_setting() -> None:
    assert lint_plan.TARGET_SETTINGS is TARGET_SETTINGS is yaml_target.TARGET_SETTINGS
    assert set(TARGET_SETTINGS) <= yaml_target.YAML_KEYS
    # each a setting of the table (a YAML says ``training: false`` where a flag says --inference)
    assert set(TARGET_SETTINGS) - {"training"} <= {s.attr for s in SETTINGS} and default("inference") is False


def test_the_application_reads_them_without_the_loader(tmp_path: Path) -> None:
    target = tmp_path / "t.yaml"
    target.write_text("model: m:build\ngpus_per_node: 4\ndtype: fp16\nkwargs: {}\n")
    code = ("import sys; from pathlib import Path; from shapelint.app.lint_plan import target_settings; "
            f"print(sorted(target_settings(Path({str(target)!r})))); "
            "print('shapelint.load.yaml_target' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['dtype', 'gpus_per_node']", "False False"]


def test_gpus_per_node_has_one_default() -> None:
    assert Layout().gpus_per_node == default("gpus-per-node") == GPUS_PER_NODE == 8
