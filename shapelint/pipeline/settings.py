"""Every setting once: its name, type, default, validation and help.

The command line (``--min-speedup 1.1``), ``[tool.shapelint]`` in ``pyproject.toml``
and ``.shapelint.yaml`` (``min-speedup = 1.1``; ``min_speedup`` is accepted too) all
read this table. A value that is not given is ``None``, never a valid value, so that
the precedence flag > the target's own setting > the configuration file > the default
can tell "not given" from "given as the default".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

from shapelint.errors import ShapelintError
from shapelint.files import INT64_MAX
from shapelint.model.dtypes import FSDP_DTYPES, PRECISION_NAMES
from shapelint.model.target_settings import GPUS_PER_NODE
from shapelint.model.thresholds import MIN_LOSS, MIN_SPEEDUP, MIN_STEP_SHARE

#: compute precisions a user may ask for (``--dtype`` and the ``dtype`` key)
DTYPES = PRECISION_NAMES
#: report formats (``--format`` and the ``format`` key)
FORMATS = ("text", "json", "sarif", "github", "concise")
#: optimizers the step model prices (``--optimizer`` and the ``optimizer`` key)
OPTIMIZERS = ("adamw", "adam", "sgd", "none")

Kind = Literal["gpu", "dtype", "fsdp-dtype", "format", "optimizer", "positive", "number", "fraction", "bool", "codes",
               "per-module", "modules", "paths"]


@dataclass(frozen=True)
class Settings:
    """Values of every setting; None: not given (see ``SETTINGS`` for what each means)."""

    gpu: str | None = None
    dtype: str | None = None
    inference: bool | None = None
    batch: int | None = None
    seq: int | None = None
    tp: int | None = None
    dp: int | None = None
    fsdp: int | None = None
    sp: bool | None = None
    gpus_per_node: int | None = None
    fsdp_param_dtype: str | None = None
    fsdp_reduce_dtype: str | None = None
    format: str | None = None
    select: list[str] | None = None
    ignore: list[str] | None = None
    per_module_ignores: dict[str, list[str]] | None = None
    min_speedup: float | None = None
    min_loss: float | None = None
    min_step_share: float | None = None
    exit_zero: bool | None = None
    compile: bool | None = None
    optimizer: str | None = None
    allow_builders: list[str] | None = None
    targets: list[str] | None = None
    extend_select: list[str] | None = None
    extend_ignore: list[str] | None = None
    gemms: bool | None = None


@dataclass(frozen=True)
class Setting:
    """One setting: ``key`` is its configuration spelling (hyphens) and, with ``--``,
    its flag (``flag=False``: configuration files only); ``default`` the value used
    when nothing sets it (None: decided at run time, as the GPU is)."""

    key: str
    kind: Kind
    help: str
    default: Any = None
    flag: bool = True

    @property
    def attr(self) -> str:
        return self.key.replace("-", "_")


SETTINGS: tuple[Setting, ...] = (
    Setting("gpu", "gpu", "GPU profile (default: the local CUDA GPU, else h100)"),
    Setting("dtype", "dtype", "compute precision of the matmuls, as autocast runs them (default bf16)", "bf16"),
    Setting("inference", "bool", "forward only (default: forward and backward); --no-inference undoes a "
                                 "config's inference = true", False),
    Setting("batch", "positive", "batch size for config targets and shapelint_model(batch=...) (default 8 for "
                                 "configs)"),
    Setting("seq", "positive", "sequence length, likewise (default 1024 for configs)"),
    Setting("tp", "positive", "tensor-parallel degree (Megatron-style sharding; default 1)", 1),
    Setting("dp", "positive", "data-parallel degree: DDP replicas, each with its own --batch (default 1)", 1),
    Setting("fsdp", "positive", "sharded data-parallel degree: FSDP2 fully_shard per block, each rank its own "
                                "--batch (default 1)", 1),
    Setting("sp", "bool", "sequence parallelism with --tp: reduce-scatter and all-gather instead of all-reduce "
                          "(default: off)", False),
    Setting("gpus-per-node", "positive", "GPUs per machine (NVLink within one, the network between them; "
                                         f"default {GPUS_PER_NODE})", GPUS_PER_NODE),
    Setting("fsdp-param-dtype", "fsdp-dtype", "with --fsdp above 1 (ignored without): the dtype FSDP2 all-gathers "
                                              "the parameters in (MixedPrecisionPolicy(param_dtype=...)), priced on "
                                              "the collectives; the GEMMs keep --dtype's precision; default fp32, "
                                              "no policy", "fp32"),
    Setting("fsdp-reduce-dtype", "fsdp-dtype", "with --fsdp above 1 (ignored without): the dtype FSDP2 reduce-scatters "
                                               "the gradients in "
                                               "(MixedPrecisionPolicy(reduce_dtype=...)); default: "
                                               "--fsdp-param-dtype's, as FSDP2's"),
    Setting("format", "format", "report format: text, json, sarif (GitHub code scanning), github (workflow "
                                "annotations), concise (one line per finding: path:line:col: CODE message); "
                                "default text (--output-format is the same flag, as ruff spells it)", "text"),
    Setting("select", "codes", "only these rule codes/prefixes/names, comma-separated", []),
    Setting("ignore", "codes", "skip these rule codes/prefixes/names, comma-separated", []),
    Setting("per-module-ignores", "per-module", "module-path glob → rule codes to skip there", {}, flag=False),
    Setting("min-speedup", "number", "report findings whose estimated speedup on the work they cover is at "
                                     f"least X (default {MIN_SPEEDUP})", MIN_SPEEDUP),
    Setting("min-loss", "fraction", "report findings that save at least this fraction of the time of the "
                                    f"work they cover (default {MIN_LOSS})", MIN_LOSS),
    Setting("min-step-share", "fraction", "report findings that save at least this fraction of the "
                                          f"estimated training step (default {MIN_STEP_SHARE})", MIN_STEP_SHARE),
    Setting("exit-zero", "bool", "exit 0 even with findings (errors still exit 2)", False),
    Setting("compile", "bool", "price the step as torch.compile (Inductor, default mode) runs it: fused "
                               "elementwise chains, GEMMs that pad_mm pads itself (default: eager)", False),
    Setting("optimizer", "optimizer", "the optimizer step the step model prices: adamw (fused, the default), "
                                      "adam, sgd, or none", "adamw"),
    Setting("allow-builders", "modules", "packages outside a YAML target's project whose builders its model: may "
                                         "name, e.g. [\"mypkg.models\"]", [], flag=False),
    Setting("targets", "paths", "what `shapelint` with no TARGET lints: files, directories and globs, relative to "
                                "the configuration file", [], flag=False),
    Setting("extend-select", "codes", "also these rule codes/prefixes/names, on top of select (or of the default "
                                      "set), comma-separated; e.g. SL900 (unused suppressions)", []),
    Setting("extend-ignore", "codes", "also skip these rule codes/prefixes/names, on top of ignore, "
                                      "comma-separated", []),
    Setting("gemms", "bool", "the JSON report's gemms list, one record per GEMM (--no-gemms leaves it out: "
                             "a 50-config folder wrote 38 MB, 26,814 records)", True),
)

BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}


#: another spelling of a key, as ruff's configuration spells it
ALIASES = {"output-format": "format"}


def canonical(key: str) -> str:
    key = key.replace("_", "-")
    return ALIASES.get(key, key)


def default(key: str) -> Any:
    return BY_KEY[key].default


def or_default(value: Any, key: str) -> Any:
    """``value``, or the setting ``key``'s default when it is not given (None)."""
    return value if value is not None else default(key)


