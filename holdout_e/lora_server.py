"""Multi-tenant LoRA inference server loop.

A frozen bf16 base model (a stack of square Linear layers with SiLU) is shared by several
tenants, each with its own rank-16 LoRA adapter (A, B per layer, scale alpha/r). Every
server tick takes the queued requests (16 tokens each, tagged with a tenant id), runs
them through the base model with their tenant's adapter and writes the outputs back in
request order. Requests are run per tenant in micro-batches of `micro_batch` requests.
inference_mode, bf16, CUDA events.
"""
import argparse, json, sys, time
import torch
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


FIXES = ("unmerged", "group")


class LoRAModel:
    def __init__(self, layers, d, tenants, rank, alpha, dev, dtype):
        g = torch.Generator(device=dev)
        g.manual_seed(0)
        self.W = [torch.randn(d, d, device=dev, generator=g).mul_(d ** -0.5).to(dtype) for _ in range(layers)]
        self.b = [torch.zeros(d, device=dev, dtype=dtype) for _ in range(layers)]
        # adapters stacked per layer: A (tenants, r, d), B (tenants, d, r)
        self.A = [torch.randn(tenants, rank, d, device=dev, generator=g).mul_(d ** -0.5).to(dtype) for _ in range(layers)]
        self.B = [torch.randn(tenants, d, rank, device=dev, generator=g).mul_(0.5 * rank ** -0.5).to(dtype) for _ in range(layers)]
        self.scale = alpha / rank
        self.layers = layers

    def merged_weight(self, l, t):
        return torch.addmm(self.W[l], self.B[l][t], self.A[l][t], alpha=self.scale)

    def forward_tenant(self, x, t, merged):
        """x: (n, d) tokens of tenant t."""
        for l in range(self.layers):
            if merged:
                y = F.linear(x, self.merged_weight(l, t), self.b[l])
            else:
                xa = F.linear(x, self.A[l][t])
                y = torch.addmm(F.linear(x, self.W[l], self.b[l]), xa, self.B[l][t].t(), alpha=self.scale)
            x = F.silu(y) if l < self.layers - 1 else y
        return x

    def forward_grouped(self, xg):
        """xg: (tenants, n, d), row block t belongs to tenant t; one base GEMM for all."""
        T, n, d = xg.shape
        x = xg
        for l in range(self.layers):
            base = F.linear(x.reshape(T * n, d), self.W[l], self.b[l]).view(T, n, d)
            xa = torch.bmm(x, self.A[l].transpose(1, 2))
            y = torch.baddbmm(base, xa, self.B[l].transpose(1, 2), alpha=self.scale)
            x = F.silu(y) if l < self.layers - 1 else y
        return x


def serve_tick(model, x, order, tenants, per_tenant, tok, micro_batch, fixes):
    """x: (R, tok, d) requests; order[t]: request indices of tenant t (tenants x per_tenant)."""
    R, _, d = x.shape
    out = torch.empty_like(x)
    merged = "unmerged" not in fixes
    if "group" in fixes and not merged:
        xg = x[order.flatten()].view(tenants, per_tenant * tok, d)
        yg = model.forward_grouped(xg)
        out[order.flatten()] = yg.view(tenants * per_tenant, tok, d)
        return out
    mb = per_tenant if "group" in fixes else micro_batch
    for t in range(tenants):
        for s in range(0, per_tenant, mb):
            idx = order[t, s:s + mb]
            y = model.forward_tenant(x[idx].view(-1, d), t, merged)
            out[idx] = y.view(-1, tok, d)
    return out


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        layers, d, tenants, per_tenant, tok, dtype = 8, 4096, 8, 8, 16, torch.bfloat16
    else:
        layers, d, tenants, per_tenant, tok, dtype = 2, 64, 4, 4, 4, torch.float32
    rank, alpha, micro_batch = 16, 32.0, 2
    R = tenants * per_tenant
    torch.manual_seed(0)
    model = LoRAModel(layers, d, tenants, rank, alpha, dev, dtype)
    loop = Loop(args, dev)
    checksum = torch.zeros((), device=dev, dtype=torch.float32)
    with torch.inference_mode():
        for i in range(args.iters):
            loop.begin(i)
            # a tick's queue: R requests in arrival order, each tenant with per_tenant of them
            tenant_of = torch.arange(R, device=dev) // per_tenant
            tenant_of = tenant_of[torch.randperm(R, device=dev)]
            order = torch.argsort(tenant_of, stable=True).view(tenants, per_tenant)
            x = torch.randn(R, tok, d, device=dev, dtype=dtype)
            out = serve_tick(model, x, order, tenants, per_tenant, tok, micro_batch, fixes)
            checksum += out.float().square().mean()
            loop.end(i)
    loop.report("lora_server", fixes, "one server tick (all queued requests) per iteration")
    print("output checksum %.5f" % (checksum.item() / args.iters))


if __name__ == "__main__":
    main()
