"""Built-in models for ``tensight bench``, trained on synthetic data.

Each builder returns ``(model, make_batch, loss_fn)``: ``make_batch()`` gives one batch
(made once on the device and reused, so no data pipeline is measured) and
``loss_fn(model, batch)`` the loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

MODELS = ("resnet50", "transformer", "simple_cnn")

Batch = tuple[torch.Tensor, torch.Tensor]
Built = tuple[nn.Module, Callable[[], Batch], Callable[[nn.Module, Batch], torch.Tensor]]


class SimpleCNN(nn.Module):
    """Two conv blocks and a linear head on 3x32x32 images (CIFAR-sized), 10 classes."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(64 * 8 * 8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class TransformerLM(nn.Module):
    """A GPT-like causal LM built on ``nn.TransformerEncoder`` (pre-norm, GELU)."""

    mask: torch.Tensor

    def __init__(self, vocab: int = 8192, d_model: int = 512, heads: int = 8,
                 layers: int = 6, seq_len: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:, :n]
        x = self.encoder(x, mask=self.mask[:n, :n], is_causal=True)
        return self.head(self.norm(x))


def _classify(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _lm(model: nn.Module, batch: Batch) -> torch.Tensor:
    tokens, targets = batch
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def build(name: str, batch_size: int, device: torch.device) -> Built:
    """The model `name` on `device`, a batch maker and its loss."""
    g = torch.Generator(device="cpu").manual_seed(0)
    if name == "simple_cnn":
        model: nn.Module = SimpleCNN()
        x = torch.randn(batch_size, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (batch_size,), generator=g)
        loss: Callable[[nn.Module, Batch], torch.Tensor] = _classify
    elif name == "resnet50":
        try:
            from torchvision.models import resnet50
        except ImportError as e:
            raise SystemExit("error: --model resnet50 needs torchvision "
                             f"(pip install torchvision): {e}") from None
        model = resnet50(weights=None, num_classes=1000)
        x = torch.randn(batch_size, 3, 224, 224, generator=g)
        y = torch.randint(0, 1000, (batch_size,), generator=g)
        loss = _classify
    elif name == "transformer":
        lm = TransformerLM()
        model = lm
        seq = lm.pos.shape[1]
        x = torch.randint(0, lm.embed.num_embeddings, (batch_size, seq), generator=g)
        y = torch.roll(x, -1, dims=1)
        loss = _lm
    else:
        raise SystemExit(f"error: unknown model {name!r} (one of {', '.join(MODELS)})")
    model.to(device)
    batch = (x.to(device), y.to(device))

    def make_batch() -> Batch:
        return batch

    return model, make_batch, loss


def describe(model: nn.Module) -> dict[str, Any]:
    """Parameter count, for the bench's summary line."""
    return {"parameters": sum(p.numel() for p in model.parameters())}
