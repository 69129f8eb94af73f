"""Point findings of a config target at the config key that sets the size they change.

A Hugging Face config (or a YAML target's keys) sets a model's sizes; library code
(transformers' modeling files) turns them into layers. A finding on such a target is
reported at the key, in the file the user owns and edits, with the library line kept
as context (``details.library_source``). How a size is explained, best first:

1. a key whose value is the size (with tensor parallelism, a key whose value split
   over the GPUs is the size), preferring a key named as the layer's parameter
   (``head_dim``), then the keys the rule's kind of size is known by (``vocab_size``
   for a vocabulary), then keys that name a layer size, then any other; and keys of
   the sub-config the module belongs to (``text_config.*`` for ``text_model.*``);
2. a quotient or product of a size key and a count key (``hidden_size /
   num_attention_heads``: the head dimension of most configs; ``num_key_value_heads ×
   head_dim``);
3. nothing: the finding says so (``details.config_key`` is null, ``config_note`` says
   why) and, when its line is in library code, is shown at the config's
   ``model_type`` key, the one that chose that code.

Sizes of 0 or 1 and keys that never size a GEMM (token ids, layer counts, sequence
lengths) explain nothing: a coincidence there is not a cause.
"""

from __future__ import annotations

import re
import site
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from shapelint.locate import pretrained as pretrained
from shapelint.model.records import Facts, Finding, Source, Suggestion

#: config keys that name a layer size, preferred when several keys share a value
CONFIG_SIZE_KEYS = (
    "vocab_size", "intermediate_size", "hidden_size", "n_embd", "n_inner", "d_model", "d_ff",
    "ffn_dim", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "moe_intermediate_size",
    "encoder_ffn_dim", "decoder_ffn_dim", "d_kv", "embedding_size", "hidden_sizes", "num_channels", "conv_dim",
    "shared_expert_intermediate_size", "num_experts", "num_local_experts", "n_routed_experts", "kv_lora_rank",
    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "projection_dim", "embed_dim",
    "num_mel_bins", "ffn_hidden_size", "kv_channels", "rotary_dim", "patch_size",
)

#: the keys each rule's kind of size is known by (before the generic size keys)
RULE_KEYS: dict[str, tuple[str, ...]] = {
    "SL501": ("vocab_size", "decoder_vocab_size", "n_vocab", "padded_vocab_size"),
    "SL301": ("head_dim", "d_kv", "kv_channels", "attention_head_size", "head_size", "v_head_dim",
              "qk_nope_head_dim", "qk_rope_head_dim", "num_attention_heads", "n_head", "num_heads"),
    "SL401": ("num_channels", "hidden_sizes", "conv_dim", "embedding_size", "hidden_size", "embed_dim"),
}

#: keys that declare one vocabulary: when several hold the size, they change together
#: (Marian's published configs give ``vocab_size`` and ``decoder_vocab_size`` both 58101:
#: the output layer is sized by the second, the shared embedding by the first, and tied
#: weights need them equal)
VOCAB_KEYS = frozenset(RULE_KEYS["SL501"])

#: suggestions that change how the model is run, not a size in its config
NOT_CONFIG_KEYS = frozenset({"batch", "dtype", "memory_format", "attention"})

#: why a suggestion that is not a config size has no key (shown at ``model_type``)
RUN_NOTES = {
    "batch": "the batch and sequence length are how the model is run (--batch, --seq), not keys of {name}",
    "dtype": "the precision is how the model is run (--dtype, autocast), not a key of {name}",
    "memory_format": "the memory format is how the model is run (model.to(memory_format=...)), not a key of {name}",
    "attention": "the attention is the library code that model_type selects; no key of {name} changes it",
}

#: keys that never set a GEMM dimension: token ids, layer counts, sequence lengths
NOT_SIZE = re.compile(
    r"(_id|_ids|token_id)$|^(num_hidden_layers|n_layers?|num_layers|(en|de)coder_layers|num_(en|de)coder_layers|"
    r"num_decoder_layers|max_position_embeddings|n_positions|n_ctx|max_seq_len|seq_length|sliding_window|"
    r"max_window_layers|first_k_dense_replace|moe_layer_freq|decoder_sparse_step|num_experts_per_tok|"
    r"max_length|min_length|num_beams|type_vocab_size|depths)$"
)
#: keys that count heads, experts or groups (a factor of a size: ``num_heads × head_dim``)
COUNT_KEY = re.compile(r"(heads|^n_head|_head$|experts|expansion_ratio|groups)$")
#: keys that name a width (the other factor, or the dividend of ``hidden_size / heads``)
WIDTH_KEY = re.compile(r"(size|dim|embd|d_model|d_ff|d_kv|inner|width|channels)s?$")


