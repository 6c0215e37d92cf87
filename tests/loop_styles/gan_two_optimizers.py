"""GAN-style loop: a generator and a discriminator, two Adam optimizers, two LR schedulers.

Each step updates the discriminator on a real and a (detached) fake batch,
then the generator through the discriminator.  The loop runs in three phases
(before, inside and after the profiler), each under its own context manager
(``nullcontext()`` outside the profiled phase); no prof.step().
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


def mlp(d_in: int, d_hidden: int, d_out: int, act: type[nn.Module]) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, d_hidden), act(), nn.Linear(d_hidden, d_hidden), act(), nn.Linear(d_hidden, d_out)
    )


def real_batch(n: int, d: int, mix: torch.Tensor, device: torch.device) -> torch.Tensor:
    """'Real' data: a fixed random linear mix of heavy-tailed noise."""
    return torch.distributions.StudentT(3.0).sample((n, mix.shape[0])).to(device) @ mix


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 128 on CPU, 1024 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    n = args.batch_size or (128 if device.type == "cpu" else 1024)
    d_latent, d_data, d_hidden = 64, 128, 384
    mix = torch.randn(32, d_data, device=device) / 32 ** 0.5
    gen = mlp(d_latent, d_hidden, d_data, nn.ReLU).to(device)
    disc = mlp(d_data, d_hidden, 1, nn.LeakyReLU).to(device)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    sched_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=10, gamma=0.5)
    sched_d = torch.optim.lr_scheduler.StepLR(opt_d, step_size=10, gamma=0.5)
    ones = torch.ones(n, 1, device=device)
    zeros = torch.zeros(n, 1, device=device)  # BCE targets, not inputs
    timer = StepTimer(device)

    def gan_step() -> tuple[torch.Tensor, torch.Tensor]:
        real = real_batch(n, d_data, mix, device)
        fake = gen(torch.randn(n, d_latent, device=device))

        opt_d.zero_grad(set_to_none=True)
        loss_d = F.binary_cross_entropy_with_logits(disc(real), ones) + F.binary_cross_entropy_with_logits(
            disc(fake.detach()), zeros
        )
        loss_d.backward()
        opt_d.step()

        opt_g.zero_grad(set_to_none=True)
        loss_g = F.binary_cross_entropy_with_logits(disc(fake), ones)
        loss_g.backward()
        opt_g.step()

        sched_d.step()
        sched_g.step()
        return loss_d.detach(), loss_g.detach()

    window = trace_window(args)
    prof: profile | None = None
    phases: list[tuple[range, AbstractContextManager[object]]]
    if window:
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        prof = profile(activities=activities, record_shapes=True, with_stack=True)
        phases = [(range(window.start), nullcontext()), (window, prof), (range(window.stop, args.iters), nullcontext())]
    else:
        phases = [(range(args.iters), nullcontext())]

    loss_d = loss_g = torch.zeros(())
    for steps, ctx in phases:
        with ctx:
            for _ in steps:
                with timer.step():
                    loss_d, loss_g = gan_step()

    if prof is not None:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    print(f"loss D {loss_d.item():.4f} G {loss_g.item():.4f}")
    emit_result("gan_two_optimizers", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
