"""Masked-autoencoder (MAE) pre-training of a ViT-B/16 encoder on synthetic 224x224 images.

Per step: patchify, random 75% masking by argsort of uniform noise (all on the GPU), a
12 x 768 encoder over the visible 49 patches, a 4 x 512 decoder over all 196 positions with
mask tokens, and the normalised-pixel MSE on the masked patches only. SDPA attention,
bf16 autocast, fused AdamW, images generated on the device, loss read once at the end.
Timed with CUDA events.
"""
import argparse, json, sys, time
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




class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class MAE(nn.Module):
    def __init__(self, img, patch, dim, depth, heads, ddim, ddepth, dheads, mask_ratio=0.75):
        super().__init__()
        self.patch, self.n = patch, (img // patch) ** 2
        self.keep = int(self.n * (1 - mask_ratio))
        pdim = 3 * patch * patch
        self.embed = nn.Linear(pdim, dim)
        self.pos = nn.Parameter(torch.randn(1, self.n, dim) * 0.02)
        self.enc = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.enc_norm = nn.LayerNorm(dim)
        self.to_dec = nn.Linear(dim, ddim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, ddim))
        self.dpos = nn.Parameter(torch.randn(1, self.n, ddim) * 0.02)
        self.dec = nn.ModuleList([Block(ddim, dheads) for _ in range(ddepth)])
        self.dec_norm = nn.LayerNorm(ddim)
        self.pred = nn.Linear(ddim, pdim)

    def patchify(self, imgs):
        b, c, h, w = imgs.shape
        p = self.patch
        x = imgs.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(b, self.n, p * p * c)

    def forward(self, imgs):
        target = self.patchify(imgs)
        b = target.shape[0]
        noise = torch.rand(b, self.n, device=imgs.device)
        shuffle = torch.argsort(noise, dim=1)
        restore = torch.argsort(shuffle, dim=1)
        keep = shuffle[:, :self.keep]
        x = self.embed(target) + self.pos
        x = torch.gather(x, 1, keep[:, :, None].expand(-1, -1, x.shape[-1]))
        for blk in self.enc:
            x = blk(x)
        x = self.to_dec(self.enc_norm(x))
        x = torch.cat([x, self.mask_token.expand(b, self.n - self.keep, -1)], 1)
        x = torch.gather(x, 1, restore[:, :, None].expand(-1, -1, x.shape[-1])) + self.dpos
        for blk in self.dec:
            x = blk(x)
        pred = self.pred(self.dec_norm(x))
        mask = torch.ones(b, self.n, device=imgs.device)
        mask[:, :self.keep] = 0
        mask = torch.gather(mask, 1, restore)
        mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
        err = ((pred.float() - (target - mean) / (var + 1e-6).sqrt()) ** 2).mean(-1)
        return (err * mask).sum() / mask.sum()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, cfg = 128, dict(img=224, patch=16, dim=768, depth=12, heads=12, ddim=512, ddepth=4, dheads=16)
    else:
        B, cfg = 4, dict(img=64, patch=16, dim=64, depth=2, heads=2, ddim=32, ddepth=1, dheads=2)
    torch.manual_seed(0)
    model = MAE(**cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05,
                            **({"fused": True} if cuda else {}))
    img = cfg["img"]
    basis = torch.randn(16, 3, img, img, device=dev)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        w = torch.randn(B, 16, device=dev)
        imgs = torch.einsum("bk,kchw->bchw", w, basis) + 0.1 * torch.randn(B, 3, img, img, device=dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = model(imgs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        loop.end(i)
    loop.report("mae_control", applied_fixes(args, control=True), "one pre-training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
