"""Policy-gradient (A2C) training of a Gaussian MLP policy on a vectorised point-mass task.

4096 environments are stepped together: a 2-D point mass with drag must reach a goal;
the reward is the negative distance minus an action penalty. One iteration collects a
64-step rollout with the current policy and value net, computes discounted returns and
advantages, and takes one Adam step on the actor-critic loss. The environment mirrors
a numpy reference implementation.
"""
import argparse, json, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- run harness
def make_parser(doc, fixes=()):
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--fixed", action="store_true", help="use the corrected variant")
    if fixes:
        p.add_argument("--fix", action="append", default=[], choices=list(fixes),
                       help="apply one correction only (repeatable): " + ", ".join(fixes))
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--trace", help="chrome trace of iterations 10..10+K-1")
    p.add_argument("--trace-iters", type=int, default=5)
    p.add_argument("--et", help="execution trace of the same iterations")
    return p


def applied_fixes(args, fixes=(), control=False):
    if control:
        return []
    if not fixes:
        return ["all"] if args.fixed else []
    return sorted(set(fixes) if args.fixed else set(args.fix))


class Loop:
    """Iteration bookkeeping: timed range, profiled window, final report line."""

    def __init__(self, args, device, timer="events"):
        self.args, self.n = args, args.iters
        self.cuda = device.type == "cuda"
        self.timer = timer if self.cuda else "wall"
        k = args.trace_iters
        self.rec = bool(args.trace or args.et)
        self.w0 = max(0, min(10, self.n - k)) if self.rec else self.n
        self.w1 = min(self.n, self.w0 + k)
        self.t0, self.t1 = 5, (self.w0 if self.rec else self.n)
        if self.t1 <= self.t0:
            self.t0, self.t1 = min(5, self.n - 1), self.n
        self.marks, self.prof, self.eto = {}, None, None

    def _mark(self, key):
        if self.timer == "events":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks[key] = e
        else:
            if self.cuda:
                torch.cuda.synchronize()
            self.marks[key] = time.perf_counter()

    def begin(self, i):
        if i == self.t0:
            self._mark("start")
        if i == self.t1:
            self._mark("end")
        if self.rec and i == self.w0:
            if self.args.et:
                from torch.profiler import ExecutionTraceObserver
                self.eto = ExecutionTraceObserver()
                self.eto.register_callback(self.args.et)
                self.eto.start()
            if self.args.trace:
                acts = [torch.profiler.ProfilerActivity.CPU]
                if self.cuda:
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                self.prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
                self.prof.__enter__()

    def end(self, i):
        if self.rec and i == self.w1 - 1:
            if self.prof is not None:
                self.prof.__exit__(None, None, None)
                self.prof.export_chrome_trace(self.args.trace)
            if self.eto is not None:
                self.eto.stop()
                self.eto.unregister_callback()

    def report(self, program, fixes, timing="start/end marks"):
        if "end" not in self.marks:
            self._mark("end")
        a, b = self.marks["start"], self.marks["end"]
        if self.timer == "events":
            torch.cuda.synchronize()
            ms = a.elapsed_time(b)
        else:
            ms = (b - a) * 1e3
        res = dict(program=program, fixes=fixes, iters=self.n,
                   iter_ms=round(ms / (self.t1 - self.t0), 4),
                   timing="%s (%s) over iterations %d..%d" % (
                       timing, "CUDA events" if self.timer == "events" else "perf_counter"
                       + (" + cuda.synchronize" if self.cuda else ""), self.t0, self.t1 - 1))
        sys.stdout.flush()
        print("HOLDOUT_RESULT " + json.dumps(res), file=sys.stderr, flush=True)



DT, DRAG = 0.05, 0.1
HALF_LOG_2PI = 0.9189385332046727


class NumpyPointMass:
    def __init__(self, n, seed=0):
        self.rng = np.random.default_rng(seed)
        self.n = n
        self.pos = self.rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        self.vel = np.zeros((n, 2), np.float32)
        self.goal = self.rng.uniform(-1, 1, (n, 2)).astype(np.float32)

    def obs(self):
        return np.concatenate([self.pos, self.vel, self.goal - self.pos], 1)

    def step(self, act):
        act = np.clip(act, -1.0, 1.0)
        self.vel = self.vel * (1 - DRAG) + DT * act
        self.pos = np.clip(self.pos + DT * self.vel, -2, 2)
        rew = -np.linalg.norm(self.goal - self.pos, axis=1) - 0.01 * (act ** 2).sum(1)
        return self.obs(), rew.astype(np.float32)


class TorchPointMass:
    def __init__(self, n, device, seed=0):
        ref = NumpyPointMass(n, seed)
        self.pos, self.vel, self.goal = (torch.from_numpy(a).to(device) for a in (ref.pos, ref.vel, ref.goal))

    def obs(self):
        return torch.cat([self.pos, self.vel, self.goal - self.pos], 1)

    def step(self, act):
        act = act.clamp(-1.0, 1.0)
        self.vel = self.vel * (1 - DRAG) + DT * act
        self.pos = (self.pos + DT * self.vel).clamp(-2, 2)
        rew = -(self.goal - self.pos).norm(dim=1) - 0.01 * (act ** 2).sum(1)
        return self.obs(), rew


class ActorCritic(nn.Module):
    def __init__(self, hid):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, hid), nn.Tanh(), nn.Linear(hid, hid), nn.Tanh())
        self.mu, self.v = nn.Linear(hid, 2), nn.Linear(hid, 1)
        self.log_std = nn.Parameter(torch.full((2,), -0.5))

    def forward(self, o):
        h = self.body(o)
        return self.mu(h), self.v(h).squeeze(-1)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    n_env, T, hid = (4096, 64, 512) if cuda else (64, 8, 32)
    torch.manual_seed(0)
    net = ActorCritic(hid).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=3e-4, fused=cuda)
    env = TorchPointMass(n_env, dev) if args.fixed else NumpyPointMass(n_env)
    gamma = 0.99
    loop = Loop(args, dev, timer="events")
    hist = []
    obs = env.obs()
    for i in range(args.iters):
        loop.begin(i)
        logps, vals, rews = [], [], []
        ents = []
        for t in range(T):
            o = obs if args.fixed else torch.from_numpy(obs).to(dev)
            mu, v = net(o)
            std = net.log_std.exp()
            a = (mu + std * torch.randn_like(mu)).detach()
            logps.append((-0.5 * ((a - mu) / std) ** 2 - net.log_std - HALF_LOG_2PI).sum(-1))
            vals.append(v)
            ents.append((0.5 + HALF_LOG_2PI + net.log_std).sum().expand(n_env))
            if args.fixed:
                obs, r = env.step(a)
            else:
                obs, r = env.step(a.cpu().numpy())
                r = torch.from_numpy(r).to(dev)
            rews.append(r)
        with torch.no_grad():
            ret = net(obs if args.fixed else torch.from_numpy(obs).to(dev))[1]
            rets = []
            for r in reversed(rews):
                ret = r + gamma * ret
                rets.append(ret)
            rets = torch.stack(rets[::-1])
        vals, logps = torch.stack(vals), torch.stack(logps)
        adv = rets - vals.detach()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        loss = -(logps * adv).mean() + 0.5 * F.mse_loss(vals, rets) - 1e-3 * torch.stack(ents).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        hist.append(rets[0].mean().detach())
        loop.end(i)
    loop.report("rl_numpy_env", applied_fixes(args), "CUDA events before iteration 5 and before the end of the timed range")
    print("mean return %.3f" % torch.stack(hist).mean().item())


if __name__ == "__main__":
    main()
