"""``--diff`` and ``--fix``: turn the findings' suggestions into edits of the files that
set the sizes, as ruff does for its fixes.

What can be edited (only the value's characters change; the rest of the file stays
byte-identical):

- a key of a Hugging Face ``config.json`` (the key ``shapelint.locate`` found);
- an integer in a shapelint YAML: the key the finding points at, else every integer
  of that value under ``kwargs``, ``hf_config`` and ``inputs`` (one width, passed to the
  builder and to the inputs alike);
- an integer literal in a Python file, at the call the finding's source line makes
  (``nn.Linear(768, 50257)``), with the same literal among the layer sizes of the
  same function (``nn.Conv2d(30, 60)`` then ``nn.Conv2d(60, 100)``: the next layer's
  input grows with the output); where the argument is a name (``config.vocab_size``),
  every literal of that value bound to that name in the file
  (``vocab_size: int = 50257``, ``def f(vocab_size=50257)``, ``Config(vocab_size=50257)``).

Anything else (a computed size, a variable set without a literal, a file outside the
project, a run setting such as the dtype) is not edited, and the finding says why.
A fix that changes what the model computes beyond padding (a head dimension, the
number of heads, a smaller layer) is unsafe and needs ``--unsafe-fixes``.
Files are written atomically (a temporary file beside them, then a rename) and keep
their mode; after writing, the edited targets are linted again, and if one no longer
loads, every edit is undone.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.files import read_text
from shapelint.locate import NOT_CONFIG_KEYS, leaf
from shapelint.physics.attention import HEAD_DIM_PARAMS, HEADS_PARAMS
from shapelint.pipeline import Result, with_findings

#: sizes that grow by padding (zero weights for the new units, zeros fed to new inputs):
#: the model computes the same; every other size change is unsafe
VOCAB_PARAMETERS = ("vocab_size", "num_embeddings", "n_vocab", "padded_vocab_size")
OUTPUT_PARAMETERS = ("out_features", "out_channels", "intermediate_size", "n_inner", "d_ff", "ffn_dim",
                     "dim_feedforward", "ffn_hidden_size", "moe_intermediate_size", "intermediate_dim")
INPUT_PARAMETERS = ("in_features", "in_channels")
PADDING_PARAMETERS = VOCAB_PARAMETERS + OUTPUT_PARAMETERS + INPUT_PARAMETERS
#: YAML sections whose integers are the builder's sizes
YAML_SIZE_SECTIONS = ("kwargs", "hf_config", "inputs")


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` of ``file`` (character offsets) by ``new``."""

    file: Path
    start: int
    end: int
    new: str


@dataclass(frozen=True)
class Planned:
    """What ``--fix`` does for one finding: ``edits`` (none: ``reason`` says why)."""

    finding: Any  # shapelint.records.Finding
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


def plan(results: Sequence[Result], *, unsafe: bool) -> list[Planned]:
    """One entry per reported (not suppressed) finding; edits that conflict with an
    earlier fix's are dropped with a reason."""
    out: list[Planned] = []
    taken: dict[tuple[Path, int, int], str] = {}
    for r in results:
        for f in r.findings:
            if f.suppressed:
                continue
            p = _plan_one(r, f, unsafe)
            if p.fixable and any(taken.get((e.file, e.start, e.end), e.new) != e.new or _overlaps(e, taken)
                                 for e in p.edits):
                p = replace(p, edits=(), reason="conflicts with another fix of the same value")
            for e in p.edits if p.fixable else ():
                taken[(e.file, e.start, e.end)] = e.new
            out.append(p)
    return out


def _overlaps(e: Edit, taken: dict[tuple[Path, int, int], str]) -> bool:
    return any(file == e.file and (start, end) != (e.start, e.end) and start < e.end and e.start < end
               for file, start, end in taken)


def _plan_one(r: Result, f: Any, unsafe: bool) -> Planned:
    s = f.suggestion
    if s is None:
        return Planned(f, r.target, reason="the finding suggests no value")
    if s.parameter in NOT_CONFIG_KEYS or not isinstance(s.from_, int) or not isinstance(s.to, int):
        return Planned(f, r.target, reason=f"{s.parameter} is how the model runs, not a size in a file")
    names = (s.parameter, str(f.fact("code_parameter") or s.parameter))
    safe = is_safe(s.parameter, s.from_, s.to)
    try:
        edits = _locate(r, f, names, s.from_, str(s.to))
    except _NotFixed as exc:
        return Planned(f, r.target, reason=str(exc))
    reason = "" if safe or unsafe else "unsafe fix (it changes what the model computes): rerun with --unsafe-fixes"
    return Planned(f, r.target, edits, reason, not safe, caveat(s.parameter, s.from_, s.to, f.fact("vocab") is not None))


