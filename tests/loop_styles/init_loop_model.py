"""Inference loop over a model whose constructor initialises its weights in a loop.

``DeepMLP.__init__`` builds 48 linear layers and then initialises every weight in a
``for`` loop (one ``normal_``/``zero_`` per parameter), the way hand-written GPT and
ResNet reimplementations do; under ``torch.device(...)`` those run on the device. That
loop repeats far longer than a recording window. The program's time is in the serving
loop that follows: one forward of the whole model per request batch.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window

LAYERS = 48


class DeepMLP(nn.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        for name, p in self.named_parameters():
            if name.endswith("weight"):
                nn.init.normal_(p, std=0.01)
            else:
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x)) + x
        return x


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--width", type=int, default=None, help="default: 384 on CPU, 2048 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    width = args.width or (384 if device.type == "cpu" else 2048)
    with torch.device(device):
        model = DeepMLP(width, LAYERS).eval()
    requests = [torch.randn(64, width, device=device) for _ in range(4)]
    timer = StepTimer(device)
    window = trace_window(args)
    prof = None
    total = torch.zeros((), device=device)
    with torch.inference_mode():
        for i in range(args.iters):
            if window and i == window.start:
                activities = [ProfilerActivity.CPU]
                if device.type == "cuda":
                    activities.append(ProfilerActivity.CUDA)
                prof = profile(activities=activities, record_shapes=True, with_stack=True)
                prof.__enter__()
            with timer.step():
                total += model(requests[i % len(requests)]).mean()
            if prof is not None and i == window.stop - 1:
                prof.__exit__(None, None, None)
                Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
                prof.export_chrome_trace(args.trace)
                prof = None
    print(f"mean output {total.item() / args.iters:.6f}")
    emit_result("init_loop_model", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
