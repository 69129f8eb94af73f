"""Every suggestion names a knob the user owns, or the finding is not reported.

A rule names the change the GEMMs need; whether the user can make it depends on the
model, which rules do not see. This stage, after a finding is located, decides:

- **a size no layer parameter sets, in GEMMs of two activations**: a sequence length
  (vit-pytorch's 65 tokens: 64 patches and a class token), a window (SAM's 14 × 14
  windows, Swin's ``window_area`` 49), a relative-position table (WavLM's 1023). No
  weight is in those GEMMs (no ``grad_weight`` phase), and the size is the data's or a
  pretrained architecture's constant: changing it changes what the model computes, not
  only its speed. Not reported (:func:`not_a_knob` says why, for the tests and the docs);
  nor is a size of such GEMMs that no config key gives (MPNet's 514, its sequence length,
  equal to its position table's size, read as a vocabulary).
- **attention written by hand** (SL302): the knob depends on where the attention lives.
  In a Hugging Face model, ``attn_implementation`` is one only when the model class
  supports another implementation (``_supports_sdpa``, ``_supports_flash_attn``,
  ``_supports_flex_attn``) *and* the attention module dispatches on it; shapelint builds
  every model with SDPA where the class takes it, so a hand-written attention left in a
  library model is code the switch does not reach (Pegasus-X refuses SDPA, and its
  encoder's global-local attention is written by hand whatever the setting): the advice
  says so, and what to do instead. ``nn.MultiheadAttention``: ``need_weights=False``.
- **one module, one finding**: repeated layers whose attentions differ in shape (Pegasus-X's
  staggered encoder blocks: 128×1664 and 128×1152 scores) gave the same advice twice for
  one module; they become one finding that names both shapes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import torch

from shapelint.locate.config_keys import NOT_CONFIG_KEYS, is_library
from shapelint.model.records import Finding, Gemm
from shapelint.price.grouping import concatenated, module_glob

#: names of sizes that are a sequence, a window or a position table, not a layer width
SEQUENCE_LIKE = re.compile(r"^size$|window|seq|position|patch(es)?$|length|area|bucket|distance")

#: attention implementations of transformers, and the class flag that says a model takes each
IMPLEMENTATIONS = (("sdpa", "_supports_sdpa"), ("flash_attention_2", "_supports_flash_attn"),
                   ("flex_attention", "_supports_flex_attn"))

#: words in an attention module's forward that show it dispatches on ``attn_implementation``
DISPATCHES = ("ALL_ATTENTION_FUNCTIONS", "_attn_implementation", "attention_interface")


def _sequence_like(f: Finding) -> bool:
    """The suggestion's name, or the layer parameter it stood for, is a sequence's or a window's."""
    names = (f.suggestion.parameter if f.suggestion else "", f.location.code_parameter if f.location else "")
    return any(n and SEQUENCE_LIKE.search(n) for n in names)


def not_a_knob(f: Finding, gemms: dict[int, Gemm]) -> str | None:
    """Why ``f``'s suggestion is no knob the user owns (None: it is one): a size named as
    a sequence or a window, or one no config key gives (MPNet's 514 is the sequence
    length, equal to its position table's size), of GEMMs with no weight in a training
    step (a weight's dimension is a layer size, whatever its name)."""
    s = f.suggestion
    if s is None or not isinstance(s.from_, int) or s.parameter in NOT_CONFIG_KEYS:
        return None  # a run setting (batch, memory format) or a kernel choice is the user's
    named = _sequence_like(f)
    unexplained = f.location is not None and f.location.key is None
    covered = [gemms[i] for i in f.gemms if i in gemms]
    training = any(g.phase != "forward" for g in gemms.values())
    if not (named or (unexplained and training)) or any(g.phase == "grad_weight" for g in covered):
        return None
    return (f"{s.from_} is a sequence, window or position-table size of GEMMs between activations (no weight): "
            f"it is the data's or the architecture's, not a layer size to pad")


