//! Small synthetic Kineto traces for tests: a builder that writes the same JSON the
//! PyTorch profiler writes (same categories, arg names and links), so a rule's test can
//! say "a step with a 2 ms pageable copy" in a few lines. Times are in µs, as in Kineto.
//! Not for production use; real traces are in tests/fixtures.

use crate::report::Report;
use serde_json::{json, Value};

/// Process id of the synthetic host process.
pub const PID: i64 = 100;
/// Main thread id.
pub const TID: i64 = 100;
/// GPU stream used for activities.
pub const STREAM: i64 = 7;

/// Builds a Kineto trace event by event.
pub struct TraceBuilder {
    events: Vec<Value>,
    devices: Vec<Value>,
    next_corr: i64,
    next_ext: i64,
    top: Vec<(String, Value)>,
}

impl Default for TraceBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceBuilder {
    /// A trace of a process using one NVIDIA H200.
    pub fn new() -> Self {
        TraceBuilder {
            events: Vec::new(),
            devices: vec![json!({
                "id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_109_880_320u64,
                "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
                "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
                "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472
            })],
            next_corr: 1,
            next_ext: 1,
            top: Vec::new(),
        }
    }

    /// A trace with no GPU.
    pub fn cpu_only() -> Self {
        let mut b = Self::new();
        b.devices.clear();
        b
    }

    /// Set a top-level field (e.g. `record_shapes`).
    pub fn top_level(&mut self, key: &str, v: Value) -> &mut Self {
        self.top.push((key.to_string(), v));
        self
    }

    fn ext(&mut self) -> i64 {
        let e = self.next_ext;
        self.next_ext += 1;
        e
    }

    /// A `cpu_op` on the main thread; returns its External id.
    pub fn op(&mut self, name: &str, ts: f64, dur: f64) -> i64 {
        self.op_with(name, ts, dur, json!({}))
    }

    /// A `cpu_op` with extra args (`Input Dims`, `Input type`, `Concrete Inputs`, ...);
    /// returns its External id.
    pub fn op_with(&mut self, name: &str, ts: f64, dur: f64, args: Value) -> i64 {
        self.op_on(TID, name, ts, dur, args)
    }

    /// A `cpu_op` on thread `tid`; returns its External id.
    pub fn op_on(&mut self, tid: i64, name: &str, ts: f64, dur: f64, args: Value) -> i64 {
        let ext = self.ext();
        let mut a = json!({"External id": ext, "Record function id": ext});
        merge(&mut a, args);
        self.events.push(
            json!({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid,
            "ts": ts, "dur": dur, "args": a}),
        );
        ext
    }

    /// A `user_annotation` (record_function); returns its External id.
    pub fn annotation(&mut self, name: &str, ts: f64, dur: f64) -> i64 {
        let ext = self.ext();
        self.events.push(
            json!({"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": TID,
            "ts": ts, "dur": dur, "args": {"External id": ext}}),
        );
        ext
    }

    /// `ProfilerStep#n` over [ts, ts+dur).
    pub fn step(&mut self, n: u32, ts: f64, dur: f64) -> &mut Self {
        self.annotation(&format!("ProfilerStep#{n}"), ts, dur);
        self
    }

    /// A Python frame (`python_function`), e.g. `train.py(12): step`.
    pub fn frame(&mut self, name: &str, ts: f64, dur: f64) -> &mut Self {
        self.events.push(
            json!({"ph": "X", "cat": "python_function", "name": name, "pid": PID, "tid": TID,
            "ts": ts, "dur": dur, "args": {}}),
        );
        self
    }

    /// A runtime call on the main thread made by op `ext`; returns its correlation id.
    pub fn runtime(&mut self, name: &str, ts: f64, dur: f64, ext: Option<i64>) -> i64 {
        let corr = self.next_corr;
        self.next_corr += 1;
        let mut args = json!({"correlation": corr, "cbid": 1});
        if let Some(e) = ext {
            args["External id"] = json!(e);
        }
        self.events.push(
            json!({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID,
            "ts": ts, "dur": dur, "args": args}),
        );
        corr
    }

    /// A kernel launched by op `ext` with `cudaLaunchKernel` at `launch_ts` (5 µs),
    /// running over [ts, ts+dur) with the given grid and block.
    #[allow(clippy::too_many_arguments)]
    pub fn kernel(
        &mut self,
        name: &str,
        ext: i64,
        launch_ts: f64,
        ts: f64,
        dur: f64,
        grid: [u32; 3],
        block: [u32; 3],
    ) -> &mut Self {
        self.kernel_with(
            name,
            ext,
            launch_ts,
            ts,
            dur,
            json!({"grid": grid, "block": block}),
        )
    }

