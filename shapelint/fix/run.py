"""``--diff`` and ``--fix``: turn the findings' suggestions into edits of the files that
set the sizes, as ruff does for its fixes.

What can be edited (only the value's characters change; the rest of the file stays
byte-identical):

- the value token of the key of a Hugging Face ``config.json`` that ``shapelint.locate.config_keys``
  found (:mod:`shapelint.fix.config_edits`);
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
(weights beside it, or ``_name_or_path``/``torch_dtype``): its vocabulary is padded in
code instead (:mod:`shapelint.locate.pretrained`). A fix that changes what the model
computes beyond padding (a head dimension, the number of heads, a smaller layer) is
unsafe and needs ``--unsafe-fixes``.

Each file keeps its bytes outside the edited tokens (BOM, encoding, line ends), its
mode and its links (:mod:`shapelint.fix.files`). After writing, the edited targets
are linted again in a fresh process (:mod:`shapelint.fix.relint`); if one no longer
loads, or a write fails, every file written is put back as it was.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.fix.chain import IN_PARAMETERS
from shapelint.fix.config_edits import check_json, json_spans, yaml_spans
from shapelint.fix.files import Doc, NotFixed, Transaction, named, read_doc, writable
from shapelint.fix.python_edits import python_spans
from shapelint.locate import pretrained as pretrained
from shapelint.locate.config_keys import NOT_CONFIG_KEYS, is_library, leaf
from shapelint.physics.attention import HEAD_DIM_PARAMS, HEADS_PARAMS
from shapelint.pipeline.result import Result
from shapelint.pipeline.run import with_findings

#: sizes that grow by padding (zero weights for the new units, zeros fed to new inputs):
#: the model computes the same; every other size change is unsafe
VOCAB_PARAMETERS = ("vocab_size", "num_embeddings", "n_vocab", "padded_vocab_size")
OUTPUT_PARAMETERS = ("out_features", "out_channels", "intermediate_size", "n_inner", "d_ff", "ffn_dim",
                     "dim_feedforward", "ffn_hidden_size", "moe_intermediate_size", "intermediate_dim")
INPUT_PARAMETERS = ("in_features", "in_channels")
PADDING_PARAMETERS = VOCAB_PARAMETERS + OUTPUT_PARAMETERS + INPUT_PARAMETERS


@dataclass(frozen=True)
class Edit:
    """Replace ``doc.text[start:end]`` by ``new``; ``file`` is the file as the finding
    names it, ``doc`` what was read (through a symlink: the file it points to)."""

    file: Path
    start: int
    end: int
    new: str
    doc: Doc = field(compare=False, repr=False)

    @property
    def real(self) -> Path:
        return self.doc.path


@dataclass(frozen=True)
class Planned:
    """What ``--fix`` does for one finding: ``edits`` (none: ``reason`` says why)."""

    finding: Any  # shapelint.model.records.Finding
    target: str
    edits: tuple[Edit, ...] = ()
    reason: str = ""
    unsafe: bool = False
    caveat: str = ""

    @property
    def fixable(self) -> bool:
        return bool(self.edits) and not self.reason


@dataclass
class Outcome:
    """The results after fixing (the edited targets linted again), the unified diff of
    the edits, and the lines to print after the report (fixes, reasons, summary)."""

    results: list[Result]
    diff: str
    notes: list[str] = field(default_factory=list)


# -- planning -----------------------------------------------------------------


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


class _Files:
    """The files a plan reads, each once (every edit of a file is an offset into the same
    text); with a project ``root``, only files ``--fix`` may write (:func:`writable`)."""

    def __init__(self, root: Path | None, targets: Sequence[str] = ()) -> None:
        self.root = root
        self.named = named(targets)
        self.docs: dict[Path, Doc] = {}

    def doc(self, path: Path) -> Doc:
        if self.root is not None:
            real = writable(path, self.root, self.named)
        else:
            real = Path(os.path.realpath(path))
            if is_library(str(real)):
                raise NotFixed(f"{path} is an installed package's file: change the size in your own code")
        if real not in self.docs:
            self.docs[real] = read_doc(real)
        return self.docs[real]


def plan(results: Sequence[Result], *, unsafe: bool, root: Path | None = None) -> list[Planned]:
    """One entry per reported (not suppressed) finding; edits that conflict with an
    earlier fix's are dropped with a reason. ``root``: the project, the only place
    edits may be written besides the targets' own files (None: plan only, as
    ``--verify --step`` does for its copies)."""
    out: list[Planned] = []
    files = _Files(root, [t for r in results for t in (r.target, r.config_file) if t])
    taken: dict[tuple[Path, int, int], str] = {}
    for r in results:
        for f in r.findings:
            if f.suppressed:
                continue
            p = _plan_one(r, f, unsafe, files)
            if p.fixable and any(taken.get((e.real, e.start, e.end), e.new) != e.new or _overlaps(e, taken)
                                 for e in p.edits):
                p = replace(p, edits=(), reason="conflicts with another fix of the same value")
            for e in p.edits if p.fixable else ():
                taken[(e.real, e.start, e.end)] = e.new
            out.append(p)
    return out


def _overlaps(e: Edit, taken: dict[tuple[Path, int, int], str]) -> bool:
    return any(file == e.real and (start, end) != (e.start, e.end) and start < e.end and e.start < end
               for file, start, end in taken)


def _plan_one(r: Result, f: Any, unsafe: bool, files: _Files) -> Planned:
    s = f.suggestion
    if s is None:
        return Planned(f, r.target, reason="the finding suggests no value")
    if s.parameter in NOT_CONFIG_KEYS or not isinstance(s.from_, int) or not isinstance(s.to, int):
        return Planned(f, r.target, reason=f"{s.parameter} is how the model runs, not a size in a file")
    names = (s.parameter, str(f.fact("code_parameter") or s.parameter))
    safe = is_safe(s.parameter, s.from_, s.to)
    try:
        edits = _locate(r, f, names, s.from_, str(s.to), files)
    except NotFixed as exc:
        return Planned(f, r.target, reason=str(exc))
    reason = "" if safe or unsafe else "unsafe fix (it changes what the model computes): rerun with --unsafe-fixes"
    return Planned(f, r.target, edits, reason, not safe, caveat(s.parameter, s.from_, s.to, f.fact("vocab") is not None))


def _locate(r: Result, f: Any, names: tuple[str, ...], value: int, new: str, files: _Files) -> tuple[Edit, ...]:
    src = f.source
    if r.config_file and r.kind == "hf-config":
        return _json_edits(r.config_file, f, names, value, new, files)
    if r.config_file and r.kind == "yaml":
        edits = _yaml_edits(r.config_file, f, names, value, new, files)
        if edits:
            return edits
    if src is None:
        raise NotFixed("shapelint knows no source line for this layer (an in-memory model, or built in a library)")
    path = Path(src.file)
    if path.suffix != ".py":
        raise NotFixed(f"{src} is not a Python file, a config.json or a shapelint YAML")
    doc = files.doc(path)
    entry = r.kind == "python" and os.path.realpath(r.target) == os.path.realpath(path)
    spans = python_spans(doc, path, src.line, names, value, vocab=f.fact("vocab") is not None, entry=entry)
    return tuple(Edit(path, start, end, new, doc) for start, end in spans)


def _json_edits(config_file: str, f: Any, names: tuple[str, ...], value: int, new: str,
                files: _Files) -> tuple[Edit, ...]:
    """The key of a Hugging Face config (never a pretrained checkpoint's)."""
    why = pretrained.marks(config_file)
    if why is not None:
        how = pretrained.recipe(value, int(new)) if f.code == "SL501" or f.fact("vocab") is not None else ""
        raise NotFixed(pretrained.refusal(why) + (f"; {how}" if how else ""))
    src, key = f.source, f.fact("config_key")
    keys = f.fact("config_keys") or []
    if src is None or src.file != config_file or not isinstance(key, str):
        note = f.fact("config_note")
        raise NotFixed(f"{value} is not the value of a key of {config_file}" + (f" ({note})" if note else ""))
    if len(keys) > 1 or leaf(key) != names[0]:
        raise NotFixed(f"{value} is {f.fact('config_formula') or key}, not one key's value: change the keys by hand")
    path = Path(config_file)
    doc = files.doc(path)
    all_keys = [key, *(str(k["key"]) for k in f.fact("config_together") or [])]
    spans = json_spans(doc, all_keys, value)
    check_json(doc, _apply_text(doc.text, {span: new for span in spans}), all_keys)
    return tuple(Edit(path, start, end, new, doc) for start, end in spans)


def _yaml_edits(config_file: str, f: Any, names: tuple[str, ...], value: int, new: str,
                files: _Files) -> tuple[Edit, ...]:
    """Integers of a shapelint YAML (none: the size is in the builder's code)."""
    path = Path(config_file)
    src = f.source
    lines = [src.line] if src is not None and src.file == config_file else []
    lines += [int(k["line"]) for k in f.fact("config_together") or []] if lines else []
    width = None if names[0] not in IN_PARAMETERS else 1 if names[0] == "in_channels" else -1
    try:
        doc = files.doc(path)
    except NotFixed:
        if yaml_spans(read_doc(Path(os.path.realpath(path))), lines, value, width):
            raise
        return ()  # the size is not in the YAML: the builder's code may still be fixed
    return tuple(Edit(path, start, end, new, doc) for start, end in yaml_spans(doc, lines, value, width))


# -- applying -----------------------------------------------------------------


def _apply_text(text: str, edits: dict[tuple[int, int], str]) -> str:
    for (start, end), new in sorted(edits.items(), reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _by_file(planned: Sequence[Planned]) -> dict[Path, tuple[Path, Doc, str]]:
    """real file -> (the name it is shown by, what was read, the text after every fixable edit)."""
    edits: dict[Path, tuple[Path, Doc, dict[tuple[int, int], str]]] = {}
    for p in planned:
        for e in p.edits if p.fixable else ():
            edits.setdefault(e.real, (e.file, e.doc, {}))[2][(e.start, e.end)] = e.new
    return {real: (shown, doc, _apply_text(doc.text, spans)) for real, (shown, doc, spans) in edits.items()}


def edited_texts(planned: Sequence[Planned]) -> dict[Path, tuple[str, str]]:
    """file (as the findings name it) -> (text now, text after every fixable entry's edits)."""
    return {shown: (doc.text, new) for shown, doc, new in _by_file(planned).values()}


def unified_diff(texts: dict[Path, tuple[str, str]]) -> str:
    return "".join("".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                f"a/{file}", f"b/{file}"))
                   for file, (old, new) in texts.items())