def misalignment_without_knob(value: int, gemms: Sequence[Gemm], layer_dims: Collection[int] = ()) -> str | None:
    """Why no knob the user owns aligns the misaligned leading dimension ``value`` of
    ``gemms`` (the GEMMs it is a leading dimension of), or None where a layer size sets it
    (a rule's finding, or a miss). Two causes, both the architecture's or the data's:

    - **a view's row stride**: ``value`` is none of m, n, k of any of the GEMMs: a view of
      a larger tensor (Longformer's and LED's overlapping chunks, rows 3w+1 apart for a
      one-sided window w = attention_window / 2: 769, 1537). The algorithm sets it; no
      window aligns it either: 3w+1 is a multiple of 8 only for odd w, and then the
      chunk length 2w, a dimension of the same GEMMs, is 2 modulo 4.
    - **a sequence, window or position size**: no layer parameter has the value and it
      is no weight's dimension (m or n of a ``grad_weight`` GEMM; its k is the token
      count): SpeechT5's 1023 encoder frames in its attention and relative-position
      matmuls, the data's length or a pretrained constant (:func:`not_a_knob` says the
      same of a finding). Not where ``value`` splits one of the model's ``layer_dims``
      (its weights' sizes) into two or more equal parts: a head dimension (hidden size
      over heads; a head dim of 100 at hidden 1200), which the head count sets. A
      sequence that happens to divide a weight's size (100 tokens at hidden 1200) counts
      as a knob too: the records cannot tell the two apart, and the recall benchmark then
      counts it against recall, never for it."""
    if not gemms:
        return None
    if all(value not in (g.m, g.n, g.k) for g in gemms):
        return (f"{value} is the row stride of a view (a larger tensor's rows, as the model's algorithm lays them "
                f"out), none of the GEMMs' sizes: no layer size or setting aligns it")
    if any(g.param(value) or (g.phase == "grad_weight" and value in (g.m, g.n)) for g in gemms):
        return None  # a weight's dimension (a gradient's k is the token count: not one)
    if any(dim > value and dim % value == 0 for dim in layer_dims):
        return None  # a head dimension: the hidden size over the head count
    return (f"{value} is a sequence, window or position size of GEMMs between activations (no weight): "
            f"the data's length or the architecture's, not a layer size to pad")


def actionable(findings: Sequence[Finding], gemms: dict[int, Gemm]) -> list[Finding]:
    """The findings whose suggestion is a knob (:func:`not_a_knob`)."""
    return [f for f in findings if not_a_knob(f, gemms) is None]


# -- attention ------------------------------------------------------------------------

def _library_model(model: torch.nn.Module) -> torch.nn.Module | None:
    """The outermost Hugging Face model in ``model`` (``model`` itself for a config target)."""
    for m in model.modules():
        if hasattr(type(m), "_supports_sdpa") and hasattr(m, "config"):
            return m
    return None


def _dispatches(module: torch.nn.Module) -> bool:
    try:
        source = inspect.getsource(type(module).forward)
    except (OSError, TypeError):
        return False
    return any(word in source for word in DISPATCHES)


#: boolean attributes of an attention module that select a fused kernel (x-transformers'
#: ``Attend.flash``, timm's ``fused_attn``)
FUSED_SWITCH = re.compile(r"^(use_)?(flash|sdpa|fused|flash_attn|fused_attn|memory_efficient)$")


def _fused_switch(module: torch.nn.Module) -> str | None:
    """``Class.attr`` of a switch to a fused kernel that is off, in ``module`` or below it."""
    for m in module.modules():
        for name, value in vars(m).items():
            if value is False and FUSED_SWITCH.match(name):
                return f"{type(m).__name__}.{name}"
    return None


def _installed(module: torch.nn.Module | None) -> str:
    """For attention in installed code that is no Hugging Face model's (perceiver-pytorch):
    no argument reaches it. The user's own code: nothing to add (the suggestion says it)."""
    if module is None:
        return ""
    try:
        file = inspect.getsourcefile(type(module))
    except TypeError:
        file = None
    if file is None or not is_library(file):
        return ""
    package = type(module).__module__.split(".", 1)[0]
    switch = _fused_switch(module)
    if switch is not None:
        return (f"{switch} is False: {package} has a fused attention path behind it; turn it on before the model "
                f"is built (x-transformers: attn_flash=True; timm: timm.layers.set_fused_attn(True, "
                f"experimental=True) or TIMM_FUSED_ATTN=2)")
    return (f"{type(module).__name__} is {package}'s code (installed): no argument changes how it computes "
            f"attention; a fused kernel needs its forward rewritten with F.scaled_dot_product_attention, or "
            f"an attention module that calls it")


