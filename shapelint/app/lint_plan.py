"""How each target is linted, resolved once for the command line and the Python API
alike: the rules (loaded, checked against the configuration, selected), each target's
``Options`` and GPU by one precedence, and the suppression applied to its result.

The precedence of a setting: a flag (or an API keyword) > the target's own setting
(a shapelint YAML's ``dtype``, ``gpu``, ``batch``...: ``TARGET_SETTINGS``) >
the configuration file > the built-in default. The settings a target cannot set (the
reporting policy, ``allow-builders``) come from the flags and the configuration alone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shapelint.app.config import Config
from shapelint.errors import ShapelintError
from shapelint.model.target_settings import TARGET_SETTINGS
from shapelint.pipeline.settings import Settings, merged, or_default

if TYPE_CHECKING:
    from shapelint.app.suppression import Suppression
    from shapelint.check.rule_api import Rule
    from shapelint.check.selection import Named
    from shapelint.hardware import Hardware
    from shapelint.pipeline.result import Options

#: the reporting policy's settings (``shapelint.price.Policy``'s fields, hyphenated)
POLICY_SETTINGS = ("min-loss", "min-speedup", "min-step-share")

#: one target's lint: its path, options and GPU (None: the target's own, else the default GPU)
Job = tuple[Path, "Options", "Hardware | None"]


@dataclass(frozen=True)
class RuleSet:
    """The rules of a run: every loaded rule (``known``: the codes and names an ignore
    comment may name), the selected ones, in order, and the application's own checks
    selected (``meta``: codes of :data:`shapelint.app.rule_index.META`)."""

    loaded: Sequence[Rule]
    selected: list[Rule]
    meta: frozenset[str] = frozenset()

    @property
    def known(self) -> frozenset[str]:
        from shapelint.app.rule_index import META

        return frozenset({r.code for r in self.loaded} | {r.name for r in self.loaded}
                         | {m.code for m in META} | {m.name for m in META})


def selected_codes(rules: Sequence[Named], settings: Settings) -> list[str]:
    """The codes ``settings`` select among ``rules`` and the application's own checks
    (:mod:`shapelint.check.selection`; an opt-in check only when named)."""
    from shapelint.app.rule_index import META
    from shapelint.check import selection

    every: list[Named] = [*rules, *META]
    chosen = selection.select(every, select=settings.select, ignore=settings.ignore or [],
                              extend_select=settings.extend_select or [], extend_ignore=settings.extend_ignore or [],
                              opt_in=frozenset(m.code for m in META if m.opt_in))
    return [r.code for r in chosen]


def select_rules(settings: Settings, config: Config | None = None, rules_dirs: Sequence[str] = ()) -> RuleSet:
    """The built-in rules and those of ``rules_dirs``; the configuration's rule codes
    checked (an unknown one is an error naming its file and line); the ``select``,
    ``ignore``, ``extend-select`` and ``extend-ignore`` of ``settings`` applied."""
    from shapelint.app.rule_index import META
    from shapelint.check import run as check

    loaded = check.load_rules(rules_dirs)
    if config is not None:
        check_config_codes(config, loaded)
    codes = set(selected_codes(loaded, settings))
    return RuleSet(loaded, [r for r in loaded if r.code in codes], frozenset(m.code for m in META if m.code in codes))


def select_infos(settings: Settings, config: Config | None = None, rules_dirs: Sequence[str] = ()) -> list[Any]:
    """The selected rules as :class:`~shapelint.app.rule_index.RuleInfo` (read, not
    imported, unless ``rules_dirs`` are given): what ``--list-rules`` and
    ``--show-settings`` print without importing torch."""
    from shapelint.app import rule_index

    infos = rule_index.rules(rules_dirs)
    if config is not None:
        check_config_codes(config, infos)
    codes = set(selected_codes([r for r in infos if r not in rule_index.META], settings))
    return [r for r in infos if r.code in codes]


def check_config_codes(cfg: Config, rules: Sequence[Named]) -> None:
    """Unknown rule codes in the configuration file: an error naming the file and line."""
    from shapelint.app.rule_index import META
    from shapelint.check import selection

    if cfg.file is None:
        return
    checks = [(key, getattr(cfg, key.replace("-", "_")) or [])
              for key in ("select", "ignore", "extend-select", "extend-ignore")]
    checks += [("per-module-ignores", codes) for codes in (cfg.per_module_ignores or {}).values()]
    for key, codes in checks:
        try:
            selection.check_codes([*rules, *(m for m in META if m not in rules)], codes)
        except ShapelintError as exc:
            raise ShapelintError(f"{cfg.where(key)}: {key}: {exc}") from None


def target_settings(path: Path) -> set[str]:
    """The settings a YAML target sets itself (they win over the configuration file)."""
    from shapelint.load.documents import read_yaml
    from shapelint.load.targets import YAML_SUFFIXES

    if path.suffix not in YAML_SUFFIXES or not path.is_file():
        return set()
    try:
        doc = read_yaml(path)
    except ShapelintError:
        raise
    except Exception:
        return set()
    return {k for k in TARGET_SETTINGS if k in doc}


@dataclass(frozen=True)
class LintPlan:
    """The settings given (``flags``: the command line's, or the API's keywords), the
    configuration (empty for the API), the selected rules, and the GPUs: ``gpu`` for
    every target (``--gpu-profile``, ``--gpu``), ``config_gpu`` for the targets that
    name none themselves."""

    flags: Settings
    rules: RuleSet
    config: Config = field(default_factory=Config)
    gpu: Hardware | None = None
    config_gpu: Hardware | None = None

    def options(self, own: Collection[str] = (), dump_graph: str | None = None) -> Options:
        """One target's options; ``own``: the settings the target sets itself, left
        None here so that the target's value applies (``lint_target`` applies the
        built-in defaults last)."""
        from shapelint.pipeline.result import Options
        from shapelint.price import Policy

        fixed = merged(self.flags, self.config)  # the settings a target cannot set

        def pick(attr: str, setting: str | None = None) -> Any:
            value = getattr(self.flags, attr)
            if value is not None:
                return value
            return None if (setting or attr) in own else getattr(self.config, attr)

        inference = pick("inference", "training")
        return Options(
            dtype=pick("dtype"),
            training=None if inference is None else not inference,
            batch=pick("batch"),
            seq=pick("seq"),
            tp=pick("tp"),
            dp=pick("dp"),
            fsdp=pick("fsdp"),
            sp=pick("sp"),
            gpus_per_node=pick("gpus_per_node"),
            fsdp_param_dtype=pick("fsdp_param_dtype"),
            fsdp_reduce_dtype=pick("fsdp_reduce_dtype"),
            compile=pick("compile"),
            optimizer=pick("optimizer"),
            dump_graph=dump_graph,
            allow_builders=tuple(self.config.allow_builders or ()),
            policy=Policy(**{key.replace("-", "_"): or_default(getattr(fixed, key.replace("-", "_")), key)
                             for key in POLICY_SETTINGS}),
        )

    def job(self, path: Path, dump_graph: str | None = None) -> Job:
        """``path``'s lint: its options (with its own settings read from its YAML) and GPU."""
        own = target_settings(path)
        hw = self.gpu if self.gpu is not None else None if "gpu" in own else self.config_gpu
        return path, self.options(own, dump_graph), hw

    def suppression(self) -> Suppression:
        """The suppression of this plan's results (each file read once)."""
        from shapelint.app.rule_index import UNUSED_SUPPRESSION
        from shapelint.app.suppression import Suppression

        return Suppression(self.config.per_module_ignores, self.rules.known,
                           report_unused=UNUSED_SUPPRESSION.code in self.rules.meta,
                           ran=frozenset(n for r in self.rules.selected for n in (r.code, r.name)))


__all__ = ["POLICY_SETTINGS", "TARGET_SETTINGS", "Job", "LintPlan", "RuleSet", "check_config_codes", "select_infos",
           "select_rules", "selected_codes", "target_settings"]
