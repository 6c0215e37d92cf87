"""A class-based Trainer: ``Trainer.train_step(batch)`` called from ``Trainer.fit(num_steps)``.

The model is a tiny causal Transformer language model on random token
streams, trained with AdamW and a OneCycleLR schedule stepped every step.
``main`` calls ``fit`` three times (before, inside and after the profiler);
the profiled ``fit`` gets ``on_step_end=prof.step``, so prof.step() is called
after each profiled step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=tokens.device)
        h = self.tok(tokens) + self.pos[:seq]
        h = self.blocks(h, mask=mask, is_causal=True)
        return self.lm_head(self.norm(h))


class Trainer:
    def __init__(self, model: nn.Module, total_steps: int, device: torch.device, batch_size: int, seq_len: int, vocab: int) -> None:
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.vocab = vocab
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=1e-3, total_steps=total_steps)
        self.timer = StepTimer(device)
        self.global_step = 0
        self.last_loss: torch.Tensor | None = None
        self._gen = torch.Generator(device="cpu").manual_seed(1234)

    def next_batch(self) -> torch.Tensor:
        tokens = torch.randint(0, self.vocab, (self.batch_size, self.seq_len + 1), generator=self._gen)
        return tokens.to(self.device, non_blocking=True)

    def train_step(self, batch: torch.Tensor) -> torch.Tensor:
        inputs, targets = batch[:, :-1], batch[:, 1:]
        logits = self.model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()

    def fit(self, num_steps: int, on_step_end: Callable[[], None] | None = None) -> None:
        self.model.train()
        for _ in range(num_steps):
            with self.timer.step():
                self.last_loss = self.train_step(self.next_batch())
            self.global_step += 1
            if on_step_end is not None:
                on_step_end()


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 8 on CPU, 64 on CUDA")
    parser.add_argument("--seq-len", type=int, default=64)
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    vocab = 1024
    batch_size = args.batch_size or (8 if device.type == "cpu" else 64)
    model = TinyLM(vocab, d_model=128, n_layers=2, max_len=args.seq_len).to(device)
    trainer = Trainer(model, args.iters, device, batch_size, args.seq_len, vocab)

    window = trace_window(args)
    if window:
        trainer.fit(window.start)
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            trainer.fit(len(window), on_step_end=prof.step)
        trainer.fit(args.iters - window.stop)
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    else:
        trainer.fit(args.iters)

    assert trainer.last_loss is not None
    print(f"step {trainer.global_step}: loss {trainer.last_loss.item():.4f}, lr {trainer.scheduler.get_last_lr()[0]:.2e}")
    emit_result("trainer_class", trainer.timer.step_ms(), list(window), trainer.timer.period_ms())


if __name__ == "__main__":
    main()