def _write(planned: Sequence[Planned]) -> Transaction:
    """Write every edited file; if one write fails, put back those written and raise."""
    tx = Transaction()
    try:
        for real, (_, doc, new) in _by_file(planned).items():
            tx.write(real, doc.raw, doc.encode(new))
    except BaseException as exc:
        failed = tx.undo()
        if not isinstance(exc, Exception):
            raise
        raise ShapelintError(_undone(str(exc), failed)) from exc
    return tx


def _undone(why: str, failed: list[str]) -> str:
    if failed:
        return f"{why}; could not put back {', '.join(failed)}: restore them from version control"
    return f"{why}; every edit was undone"


def run(results: list[Result], relint: Callable[[list[str]], list[Result]], *, write: bool, unsafe: bool,
        root: Path) -> Outcome:
    """Plan the fixes of the files inside the project ``root``; with ``write``, apply
    them and lint the edited targets again with ``relint`` (a fresh process:
    :class:`shapelint.fix.relint.Relinter`), undoing every edit if that fails."""
    planned = plan(results, unsafe=unsafe, root=root)
    texts = edited_texts(planned)
    fixed = [p for p in planned if p.fixable]
    outcome = Outcome(results, unified_diff(texts))
    if write and texts:
        tx = _write(planned)
        outcome.results = _relint(results, relint, tx, {p.target for p in fixed})
    outcome.notes = _notes(planned, fixed, write)
    reasons = {_key(p.finding): p.reason for p in planned if not p.fixable}
    outcome.results = [with_findings(r, [replace(f, facts=f.facts + (("not_fixed", reasons[_key(f)]),))
                                         if _key(f) in reasons and not f.suppressed else f for f in r.findings])
                       for r in outcome.results]
    left = sum(1 for r in outcome.results for f in r.findings if not f.suppressed)
    hidden = sum(1 for p in planned if p.unsafe and p.edits and not p.fixable)
    if write:
        outcome.notes.append(f"Fixed {len(fixed)} finding{'s' if len(fixed) != 1 else ''} ({left} remaining).")
    else:
        would = len(planned) - len(fixed)
        outcome.notes.append(f"Would fix {len(fixed)} finding{'s' if len(fixed) != 1 else ''} ({would} would remain).")
    if hidden:
        outcome.notes.append(f"{hidden} unsafe fix{'es' if hidden != 1 else ''} can be applied with --unsafe-fixes.")
    return outcome


