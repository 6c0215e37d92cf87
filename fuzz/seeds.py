#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora, cut small from real profiler output.

Kineto and diagnose: the first events of each real trace in ../shared/traces (and the
fixtures), with its top-level fields, minified, each under 6 KB. Execution trace: the
first nodes of the real execution traces. ncu: the header, units and first rows of the
real CSVs. Manifest: the fixtures' bundle manifests. Plus the hostile cases of issue #14.
Run from the repository root: python3 fuzz/seeds.py [TRACES_DIR]
"""
import csv, gzip, io, json, os, sys

traces = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces"
out = "fuzz/corpus"
LIMIT = 6000


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as f:
        return f.read()


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def cut_kineto(doc):
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    events = doc.get("traceEvents", [])
    # Keep metadata first, then a window from the middle where ops, launches and
    # kernels interleave.
    meta = [e for e in events if e.get("ph") == "M"][:4]
    rest = [e for e in events if e.get("ph") != "M"]
    mid = len(rest) // 2
    for n in range(40, 0, -1):
        t = dict(top, traceEvents=meta + rest[mid : mid + n])
        s = json.dumps(t, separators=(",", ":"))
        if len(s) <= LIMIT:
            return s
    return json.dumps(dict(top, traceEvents=meta[:1]), separators=(",", ":"))[:LIMIT]


real = sorted(
    os.path.join(dp, f)
    for dp, _, fs in os.walk(traces)
    for f in fs
    if f.endswith((".json", ".json.gz"))
)
for p in real:
    doc = json.loads(load(p))
    name = os.path.basename(p).split(".")[0][:40]
    if "traceEvents" in doc:
        s = cut_kineto(doc)
        put("kineto", name, s)
        put("diagnose", name, s)
    elif "nodes" in doc:
        nodes = doc["nodes"]
        for n in range(60, 0, -1):
            s = json.dumps(dict(doc, nodes=nodes[:n]), separators=(",", ":"))
            if len(s) <= LIMIT:
                break
        put("execution_trace", name, s)

for root, _, fs in os.walk(traces):
    for f in fs:
        if ".csv" in f:
            text = load(os.path.join(root, f))
            lines = [l for l in text.splitlines() if not l.startswith("==")]
            put("ncu", f.split(".")[0], "\n".join(lines[:5]) + "\n")

bundles = "tests/fixtures/bundles"
for b in sorted(os.listdir(bundles)):
    m = os.path.join(bundles, b, "manifest.json")
    if os.path.exists(m):
        put("manifest", b, load(m))

# Issue #14's examples: crash regressions, replayed by tests/fuzz_corpus.rs.
out = "fuzz/regressions"
evil = "evil\\u001b[2J\\u001b]0;pwned\\u0007\\r\\nFORGED\\u202ekcatta"
put("diagnose", "issue14-step-1e16", '{"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":1,"args":{"correlation":1}},{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":5,"dur":1e16},{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":6,"dur":2}]}')
put("diagnose", "issue14-negative-ts-huge-dur", '{"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":1,"args":{"correlation":1}},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":-9000000000000000,"dur":9223372036854775,"args":{"device":0,"stream":7,"correlation":1,"grid":[1,1,1],"block":[32,1,1]}},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":8,"ts":10,"dur":5,"args":{"device":0,"stream":8,"grid":[1,1,1],"block":[32,1,1]}}]}')
put("kineto", "issue14-evil-names", '{"traceEvents":[{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"%s"}},{"ph":"X","cat":"cpu_op","name":"%s","pid":1,"tid":1,"ts":2,"dur":90}]}' % (evil, evil))
put("manifest", "issue14-evil", '{"format":"tensight-bundle","format_version":1,"command":["%s"],"program":{"status":"crashed","error":"%s"}}' % (evil, evil))