    /// A kernel with explicit args (occupancy fields and the like).
    pub fn kernel_with(
        &mut self,
        name: &str,
        ext: i64,
        launch_ts: f64,
        ts: f64,
        dur: f64,
        args: Value,
    ) -> &mut Self {
        let corr = self.runtime("cudaLaunchKernel", launch_ts, 5.0, Some(ext));
        let mut a = json!({"External id": ext, "correlation": corr, "device": 0, "stream": STREAM,
            "registers per thread": 32, "shared memory": 0, "grid": [1, 1, 1], "block": [128, 1, 1]});
        merge(&mut a, args);
        self.events.push(
            json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": STREAM,
            "ts": ts, "dur": dur, "args": a}),
        );
        self
    }

    /// A memcpy: `dir` is `HtoD`/`DtoH`/`DtoD`, `src`/`dst` memory kinds as Kineto
    /// labels them (`Pageable`, `Pinned`, `Device`). The API call (`cudaMemcpyAsync`)
    /// runs over [call_ts, call_ts+call_dur), the copy over [ts, ts+dur).
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy(
        &mut self,
        dir: &str,
        src: &str,
        dst: &str,
        ext: i64,
        call_ts: f64,
        call_dur: f64,
        ts: f64,
        dur: f64,
        bytes: u64,
    ) -> &mut Self {
        let corr = self.runtime("cudaMemcpyAsync", call_ts, call_dur, Some(ext));
        self.events.push(json!({"ph": "X", "cat": "gpu_memcpy", "name": format!("Memcpy {dir} ({src} -> {dst})"),
            "pid": 0, "tid": STREAM, "ts": ts, "dur": dur,
            "args": {"External id": ext, "correlation": corr, "device": 0, "stream": STREAM, "bytes": bytes}}));
        self
    }

    /// An allocator record (`[memory]` instant event) on the GPU.
    pub fn memory(
        &mut self,
        ts: f64,
        bytes: i64,
        total_allocated: i64,
        total_reserved: i64,
    ) -> &mut Self {
        self.events.push(json!({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": PID,
            "tid": TID, "ts": ts, "args": {"Total Reserved": total_reserved, "Total Allocated": total_allocated,
            "Bytes": bytes, "Device Id": 0, "Device Type": 1, "Addr": 1}}));
        self
    }

    /// Any raw event.
    pub fn raw(&mut self, v: Value) -> &mut Self {
        self.events.push(v);
        self
    }

    /// The trace as JSON bytes.
    pub fn build(&self) -> Vec<u8> {
        let mut top = json!({"schemaVersion": 1, "deviceProperties": self.devices, "traceEvents": self.events});
        for (k, v) in &self.top {
            top[k] = v.clone();
        }
        serde_json::to_vec(&top).unwrap_or_default()
    }

    /// Analyse and diagnose the trace.
    pub fn report(&self) -> Report {
        match crate::analyze_bytes("synthetic", &self.build()) {
            Ok(r) => r,
            Err(e) => panic!("synthetic trace did not load: {e}"),
        }
    }
}

impl TraceBuilder {
    /// Analyse and diagnose the trace with an Nsight Compute CSV (plain or gzip)
    /// aligned to it, as `tensight analyze TRACE --ncu FILE` does.
    pub fn report_with_ncu(&self, ncu: &[u8]) -> Report {
        let mut loaded = match crate::read::load_bytes("synthetic", &self.build()) {
            Ok(l) => l,
            Err(e) => panic!("synthetic trace did not load: {e}"),
        };
        match crate::read::ncu::parse_bytes("ncu", ncu) {
            Ok(hw) => crate::read::ncu::attach(&mut loaded.profile, hw),
            Err(e) => panic!("ncu CSV did not parse: {e}"),
        }
        crate::diagnose(loaded, "synthetic".into())
    }
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}

/// The first finding of rule `code` in a report; panics (a test failure) when the rule
/// did not fire.
pub fn finding<'a>(r: &'a Report, code: &str) -> &'a crate::rules::Finding {
    match r.diagnosis.findings.iter().find(|f| f.code == code) {
        Some(f) => f,
        None => panic!("{code} does not fire; findings: {:?}", codes(r)),
    }
}

/// Codes of the findings in a report.
pub fn codes(r: &Report) -> Vec<&'static str> {
    r.diagnosis.findings.iter().map(|f| f.code).collect()
}
