"""A padded layer (zero extra weights, extra outputs sliced or masked) computes the
same outputs and the same gradients as the original, on random inputs (CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shapelint.padding import (
    mask_padded_logits,
    pad_conv,
    pad_embedding,
    pad_input_features,
    pad_linear,
)

torch.manual_seed(0)


def grads(loss: torch.Tensor, *params: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, params))


@pytest.mark.parametrize("old,new", [(50257, 50264), (1001, 1008), (5461, 5464)])
def test_linear_out_features_padding_is_equivalent(old: int, new: int) -> None:
    layer = nn.Linear(24, old).double()
    padded = pad_linear(layer, out_features=new)
    x = torch.randn(7, 24, dtype=torch.float64, requires_grad=True)
    target = torch.randn(7, old, dtype=torch.float64)
    y, yp = layer(x), padded(x)[..., :old]
    assert torch.equal(padded.weight[old:], torch.zeros(new - old, 24, dtype=torch.float64))
    torch.testing.assert_close(yp, y)
    g = grads(F.mse_loss(y, target), x, layer.weight, layer.bias)
    gp = grads(F.mse_loss(yp, target), x, padded.weight, padded.bias)
    torch.testing.assert_close(gp[0], g[0])
    torch.testing.assert_close(gp[1][:old], g[1])
    torch.testing.assert_close(gp[2][:old], g[2])
    assert torch.count_nonzero(gp[1][old:]) == 0  # padded rows get no gradient: they stay zero


def test_linear_in_features_padding_with_zero_inputs_is_equivalent() -> None:
    layer = nn.Linear(1023, 32).double()
    padded = pad_linear(layer, in_features=1024)
    x = torch.randn(5, 1023, dtype=torch.float64, requires_grad=True)
    y, yp = layer(x), padded(pad_input_features(x, 1024))
    torch.testing.assert_close(yp, y)
    g, gp = grads(y.square().sum(), x, layer.weight), grads(yp.square().sum(), x, padded.weight)
    torch.testing.assert_close(gp[0], g[0])
    torch.testing.assert_close(gp[1][:, :1023], g[1])


def test_tied_lm_head_with_masked_logits_is_equivalent() -> None:
    """Padded vocabulary with tied embedding: cross-entropy over masked logits."""
    vocab, padded_vocab, width = 1001, 1008, 16
    emb = nn.Embedding(vocab, width).double()
    emb_p = pad_embedding(emb, padded_vocab)
    idx = torch.randint(0, vocab, (4, 9))
    targets = torch.randint(0, vocab, (4, 9))

    def loss(e: nn.Embedding, masked: bool) -> torch.Tensor:
        h = torch.tanh(e(idx))
        logits = h @ e.weight.t()  # tied LM head
        if masked:
            logits = mask_padded_logits(logits, vocab)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    ref, lp = loss(emb, False), loss(emb_p, True)
    torch.testing.assert_close(lp, ref)
    (g,), (gp,) = grads(ref, emb.weight), grads(lp, emb_p.weight)
    torch.testing.assert_close(gp[:vocab], g)
    assert torch.count_nonzero(gp[vocab:]) == 0


def test_conv_channel_padding_is_equivalent() -> None:
    conv = nn.Conv2d(30, 60, 3, padding=1).double()
    padded = pad_conv(conv, out_channels=64, in_channels=32)
    x = torch.randn(2, 30, 8, 8, dtype=torch.float64, requires_grad=True)
    y = conv(x)
    yp = padded(F.pad(x, (0, 0, 0, 0, 0, 2)))[:, :60]
    torch.testing.assert_close(yp, y)
    g = grads(y.square().sum(), x, conv.weight, conv.bias)
    gp = grads(yp.square().sum(), x, padded.weight, padded.bias)
    torch.testing.assert_close(gp[0], g[0])
    torch.testing.assert_close(gp[1][:60, :30], g[1])
    torch.testing.assert_close(gp[2][:60], g[2])


def test_padding_cannot_shrink() -> None:
    with pytest.raises(ValueError):
        pad_linear(nn.Linear(8, 8), out_features=4)
