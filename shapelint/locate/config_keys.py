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

The finding carries the answer as a typed ``ConfigLocation`` (``shapelint.model.locations``).

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
from shapelint.model.attention_keys import HEAD_DIM_KEYS, KV_HEAD_KEYS
from shapelint.model.locations import ConfigKey, ConfigLocation, Pretrained, Source
from shapelint.model.parallel import FSDP_GROUP_PARAMETER
from shapelint.model.records import Finding, Suggestion

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
    "SL602": ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
              "decoder_attention_heads"),
}

# keys that count an attention's key/value heads (KV_HEAD_KEYS): with multi-head
# attention they hold the heads' count too, and change with it (SL602)

#: keys that declare one vocabulary: when several hold the size, they change together
#: (Marian's published configs give ``vocab_size`` and ``decoder_vocab_size`` both 58101:
#: the output layer is sized by the second, the shared embedding by the first, and tied
#: weights need them equal)
VOCAB_KEYS = frozenset(RULE_KEYS["SL501"])

#: suggestions that change how the model is run, not a size in its config
NOT_CONFIG_KEYS = frozenset({"batch", "dtype", "memory_format", "attention", FSDP_GROUP_PARAMETER})

#: why a suggestion that is not a config size has no key (shown at ``model_type``)
RUN_NOTES = {
    "batch": "the batch and sequence length are how the model is run (--batch, --seq), not keys of {name}",
    "dtype": "the precision is how the model is run (--dtype, autocast), not a key of {name}",
    "memory_format": "the memory format is how the model is run (model.to(memory_format=...)), not a key of {name}",
    "attention": "the attention is the library code that model_type selects; no key of {name} changes it",
    FSDP_GROUP_PARAMETER: "FSDP2's groups are the training script's fully_shard calls, not a key of {name}",
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
    ranking = _Ranking(parameter, code, module, order)
    singles = [(k, v != value) for k, v in usable.items() if v == value or (tp > 1 and -(-v // tp) == value)]
    if singles:
        return ranking.single(singles, tp)
    return _derived(value, usable, module, order)


@dataclass(frozen=True)
class _Ranking:
    """How keys that hold a size rank (``_rank``, ``_scope``) for one finding's layer."""

    parameter: str
    code: str
    module: str
    order: dict[str, int]

    def tie(self, key: str, per_gpu: bool) -> tuple[object, ...]:
        """What two keys must share to be equally good explanations."""
        return per_gpu, _rank(key, self.parameter, self.code)[0], _scope(key, self.module)

    def place(self, kv: tuple[str, bool]) -> tuple[object, ...]:
        """Sort key: whole sizes before per-GPU ones, then not another part's, tier, scope,
        place in the rule's list, place in the file."""
        tier, index = _rank(kv[0], self.parameter, self.code)
        scope = _scope(kv[0], self.module)
        return kv[1], scope == 2, tier, scope, index, self.order[kv[0]]

    def single(self, singles: Sequence[tuple[str, bool]], tp: int) -> Explanation:
        """The best of the keys that hold the size (``per_gpu``: split over ``tp`` GPUs),
        with the keys of one vocabulary edited together and the equally good ones named."""
        ranked = sorted(singles, key=self.place)
        best, per_gpu = ranked[0]
        rest = [k for k, p in ranked[1:] if p == per_gpu and leaf(k) != leaf(best)]
        together = tuple(k for k in rest if (self.code == "SL501" and leaf(best) in VOCAB_KEYS and leaf(k) in VOCAB_KEYS)
                         or (self.code == "SL602" and leaf(best) not in KV_HEAD_KEYS and leaf(k) in KV_HEAD_KEYS))
        others = tuple(k for k in rest if self.tie(k, per_gpu) == self.tie(best, per_gpu) and k not in together)
        formula = f"{leaf(best)} / tp {tp}" if per_gpu else leaf(best)
        return Explanation((best,), formula, per_gpu, False, others, together)


def _derived(value: int, usable: dict[str, int], module: str, order: dict[str, int]) -> Explanation | None:
    """A quotient or product of a width key and a count key that gives ``value``, the
    one of the module's own part first, then the earliest in the file."""
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
    moved_from = f.source if library else None
    exp = None
    if s is not None and isinstance(s.from_, int) and s.parameter not in NOT_CONFIG_KEYS:
        exp = explain(s.from_, s.parameter, f.code, f.module, config_keys, tp)
    if exp is not None:
        return at_key(f, exp, config_keys, config_file, tp, moved_from)
    if not library:
        return f
    location = ConfigLocation(None, note=no_key_note(s, Path(config_file).name), library_source=moved_from)
    return replace(f, source=Source(config_file, anchor), location=location)


def no_key_note(s: Suggestion | None, name: str) -> str:
    """Why no key of the config ``name`` sets the size ``s`` changes."""
    if s is None:
        return f"no size of {name} is involved"
    if s.parameter in RUN_NOTES:
        return RUN_NOTES[s.parameter].format(name=name)
    if not isinstance(s.from_, int) or s.parameter in NOT_CONFIG_KEYS:
        return f"{s.parameter} is not a key of {name}"
    return f"no key of {name} has the value {s.from_} or gives it as a product or quotient"


def at_key(f: Finding, exp: Explanation, config_keys: dict[str, tuple[int, int]], config_file: str, tp: int,
            moved_from: Source | None) -> Finding:
    """``f`` at the key ``exp`` explains its size by; a key that holds the size itself
    becomes the suggestion's parameter (times ``tp`` where it holds the whole size)."""
    def at(keys: Sequence[str]) -> tuple[ConfigKey, ...]:
        return tuple(ConfigKey(k, config_keys[k][1], config_keys[k][0]) for k in keys)

    key = exp.keys[0]
    value, line = config_keys[key]
    s = suggestion = f.suggestion
    code_parameter = None
    if s is not None and not exp.derived:
        to = s.to * tp if exp.per_gpu and isinstance(s.to, int) else s.to
        suggestion = Suggestion(leaf(key), value, to)
        code_parameter = s.parameter
    location = ConfigLocation(key, exp.formula, at(exp.keys), at(exp.others), at(exp.together),
                              code_parameter=code_parameter, library_source=moved_from)
    return replace(f, suggestion=suggestion, source=Source(config_file, line), location=location)


def locate_all(findings: Sequence[Finding], config_keys: dict[str, tuple[int, int]], config_file: str, *,
               tp: int = 1) -> list[Finding]:
    """``locate_in_config`` for every finding of one target."""
    try:
        anchor = anchor_line(Path(config_file).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        anchor = 1
    located = [_head_dim_set(locate_in_config(f, config_keys, config_file, tp=tp, anchor=anchor), config_keys)
               for f in findings]
    why = pretrained.marks(config_file)
    return located if why is None else [with_pretrained(f, why) for f in located]


def _head_dim_set(f: Finding, config_keys: dict[str, tuple[int, int]]) -> Finding:
    """An SL602 finding on a config that sets the head dimension in a key of its own:
    the suggested head count changes it too (the hidden size kept: ``d × heads`` stays),
    and ``--fix`` edits one value, so it leaves the finding and says what to change."""
    s = f.suggestion
    keys = [k for k in config_keys if leaf(k) in HEAD_DIM_KEYS]
    if f.code != "SL602" or not keys or s is None or not isinstance(s.from_, int) or not isinstance(s.to, int):
        return f
    d = config_keys[keys[0]][0]
    return replace(f, not_fixed=f"the config sets the head dimension itself ({keys[0]}: {d}): change the heads to "
                                f"{s.to} and {leaf(keys[0])} to {d * s.from_ // s.to} together, by hand")


def with_pretrained(f: Finding, why: str) -> Finding:
    """A finding of a pretrained checkpoint's config (``why`` says what marks it: weights
    beside it, ``_name_or_path``): ``pretrained`` says so, and a vocabulary finding gets
    the recipe to pad in code (the config itself must not change)."""
    s = f.suggestion
    recipe = ""
    if (f.code == "SL501" or f.vocab is not None) and s is not None and isinstance(s.from_, int) \
            and isinstance(s.to, int) and s.to > s.from_:
        recipe = pretrained.recipe(s.from_, s.to)
    return replace(f, pretrained=Pretrained(why, recipe))