def merged(*layers: Settings) -> Settings:
    """The first given value of each setting, layer by layer (highest precedence first)."""
    values = {}
    for f in fields(Settings):
        values[f.name] = next((getattr(s, f.name) for s in layers if getattr(s, f.name) is not None), None)
    return Settings(**values)


# -- values -------------------------------------------------------------------


def describe(value: Any) -> str:
    """``an integer (3)``: a value's kind, for messages."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _codes(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise ShapelintError(f"{where}: expected a list of rule codes, got {describe(value)}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ShapelintError(f"{where}: expected rule codes (strings), got {describe(item)}")
        if item.strip():
            out.append(item.strip())
    return out


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShapelintError(f"{where}: expected a number, got {describe(value)}")
    return float(value)


def _gpu(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ShapelintError(f"{where}: expected a GPU name, got {describe(value)}")
    from shapelint import hardware

    try:
        hardware.resolve(value)
    except ShapelintError as exc:
        raise ShapelintError(f"{where}: {exc}") from None
    return value.strip()


def _choice(choices: tuple[str, ...]) -> Callable[[Any, str], str]:
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ShapelintError(f"{where}: expected one of {', '.join(choices)}, got {describe(value)}")
        return value
    return check


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapelintError(f"{where}: expected a positive integer, got {describe(value)}")
    if value <= 0:
        raise ShapelintError(f"{where}: must be a positive integer, got {value}")
    if value > INT64_MAX:  # no tensor dimension can be larger
        raise ShapelintError(f"{where}: must be at most {INT64_MAX} (int64), got {value}")
    return value


def _positive_number(value: Any, where: str) -> float:
    x = _number(value, where)
    if not 0 < x < float("inf"):
        raise ShapelintError(f"{where}: must be a positive number, got {value}")
    return x


def _fraction(value: Any, where: str) -> float:
    x = _number(value, where)
    if not 0 <= x < 1:
        raise ShapelintError(f"{where}: must be at least 0 and below 1, got {value}")
    return x


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ShapelintError(f"{where}: expected true or false, got {describe(value)}")
    return value


def _per_module(value: Any, where: str) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        raise ShapelintError(f"{where}: expected a mapping of module glob → rule codes, got {describe(value)}")
    out: dict[str, list[str]] = {}
    for pattern, codes in value.items():
        if not isinstance(pattern, str) or not pattern:
            raise ShapelintError(f"{where}: module globs must be non-empty strings, got {describe(pattern)}")
        out[pattern] = _codes(codes, f"{where}.{pattern}")
    return out


def _modules(value: Any, where: str) -> list[str]:
    from shapelint.load.builders import ALLOW_KEY, parse_allow_list

    return parse_allow_list(value, where.removesuffix(f": {ALLOW_KEY}"))


def _paths(value: Any, where: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ShapelintError(f"{where}: expected a list of paths or globs (non-empty strings), got {describe(value)}")
    return [i.strip() for i in items]


#: each kind's validator: a parsed value (TOML/YAML/JSON, or converted from a flag) → the setting's value
VALIDATORS: dict[Kind, Callable[[Any, str], Any]] = {
    "gpu": _gpu,
    "dtype": _choice(DTYPES),
    "fsdp-dtype": _choice(FSDP_DTYPES),
    "format": _choice(FORMATS),
    "optimizer": _choice(OPTIMIZERS),
    "positive": _positive,
    "number": _positive_number,
    "fraction": _fraction,
    "bool": _bool,
    "codes": _codes,
    "per-module": _per_module,
    "modules": _modules,
    "paths": _paths,
}


#: the placeholder of a flag's value in ``--help``, by kind (others: ``N``)
METAVARS: dict[Kind, str] = {"gpu": "NAME", "codes": "CODES", "number": "X", "fraction": "X"}

#: the choice kinds and their values (argparse's ``choices=``)
CHOICES: dict[Kind, tuple[str, ...]] = {"dtype": DTYPES, "fsdp-dtype": FSDP_DTYPES, "format": FORMATS,
                                        "optimizer": OPTIMIZERS}


def validate(setting: Setting, value: Any, where: str) -> Any:
    return VALIDATORS[setting.kind](value, where)


# -- the command line ----------------------------------------------------------


def _from_text(setting: Setting) -> Callable[[str], Any]:
    """argparse's ``type=`` for a setting: the flag's text, converted, then validated
    like a configuration value (argparse turns the ShapelintError into its message)."""

    def convert(text: str) -> Any:
        value: Any = text
        if setting.kind == "gpu":
            return text  # resolved (with the list of known GPUs) where the profile is loaded
        if setting.kind == "positive":
            try:
                value = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
        elif setting.kind in ("number", "fraction"):
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        try:
            return validate(setting, value, "value")
        except ShapelintError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None

    convert.__name__ = setting.key
    return convert


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting that has one; every flag defaults to None (not given)."""
    for s in SETTINGS:
        if not s.flag:
            continue
        if s.kind == "bool":
            parser.add_argument(f"--{s.key}", action=argparse.BooleanOptionalAction, default=None, help=s.help)
        elif s.kind in CHOICES:
            parser.add_argument(f"--{s.key}", choices=CHOICES[s.kind], default=None, help=s.help)
        else:
            metavar = METAVARS.get(s.kind, "N")
            parser.add_argument(f"--{s.key}", type=_from_text(s), default=None, metavar=metavar, help=s.help)


def from_args(args: argparse.Namespace) -> Settings:
    return Settings(**{s.attr: getattr(args, s.attr) for s in SETTINGS if s.flag})
