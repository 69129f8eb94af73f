"""Point findings of a config target at the config key their suggestion changes."""

from __future__ import annotations

from dataclasses import replace

from shapelint.records import Finding, Source, Suggestion

#: config keys that name a layer size, preferred when several keys share a value
CONFIG_SIZE_KEYS = (
    "vocab_size", "intermediate_size", "hidden_size", "n_embd", "n_inner", "d_model", "d_ff",
    "ffn_dim", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "moe_intermediate_size",
)

#: suggestions that change how the model is run, not a size in its config
NOT_CONFIG_KEYS = frozenset({"batch", "dtype", "memory_format", "attention"})


def locate_in_config(f: Finding, config_keys: dict[str, tuple[int, int]], config_file: str) -> Finding:
    """Point a finding at the config key whose value its suggestion changes."""
    s = f.suggestion
    if s is None or not isinstance(s.from_, int) or s.parameter in NOT_CONFIG_KEYS:
        return f
    keys = [k for k, (v, _) in config_keys.items() if v == s.from_]
    if not keys:
        return f
    leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
    key = next((leaf[k] for k in CONFIG_SIZE_KEYS if k in leaf), keys[0])
    line = config_keys[key][1]
    return replace(
        f,
        suggestion=Suggestion(key.rsplit(".", 1)[-1], s.from_, s.to),
        source=Source(config_file, line),
        facts=f.facts + (("code_parameter", s.parameter),),
    )
