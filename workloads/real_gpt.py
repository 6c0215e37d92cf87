"""A real model as users run it (no planted bottleneck): a small GPT-style language model
trained with a DataLoader, bf16 autocast, AdamW and a loss printed every 10 steps.
``--fixed`` runs the same program.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
VOCAB, CTX, DIM, LAYERS, HEADS = 8192, 256, 512, 6, 8


class Tokens(Dataset[torch.Tensor]):
    def __init__(self) -> None:
        self.data = torch.randint(0, VOCAB, (1 << 20,))

    def __len__(self) -> int:
        return (len(self.data) - 1) // CTX

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i * CTX : (i + 1) * CTX + 1]


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(CTX, DIM))
        layer = nn.TransformerEncoderLayer(DIM, HEADS, 4 * DIM, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device)
        h = self.blocks(self.tok(idx) + self.pos[: idx.shape[1]], mask=mask, is_causal=True)
        return self.head(h)


model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
loader = DataLoader(Tokens(), batch_size=32, shuffle=True, num_workers=2, pin_memory=True, drop_last=True)
batches = iter(loader)


def step(i: int) -> None:
    seq = next(batches).to(dev, non_blocking=True)
    x, y = seq[:, :-1], seq[:, 1:]
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev == "cuda"):
        logits = model(x)
    loss = nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if i % 10 == 0:
        print(f"step {i} loss {loss.item():.3f}")


if __name__ == "__main__":
    run(step, args.steps, "real_gpt", args.fixed)
