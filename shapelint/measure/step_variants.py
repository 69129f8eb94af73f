"""The variants ``--verify --step`` trains: *before*, the target built for real
(``shapelint.load.real.build``: the class, inputs and labels the lint traced; random
weights), and *after*, every suggestion applied as ``--fix --unsafe-fixes`` would edit it
(``shapelint.fix.run.plan``), built from a copy in a temporary folder outside the
target's folder: the edited config.json or YAML, or the edited model.py (with the
target's folder still on the import path, and the folder's Python files copied when an
edit is in another of them). Nothing of the user's files is written. A finding that
cannot be applied (no literal to edit, a run setting such as the batch, a throughput
finding whose step does other work) is listed with the reason.

A change of the memory format (SL402) is no edit: the after-variant is the model built
as written, converted as the finding says (``model.to(memory_format=...)`` and its
inputs). A padded vocabulary's logits are sliced back to the tokenizer's size before the loss (a
forward hook on the output layer), as the finding asks and as its estimate prices (the
slice's strided copy).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from shapelint.capture.run import output_tensors
from shapelint.errors import ShapelintError
from shapelint.load.real import Built, build
from shapelint.measure.parallel_change import unmeasured, with_head_keys, wraps_only
from shapelint.model.records import Finding
from shapelint.model.step_verification import FindingRef, UnappliedFinding
from shapelint.pipeline.result import Result

#: Python files copied at most when an edit is outside the target file
MIRROR_MAX_FILES = 2000
#: folders never copied
MIRROR_SKIP = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules", "venv", ".venv", "env"})


class NotApplied(Exception):
    """Why a finding (or every finding) cannot be applied to the copy."""


def plan(r: Result) -> tuple[list[tuple[Finding, dict[Path, str]]], list[UnappliedFinding]]:
    """The findings ``--fix --unsafe-fixes`` can apply, each with its edited texts, and
    the others with the reason. Under a parallel layout, a finding that changes only how
    the layout wraps the model (SL603) applies with no edit
    (:mod:`shapelint.measure.parallel_change`)."""
    from shapelint.fix import run as fix

    applied: list[tuple[Finding, dict[Path, str]]] = []
    not_applied: list[UnappliedFinding] = []
    for p in fix.plan([r], unsafe=True):
        f = p.finding
        if wraps_only(r, f) or f.memory_format is not None:
            applied.append((f, {}))  # the layout's wrapper or the memory format makes the change: no file to edit
            continue
        if f.gain == "throughput":
            reason = "a throughput finding: the step does more work after it, so step times do not compare"
        elif not p.fixable:
            reason = p.reason
        else:
            reason = unmeasured(r, f)
        if reason:
            not_applied.append(UnappliedFinding(FindingRef.of(f), reason))
            continue
        applied.append((f, {Path(file).resolve(): new for file, (_, new) in fix.edited_texts([p]).items()}))
    return applied, not_applied


def merged_texts(r: Result, findings: Sequence[Finding]) -> dict[Path, str]:
    """The texts with every given finding's edits (as ``--fix`` would write them; a head
    count's ``head_dim`` with it, where the config states one)."""
    from shapelint.fix import run as fix

    keep = {id(f) for f in findings}
    planned = [p for p in fix.plan([r], unsafe=True) if id(p.finding) in keep and p.fixable]
    texts = {Path(file).resolve(): new for file, (_, new) in fix.edited_texts(planned).items()}
    return with_head_keys(findings, texts)


def scratch_root(target: Path) -> Path:
    """A fresh folder for the copies, outside the target's folder."""
    folder = _folder(target)
    for base in (Path(tempfile.gettempdir()), Path.home() / ".cache" / "shapelint"):
        base = base.resolve()
        if not base.is_relative_to(folder):
            base.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="shapelint-step-", dir=base))
    raise ShapelintError(f"{target}: no temporary folder outside the target's folder for the edited copy "
                         f"(set TMPDIR elsewhere)")


def _folder(target: Path) -> Path:
    t = target.resolve()
    return t if t.is_dir() else t.parent


def write_copy(r: Result, texts: dict[Path, str], root: Path) -> Path:
    """The target with ``texts`` applied, in a new folder under ``root``; returns the
    copy's target path. Only the target file is copied when every edit is in it (the
    original folder stays on the import path); otherwise the Python files of the
    target's folder are copied, so that the edited ones are imported."""
    target = Path(r.config_file or r.target).resolve()
    folder = target.parent
    copy = Path(tempfile.mkdtemp(prefix="copy-", dir=root))
    outside = [f for f in texts if not f.is_relative_to(folder)]
    if outside:
        raise NotApplied(f"the edit is in {outside[0]}, outside the target's folder {folder}")
    if set(texts) - {target} or _has_builder(r):
        _mirror_python(folder, copy, root)
    for file, text in texts.items():
        dest = copy / file.relative_to(folder)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
    dest = copy / target.name
    if not dest.exists():
        shutil.copyfile(target, dest)
    return dest


def _has_builder(r: Result) -> bool:
    """A YAML target naming a builder (a file or module beside it, copied with it)."""
    if r.kind != "yaml" or not r.config_file:
        return False
    from shapelint.load.documents import read_yaml

    return "model" in read_yaml(Path(r.config_file))


def _mirror_python(folder: Path, copy: Path, root: Path) -> None:
    count = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in MIRROR_SKIP
                       and not (here / d).resolve().is_relative_to(root)]
        for name in filenames:
            if name.endswith(".py"):
                count += 1
                if count > MIRROR_MAX_FILES:
                    raise NotApplied(f"the edit is outside the target file and its folder {folder} holds more "
                                     f"than {MIRROR_MAX_FILES} Python files to copy")
                dest = copy / (here / name).relative_to(folder)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(here / name, dest)


