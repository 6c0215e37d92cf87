"""Offline RL with a critic ensemble (SAC-N / EDAC flavour, deterministic actor).

A fixed dataset of transitions (as loaded from an offline-RL dump) is sampled
uniformly; an ensemble of Q-networks is regressed onto a clipped-min TD target
from Polyak-averaged target networks, and a tanh actor is trained to maximise
the ensemble-mean Q value. Runs as a plain while loop over gradient steps.
"""
import argparse
import copy
import json
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXES = ("replay", "stacked")


def mlp(din, dout, hidden, depth):
    layers, d = [], din
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    layers.append(nn.Linear(d, dout))
    return nn.Sequential(*layers)


class CriticList(nn.Module):
    def __init__(self, din, hidden, depth, n):
        super().__init__()
        self.qs = nn.ModuleList(mlp(din, 1, hidden, depth) for _ in range(n))

    def forward(self, s, a):
        sa = torch.cat([s, a], -1)
        return torch.stack([q(sa) for q in self.qs], 0)  # (n, B, 1)


class EnsembleLinear(nn.Module):
    def __init__(self, din, dout, n):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, din, dout))
        self.bias = nn.Parameter(torch.empty(n, 1, dout))
        bound = din ** -0.5
        nn.init.uniform_(self.weight, -bound, bound)  # same distribution as nn.Linear's default
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):  # x: (n, B, din)
        return torch.baddbmm(self.bias, x, self.weight)


class CriticStack(nn.Module):
    def __init__(self, din, hidden, depth, n):
        super().__init__()
        self.n = n
        dims = [din] + [hidden] * depth
        self.layers = nn.ModuleList(EnsembleLinear(a, b, n) for a, b in zip(dims[:-1], dims[1:]))
        self.out = EnsembleLinear(hidden, 1, n)

    def forward(self, s, a):
        x = torch.cat([s, a], -1).unsqueeze(0).expand(self.n, -1, -1)
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.out(x)


def main():
    ap = argparse.ArgumentParser(description="offline RL critic-ensemble training")
    ap.add_argument("--fixed", action="store_true", help="apply every fix")
    ap.add_argument("--fix", action="append", default=[], choices=FIXES,
                    help="apply one fix (repeatable): " + ", ".join(FIXES))
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et")
    args = ap.parse_args()
    fixes = sorted(set(FIXES) if args.fixed else set(args.fix))

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if cuda:
        n_data, obs_dim, act_dim, hidden, depth, n_q, batch = 250_000, 512, 32, 256, 3, 10, 4096
    else:
        n_data, obs_dim, act_dim, hidden, depth, n_q, batch = 5_000, 24, 6, 32, 2, 4, 64
    gamma, tau = 0.99, 0.005

    # offline dataset: observations along trajectories, next_obs = obs[i + 1]
    data = {
        "obs": rng.standard_normal((n_data + 1, obs_dim), dtype=np.float32),
        "act": rng.uniform(-1, 1, (n_data, act_dim)).astype(np.float32),
        "rew": rng.standard_normal((n_data, 1), dtype=np.float32),
        "done": (rng.random((n_data, 1)) < 0.01).astype(np.float32),
    }
    if "replay" in fixes:
        data_dev = {k: torch.from_numpy(v).to(dev) for k, v in data.items()}

    def sample():
        if "replay" in fixes:
            i = torch.randint(0, n_data, (batch,), device=dev)
            d = data_dev
            return d["obs"][i], d["act"][i], d["rew"][i], d["obs"][i + 1], d["done"][i]
        i = rng.integers(0, n_data, batch)
        d = data
        return tuple(torch.as_tensor(x).to(dev) for x in
                     (d["obs"][i], d["act"][i], d["rew"][i], d["obs"][i + 1], d["done"][i]))

    Critic = CriticStack if "stacked" in fixes else CriticList
    critic = Critic(obs_dim + act_dim, hidden, depth, n_q).to(dev)
    actor = nn.Sequential(mlp(obs_dim, act_dim, hidden, 2), nn.Tanh()).to(dev)
    critic_t, actor_t = copy.deepcopy(critic), copy.deepcopy(actor)
    for p in list(critic_t.parameters()) + list(actor_t.parameters()):
        p.requires_grad_(False)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=3e-4)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    online = list(critic.parameters()) + list(actor.parameters())
    target = list(critic_t.parameters()) + list(actor_t.parameters())

    def grad_step():
        s, a, r, s2, done = sample()
        with torch.no_grad():
            noise = (0.2 * torch.randn_like(a)).clamp(-0.5, 0.5)
            a2 = (actor_t(s2) + noise).clamp(-1, 1)
            y = r + gamma * (1 - done) * critic_t(s2, a2).amin(0)
        q = critic(s, a)
        critic_loss = (q - y.unsqueeze(0)).pow(2).mean(dim=(1, 2)).sum()
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_opt.step()

        actor_loss = -critic(s, actor(s)).mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(target, online, tau)
        return critic_loss.detach(), actor_loss.detach()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    logs = []
    t0 = t1 = None
    prof = et = None
    step = 0
    while step < args.iters:
        if step == 5 and win > 5:
            sync()
            t0 = time.perf_counter()
        if step == win:
            if t0 is not None:
                sync()
                t1 = time.perf_counter()
            if profiling:
                if args.et:
                    et = torch.profiler.ExecutionTraceObserver()
                    et.register_callback(args.et)
                    et.start()
                prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
                prof.start()
        logs.append(grad_step())
        step += 1
        if prof is not None:
            prof.step()
            if step == win + k:
                prof.stop()
                if args.trace:
                    prof.export_chrome_trace(args.trace)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
                prof = None
    sync()
    if t0 is not None and t1 is None:
        t1 = time.perf_counter()
    iter_ms = (t1 - t0) * 1e3 / (win - 5) if t0 is not None else None
    cl, al = (torch.stack(x).mean().item() for x in zip(*logs))
    print(f"critic_ensemble: {n_q} critics, mean critic loss {cl:.4f}, mean actor loss {al:.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "critic_ensemble",
        "fixes": fixes,
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": f"perf_counter with cuda.synchronize at both ends of steps 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
