"""The config keys that size an attention beside its head count, once: the loader's
check that key/value heads divide the heads (``shapelint.load.validate``), the locator
and ``--fix`` for SL602 (``shapelint.locate.config_keys``), and ``--verify --step``'s
edited copy (``shapelint.measure.parallel_change``) read the same names."""

from __future__ import annotations

#: keys (and Hugging Face config attributes) that hold an attention's key/value heads:
#: Llama and most decoders, Falcon and its old name, Mistral-style ``n_kv_heads``, ChatGLM
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num")
#: keys that set an attention's head dimension outright (not ``hidden_size / heads``)
HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "head_size", "attention_head_size", "attention_head_dim")

__all__ = ["HEAD_DIM_KEYS", "KV_HEAD_KEYS"]
