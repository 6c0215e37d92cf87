"""Inference loop: a small Transformer encoder (nn.Module) under torch.inference_mode() over batches.

The profiler wraps the middle range of batches; this program does NOT call
prof.step().
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class TextClassifier(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, n_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.1, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(tokens))
        return self.head(h.mean(dim=1))


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 16 on CPU, 256 on CUDA")
    parser.add_argument("--seq-len", type=int, default=64)
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    batch_size = args.batch_size or (16 if device.type == "cpu" else 256)
    vocab = 5000
    model = TextClassifier(vocab, d_model=256, n_heads=4, n_layers=2, n_classes=4).to(device).eval()
    batches = [torch.randint(0, vocab, (batch_size, args.seq_len), device=device) for _ in range(6)]
    timer = StepTimer(device)
    predictions: list[torch.Tensor] = []

    def predict(step: int) -> None:
        logits = model(batches[step % len(batches)])
        predictions.append(logits.argmax(dim=-1))

    window = trace_window(args)
    with torch.inference_mode():
        for step in range(window.start if window else args.iters):
            with timer.step():
                predict(step)
        if window:
            activities = [ProfilerActivity.CPU]
            if device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
                for step in window:
                    with timer.step():
                        predict(step)
            for step in range(window.stop, args.iters):
                with timer.step():
                    predict(step)

    if args.trace:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    counts = torch.bincount(torch.cat(predictions), minlength=4).tolist()
    print(f"predicted class counts {counts}")
    emit_result("inference_module", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
