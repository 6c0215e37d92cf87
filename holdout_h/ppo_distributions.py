"""PPO on a vectorised point-mass reaching task simulated on the GPU.

32k environments are stepped in parallel with torch tensor ops (a point mass with damping
must reach a random goal; episodes restart every 64 steps). Each iteration collects a
32-step rollout with a diagonal-Gaussian policy from torch.distributions, computes GAE
advantages and runs one PPO epoch of 4 minibatches (clipped surrogate, value loss, entropy
bonus). Separate tanh-MLP actor and critic, fused Adam, TF32 matmuls, CUDA events.
"""
import argparse, json, sys, time
import torch
import torch.nn as nn
from torch.distributions import Independent, Normal

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

OBS, ACT = 8, 2


class PointMassEnv:
    def __init__(self, n, dev, horizon=64, seed=0):
        self.n, self.dev, self.horizon = n, dev, horizon
        self.g = torch.Generator(device=dev).manual_seed(seed)
        self.pos = torch.zeros(n, 2, device=dev)
        self.vel = torch.zeros(n, 2, device=dev)
        self.goal = torch.zeros(n, 2, device=dev)
        self.t = 0
        self._reset(torch.ones(n, 1, device=dev))

    def _reset(self, mask):
        self.pos = torch.where(mask > 0, torch.rand(self.n, 2, generator=self.g, device=self.dev) * 2 - 1, self.pos)
        self.vel = self.vel * (1 - mask)
        self.goal = torch.where(mask > 0, torch.rand(self.n, 2, generator=self.g, device=self.dev) * 2 - 1, self.goal)

    def obs(self):
        return torch.cat([self.pos, self.vel, self.goal - self.pos, self.vel.norm(dim=1, keepdim=True),
                          (self.goal - self.pos).norm(dim=1, keepdim=True)], 1)

    def step(self, action):
        a = action.clamp(-1, 1)
        self.vel = 0.9 * self.vel + 0.1 * a
        self.pos = (self.pos + 0.05 * self.vel).clamp(-1.5, 1.5)
        reward = -(self.goal - self.pos).norm(dim=1) - 0.01 * a.pow(2).sum(1)
        self.t += 1
        done = torch.full((self.n,), float(self.t % self.horizon == 0), device=self.dev)
        self._reset(done[:, None])
        return self.obs(), reward, done


def mlp(d_in, d_out, hidden):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, d_out))


class ActorCritic(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.actor, self.critic = mlp(OBS, ACT, hidden), mlp(OBS, 1, hidden)
        self.log_std = nn.Parameter(torch.full((ACT,), -0.5))

    def dist(self, obs):
        return Independent(Normal(self.actor(obs), self.log_std.exp().expand(obs.shape[0], ACT)), 1)

    def value(self, obs):
        return self.critic(obs).squeeze(-1)


def rollout(env, ac, obs, T):
    buf = {k: [] for k in ("obs", "act", "logp", "rew", "done", "val")}
    with torch.no_grad():
        for _ in range(T):
            d = ac.dist(obs)
            a = d.sample()
            buf["obs"].append(obs); buf["act"].append(a); buf["logp"].append(d.log_prob(a))
            buf["val"].append(ac.value(obs))
            obs, r, done = env.step(a)
            buf["rew"].append(r); buf["done"].append(done)
        last_val = ac.value(obs)
    return {k: torch.stack(v) for k, v in buf.items()}, obs, last_val


def gae(rew, val, done, last_val, gamma=0.99, lam=0.95):
    adv = torch.zeros_like(rew)
    next_adv, next_val = torch.zeros_like(last_val), last_val
    for t in reversed(range(rew.shape[0])):
        nonterm = 1.0 - done[t]
        delta = rew[t] + gamma * next_val * nonterm - val[t]
        next_adv = delta + gamma * lam * nonterm * next_adv
        adv[t] = next_adv
        next_val = val[t]
    return adv, adv + val


def ppo_update(ac, opt, batch, adv, ret, n_mb, gen, clip=0.2):
    n = adv.numel()
    flat = {k: v.flatten(0, 1) for k, v in batch.items()}
    adv, ret = adv.flatten(), ret.flatten()
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    perm = torch.randperm(n, generator=gen, device=adv.device)
    stats = torch.zeros((), device=adv.device)
    for idx in perm.view(n_mb, -1):
        d = ac.dist(flat["obs"][idx])
        logp = d.log_prob(flat["act"][idx])
        ratio = (logp - flat["logp"][idx]).exp()
        pg = -torch.min(ratio * adv[idx], ratio.clamp(1 - clip, 1 + clip) * adv[idx]).mean()
        v_loss = (ac.value(flat["obs"][idx]) - ret[idx]).pow(2).mean()
        loss = pg + 0.5 * v_loss - 0.001 * d.entropy().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(ac.parameters(), 0.5)
        opt.step()
        stats += loss.detach()
    return stats / n_mb


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        N_ENVS, T, HIDDEN, N_MB = 32768, 32, 256, 4
    else:
        N_ENVS, T, HIDDEN, N_MB = 64, 8, 32, 2
    if args.fixed:
        torch.distributions.Distribution.set_default_validate_args(False)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    env = PointMassEnv(N_ENVS, dev)
    ac = ActorCritic(HIDDEN).to(dev)
    opt = torch.optim.Adam(ac.parameters(), lr=3e-4, **({"fused": True} if cuda else {}))
    gen = torch.Generator(device=dev).manual_seed(2)
    loop = Loop(args, dev)
    obs = env.obs()
    total_ret = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        batch, obs, last_val = rollout(env, ac, obs, T)
        adv, ret = gae(batch["rew"], batch["val"], batch["done"], last_val)
        ppo_update(ac, opt, batch, adv, ret, N_MB, gen)
        total_ret += batch["rew"].mean()
        loop.end(i)
    loop.report("ppo_distributions", applied_fixes(args), "one rollout + PPO epoch per iteration")
    print("mean reward %.4f" % (total_ret.item() / args.iters))


if __name__ == "__main__":
    main()