def build_copy(r: Result, path: Path, device: str) -> Built:
    """Build the edited copy at ``path``; a model.py or a YAML builder imports from the
    copy first, then from the original folder."""
    from shapelint.load.usercode import user_code

    opts = r.options
    kwargs: dict[str, Any] = {"batch": opts.batch if opts else None, "seq": opts.seq if opts else None,
                              "allow_builders": opts.allow_builders if opts else ()}
    if r.kind == "hf-config":
        return build(path, device=device, **kwargs)
    original = _folder(Path(r.config_file or r.target))
    with user_code(path, "building the edited copy", (original,)):
        return build(path, device=device, **kwargs)


def build_original(r: Result, device: str) -> Built:
    opts = r.options
    return build(Path(r.target), device=device, batch=opts.batch if opts else None,
                 seq=opts.seq if opts else None, allow_builders=opts.allow_builders if opts else ())


def in_memory_formats(built: Built, inputs: Any, findings: Sequence[Finding]) -> Any:
    """The findings' memory formats applied as the user applies them (SL402:
    ``model.to(memory_format=torch.channels_last)``, in place, and channels-last inputs);
    returns the inputs converted."""
    from shapelint.capture.memory_format import FORMATS, converted_inputs

    for name in dict.fromkeys(f.memory_format for f in findings if f.memory_format is not None):
        built.model.to(memory_format=FORMATS[name][0])  # type: ignore[call-overload]  # torch stubs lack it
        inputs = converted_inputs(inputs, name)
    return inputs


def signature(built: Built) -> tuple[Any, ...]:
    """What a change must alter: the parameters' and inputs' shapes."""
    params = tuple((name, tuple(p.shape)) for name, p in built.model.named_parameters())
    return params, tuple(tuple(t.shape) for t in output_tensors(built.inputs))


def slice_padded_logits(built: Built, findings: Sequence[Finding]) -> tuple[str, ...]:
    """For each applied vocabulary padding, slice the output layer's logits back to the
    tokenizer's size before the loss (``logits[..., :vocab]``), as the finding asks;
    a Hugging Face model's loss then reads the vocabulary size it is told. Returns the
    modules sliced."""
    done: list[str] = []
    for f in findings:
        vocab = f.vocab
        s = f.suggestion
        if not f.slices or vocab is None or s is None or not isinstance(s.to, int):
            continue
        heads = _output_layers(built.model, f, s.to)
        for _, module in heads:
            module.register_forward_hook(lambda _m, _i, out, keep=vocab: out[..., :keep])
        if not heads:
            continue
        _slice_logits_bias(built.model, s.to, vocab)
        config = getattr(built.model, "config", None)
        if config is not None:
            text = _loss_config(config)
            for key in VOCAB_SIZE_KEYS:
                if getattr(text, key, None) == s.to:
                    setattr(text, key, vocab)
        done.extend(name for name, _ in heads)
    return tuple(done)


def _loss_config(config: Any) -> Any:
    """The (sub-)config whose vocabulary the loss reads, as the model holds it: the
    config itself, or its one text sub-config (a VLM's ``text_config``). A composite
    config with two text configs (MusicGen: ``text_encoder`` and ``decoder``) refuses a
    bare ``get_text_config()`` as ambiguous; the loss reads the decoder's. Only then is
    ``decoder=True`` asked: on a flat encoder-decoder config (Marian) it returns a copy,
    where a vocabulary set would reach no loss."""
    get = getattr(config, "get_text_config", None)
    if not callable(get):
        return config
    try:
        return get()
    except ValueError:
        return get(decoder=True)


#: config attributes a Hugging Face loss reads the vocabulary from (Marian's loss reads
#: ``decoder_vocab_size``)
VOCAB_SIZE_KEYS = ("vocab_size", "decoder_vocab_size")
#: buffers a model adds to its output layer's logits (the BART family: BART, mBART,
#: Marian, Pegasus, Blenderbot add ``final_logits_bias`` of shape (1, vocab_size))
LOGITS_BIASES = ("final_logits_bias",)


def _slice_logits_bias(model: torch.nn.Module, padded: int, vocab: int) -> None:
    """A bias the model adds to the sliced logits is sliced with them: the padded rows of
    ``final_logits_bias`` go with the padded logits."""
    for name in LOGITS_BIASES:
        bias = model._buffers.get(name)
        if isinstance(bias, torch.Tensor) and bias.shape[-1] == padded:
            model.register_buffer(name, bias[..., :vocab].clone())


def _output_layers(model: torch.nn.Module, f: Finding, padded: int) -> list[tuple[str, torch.nn.Module]]:
    """The padded output layers: the finding's modules, else the model's output
    embeddings (one Linear, or a list of them: MusicGen has one head per codebook, each
    ``vocab_size`` wide, all grown and all sliced back). Each layer once."""
    names = [m for m in (*f.modules, f.module) if "*" not in m]
    found = [(n, model.get_submodule(n)) for n in dict.fromkeys(names) if _has(model, n)]
    get = getattr(model, "get_output_embeddings", None)
    out = get() if callable(get) else None
    if isinstance(out, torch.nn.Module):
        found += [(n, m) for n, m in model.named_modules() if m is out or any(m is o for o in out.children())]
    heads: dict[int, tuple[str, torch.nn.Module]] = {}
    for n, m in found:
        if isinstance(m, torch.nn.Linear) and m.out_features == padded:
            heads.setdefault(id(m), (n, m))
    return list(heads.values())


def _has(model: torch.nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


__all__ = ["LOGITS_BIASES", "VOCAB_SIZE_KEYS", "NotApplied", "build_copy", "build_original", "merged_texts", "plan",
           "scratch_root", "signature", "slice_padded_logits", "write_copy"]
