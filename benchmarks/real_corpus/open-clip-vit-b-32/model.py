"""open_clip ViT-B-32 (image 224, text context 77, vocab 49408), contrastive batch."""
import open_clip
import torch


def shapelint_model(batch: int = 256):
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    return model, (torch.randn(batch, 3, 224, 224), torch.randint(0, 49408, (batch, 77)))