@dataclass(frozen=True)
class Explanation:
    """How config keys give a size: ``keys`` (the one to edit first), ``formula``
    (``vocab_size``, ``hidden_size / num_attention_heads``, ``intermediate_size / tp``)
    and ``others``: keys with the same value, ranked as high (an ambiguity, named)."""

    keys: tuple[str, ...]
    formula: str
    per_gpu: bool = False
    derived: bool = False
    others: tuple[str, ...] = ()
    #: keys edited to the same new value as ``keys[0]`` (one vocabulary declared twice)
    together: tuple[str, ...] = ()


def leaf(key: str) -> str:
    """``text_config.hidden_size`` → ``hidden_size``; ``hidden_sizes[2]`` → ``hidden_sizes``."""
    return key.rsplit(".", 1)[-1].split("[", 1)[0]


def _rank(key: str, parameter: str, code: str) -> tuple[int, int]:
    """(tier, place in its list): 0 the layer's parameter name, 1 the rule's keys,
    2 the generic size keys, 3 any other key."""
    name = leaf(key)
    if name == parameter:
        return 0, 0
    if name in RULE_KEYS.get(code, ()):
        return 1, RULE_KEYS[code].index(name)
    return (2, CONFIG_SIZE_KEYS.index(name)) if name in CONFIG_SIZE_KEYS else (3, 0)


#: leading words of top-level keys that belong to one part of a model (``encoder_ffn_dim``)
PART_WORDS = ("encoder", "decoder", "text", "vision", "audio", "speech")


def _scope(key: str, module: str) -> int:
    """0: the key belongs to the module's part (``vision_config.*`` or ``vision_*`` for
    ``vision_model.*``, ``decoder_ffn_dim`` for ``decoder.*``), 1: a key of the whole
    model, 2: another part's."""
    if "." in key:
        stem = key.split(".", 1)[0].split("[", 1)[0].removesuffix("_config")
    else:
        stem = next((w for w in PART_WORDS if key.startswith(w + "_")), "")
        if not stem:
            return 1
    word = re.compile(rf"(^|_){re.escape(stem)}(_|$)")
    return 0 if any(word.search(p) for p in module.split(".")) else 2


