"""Single-level anchor-based object detector: batched inference with post-processing.

A ResNet-style backbone to stride 16, RetinaNet-style classification and box
heads over 9 anchors per cell, then the usual post-processing per image:
pre-NMS top-k, score threshold, box decoding, class-aware NMS, top-100
detections. Frames come from a device-resident pool of uint8 images.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from torchvision.ops import batched_nms as tv_batched_nms
except Exception:  # torchvision is optional
    tv_batched_nms = None


def conv_bn(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = conv_bn(cin, cout, 3, stride)
        self.c2 = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.c2(self.c1(x)) + self.skip(x))


class Detector(nn.Module):
    def __init__(self, width=64, n_anchors=9, n_classes=20):
        super().__init__()
        w = width
        self.stem = nn.Sequential(conv_bn(3, w, 7, 2), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(
            Basic(w, w, 1), Basic(w, w, 1),
            Basic(w, 2 * w, 2), Basic(2 * w, 2 * w, 1),
            Basic(2 * w, 4 * w, 2), Basic(4 * w, 4 * w, 1), Basic(4 * w, 4 * w, 1),
        )
        self.cls_tower = conv_bn(4 * w, 4 * w)
        self.box_tower = conv_bn(4 * w, 4 * w)
        self.cls = nn.Conv2d(4 * w, n_anchors * n_classes, 3, 1, 1)
        self.box = nn.Conv2d(4 * w, n_anchors * 4, 3, 1, 1)
        self.n_classes = n_classes

    def forward(self, x):
        f = self.layers(self.stem(x))
        b = x.shape[0]
        cls = self.cls(self.cls_tower(f)).permute(0, 2, 3, 1).reshape(b, -1, self.n_classes)
        box = self.box(self.box_tower(f)).permute(0, 2, 3, 1).reshape(b, -1, 4)
        return cls, box


def make_anchors(h, w, stride, sizes=(32, 64, 128), ratios=(0.5, 1.0, 2.0)):
    ys, xs = torch.meshgrid(torch.arange(h) * stride + stride / 2, torch.arange(w) * stride + stride / 2, indexing="ij")
    wh = torch.tensor([(s * r ** 0.5, s / r ** 0.5) for s in sizes for r in ratios])
    ctr = torch.stack([xs, ys], -1).view(-1, 1, 2)
    return torch.cat([ctr - wh / 2, ctr + wh / 2], -1).view(-1, 4)  # (h*w*A, 4)


# ---------------------------------------------------------------- post-processing
def nms_np(boxes, scores, thr):
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1) * (y2 - y1)
    order = scores.argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        xx1 = np.maximum(x1[i], x1[rest])
        yy1 = np.maximum(y1[i], y1[rest])
        xx2 = np.minimum(x2[i], x2[rest])
        yy2 = np.minimum(y2[i], y2[rest])
        inter = np.maximum(0.0, xx2 - xx1) * np.maximum(0.0, yy2 - yy1)
        iou = inter / (areas[i] + areas[rest] - inter)
        order = rest[iou <= thr]
    return np.asarray(keep, dtype=np.int64)


def decode_np(anchors, deltas, size):
    w = anchors[:, 2] - anchors[:, 0]
    h = anchors[:, 3] - anchors[:, 1]
    cx = anchors[:, 0] + 0.5 * w + deltas[:, 0] * w
    cy = anchors[:, 1] + 0.5 * h + deltas[:, 1] * h
    pw = w * np.exp(np.minimum(deltas[:, 2], 4.0))
    ph = h * np.exp(np.minimum(deltas[:, 3], 4.0))
    return np.stack([cx - pw / 2, cy - ph / 2, cx + pw / 2, cy + ph / 2], 1).clip(0, size)


def postprocess_np(cls_logits, box_deltas, anchors_np, size, pre_nms=1000, thr=0.05, iou=0.5, max_det=100):
    scores = torch.sigmoid(cls_logits.float()).cpu().numpy()
    deltas = box_deltas.float().cpu().numpy()
    n_cls = scores.shape[-1]
    results = []
    for b in range(scores.shape[0]):
        s = scores[b].ravel()
        cand = np.argpartition(-s, pre_nms)[:pre_nms]
        cand = cand[s[cand] > thr]
        a_idx, c_idx = np.divmod(cand, n_cls)
        boxes = decode_np(anchors_np[a_idx], deltas[b, a_idx], size)
        sc = s[cand]
        keep = []
        for c in np.unique(c_idx):
            m = np.nonzero(c_idx == c)[0]
            keep.append(m[nms_np(boxes[m], sc[m], iou)])
        keep = np.concatenate(keep) if keep else np.zeros(0, np.int64)
        keep = keep[np.argsort(-sc[keep], kind="stable")][:max_det]
        results.append(np.concatenate([boxes[keep], sc[keep, None], c_idx[keep, None].astype(np.float32)], 1))
    return results


def decode_t(anchors, deltas, size):
    wh = anchors[..., 2:] - anchors[..., :2]
    ctr = anchors[..., :2] + 0.5 * wh + deltas[..., :2] * wh
    pwh = wh * torch.exp(deltas[..., 2:].clamp(max=4.0))
    return torch.cat([ctr - pwh / 2, ctr + pwh / 2], -1).clamp(0, size)


def nms_torch_fallback(boxes, scores, idxs, iou):
    # exact greedy NMS via Cluster-NMS iterations on the IoU matrix (no host round trips)
    order = scores.argsort(descending=True)
    boxes, idxs = boxes[order], idxs[order]
    off = boxes + (idxs.to(boxes.dtype) * (boxes.max() + 1)).unsqueeze(1)
    area = (off[:, 2] - off[:, 0]) * (off[:, 3] - off[:, 1])
    lt = torch.max(off[:, None, :2], off[None, :, :2])
    rb = torch.min(off[:, None, 2:], off[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    m = (inter / (area[:, None] + area[None] - inter)).triu(1)
    keep = torch.ones_like(scores, dtype=torch.bool)
    for _ in range(32):
        keep = ~((m * keep.unsqueeze(1).float()).amax(0) > iou)
    kept = order[keep]
    return kept[scores[kept].argsort(descending=True)]


def postprocess_torch(cls_logits, box_deltas, anchors, size, pre_nms=1000, thr=0.05, iou=0.5, max_det=100):
    b, _, n_cls = cls_logits.shape
    scores = torch.sigmoid(cls_logits.float()).flatten(1)
    top_s, top_i = scores.topk(pre_nms, dim=1)
    a_idx, c_idx = top_i // n_cls, top_i % n_cls
    boxes = decode_t(anchors[a_idx], torch.gather(box_deltas.float(), 1, a_idx.unsqueeze(-1).expand(-1, -1, 4)), size)
    top_s = top_s.masked_fill(top_s <= thr, 0.0)
    out = torch.zeros(b, max_det, 6, device=scores.device)
    nms = tv_batched_nms or nms_torch_fallback
    for i in range(b):
        keep = nms(boxes[i], top_s[i], c_idx[i], iou)[:max_det]
        n = keep.numel()
        out[i, :n] = torch.cat([boxes[i, keep], top_s[i, keep, None], c_idx[i, keep, None].float()], 1)
    return out


def main():
    ap = argparse.ArgumentParser(description="detector inference")
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et")
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    if cuda:
        batch, size, width, pre_nms = 6, 640, 64, 1000
    else:
        batch, size, width, pre_nms = 2, 160, 16, 200

    model = Detector(width).to(dev).eval()
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    anchors = make_anchors(size // 16, size // 16, 16).to(dev)
    anchors_np = anchors.cpu().numpy()
    frames = torch.randint(0, 256, (4, batch, 3, size, size), dtype=torch.uint8, device=dev)
    mean = torch.tensor([123.7, 116.3, 103.5], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4], device=dev).view(1, 3, 1, 1)

    def infer(i):
        x = (frames[i % 4].float() - mean) / std
        if cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            cls, box = model(x)
        if args.fixed:
            return postprocess_torch(cls, box, anchors, size, pre_nms)
        return postprocess_np(cls, box, anchors_np, size, pre_nms)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    detections = []
    t0 = t1 = None
    prof = et = None
    with torch.inference_mode():
        for i in range(args.iters):
            if i == 5 and win > 5:
                sync()
                t0 = time.perf_counter()
            if i == win:
                if t0 is not None:
                    sync()
                    t1 = time.perf_counter()
                if args.et:
                    et = torch.profiler.ExecutionTraceObserver()
                    et.register_callback(args.et)
                    et.start()
                prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
                prof.__enter__()
            detections.append(infer(i))
            if prof is not None and i == win + k - 1:
                prof.__exit__(None, None, None)
                if args.trace:
                    prof.export_chrome_trace(args.trace)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
                prof = None
        sync()
        if t0 is not None and t1 is None:
            t1 = time.perf_counter()
    n_det = sum(int((d[..., 4] > 0).sum()) if torch.is_tensor(d) else sum(len(r) for r in d) for d in detections)
    iter_ms = (t1 - t0) * 1e3 / (win - 5) if t0 is not None else None
    print(f"detector_infer: {args.iters} batches of {batch}, {n_det} detections")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "detector_infer",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": f"perf_counter with cuda.synchronize at both ends of batches 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
