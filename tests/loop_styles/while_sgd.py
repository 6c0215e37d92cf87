"""A ``while`` loop doing hand-written SGD on raw tensors with requires_grad.

Two-layer softmax regression; each step is ``loss.backward()`` then, under
``torch.no_grad()``, ``w -= lr * w.grad; w.grad = None``.  The profiler is
entered and left from inside the loop (an ExitStack) and prof.step() is called
after each profiled step.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 1024 on CPU, 8192 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    n = args.batch_size or (1024 if device.type == "cpu" else 8192)
    d_in, d_hidden, n_classes = 256, 1024, 16
    # A fixed random "teacher" makes the labels learnable.
    teacher = torch.randn(d_in, n_classes, device=device)
    w1 = (torch.randn(d_in, d_hidden, device=device) * d_in ** -0.5).requires_grad_()
    b1 = torch.zeros(d_hidden, device=device).requires_grad_()
    w2 = (torch.randn(d_hidden, n_classes, device=device) * d_hidden ** -0.5).requires_grad_()
    params = [w1, b1, w2]
    timer = StepTimer(device)

    window = trace_window(args)
    prof: profile | None = None
    losses: list[torch.Tensor] = []
    with ExitStack() as stack:
        step = 0
        while step < args.iters:
            if step == window.start and window:
                activities = [ProfilerActivity.CPU]
                if device.type == "cuda":
                    activities.append(ProfilerActivity.CUDA)
                prof = stack.enter_context(
                    profile(activities=activities, record_shapes=True, with_stack=True)
                )

            timer.start()
            x = torch.randn(n, d_in, device=device)
            y = (x @ teacher).argmax(dim=1)
            hidden = torch.tanh(x @ w1 + b1)
            loss = F.cross_entropy(hidden @ w2, y)
            loss.backward()
            with torch.no_grad():
                for p in params:
                    assert p.grad is not None
                    p -= args.lr * p.grad
                    p.grad = None
            losses.append(loss.detach())
            timer.stop()

            if prof is not None and step in window:
                prof.step()
                if step == window.stop - 1:
                    stack.close()
            step += 1

    if prof is not None:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    print(f"loss first {losses[0].item():.4f} last {losses[-1].item():.4f}")
    emit_result("while_sgd", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