def attention_advice(f: Finding, model: torch.nn.Module) -> str:
    """What the user can do about ``f``'s hand-written attention in ``model``."""
    try:
        module = model.get_submodule("" if f.module == "<root>" else (f.modules or (f.module,))[0])
    except AttributeError:
        module = None
    if isinstance(module, torch.nn.MultiheadAttention):
        return ""  # the rule names need_weights=False
    hf = _library_model(model)
    if hf is None or module is None or hf is module:
        return _installed(module)
    cls = type(hf).__name__
    supported = [impl for impl, flag in IMPLEMENTATIONS if getattr(type(hf), flag, False)]
    if _dispatches(module) and supported:
        impls = " or ".join(f'"{i}"' for i in supported)
        return (f"build {cls} with attn_implementation={impls} (from_pretrained, from_config): the class "
                f"supports it and this attention follows the setting")
    refused = "" if "sdpa" in supported else " (the class refuses attn_implementation=\"sdpa\": _supports_sdpa is False)"
    return (f"transformers' {type(module).__name__} writes this attention by hand whatever attn_implementation "
            f"{cls} is built with{refused}: no setting changes it; a fused kernel needs that module's forward "
            f"rewritten with F.scaled_dot_product_attention (a subclass swapped in), or an architecture with "
            f"SDPA attention")


def _shape(f: Finding, gemms: dict[int, Gemm]) -> str:
    """``Tq x Tk`` of a hand-written attention: its first GEMM, QKᵀ, is (Tq × Tk)."""
    g = gemms.get(f.gemms[0]) if f.gemms else None
    return f"{g.m}x{g.n}" if g is not None else "?"


def _summed(members: Sequence[Finding]) -> dict[str, Any]:
    """The fields of a merged finding that add up over its members."""
    saved = [f.step_ms_saved for f in members if f.step_ms_saved is not None]
    return dict(concatenated(members), est_ms=sum(f.est_ms for f in members),
                est_ms_after=sum(f.est_ms_after for f in members), step_ms_saved=sum(saved) if saved else None)


def _merged(members: Sequence[Finding], gemms: dict[int, Gemm]) -> Finding:
    """One finding for ``members`` (one rule, one suggestion, one module glob): the
    largest's message, naming the other shapes; the work and savings summed."""
    first = max(members, key=lambda f: f.saved_ms)
    shapes = dict.fromkeys(_shape(f, gemms) for f in members if f is not first)
    shapes.pop(_shape(first, gemms), None)
    also = f" (and the {', '.join(shapes)} scores of its other layers)" if shapes else ""
    modules = tuple(dict.fromkeys(m for f in members for m in (f.modules or (f.module,))))
    return replace(first, message=first.message.replace(" score matrix", " score matrix" + also, 1),
                   module=module_glob(modules), modules=modules, **_summed(members))


def one_per_module(findings: Sequence[Finding], gemms: dict[int, Gemm]) -> list[Finding]:
    """Findings of one rule with one suggestion on one module glob merged (:func:`_merged`)."""
    groups: dict[Any, list[Finding]] = {}
    for f in findings:
        key = (f.code, f.suggestion, module_glob(f.modules or (f.module,))) if f.code == "SL302" else id(f)
        groups.setdefault(key, []).append(f)
    return [members[0] if len(members) == 1 else _merged(members, gemms) for members in groups.values()]


def advise(findings: Sequence[Finding], model: torch.nn.Module, gemms: Sequence[Gemm]) -> list[Finding]:
    """The findings a user can act on, each naming the knob (see the module's docstring)."""
    by_index = {g.index: g for g in gemms}
    out = []
    for f in one_per_module(actionable(findings, by_index), by_index):
        s = f.suggestion
        advice = attention_advice(f, model) if s is not None and s.parameter == "attention" else ""
        if advice:
            f = replace(f, message=f"{f.message}; {advice}")
        if s is not None and advice.startswith("build ") and isinstance(s.to, str):
            f = replace(f, suggestion=replace(s, to=advice.split(" (", 1)[0].split(" with ", 1)[1]))
        out.append(f)
    return out


__all__ = ["actionable", "advise", "attention_advice", "misalignment_without_knob", "not_a_knob", "one_per_module"]
