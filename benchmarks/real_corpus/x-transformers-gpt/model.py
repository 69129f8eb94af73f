"""x-transformers' README decoder (GPT-like, 8 layers... at its example sizes) with rotary positions."""
import torch
from x_transformers import Decoder, TransformerWrapper


def shapelint_model(batch: int = 8, seq: int = 1024):
    model = TransformerWrapper(num_tokens=20000, max_seq_len=1024,
                               attn_layers=Decoder(dim=512, depth=12, heads=8, rotary_pos_emb=True))
    return model, torch.randint(0, 20000, (batch, seq))
