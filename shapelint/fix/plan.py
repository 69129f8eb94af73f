"""Plan ``--fix``: for each reported finding, the edits of the value tokens that set the
size it changes, or the reason there are none.

What can be edited (only the value's characters change; the rest of the file stays
byte-identical):

- the value token of the key of a Hugging Face ``config.json`` that
  ``shapelint.locate.config_keys`` found (the finding's ``ConfigLocation``;
  :mod:`shapelint.fix.config_edits`);
- a decimal integer in a shapelint YAML: at the key the finding points at, else the
  one integer of that value under ``kwargs``/``hf_config`` (with the example inputs'
  width for an input size);
- the integer literal that provably sets the size at the call the finding points at
  (:mod:`shapelint.fix.python_edits`), with the sizes the code proves grow with it (the
  layer it feeds, the example input, the embedding of the same vocabulary).

Anything else is not edited, and the finding says why: a computed size, a name
shapelint cannot follow to one literal, a companion it cannot prove, a file outside
the project, an installed package, a file reached through a symlink that leaves the
project, a hard-linked or read-only file, a YAML integer not written in decimal, a
run setting such as the dtype, and any size of a pretrained checkpoint's config
(weights beside it, or ``_name_or_path``/``torch_dtype``/``dtype``): its vocabulary is padded in
code instead (:mod:`shapelint.locate.pretrained`). A fix that changes what the model
computes beyond padding (a head dimension, the number of heads, a smaller layer) is
unsafe and needs ``--unsafe-fixes``. Of two fixes whose edits conflict, the first
is kept (:mod:`shapelint.fix.edits`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from shapelint.fix.chain import IN_PARAMETERS
from shapelint.fix.config_edits import check_json, json_spans
from shapelint.fix.edits import Edit, Taken, apply_text, conflicts, take
from shapelint.fix.files import Doc, NotFixed, named, read_doc, writable
from shapelint.fix.python_edits import python_spans
from shapelint.fix.yaml_edits import yaml_spans
from shapelint.locate import pretrained as pretrained
from shapelint.locate.config_keys import NOT_CONFIG_KEYS, is_library, leaf
from shapelint.model.locations import ConfigLocation
from shapelint.model.records import Finding
from shapelint.physics.attention import HEAD_DIM_PARAMS, HEADS_PARAMS
from shapelint.pipeline.result import Result

#: sizes that grow by padding (zero weights for the new units, zeros fed to new inputs):
#: the model computes the same; every other size change is unsafe
VOCAB_PARAMETERS = ("vocab_size", "num_embeddings", "n_vocab", "padded_vocab_size")
OUTPUT_PARAMETERS = ("out_features", "out_channels", "intermediate_size", "n_inner", "d_ff", "ffn_dim",
                     "dim_feedforward", "ffn_hidden_size", "moe_intermediate_size", "intermediate_dim")
INPUT_PARAMETERS = ("in_features", "in_channels")
PADDING_PARAMETERS = VOCAB_PARAMETERS + OUTPUT_PARAMETERS + INPUT_PARAMETERS

#: why a fix whose edits conflict with an earlier fix's is dropped
CONFLICT = "conflicts with another fix of the same value"


@dataclass(frozen=True)
class Planned:
    """What ``--fix`` does for one finding: ``edits`` (none: ``reason`` says why)."""

    finding: Finding
    target: str
    edits: tuple[Edit, ...] = ()
    reason: str = ""
    unsafe: bool = False
    caveat: str = ""

    @property
    def fixable(self) -> bool:
        return bool(self.edits) and not self.reason


def is_safe(parameter: str, from_: int, to: int) -> bool:
    return to > from_ and parameter in PADDING_PARAMETERS


def caveat(parameter: str, from_: int, to: int, vocab: bool = False) -> str:
    """What the user must do besides the edit (``vocab``: the size is a vocabulary's)."""
    grow = to - from_
    if not is_safe(parameter, from_, to):
        kind = "the attention" if parameter in HEAD_DIM_PARAMS + HEADS_PARAMS else "the layer"
        return (f"changes what the model computes beyond padding ({parameter} {from_} → {to} changes the parameter "
                f"count and {kind}): retrain, checkpoints do not load as they are")
    if vocab or parameter in VOCAB_PARAMETERS:
        return (f"the tokenizer keeps its {from_} tokens: slice the logits (logits[..., :{from_}]) or mask the "
                f"{grow} padded ones (shapelint.padding.mask_padded_logits) before the loss and sampling")
    if parameter in INPUT_PARAMETERS:
        return f"{grow} new inputs: feed them zeros (shapelint.padding.pad_input_features) or widen what feeds them"
    return (f"{grow} new units: give a checkpoint zero weights for them (shapelint.padding.pad_linear / pad_conv) "
            f"and its outputs stay the same")


def linted_digests(results: Sequence[Result]) -> dict[Path, set[str]] | None:
    """real path -> the SHA-256 digests of the bytes the lint read of it (two targets may
    have read it at different times); None when a result does not say what its lint read
    (a model linted from Python, whose files the application did not record; a re-lint's
    result, which ``--verify --step`` plans copies of)."""
    if not results or not all(r.inputs for r in results):
        return None
    out: dict[Path, set[str]] = {}
    for r in results:
        for file, sha in r.inputs:
            out.setdefault(Path(os.path.realpath(file)), set()).add(sha)
    return out


class PlanFiles:
    """The files a plan reads, each once (every edit of a file is an offset into the same
    text); with a project ``root``, only files ``--fix`` may write (:func:`writable`).
    With ``linted`` (:func:`linted_digests`), only a file that still holds the bytes
    the lint read: the findings, lines and values were computed from those bytes, so an
    edit made since (by the user, an editor's save, a formatter) would make the fix
    edit a token it never proved is the size."""

    def __init__(self, root: Path | None, targets: Sequence[str] = (),
                 linted: dict[Path, set[str]] | None = None) -> None:
        self.root = root
        self.named = named(targets)
        self.linted = linted
        self.docs: dict[Path, Doc] = {}

    def doc(self, path: Path) -> Doc:
        if self.root is not None:
            real = writable(path, self.root, self.named)
        else:
            real = Path(os.path.realpath(path))
            if is_library(str(real)):
                raise NotFixed(f"{path} is an installed package's file: change the size in your own code")
        if real not in self.docs:
            self.docs[real] = self._as_linted(path, read_doc(real))
        return self.docs[real]

    def _as_linted(self, path: Path, doc: Doc) -> Doc:
        if self.linted is None:
            return doc
        seen = self.linted.get(Path(os.path.realpath(doc.path)))
        if seen is None:
            raise NotFixed(f"{path} is not among the files the lint read; run shapelint again")
        if seen != {hashlib.sha256(doc.raw).hexdigest()}:
            raise NotFixed(f"{path} changed since it was linted; run shapelint again")
        return doc


def plan(results: Sequence[Result], *, unsafe: bool, root: Path | None = None) -> list[Planned]:
    """One entry per reported (not suppressed) finding; edits that conflict with an
    earlier fix's are dropped with a reason. ``root``: the project, the only place
    edits may be written besides the targets' own files (None: plan only, as
    ``--verify --step`` does for its copies)."""
    out: list[Planned] = []
    files = PlanFiles(root, [t for r in results for t in (r.target, r.config_file) if t],
                      linted_digests(results) if root is not None else None)
    taken: Taken = {}
    for r in results:
        for f in r.findings:
            if f.suppressed:
                continue
            p = plan_one(r, f, unsafe, files)
            if p.fixable and conflicts(p.edits, taken):
                p = replace(p, edits=(), reason=CONFLICT)
            if p.fixable:
                take(p.edits, taken)
            out.append(p)
    return out


def plan_one(r: Result, f: Finding, unsafe: bool, files: PlanFiles) -> Planned:
    """The edits of one finding's fix, or why there are none."""
    s = f.suggestion
    if s is None:
        return Planned(f, r.target, reason="the finding suggests no value")
    if f.not_fixed:  # what locating the finding found that one edit cannot fix
        return Planned(f, r.target, reason=f.not_fixed)
    if s.parameter in NOT_CONFIG_KEYS or not isinstance(s.from_, int) or not isinstance(s.to, int):
        return Planned(f, r.target, reason=f"{s.parameter} is how the model runs, not a size in a file")
    names = (s.parameter, f.code_parameter or s.parameter)
    try:
        edits, keys = _locate(r, f, names, s.from_, str(s.to), files)
    except NotFixed as exc:
        return Planned(f, r.target, reason=str(exc))
    # the name that says what the edited value sizes: the suggestion's, else the YAML
    # key the edit lands on (``kwargs: {d: 1023}``: ``d`` may size more than this layer)
    parameter = next((k for k in keys if not is_safe(k, s.from_, s.to)), s.parameter)
    safe = is_safe(parameter, s.from_, s.to)
    reason = "" if safe or unsafe else "unsafe fix (it changes what the model computes): rerun with --unsafe-fixes"
    return Planned(f, r.target, edits, reason, not safe, caveat(parameter, s.from_, s.to, f.vocab is not None))


def _ambiguous(f: Finding, value: int) -> None:
    """A key the locator found beside others of the same value that rank as high: which
    one is the size is a guess, and --fix does not guess."""
    loc = f.location
    if loc is not None and loc.key is not None and loc.also:
        others = ", ".join(f"{k.key} (line {k.line})" if k.line else k.key for k in loc.also)
        raise NotFixed(f"{value} is {loc.key}, and also {others}: shapelint cannot tell which key is this size; "
                       f"change it by hand")


def _locate(r: Result, f: Finding, names: tuple[str, ...], value: int, new: str,
            files: PlanFiles) -> tuple[tuple[Edit, ...], list[str]]:
    """The edits, and the YAML keys they set the size at (none: a Python literal, a
    config.json key named by the suggestion)."""
    src = f.source
    if r.config_file and r.kind in ("hf-config", "yaml"):
        _ambiguous(f, value)
    if r.config_file and r.kind == "hf-config":
        return _json_edits(r.config_file, f, names, value, new, files), []
    if r.config_file and r.kind == "yaml":
        edits, keys = _yaml_edits(r.config_file, f, names, value, new, files)
        if edits:
            return edits, keys
    if src is None:
        raise NotFixed("shapelint knows no source line for this layer (an in-memory model, or built in a library)")
    path = Path(src.file)
    if path.suffix != ".py":
        raise NotFixed(f"{src} is not a Python file, a config.json or a shapelint YAML")
    doc = files.doc(path)
    entry = r.kind == "python" and os.path.realpath(r.target) == os.path.realpath(path)
    spans = python_spans(doc, path, src.line, names, value, vocab=f.vocab is not None, entry=entry)
    return tuple(Edit(path, start, end, new, doc) for start, end in spans), []


def _json_edits(config_file: str, f: Finding, names: tuple[str, ...], value: int, new: str,
                files: PlanFiles) -> tuple[Edit, ...]:
    """The key of a Hugging Face config (never a pretrained checkpoint's)."""
    why = pretrained.marks(config_file)
    if why is not None:
        how = pretrained.recipe(value, int(new)) if f.code == "SL501" or f.vocab is not None else ""
        raise NotFixed(pretrained.refusal(why) + (f"; {how}" if how else ""))
    loc = _one_key(config_file, f, names, value)
    path = Path(config_file)
    doc = files.doc(path)
    all_keys = [str(loc.key), *(k.key for k in loc.together)]
    spans = json_spans(doc, all_keys, value)
    check_json(doc, apply_text(doc.text, {span: new for span in spans}), all_keys)
    return tuple(Edit(path, start, end, new, doc) for start, end in spans)


def _one_key(config_file: str, f: Finding, names: tuple[str, ...], value: int) -> ConfigLocation:
    """Where ``config_file`` sets the size: one key that holds it, named as the suggestion."""
    loc = f.location
    if f.source is None or f.source.file != config_file or loc is None or loc.key is None:
        note = loc.note if loc is not None else ""
        raise NotFixed(f"{value} is not the value of a key of {config_file}" + (f" ({note})" if note else ""))
    if len(loc.keys) > 1 or leaf(loc.key) != names[0]:
        raise NotFixed(f"{value} is {loc.formula or loc.key}, not one key's value: change the keys by hand")
    return loc


def _yaml_edits(config_file: str, f: Finding, names: tuple[str, ...], value: int, new: str,
                files: PlanFiles) -> tuple[tuple[Edit, ...], list[str]]:
    """Integers of a shapelint YAML (none: the size is in the builder's code), and the
    keys that hold the size. The layer's parameter (``names[1]``: ``in_features`` also
    when the finding was moved to a key ``d``) says whether the example inputs grow."""
    path = Path(config_file)
    src = f.source
    lines = [src.line] if src is not None and src.file == config_file else []
    if lines and f.location is not None:
        lines += [k.line for k in f.location.together]
    width = None if names[1] not in IN_PARAMETERS else 1 if names[1] == "in_channels" else -1
    try:
        doc = files.doc(path)
    except NotFixed:
        if yaml_spans(read_doc(Path(os.path.realpath(path))), lines, value, width, names)[0]:
            raise
        return (), []  # the size is not in the YAML: the builder's code may still be fixed
    spans, keys = yaml_spans(doc, lines, value, width, names)
    return tuple(Edit(path, start, end, new, doc) for start, end in spans), keys


__all__ = ["CONFLICT", "INPUT_PARAMETERS", "OUTPUT_PARAMETERS", "PADDING_PARAMETERS", "VOCAB_PARAMETERS", "PlanFiles",
           "Planned", "caveat", "is_safe", "plan", "plan_one"]
