"""Apply a padding suggestion to a layer without changing what the model computes.

The extra weights are zero and the extra outputs are sliced away (or, for a
vocabulary, their logits are set to -inf before the loss), so outputs and
gradients of the original parameters are the same as before padding.

>>> import torch, torch.nn as nn
>>> head = nn.Linear(16, 50257, bias=False)
>>> padded = pad_linear(head, out_features=50264)
>>> x = torch.randn(2, 16)
>>> torch.allclose(head(x), padded(x)[..., :50257])
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _grow(t: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
    """``t`` zero-padded at the end of each dimension to ``sizes``."""
    out = t.new_zeros(sizes)
    out[tuple(slice(0, s) for s in t.shape)] = t
    return out


def pad_linear(layer: nn.Linear, *, out_features: int | None = None, in_features: int | None = None) -> nn.Linear:
    """A Linear with more outputs and/or inputs; the new weights (and bias) are zero.

    Extra outputs must be sliced off (``y[..., :old_out]``); extra inputs must be
    fed zeros (``F.pad(x, (0, new_in - old_in))``)."""
    out_f = out_features or layer.out_features
    in_f = in_features or layer.in_features
    if out_f < layer.out_features or in_f < layer.in_features:
        raise ValueError("padding can only grow a layer")
    new = nn.Linear(in_f, out_f, bias=layer.bias is not None, device=layer.weight.device, dtype=layer.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(_grow(layer.weight, (out_f, in_f)))
        if layer.bias is not None:
            new.bias.copy_(_grow(layer.bias, (out_f,)))
    return new


def pad_embedding(layer: nn.Embedding, num_embeddings: int) -> nn.Embedding:
    """An Embedding with zero rows appended; token ids never reach them."""
    if num_embeddings < layer.num_embeddings:
        raise ValueError("padding can only grow a layer")
    new = nn.Embedding(num_embeddings, layer.embedding_dim, padding_idx=layer.padding_idx,
                       device=layer.weight.device, dtype=layer.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(_grow(layer.weight, (num_embeddings, layer.embedding_dim)))
    return new


def pad_conv(layer: nn.Conv2d, *, out_channels: int | None = None, in_channels: int | None = None) -> nn.Conv2d:
    """A Conv2d with more output and/or input channels; the new filters are zero.

    Extra output channels must be sliced off (``y[:, :old_out]``) or fed into a
    padded next layer; extra input channels must be fed zeros."""
    if layer.groups != 1:
        raise ValueError("only groups=1 convolutions can be padded this way")
    out_c = out_channels or layer.out_channels
    in_c = in_channels or layer.in_channels
    if out_c < layer.out_channels or in_c < layer.in_channels:
        raise ValueError("padding can only grow a layer")
    new = nn.Conv2d(in_c, out_c, layer.kernel_size, layer.stride, layer.padding,  # type: ignore[arg-type]
                    layer.dilation,  # type: ignore[arg-type]
                    bias=layer.bias is not None, padding_mode=layer.padding_mode,
                    device=layer.weight.device, dtype=layer.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(_grow(layer.weight, (out_c, in_c, *layer.kernel_size)))
        if layer.bias is not None:
            assert new.bias is not None
            new.bias.copy_(_grow(layer.bias, (out_c,)))
    return new


def mask_padded_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits of padded vocabulary rows set to -inf, so softmax and cross-entropy
    give them zero probability and zero gradient."""
    if logits.shape[-1] == vocab_size:
        return logits
    mask = torch.arange(logits.shape[-1], device=logits.device) >= vocab_size
    return logits.masked_fill(mask, float("-inf"))


def pad_input_features(x: torch.Tensor, in_features: int) -> torch.Tensor:
    """``x`` with zero features appended up to ``in_features``."""
    return F.pad(x, (0, in_features - x.shape[-1]))