class _NotFixed(Exception):
    """Why a finding's value cannot be edited (the message is the reason)."""


def _locate(r: Result, f: Any, names: tuple[str, ...], value: int, new: str) -> tuple[Edit, ...]:
    src = f.source
    if r.config_file and r.kind == "hf-config":
        if src is None or src.file != r.config_file:
            raise _NotFixed(f"{value} is not the value of a key of {r.config_file}")
        together = f.fact("config_together") or []  # the same vocabulary under another key
        return (_json_edit(Path(src.file), src.line, names[0], value, new),
                *(_json_edit(Path(src.file), int(k["line"]), leaf(str(k["key"])), value, new) for k in together))
    if r.config_file and r.kind == "yaml":
        yaml_file = Path(r.config_file)
        edits = _yaml_edits(yaml_file, src.line if src and src.file == r.config_file else None, value, new)
        if edits:
            return edits + tuple(e for k in f.fact("config_together") or []
                                 for e in _yaml_edits(yaml_file, int(k["line"]), value, new))
    if src is None:
        raise _NotFixed("shapelint knows no source line for this layer (an in-memory model, or built in a library)")
    path = Path(src.file)
    if not _in_project(path, Path(r.target)):
        raise _NotFixed(f"{names[0]} = {value} is set in {src.file}, outside the project: change it there or "
                        f"pass the size to the model")
    if path.suffix != ".py":
        raise _NotFixed(f"{src} is not a Python file, a config.json or a shapelint YAML")
    return _python_edits(path, src.line, names, value, new)


def _in_project(file: Path, target: Path) -> bool:
    """Inside the working directory or the target's folder, and not an installed package."""
    resolved = file.resolve()
    if {"site-packages", "dist-packages"} & set(resolved.parts):
        return False
    roots = (Path.cwd().resolve(), (target if target.is_dir() else target.parent).resolve())
    return any(resolved.is_relative_to(root) for root in roots)


# -- JSON and YAML ------------------------------------------------------------


def _json_edit(path: Path, line: int, key: str, value: int, new: str) -> Edit:
    text = read_text(path)
    start = _line_starts(text)[line - 1]
    end = text.find("\n", start)
    m = re.search(rf'"{re.escape(key)}"\s*:\s*(-?\d+)\b', text[start:end if end >= 0 else len(text)])
    if m is None or int(m.group(1)) != value:
        raise _NotFixed(f"{path}:{line}: no \"{key}\": {value} on that line")
    return Edit(path, start + m.start(1), start + m.end(1), new)


def _yaml_edits(path: Path, line: int | None, value: int, new: str) -> tuple[Edit, ...]:
    """The integers ``value`` of the YAML: on ``line`` (a key the finding points at),
    else under the builder's sections."""
    import yaml  # type: ignore[import-untyped]

    text = read_text(path)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    edits = []
    for section, node in _int_scalars(root, ()):
        if int(node.value) != value or not node.value.lstrip("-").isdigit():
            continue
        if (node.start_mark.line + 1 == line) if line is not None else section in YAML_SIZE_SECTIONS:
            edits.append(Edit(path, node.start_mark.index, node.end_mark.index, new))
    return tuple(edits)