def _notes(planned: Sequence[Planned], fixed: Sequence[Planned], write: bool) -> list[str]:
    notes = []
    for p in fixed:
        s = p.finding.suggestion
        files = ", ".join(sorted({str(e.file) for e in p.edits}))
        verb = "fixed" if write else "would fix"
        notes.append(f"{p.finding.source or p.target}: {verb} {p.finding.code} {s} in {files} "
                     f"({'unsafe; ' if p.unsafe else ''}{p.caveat})")
    for p in planned:
        if not p.fixable:
            notes.append(f"{p.finding.source or p.target}: {p.finding.code} {p.finding.suggestion or ''}: "
                         f"not fixed: {p.reason}")
    return notes


def _key(f: Any) -> tuple[str, str, str]:
    return (f.code, f.module, str(f.suggestion))


def _touched(r: Result, edited: set[str], fixed_targets: set[str]) -> bool:
    """Whether ``r`` may change with the edits: a fix of it, or an edit of its target, its
    config, a file a finding points at or a file a layer of it was built in."""
    files = {r.target, r.config_file or r.target}
    files |= {f.source.file for f in r.findings if f.source is not None}
    files |= {s.file for g in r.capture.gemms for s in (g.source, g.defined_at) if s is not None}
    return r.target in fixed_targets or any(os.path.realpath(f) in edited for f in files)


def _relint(results: list[Result], relint: Callable[[list[str]], list[Result]], tx: Transaction,
            fixed_targets: set[str]) -> list[Result]:
    """Lint again, in a fresh process, the targets the edits touch; if that fails, put
    back every edited file and say so on one line."""
    edited = {str(w.real) for w in tx.written}
    again = [r.target for r in results if _touched(r, edited, fixed_targets)]
    try:
        fresh = dict(zip(again, relint(again)))
    except BaseException as exc:
        failed = tx.undo()
        if not isinstance(exc, Exception):
            raise
        if failed:
            raise ShapelintError(_undone(f"the fixes broke the re-lint ({exc})", failed)) from exc
        restored = f"{len(edited)} file{'s' if len(edited) != 1 else ''} restored"
        raise ShapelintError(f"the fixes broke the re-lint, so every edit was undone ({restored}): {exc}") from exc
    return [fresh.get(r.target, r) for r in results]