def explain(value: int, parameter: str, code: str, module: str, keys: dict[str, tuple[int, int]],
            tp: int = 1) -> Explanation | None:
    """The config keys that set ``value`` (one GPU's size when ``tp`` > 1), or None."""
    usable = {k: v for k, (v, _) in keys.items() if v >= 2 and not NOT_SIZE.search(leaf(k))}
    order = {k: i for i, k in enumerate(keys)}

    def split(v: int) -> bool:
        return tp > 1 and v != value and -(-v // tp) == value

    singles = [(k, v != value) for k, v in usable.items() if v == value or split(v)]
    if singles:
        def place(kv: tuple[str, bool]) -> tuple[object, ...]:
            tier, index = _rank(kv[0], parameter, code)
            scope = _scope(kv[0], module)
            return kv[1], scope == 2, tier, scope, index, order[kv[0]]

        ranked = sorted(singles, key=place)
        best, per_gpu = ranked[0]
        tie = (per_gpu, _rank(best, parameter, code)[0], _scope(best, module))
        together = tuple(k for k, p in ranked[1:] if code == "SL501" and p == per_gpu and leaf(best) in VOCAB_KEYS
                         and leaf(k) in VOCAB_KEYS and leaf(k) != leaf(best))
        others = tuple(k for k, p in ranked[1:] if (p, _rank(k, parameter, code)[0], _scope(k, module)) == tie
                       and leaf(k) != leaf(best) and k not in together)
        return Explanation((best,), f"{leaf(best)} / tp {tp}" if per_gpu else leaf(best), per_gpu, False, others,
                           together)
    counts = [k for k in usable if COUNT_KEY.search(leaf(k))]
    widths = [k for k in usable if k not in counts and WIDTH_KEY.search(leaf(k))]
    found: list[tuple[int, int, str, str, str]] = []
    for w in widths:
        for c in counts:
            scope = max(_scope(w, module), _scope(c, module))
            if usable[w] % usable[c] == 0 and usable[w] // usable[c] == value:
                found.append((scope, order[w], w, c, f"{leaf(w)} / {leaf(c)}"))
            elif usable[w] * usable[c] == value:
                found.append((scope, order[w], w, c, f"{leaf(c)} × {leaf(w)}"))
    if not found:
        return None
    _, _, w, c, formula = min(found)
    return Explanation((w, c), formula, derived=True)


# -- the file: keys, lines --------------------------------------------------------

def anchor_line(text: str) -> int:
    """The line of the key that chose the model's code (``model_type``, else
    ``architectures``), else 1."""
    for key in ("model_type", "architectures"):
        m = re.search(rf'^\s*"?{key}"?\s*:', text, re.MULTILINE)
        if m:
            return text.count("\n", 0, m.start()) + 1
    return 1


def _library_dirs() -> tuple[Path, ...]:
    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # some virtualenvs' site module lacks it
        pass
    return tuple(Path(d).resolve() for d in dirs)


_LIBRARY_DIRS = _library_dirs()


def is_library(file: str) -> bool:
    """The file is installed library code (site-packages), not the user's."""
    path = Path(file).resolve()
    return ("site-packages" in path.parts or "dist-packages" in path.parts
            or any(path.is_relative_to(d) for d in _LIBRARY_DIRS))


# -- findings -----------------------------------------------------------------------


def locate_in_config(f: Finding, config_keys: dict[str, tuple[int, int]], config_file: str, *, tp: int = 1,
                     anchor: int = 1) -> Finding:
    """Point a finding at the config key whose value its suggestion changes; a finding
    no key explains, when its line is in library code, at line ``anchor`` of the file."""
    s = f.suggestion
    library = f.source is None or is_library(f.source.file)
    moved: Facts = (("library_source", f.source.to_json()),) if library and f.source else ()
    exp = None
    if s is not None and isinstance(s.from_, int) and s.parameter not in NOT_CONFIG_KEYS:
        exp = explain(s.from_, s.parameter, f.code, f.module, config_keys, tp)
    if exp is None:
        if not library:
            return f
        name = Path(config_file).name
        if s is None:
            note = f"no size of {name} is involved"
        elif s.parameter in RUN_NOTES:
            note = RUN_NOTES[s.parameter].format(name=name)
        elif not isinstance(s.from_, int) or s.parameter in NOT_CONFIG_KEYS:
            note = f"{s.parameter} is not a key of {name}"
        else:
            note = f"no key of {name} has the value {s.from_} or gives it as a product or quotient"
        return replace(f, source=Source(config_file, anchor),
                       facts=f.facts + (("config_key", None), ("config_note", note)) + moved)
    key = exp.keys[0]
    value, line = config_keys[key]
    used = [{"key": k, "line": config_keys[k][1], "value": config_keys[k][0]} for k in exp.keys]
    facts: Facts = (("config_key", key), ("config_keys", used), ("config_formula", exp.formula))
    if exp.others:
        facts += (("config_also", [{"key": k, "line": config_keys[k][1]} for k in exp.others]),)
    if exp.together:
        facts += (("config_together", [{"key": k, "line": config_keys[k][1], "value": config_keys[k][0]}
                                       for k in exp.together]),)
    suggestion = s
    if s is not None and not exp.derived:
        to = s.to * tp if exp.per_gpu and isinstance(s.to, int) else s.to
        suggestion = Suggestion(leaf(key), value, to)
        facts = (("code_parameter", s.parameter),) + facts
    return replace(f, suggestion=suggestion, source=Source(config_file, line), facts=f.facts + facts + moved)


def locate_all(findings: Sequence[Finding], config_keys: dict[str, tuple[int, int]], config_file: str, *,
               tp: int = 1) -> list[Finding]:
    """``locate_in_config`` for every finding of one target."""
    try:
        anchor = anchor_line(Path(config_file).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        anchor = 1
    located = [locate_in_config(f, config_keys, config_file, tp=tp, anchor=anchor) for f in findings]
    why = pretrained.marks(config_file)
    return located if why is None else [with_pretrained(f, why) for f in located]


def with_pretrained(f: Finding, why: str) -> Finding:
    """A finding of a pretrained checkpoint's config (``why`` says what marks it: weights
    beside it, ``_name_or_path``): ``pretrained`` says so, and a vocabulary finding gets
    ``pretrained_fix``, how to pad in code (the config itself must not change)."""
    facts: Facts = (("pretrained", why),)
    s = f.suggestion
    if (f.code == "SL501" or f.fact("vocab") is not None) and s is not None and isinstance(s.from_, int) \
            and isinstance(s.to, int) and s.to > s.from_:
        facts += (("pretrained_fix", pretrained.recipe(s.from_, s.to)),)
    return replace(f, facts=f.facts + facts)