def _int_scalars(node: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """(top-level section, scalar node) of every integer scalar under ``node``."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key, child in node.value:
            yield from _int_scalars(child, path or (str(key.value),))
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            yield from _int_scalars(child, path)
    elif isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int" and path:
        yield path[0], node


# -- Python -------------------------------------------------------------------


def _python_edits(path: Path, line: int, names: tuple[str, ...], value: int, new: str) -> tuple[Edit, ...]:
    text = read_text(path)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise _NotFixed(f"{path}: cannot parse it ({exc.msg})") from None
    starts = _line_starts(text)
    where = f"{path}:{line}"
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)
                    and n.lineno <= line <= (n.end_lineno or n.lineno)), key=lambda n: _span(n))
    for call in calls:
        arg = _argument(call, names)
        if arg is None:
            continue
        if _is_int(arg, value):
            scope = _enclosing(tree, call)
            siblings = [a for c in ast.walk(scope) if isinstance(c, ast.Call)
                        for a in _size_arguments(c, input_too=names[0] in INPUT_PARAMETERS) if _is_int(a, value)]
            return tuple(_edit(path, text, starts, n, new) for n in _unique([arg, *siblings]))
        ident = _identifier(arg)
        if ident is None:
            raise _NotFixed(f"{names[0]} = {ast.unparse(arg)} at {where} is computed, not a literal: "
                            f"change what it is computed from")
        bound = _literal_bindings(tree, ident, value)
        if not bound:
            raise _NotFixed(f"{names[0]} comes from `{ast.unparse(arg)}` at {where}, "
                            f"{_binding_site(tree, ident, path)}: no integer literal {ident} = {value} "
                            f"in {path} to change")
        return tuple(_edit(path, text, starts, n, new) for n in bound)
    literals = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and _is_int(n, value) and n.lineno == line]
    if len(literals) == 1:
        return (_edit(path, text, starts, literals[0], new),)
    elsewhere = sorted({f"{path}:{n.lineno}" for n in ast.walk(tree) if _is_int(n, value) and hasattr(n, "lineno")})
    maybe = f"; the literal {value} at {', '.join(elsewhere)} may be it, but shapelint cannot tell" if elsewhere else ""
    raise _NotFixed(f"{names[0]} = {value} reaches {where} (`{_line(text, starts, line)}`) from elsewhere, "
                    f"not as a literal{maybe}")


def _line(text: str, starts: list[int], line: int) -> str:
    end = starts[line] if line < len(starts) else len(text)
    return text[starts[line - 1]:end].strip()


def _span(n: ast.AST) -> tuple[int, int]:
    return ((getattr(n, "end_lineno", 0) or 0) - getattr(n, "lineno", 0),
            (getattr(n, "end_col_offset", 0) or 0) - getattr(n, "col_offset", 0))


def _is_int(n: ast.AST, value: int) -> bool:
    return isinstance(n, ast.Constant) and type(n.value) is int and n.value == value


def _unique(nodes: Sequence[ast.expr]) -> list[ast.expr]:
    seen: dict[tuple[int, int], ast.expr] = {}
    for n in nodes:
        seen.setdefault((n.lineno, n.col_offset), n)
    return list(seen.values())


def _parameter_names(call: ast.Call) -> list[str]:
    """The positional parameter names of a ``torch.nn`` layer's constructor."""
    import torch

    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    cls = getattr(torch.nn, name, None) if name else None
    if not isinstance(cls, type):
        return []
    try:
        return [p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs")]
    except (TypeError, ValueError):
        return []


def _arguments(call: ast.Call) -> Iterator[tuple[str, ast.expr]]:
    for name, arg in zip(_parameter_names(call), call.args):
        yield name, arg
    for kw in call.keywords:
        if kw.arg is not None:
            yield kw.arg, kw.value


def _argument(call: ast.Call, names: tuple[str, ...]) -> ast.expr | None:
    return next((arg for name, arg in _arguments(call) if name in names), None)


#: torch functions that make example inputs: their last size is the features a first layer takes
INPUT_MAKERS = ("randn", "rand", "zeros", "ones", "empty")


def _size_arguments(call: ast.Call, input_too: bool = False) -> list[ast.expr]:
    """A layer constructor's size arguments; with ``input_too``, also an example
    input's feature size (``torch.randn(4096, 1023)``), which grows with ``in_features``."""
    func = call.func
    if (input_too and isinstance(func, ast.Attribute) and func.attr in INPUT_MAKERS
            and isinstance(func.value, ast.Name) and func.value.id == "torch" and call.args):
        return [call.args[-1]]
    return [arg for name, arg in _arguments(call) if name in PADDING_PARAMETERS]


def _enclosing(tree: ast.Module, node: ast.AST) -> ast.AST:
    """The innermost function (else the module) holding ``node``."""
    best: ast.AST = tree
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(c is node for c in ast.walk(n)):
            if _span(n) < _span(best) or best is tree:
                best = n
    return best


def _identifier(arg: ast.expr) -> str | None:
    if isinstance(arg, ast.Name):
        return arg.id
    if isinstance(arg, ast.Attribute):
        return arg.attr
    return None


def _literal_bindings(tree: ast.Module, ident: str, value: int) -> list[ast.expr]:
    """Integer literals ``value`` bound to ``ident``: defaults, class fields,
    assignments, keyword arguments."""
    found: list[ast.expr] = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            positional = [*a.posonlyargs, *a.args]
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            found += [d for arg, d in pairs if arg.arg == ident and _is_int(d, value)]
        elif isinstance(n, ast.AnnAssign) and n.value is not None and _identifier(n.target) == ident:
            found += [n.value] if _is_int(n.value, value) else []
        elif isinstance(n, ast.Assign) and any(_identifier(t) == ident for t in n.targets):
            found += [n.value] if _is_int(n.value, value) else []
        elif isinstance(n, ast.keyword) and n.arg == ident and _is_int(n.value, value):
            found.append(n.value)
    return _unique(found)


def _binding_site(tree: ast.Module, ident: str, path: Path) -> str:
    """Where ``ident`` is set, for the reason: ``set at file:line (a loop variable)``."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.comprehension)):
            if any(isinstance(t, ast.Name) and t.id == ident for t in ast.walk(n.target)):
                return f"a loop variable set at {path}:{getattr(n, 'lineno', n.target.lineno)}"
        elif isinstance(n, ast.arg) and n.arg == ident:
            return f"a parameter (no literal default) at {path}:{n.lineno}"
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(_identifier(t) == ident for t in targets):
                return f"set at {path}:{n.lineno} from `{ast.unparse(n.value) if n.value else '...'}`"
    return "set outside this file"


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", text))]


def _edit(path: Path, text: str, starts: list[int], n: ast.expr, new: str) -> Edit:
    """An edit of a node's text; ast columns are UTF-8 byte offsets into its line."""

    def offset(line: int, col: int) -> int:
        start = starts[line - 1]
        return start + len(text[start:start + col].encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    return Edit(path, offset(n.lineno, n.col_offset), offset(n.end_lineno or n.lineno, n.end_col_offset or 0), new)


# -- applying -----------------------------------------------------------------


def edited_texts(planned: Sequence[Planned]) -> dict[Path, tuple[str, str]]:
    """file -> (text now, text after every fixable entry's edits)."""
    by_file: dict[Path, dict[tuple[int, int], str]] = {}
    for p in planned:
        for e in p.edits if p.fixable else ():
            by_file.setdefault(e.file, {})[(e.start, e.end)] = e.new
    out = {}
    for file, edits in by_file.items():
        old = new = read_text(file)
        for (start, end), text in sorted(edits.items(), reverse=True):
            new = new[:start] + text + new[end:]
        out[file] = (old, new)
    return out


def unified_diff(texts: dict[Path, tuple[str, str]]) -> str:
    return "".join("".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                f"a/{file}", f"b/{file}"))
                   for file, (old, new) in texts.items())


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, give it ``path``'s mode, rename it over."""
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".shapelint")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(results: list[Result], relint: Callable[[Path], Result], *, write: bool, unsafe: bool) -> Outcome:
    """Plan the fixes; with ``write``, apply them and lint the edited targets again."""
    planned = plan(results, unsafe=unsafe)
    texts = edited_texts(planned)
    fixed = [p for p in planned if p.fixable]
    outcome = Outcome(results, unified_diff(texts))
    if write and texts:
        for file, (_, new) in texts.items():
            write_atomic(file, new)
        outcome.results = _relint(results, relint, texts, {p.target for p in fixed})
    notes = outcome.notes
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
    reasons = {_key(p.finding): p.reason for p in planned if not p.fixable}
    outcome.results = [with_findings(r, [replace(f, facts=f.facts + (("not_fixed", reasons[_key(f)]),))
                                         if _key(f) in reasons and not f.suppressed else f for f in r.findings])
                       for r in outcome.results]
    left = sum(1 for r in outcome.results for f in r.findings if not f.suppressed)
    hidden = sum(1 for p in planned if p.unsafe and p.edits and not p.fixable)
    if write:
        notes.append(f"Fixed {len(fixed)} finding{'s' if len(fixed) != 1 else ''} ({left} remaining).")
    else:
        would = len(planned) - len(fixed)
        notes.append(f"Would fix {len(fixed)} finding{'s' if len(fixed) != 1 else ''} ({would} would remain).")
    if hidden:
        notes.append(f"{hidden} unsafe fix{'es' if hidden != 1 else ''} can be applied with --unsafe-fixes.")
    return outcome


def _key(f: Any) -> tuple[str, str, str]:
    return (f.code, f.module, str(f.suggestion))


def _relint(results: list[Result], relint: Callable[[Path], Result], texts: dict[Path, tuple[str, str]],
            fixed_targets: set[str]) -> list[Result]:
    """Lint again the targets with a fix or a finding in an edited file; if one no
    longer loads, put every edited file back as it was."""
    edited = {f.resolve() for f in texts}
    again = []
    for r in results:
        touched = r.target in fixed_targets or Path(r.target).resolve() in edited or any(
            f.source is not None and Path(f.source.file).resolve() in edited for f in r.findings)
        try:
            again.append(relint(Path(r.target)) if touched else r)
        except ShapelintError as exc:
            for file, (old, _) in texts.items():
                write_atomic(file, old)
            raise ShapelintError(f"the fixes broke {r.target} ({exc}); every edit was undone") from exc
    return again
