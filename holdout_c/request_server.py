"""Image-classification inference server loop with a separate upload stream.

Each tick the server takes the requests that arrived (uint8 images in pinned host
buffers), uploads them on a copy stream while the previous tick is computed, and
answers every request with its top-5 classes. bf16, channels_last, inference_mode.
"""
import argparse, json, sys, time
import torch
import torch.nn.functional as F
import torchvision


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


class Server:
    def __init__(self, model, dev, mean, std, batched):
        self.model, self.dev, self.batched = model, dev, batched
        self.mean, self.std = mean, std
        self.cuda = dev.type == "cuda"
        self.copy_stream = torch.cuda.Stream() if self.cuda else None

    def upload(self, reqs):
        if not self.cuda:
            return [r.to(self.dev) for r in reqs], None
        with torch.cuda.stream(self.copy_stream):
            out = [r.to(self.dev, non_blocking=True) for r in reqs]
            ev = torch.cuda.Event()
            ev.record()
        return out, ev

    def preprocess(self, img):
        x = (img.float() - self.mean) / self.std
        return x.to(torch.bfloat16 if self.cuda else torch.float32).contiguous(memory_format=torch.channels_last)

    def handle(self, imgs, ready):
        if ready is not None:
            torch.cuda.current_stream().wait_event(ready)
            for t in imgs:
                t.record_stream(torch.cuda.current_stream())
        if self.batched:
            x = self.preprocess(torch.stack(imgs))
            return self.model(x).topk(5, dim=1).indices
        answers = []
        for img in imgs:  # one request at a time
            logits = self.model(self.preprocess(img.unsqueeze(0)))
            answers.append(logits.topk(5, dim=1).indices)
        return torch.cat(answers)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    nreq, res = (32, 64) if cuda else (6, 32)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=1000).eval().to(dev)
    model = model.to(memory_format=torch.channels_last)
    if cuda:
        model = model.to(torch.bfloat16)
    mean = torch.tensor([123.7, 116.3, 103.5], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4], device=dev).view(1, 3, 1, 1)
    server = Server(model, dev, mean, std, batched=args.fixed)
    # request arrivals: a ring of pre-recorded ticks of uint8 images in pinned memory
    ticks = [[torch.randint(0, 256, (3, res, res), dtype=torch.uint8).pin_memory() if cuda else
              torch.randint(0, 256, (3, res, res), dtype=torch.uint8) for _ in range(nreq)] for _ in range(4)]
    answers = torch.empty(args.iters, nreq, 5, dtype=torch.long, device=dev)
    loop = Loop(args, dev, timer="wall")
    with torch.inference_mode():
        nxt = server.upload(ticks[0])
        for i in range(args.iters):
            loop.begin(i)
            imgs, ready = nxt
            nxt = server.upload(ticks[(i + 1) % len(ticks)])
            answers[i] = server.handle(imgs, ready)
            loop.end(i)
    loop.report("request_server", applied_fixes(args), "wall clock around ticks")
    print("answered", answers.shape[0] * answers.shape[1], "requests; first", answers[0, 0].tolist())


if __name__ == "__main__":
    main()
