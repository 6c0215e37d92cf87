//! The Profile: one model of a profiled run, whatever wrote the trace.
//!
//! Inputs: built by the readers in [`crate::read`]. Outputs: read by [`crate::analysis`]
//! and [`crate::rules`]. It holds what the trace says, normalised (integer nanoseconds,
//! parsed memcpy kinds, classified runtime calls) and linked (kernel → launching op by
//! External id, runtime call ↔ GPU activity by correlation, op → parent op and enclosing
//! Python frame). With a bundle or an execution trace it also holds the manifest's facts
//! ([`BundleInfo`]) and each op's tensors ([`ExecTrace`]: ids, storages, shapes, strides,
//! dtypes, aliasing). It does not compute metrics: that is the analysis stage's job.
//!
//! Units are in field names: `_ns` nanoseconds since the Unix epoch as the trace gives
//! them (Kineto writes microseconds; we multiply), `bytes`, `_pct`.

mod build;
mod classify;
pub mod detail;
pub mod hardware;
pub mod steps;

pub use build::finish;
pub use classify::{classify_runtime, parse_memcpy_name};

use serde::Serialize;
use std::sync::Arc;

/// Interned text shared by many events (op and kernel names repeat a lot).
pub type Name = Arc<str>;

/// A whole profiled run (one rank).
#[derive(Debug, Default, Serialize)]
pub struct Profile {
    /// Trace-level facts: devices, versions, distributed info.
    pub meta: Meta,
    /// Processes seen (from `process_name` metadata and events).
    pub processes: Vec<Process>,
    /// Threads seen (from `thread_name` metadata).
    pub threads: Vec<Thread>,
    /// CPU-side ranges: aten ops and user annotations, sorted by (pid, tid, start, -dur).
    pub ops: Vec<CpuOp>,
    /// Python frames (`python_function` events), sorted like `ops`.
    pub python_frames: Vec<PyFrame>,
    /// GPU activities (kernels, memcpys, memsets), sorted by start time.
    pub gpu: Vec<GpuActivity>,
    /// The runtime calls that blocked the host ([`Profile::blocks_host`]), in runtime
    /// order: found on first use (the replay asks for every change it replays).
    #[serde(skip)]
    pub blocking: std::sync::OnceLock<Vec<u32>>,
    /// The device with the most GPU time ([`Profile::main_device`]): found on first use.
    #[serde(skip)]
    pub busiest: std::sync::OnceLock<Option<i64>>,
    /// What every what-if replay of the analysed steps shares
    /// ([`crate::analysis::simulate::Skeleton`]): found on first use.
    #[serde(skip)]
    pub skeleton: std::sync::OnceLock<Option<crate::analysis::simulate::Skeleton>>,
    /// The host-side collectives ([`Profile::host_collectives`]): found on first use.
    #[serde(skip)]
    pub host_comm: std::sync::OnceLock<Vec<u32>>,
    /// GPU-side annotation ranges (`gpu_user_annotation`), sorted by start.
    pub gpu_annotations: Vec<GpuAnnotation>,
    /// GPU-side synchronization records (`cuda_sync` category, newer Kineto).
    pub gpu_syncs: Vec<GpuSync>,
    /// CUDA/HIP runtime and driver API calls, sorted by start.
    pub runtime: Vec<RuntimeCall>,
    /// Allocator events (`[memory]` instant events), sorted by time.
    pub memory: Vec<MemoryEvent>,
    /// Steps (iterations) of the run, in order.
    pub steps: Vec<Step>,
    /// How the steps were found.
    pub step_source: StepSource,
    /// What the importer skipped or repaired, by kind. Nothing vanishes silently.
    pub counters: ImportCounters,
    /// The execution trace recorded over the same window, its nodes linked to `ops`
    /// (`None` without one: only bundles and `analyze --et` load it).
    pub execution_trace: Option<ExecTrace>,
    /// What the bundle's manifest says about the run (`None` for a bare trace).
    pub bundle: Option<BundleInfo>,
    /// What the detail step gave the timed steps (`None` without one: plain traces,
    /// bundles of format 1.0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<detail::DetailInfo>,
    /// Nsight Compute counters per kernel, aligned with `gpu` (`None` without a
    /// hardware pass: `analyze --ncu FILE` or a bundle's `files.ncu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardware: Option<hardware::Hardware>,
}

/// Facts about the trace as a whole.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Meta {
    /// File the trace was read from, as given.
    pub source: String,
    /// Bytes of JSON read (after decompression).
    pub json_bytes: u64,
    /// `schemaVersion`, when present.
    pub schema_version: Option<i64>,
    /// `traceName`, when present.
    pub trace_name: Option<String>,
    /// GPUs listed in `deviceProperties` (empty for CPU-only traces).
    pub devices: Vec<DeviceProps>,
    /// `distributedInfo`, when present.
    pub distributed: Option<DistributedInfo>,
    /// CUDA runtime version (e.g. 13000), when present.
    pub cuda_runtime_version: Option<i64>,
    /// CUDA driver version, when present.
    pub cuda_driver_version: Option<i64>,
    /// HIP runtime version (ROCm traces), when present.
    pub hip_runtime_version: Option<i64>,
    /// True when the trace came from ROCm (hip* runtime names or roctracer fields).
    pub rocm: bool,
    /// Profiler options recorded in the trace.
    pub record_shapes: Option<bool>,
    /// `with_stack` as recorded.
    pub with_stack: Option<bool>,
    /// `profile_memory` as recorded.
    pub profile_memory: Option<bool>,
    /// `with_flops` as recorded.
    pub with_flops: Option<bool>,
    /// `with_modules` as recorded.
    pub with_modules: Option<bool>,
    /// Start of the profiled window: the earliest event (ns).
    pub start_ns: i64,
    /// End of the profiled window: the latest event end (ns).
    pub end_ns: i64,
}

/// One GPU as `deviceProperties` describes it.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct DeviceProps {
    /// Device index.
    pub id: i64,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Global memory in bytes.
    pub total_global_mem_bytes: u64,
    /// Compute capability major.
    pub compute_major: i64,
    /// Compute capability minor.
    pub compute_minor: i64,
    /// Streaming multiprocessors (or compute units).
    pub num_sms: u32,
    /// Max resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Registers per SM.
    pub regs_per_sm: u32,
    /// Shared memory per SM, bytes.
    pub shared_mem_per_sm_bytes: u64,
    /// Warp size.
    pub warp_size: u32,
}

/// `distributedInfo`: rank and world of a distributed run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct DistributedInfo {
    /// Backend (nccl, gloo, ...).
    pub backend: Option<String>,
    /// This trace's rank.
    pub rank: Option<i64>,
    /// Number of ranks.
    pub world_size: Option<i64>,
    /// NCCL version, when recorded.
    pub nccl_version: Option<String>,
}

/// A process (`pid`).
#[derive(Debug, Clone, Serialize)]
pub struct Process {
    /// Process id as in the trace; GPU "processes" use the device index.
    pub pid: i64,
    /// Name from metadata.
    pub name: String,
    /// Labels from metadata (e.g. `GPU 0`).
    pub labels: String,
}

/// A thread (`tid`), or a GPU stream when `pid` is a device.
#[derive(Debug, Clone, Serialize)]
pub struct Thread {
    /// Owning process id.
    pub pid: i64,
    /// Thread id (stream id for GPU rows).
    pub tid: i64,
    /// Name from metadata.
    pub name: String,
}

/// What kind of CPU-side range an op is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// An operator (`cpu_op`: aten::..., autograd nodes).
    Op,
    /// A user annotation (`user_annotation`: record_function, ProfilerStep#N, Optimizer.step#...).
    Annotation,
}

/// A CPU-side range: an operator or an annotation.
#[derive(Debug, Clone, Serialize)]
pub struct CpuOp {
    /// Operator or annotation name (`aten::mm`, `ProfilerStep#3`).
    pub name: Name,
    /// Operator or annotation.
    pub kind: OpKind,
    /// Process id.
    pub pid: i64,
    /// Thread id.
    pub tid: i64,
    /// Start (ns).
    pub ts_ns: i64,
    /// Duration (ns).
    pub dur_ns: i64,
    /// `External id`: links to the GPU work it launched.
    pub external_id: Option<i64>,
    /// `Record function id`: links to the execution trace's `rf_id`.
    pub rf_id: Option<i64>,
    /// Autograd `Sequence number` (links forward and backward).
    pub seq: Option<i64>,
    /// Enclosing op on the same thread (index into `Profile::ops`).
    pub parent: Option<u32>,
    /// Nesting depth on its thread (0 = outermost).
    pub depth: u16,
    /// Innermost enclosing Python frame on the same thread (index into `python_frames`).
    pub py_frame: Option<u32>,
    /// Input shapes as recorded (`Input Dims`): raw JSON, parsed on demand.
    pub input_dims: Option<Box<str>>,
    /// Input dtypes (`Input type`): raw JSON.
    pub input_types: Option<Box<str>>,
    /// Input strides (`Input Strides`): raw JSON.
    pub input_strides: Option<Box<str>>,
    /// Scalar inputs (`Concrete Inputs`): raw JSON.
    pub concrete_inputs: Option<Box<str>>,
    /// Module hierarchy or call stack text recorded by old profilers, when present.
    pub call_stack: Option<Box<str>>,
}

impl CpuOp {
    /// End (ns).
    pub fn end_ns(&self) -> i64 {
        self.ts_ns + self.dur_ns
    }
}

/// A Python frame (`python_function` event, recorded with `with_stack=True`).
#[derive(Debug, Clone, Serialize)]
pub struct PyFrame {
    /// `file.py(line): function` as Kineto writes it.
    pub name: Name,
    /// Process id.
    pub pid: i64,
    /// Thread id.
    pub tid: i64,
    /// Start (ns).
    pub ts_ns: i64,
    /// Duration (ns).
    pub dur_ns: i64,
    /// Enclosing frame (index into `python_frames`).
    pub parent: Option<u32>,
    /// Depth on its thread (0 = outermost).
    pub depth: u16,
}

impl PyFrame {
    /// End (ns).
    pub fn end_ns(&self) -> i64 {
        self.ts_ns + self.dur_ns
    }
}

/// Direction of a memory copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CopyDir {
    /// Host to device.
    HtoD,
    /// Device to host.
    DtoH,
    /// Device to device (same GPU).
    DtoD,
    /// Host to host.
    HtoH,
    /// Peer to peer (between GPUs).
    PtoP,
    /// Not stated.
    Unknown,
}

/// Where one side of a copy lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemKind {
    /// Pageable host memory: the copy is staged and synchronous for the host.
    Pageable,
    /// Pinned (page-locked) host memory.
    Pinned,
    /// Device memory.
    Device,
    /// Host memory of unstated kind (ROCm writes `Host`).
    Host,
    /// Managed (unified) memory.
    Managed,
    /// Not stated.
    Unknown,
}

/// What a GPU activity is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GpuKind {
    /// A compute kernel.
    Kernel,
    /// A memory copy.
    Memcpy {
        /// Direction.
        dir: CopyDir,
        /// Source memory kind.
        src: MemKind,
        /// Destination memory kind.
        dst: MemKind,
    },
    /// A memset.
    Memset,
}

/// Launch configuration and resource use of a kernel, as Kineto records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LaunchInfo {
    /// Grid dimensions (blocks).
    pub grid: [u32; 3],
    /// Block dimensions (threads).
    pub block: [u32; 3],
    /// Registers per thread.
    pub registers_per_thread: Option<u32>,
    /// Static + dynamic shared memory per block, bytes.
    pub shared_mem_bytes: Option<u64>,
    /// `blocks per SM`: grid size over SM count.
    pub blocks_per_sm: Option<f32>,
    /// `warps per SM`.
    pub warps_per_sm: Option<f32>,
    /// `est. achieved occupancy %` (CUPTI's estimate from resources and grid).
    pub est_occupancy_pct: Option<f32>,
}

impl LaunchInfo {
    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| g.max(1) as u64).product()
    }
    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| b.max(1) as u64).product()
    }
}

/// A kernel, memcpy or memset that ran on a GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GpuActivity {
    /// Kernel, memcpy or memset.
    pub kind: GpuKind,
    /// Kernel name (demangled), or the memcpy/memset label.
    pub name: Name,
    /// Device index.
    pub device: i64,
    /// Stream id.
    pub stream: i64,
    /// Start (ns).
    pub ts_ns: i64,
    /// Duration (ns).
    pub dur_ns: i64,
    /// Correlation id (links to the runtime call that launched it).
    pub correlation: Option<i64>,
    /// External id (links to the launching op).
    pub external_id: Option<i64>,
    /// Bytes moved (memcpy/memset), when recorded.
    pub bytes: Option<u64>,
    /// Launch configuration (kernels only).
    pub launch: Option<LaunchInfo>,
    /// The collective a communication kernel ran (NCCL/RCCL kernels whose args name it:
    /// `Collective name`, message sizes, dtype, process group); `None` for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<Box<Collective>>,
    /// Launching op: the op with the same External id (index into `ops`).
    pub op: Option<u32>,
    /// Launching runtime call (index into `runtime`).
    pub runtime: Option<u32>,
}

impl GpuActivity {
    /// End (ns).
    pub fn end_ns(&self) -> i64 {
        self.ts_ns + self.dur_ns
    }
    /// True for kernels.
    pub fn is_kernel(&self) -> bool {
        matches!(self.kind, GpuKind::Kernel)
    }
    /// The copy direction, for memcpys.
    pub fn copy_dir(&self) -> Option<CopyDir> {
        match self.kind {
            GpuKind::Memcpy { dir, .. } => Some(dir),
            _ => None,
        }
    }
    /// True for a copy from or to pageable host memory.
    pub fn is_pageable_copy(&self) -> bool {
        matches!(self.kind, GpuKind::Memcpy { src, dst, .. } if src == MemKind::Pageable || dst == MemKind::Pageable)
    }
}

/// A collective as the profiler recorded it on its kernel (`record_param_comms` args,
/// which torch ≥ 2.1 copies onto the NCCL kernel).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Collective {
    /// `Collective name`: `allreduce`, `allgather`, `broadcast`, `reduce_scatter`, ...
    pub name: String,
    /// `In msg nelems`: elements sent.
    pub in_nelems: Option<u64>,
    /// `Out msg nelems`: elements received.
    pub out_nelems: Option<u64>,
    /// `Group size`: ranks in the process group.
    pub group_size: Option<u32>,
    /// `dtype` as written (`Float`, `BFloat16`).
    pub dtype: Option<String>,
    /// `Process Group Name` (`0` for the default group).
    pub group: Option<String>,
}

impl Collective {
    /// From the args as the reader finds them: the strings as raw JSON text (a string
    /// in quotes, or any other value as written), the numbers already parsed.
    pub fn from_args(
        name: &str,
        in_nelems: Option<i64>,
        out_nelems: Option<i64>,
        group_size: Option<i64>,
        dtype: Option<&str>,
        group: Option<&str>,
    ) -> Collective {
        let text = |raw: &str| crate::text::cleaned(raw.trim().trim_matches('"'));
        let count = |n: Option<i64>| n.filter(|&v| v >= 0).map(|v| v as u64);
        Collective {
            name: text(name),
            in_nelems: count(in_nelems),
            out_nelems: count(out_nelems),
            group_size: group_size.filter(|&v| v > 0).map(|v| v as u32),
            dtype: dtype.map(text),
            group: group.map(text),
        }
    }

    /// Bytes of the larger message (`max(in, out) × dtype size`), when both are known.
    pub fn bytes(&self) -> Option<u64> {
        let n = self.in_nelems.max(self.out_nelems)?;
        Some(n.saturating_mul(dtype_bytes(self.dtype.as_deref()?)?))
    }
}

/// Bytes per element of a dtype as `record_param_comms` writes it (`Float`, `Half`).
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype.to_ascii_lowercase().as_str() {
        "float" | "float32" | "int" | "int32" | "uint32" => 4,
        "double" | "float64" | "long" | "int64" | "uint64" | "complexfloat" => 8,
        "half" | "bfloat16" | "float16" | "short" | "int16" => 2,
        "byte" | "char" | "bool" | "int8" | "uint8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        _ => return None,
    })
}

/// A GPU-side annotation range (`gpu_user_annotation`).
#[derive(Debug, Clone, Serialize)]
pub struct GpuAnnotation {
    /// Annotation name.
    pub name: Name,
    /// Device index.
    pub device: i64,
    /// Stream id.
    pub stream: i64,
    /// Start (ns).
    pub ts_ns: i64,
    /// Duration (ns).
    pub dur_ns: i64,
    /// External id of the CPU annotation.
    pub external_id: Option<i64>,
}

/// A synchronization the GPU side recorded (`cuda_sync`: Stream Sync, Context Sync, ...).
#[derive(Debug, Clone, Serialize)]
pub struct GpuSync {
    /// Kind as written (`Stream Sync`, `Event Sync`, `Context Sync`, `Stream Wait Event`).
    pub name: Name,
    /// Device index.
    pub device: i64,
    /// Stream id.
    pub stream: i64,
    /// Start (ns).
    pub ts_ns: i64,
    /// Duration (ns).
    pub dur_ns: i64,
    /// Correlation id of the runtime call.
    pub correlation: Option<i64>,
}

/// What a runtime/driver call does, as far as diagnosis cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    /// Kernel launch (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel, ...).
    Launch,
    /// Graph launch (cudaGraphLaunch, hipGraphLaunch).
    GraphLaunch,
    /// Memory copy API.
    Memcpy,
    /// Memset API.
    Memset,
    /// Blocks the host until the device catches up.
    Sync,
    /// Records or queries an event without blocking.
    Event,
    /// Makes a stream wait on an event (device-side, no host block).
    StreamWait,
    /// Device allocation (cudaMalloc, cudaHostAlloc, ...).
    Malloc,
    /// Device free.
    Free,
    /// Anything else (attribute queries, stream creation, ...).
    Other,
}

/// A CUDA/HIP runtime or driver API call made by the host.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeCall {
    /// API name (`cudaLaunchKernel`).
    pub name: Name,
    /// What it does.
    pub kind: RuntimeKind,
    /// Process id.
    pub pid: i64,
    /// Thread id.
    pub tid: i64,
    /// Start (ns).
    pub ts_ns: i64,
    /// Duration (ns).
    pub dur_ns: i64,
    /// Correlation id (links to the GPU activity it caused).
    pub correlation: Option<i64>,
    /// External id (links to the op that made it).
    pub external_id: Option<i64>,
    /// The op that made the call (index into `ops`), via External id or, failing that,
    /// the innermost op enclosing it on the same thread.
    pub op: Option<u32>,
    /// The GPU activity it caused (index into `gpu`), via correlation.
    pub gpu: Option<u32>,
}

impl RuntimeCall {
    /// End (ns).
    pub fn end_ns(&self) -> i64 {
        self.ts_ns + self.dur_ns
    }
}

/// One allocator event (`[memory]` instant event, recorded with `profile_memory=True`).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryEvent {
    /// Time (ns).
    pub ts_ns: i64,
    /// Bytes allocated (positive) or freed (negative).
    pub bytes: i64,
    /// Allocated bytes on that device after the event.
    pub total_allocated_bytes: Option<i64>,
    /// Reserved (cached) bytes on that device after the event.
    pub total_reserved_bytes: Option<i64>,
    /// 0 = CPU, 1 = CUDA (c10::DeviceType).
    pub device_type: i64,
    /// Device index.
    pub device_id: i64,
    /// Thread id.
    pub tid: i64,
}

impl MemoryEvent {
    /// True for GPU (CUDA/HIP) memory.
    pub fn is_gpu(&self) -> bool {
        self.device_type == 1
    }
}

/// One iteration of the program's loop.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    /// Label (`ProfilerStep#3`, `step 2`).
    pub name: String,
    /// Start (ns): where the previous step ended (the first step: its host start).
    pub start_ns: i64,
    /// End (ns): when both the host range and the GPU work launched in it are done, and
    /// not before the next step's host start.
    pub end_ns: i64,
    /// Start of the host-side range that defines the step (ns).
    pub host_start_ns: i64,
    /// End of the host-side range that defines the step (ns).
    pub cpu_end_ns: i64,
}

impl Step {
    /// Wall time of the step (ns).
    pub fn dur_ns(&self) -> i64 {
        self.end_ns - self.start_ns
    }
}

/// How steps were found.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum StepSource {
    /// `ProfilerStep#N` annotations (profiler ran with a schedule).
    ProfilerStep,
    /// A Python frame that repeats under the same parent (e.g. `train.py(40): train_step`).
    PythonFrame {
        /// The repeating frame.
        frame: String,
    },
    /// A repeating top-level annotation or op (e.g. `Optimizer.step#SGD.step` boundaries).
    Annotation {
        /// The repeating range's name.
        name: String,
    },
    /// A repeating sequence of top-level ops (no stacks, or a loop written inline).
    OpSequence {
        /// The op each step starts with.
        first_op: String,
        /// Top-level ops per step (the most common count).
        ops_per_step: usize,
    },
    /// Nothing repeats: the whole trace is one step.
    #[default]
    WholeTrace,
}

impl StepSource {
    /// How the steps were found, for the report (`steps  5 analysed: {this}`).
    pub fn describe(&self) -> String {
        match self {
            StepSource::ProfilerStep => "from ProfilerStep#N annotations".into(),
            StepSource::PythonFrame { frame } => {
                format!("from the repeating Python frame `{frame}`")
            }
            StepSource::Annotation { name } => format!("from the repeating annotation `{name}`"),
            StepSource::OpSequence {
                first_op,
                ops_per_step,
            } => format!(
                "from a repeating sequence of {ops_per_step} top-level ops starting at `{first_op}`"
            ),
            StepSource::WholeTrace => "nothing repeats: the whole trace is one step".into(),
        }
    }
}

/// How bad an import problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSeverity {
    /// Expected and harmless (e.g. flow events, which duplicate correlation ids).
    Info,
    /// Data was lost or guessed; results may be incomplete.
    DataLoss,
}

/// One named import counter.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Counter {
    /// Stable name, snake_case (`truncated_trace`).
    pub name: &'static str,
    /// How bad it is.
    pub severity: CounterSeverity,
    /// What happened, in one sentence.
    pub description: String,
    /// How many times.
    pub count: u64,
}

/// Import counters: what the reader skipped or repaired.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportCounters {
    /// Counters in the order first seen.
    pub counters: Vec<Counter>,
}

impl ImportCounters {
    /// Add `n` to a counter, creating it with `description` the first time.
    pub fn add(
        &mut self,
        name: &'static str,
        severity: CounterSeverity,
        description: &str,
        n: u64,
    ) {
        if n == 0 {
            return;
        }
        if let Some(c) = self.counters.iter_mut().find(|c| c.name == name) {
            c.count += n;
        } else {
            self.counters.push(Counter {
                name,
                severity,
                description: description.to_string(),
                count: n,
            });
        }
    }
    /// Merge another set into this one.
    pub fn merge(&mut self, other: ImportCounters) {
        for c in other.counters {
            self.add(c.name, c.severity, &c.description, c.count);
        }
    }
    /// The count of one counter (0 if absent).
    pub fn get(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.count)
    }
}

/// A copy whose stream was still busy this long after its call began waited for that
/// work (ns).
const COPY_QUEUED_NS: i64 = 10_000;
/// How many activities back [`Profile::blocks_host`] looks for the one before a copy on
/// its stream.
const STREAM_LOOKBACK: usize = 256;
/// How a host-side collective's range is named: `gloo:all_reduce`.
pub const HOST_COLLECTIVE_PREFIX: &str = "gloo:";

/// Host/GPU clock tolerance when comparing a call's end with its GPU work's (ns).
const CLOCK_SKEW_NS: i64 = 5_000;

impl Profile {
    /// Whether runtime call `i` blocked the host until the GPU had drained its queue: a
    /// sync (`cudaStreamSynchronize`, …), or a copy the host waited out (a pageable
    /// `cudaMemcpyAsync`, or `cudaMemcpy`): the call returned only after its GPU copy, and
    /// the copy queued behind earlier work on its stream that ran well past the call's
    /// start. `.tolist()` or `.cpu()` into pageable memory wait there, not in the short
    /// stream sync after. A pageable copy into an idle stream is not a sync: its time is
    /// the staging, not a wait.
    pub fn blocks_host(&self, i: u32) -> bool {
        let Some(r) = self.runtime.get(i as usize) else {
            return false;
        };
        match r.kind {
            RuntimeKind::Sync => r.dur_ns > 0,
            RuntimeKind::Memcpy => {
                let Some(gi) = r.gpu.filter(|&g| (g as usize) < self.gpu.len()) else {
                    return false;
                };
                let g = &self.gpu[gi as usize];
                // Only a pageable copy, or the synchronous API, makes the host wait: a
                // device-to-device or pinned `cudaMemcpyAsync` that happens to finish
                // inside a slow call did not wait for it.
                let synchronous = !r.name.contains("Async");
                if !(g.is_pageable_copy() || synchronous) || g.end_ns() > r.end_ns() + CLOCK_SKEW_NS
                {
                    return false;
                }
                // The activity before it on its stream (activities are in start order).
                self.gpu[..gi as usize]
                    .iter()
                    .rev()
                    .take(STREAM_LOOKBACK)
                    .find(|o| o.device == g.device && o.stream == g.stream)
                    .is_some_and(|o| o.end_ns() > r.ts_ns + COPY_QUEUED_NS)
            }
            _ => false,
        }
    }

    /// Every runtime call that [`Profile::blocks_host`], in runtime order.
    pub fn blocking_calls(&self) -> &[u32] {
        self.blocking.get_or_init(|| {
            (0..self.runtime.len() as u32)
                .filter(|&i| self.blocks_host(i))
                .collect()
        })
    }

    /// The collectives run on the host: ProcessGroupGloo runs each one on a worker thread
    /// of the rank's process and records it as a `gloo:all_reduce` (`gloo:broadcast`,
    /// ...) range there; on GPU tensors it stages them through host copies, so no kernel
    /// carries it. Indices into `ops`, in start order. (NCCL's `nccl:` ranges are the
    /// host's enqueue of a kernel, not the collective: not these.)
    pub fn host_collectives(&self) -> &[u32] {
        self.host_comm.get_or_init(|| {
            let mut v: Vec<u32> = (0..self.ops.len() as u32)
                .filter(|&i| {
                    let o = &self.ops[i as usize];
                    o.kind == OpKind::Annotation && o.name.starts_with(HOST_COLLECTIVE_PREFIX)
                })
                .collect();
            v.sort_by_key(|&i| self.ops[i as usize].ts_ns);
            v
        })
    }

    /// Whether GPU activity `g` was launched from inside a host collective on its thread
    /// (gloo's staging copies of a GPU tensor): part of the collective, not of the step's
    /// own transfers.
    pub fn in_host_collective(&self, g: &GpuActivity) -> bool {
        let Some(r) = g.runtime.and_then(|r| self.runtime.get(r as usize)) else {
            return false;
        };
        let comm = self.host_collectives();
        let after = comm.partition_point(|&i| self.ops[i as usize].ts_ns <= r.ts_ns);
        // A thread's ranges do not overlap: the latest one on the call's thread that
        // started before it is the only one that can hold it.
        comm[..after]
            .iter()
            .rev()
            .map(|&i| &self.ops[i as usize])
            .find(|o| o.pid == r.pid && o.tid == r.tid)
            .is_some_and(|o| r.ts_ns < o.end_ns())
    }

    /// The GPU the run used most (by busy time), from `deviceProperties`.
    pub fn main_device(&self) -> Option<&DeviceProps> {
        if self.meta.devices.is_empty() {
            return None;
        }
        // The busiest device, found once (a pass over every GPU activity).
        let dev = *self.busiest.get_or_init(|| {
            let mut busy: rustc_hash::FxHashMap<i64, i64> = Default::default();
            for g in &self.gpu {
                *busy.entry(g.device).or_default() += g.dur_ns;
            }
            busy.into_iter()
                .max_by_key(|&(d, t)| (t, -d))
                .map(|(d, _)| d)
        });
        match dev {
            Some(d) => self
                .meta
                .devices
                .iter()
                .find(|p| p.id == d)
                .or(self.meta.devices.first()),
            None => self.meta.devices.first(),
        }
    }

    /// True when the trace holds any GPU activity.
    pub fn has_gpu(&self) -> bool {
        !self.gpu.is_empty()
    }

    /// Chain of ops from `idx` up to its outermost ancestor, innermost first.
    pub fn op_ancestors(&self, idx: u32) -> impl Iterator<Item = u32> + '_ {
        let mut cur = Some(idx);
        std::iter::from_fn(move || {
            let i = cur?;
            cur = self.ops.get(i as usize).and_then(|o| o.parent);
            Some(i)
        })
    }

    /// The outermost `cpu_op` (not annotation) enclosing op `idx`, or `idx` itself.
    pub fn top_level_op(&self, idx: u32) -> u32 {
        let mut best = idx;
        for a in self.op_ancestors(idx) {
            if self.ops[a as usize].kind == OpKind::Op {
                best = a;
            }
        }
        best
    }

    /// The user's source line for op `idx`: the innermost enclosing Python frame that is
    /// not inside torch, the standard library or site-packages. `None` without stacks.
    pub fn user_frame(&self, idx: u32) -> Option<&PyFrame> {
        let mut f = self.ops.get(idx as usize)?.py_frame;
        while let Some(i) = f {
            let frame = &self.python_frames[i as usize];
            if is_user_frame(&frame.name) {
                return Some(frame);
            }
            f = frame.parent;
        }
        None
    }
}

/// [`is_user_frame`] of each frame, each distinct name tested once: the reader interns
/// names, so frames of one name share its allocation (the key; an equal name in
/// another allocation is only tested again).
pub fn user_frames(frames: &[PyFrame]) -> Vec<bool> {
    let mut seen: rustc_hash::FxHashMap<(usize, usize), bool> = Default::default();
    frames
        .iter()
        .map(|f| {
            let key = (f.name.as_ptr() as usize, f.name.len());
            *seen.entry(key).or_insert_with(|| is_user_frame(&f.name))
        })
        .collect()
}

/// True for a Python frame in the user's code rather than in torch or the interpreter.
pub fn is_user_frame(name: &str) -> bool {
    if name.starts_with('<') || name.starts_with("built-in") {
        return false;
    }
    let file = name.split('(').next().unwrap_or(name);
    if !file.ends_with(".py") {
        return false;
    }
    const LIB: [&str; 9] = [
        "torch/",
        "site-packages/",
        "dist-packages/",
        "/lib/python",
        "torchvision/",
        "threading.py",
        "contextlib.py",
        "tensight/",
        "runpy.py",
    ];
    !(LIB.iter().any(|l| file.contains(l))
        || file.starts_with("torch")
        || file.starts_with("functools.py"))
}

/// The execution trace (`torch.profiler.ExecutionTraceObserver`) of the profiled window:
/// which tensors each op read and wrote, linked to the Kineto ops through the record
/// function id (`attrs.rf_id` == `Record function id`).
#[derive(Debug, Default, Clone, Serialize)]
pub struct ExecTrace {
    /// File it was read from, as given.
    pub source: String,
    /// `schema` as written (`1.1.1-chakra.0.0.4`; `1.0.1` for the old flat layout).
    pub schema: String,
    /// Operator nodes in file order; the synthetic `[pytorch|profiler|execution_trace|…]`
    /// root nodes are left out.
    pub nodes: Vec<EtNode>,
    /// Nodes linked to a Kineto op (`EtNode::op` set).
    pub linked: u64,
    /// `(op index, node index)` sorted by op: the lookup behind [`ExecTrace::node_of_op`].
    #[serde(skip)]
    pub by_op: Vec<(u32, u32)>,
}

impl ExecTrace {
    /// The node linked to op `op` (index into `Profile::ops`).
    pub fn node_of_op(&self, op: u32) -> Option<&EtNode> {
        let i = self.by_op.binary_search_by_key(&op, |&(o, _)| o).ok()?;
        self.nodes.get(self.by_op[i].1 as usize)
    }

    /// Tensors recorded, inputs and outputs of every node.
    pub fn tensor_count(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.inputs.len() + n.outputs.len())
            .sum()
    }
}

/// One operator node of the execution trace.
#[derive(Debug, Clone, Serialize)]
pub struct EtNode {
    /// Node id (`id`), unique in the file.
    pub id: i64,
    /// Operator or annotation name (`aten::transpose`).
    pub name: Name,
    /// Parent node id (`ctrl_deps`; `parent` in schema 1.0).
    pub parent: Option<i64>,
    /// Record function id (`attrs.rf_id`): equals the Kineto op's `Record function id`.
    pub rf_id: Option<i64>,
    /// Autograd sequence id (`seq_id`; -1 in the file becomes `None`).
    pub seq_id: Option<i64>,
    /// Thread as the execution trace numbers them (`tid`; not an OS thread id).
    pub tid: Option<i64>,
    /// The Kineto op with the same record function id and name (index into
    /// `Profile::ops`); `None` when none matches (counted as `et_node_unlinked`).
    pub op: Option<u32>,
    /// Operator schema (`aten::transpose.int(Tensor(a) self, int dim0, int dim1) ->
    /// Tensor(a)`), when recorded.
    pub op_schema: Option<Box<str>>,
    /// How the results relate to the inputs, from the schema's return annotations: the
    /// strongest over all returns.
    pub alias: AliasKind,
    /// Tensor inputs (other arguments — ints, lists of ints, devices — are left out).
    pub inputs: Vec<EtTensor>,
    /// Tensor outputs.
    pub outputs: Vec<EtTensor>,
}

impl EtNode {
    /// True when some output shares memory with an input by the op's schema
    /// (`Tensor(a)` view or `Tensor(a!)` in-place return). `_unsafe_view` and friends
    /// alias without saying so: compare `storage_id`s for those.
    pub fn aliases(&self) -> bool {
        self.alias != AliasKind::None
    }
}

/// Alias annotation of an argument or return in an operator schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AliasKind {
    /// No annotation (`Tensor`): fresh memory, or unknown (no schema recorded).
    #[default]
    None,
    /// `Tensor(a)`: a view of an input (same storage, read-only alias).
    View,
    /// `Tensor(a!)`: the input itself, written in place.
    InPlace,
}

/// One tensor argument of an execution-trace node: the ET value
/// `[tensor_id, storage_id, offset, numel, itemsize, device]` with its shape, strides
/// and dtype.
#[derive(Debug, Clone, Serialize)]
pub struct EtTensor {
    /// Argument position among the node's inputs (or outputs), counting non-tensor
    /// arguments too, so it matches the operator schema.
    pub arg: u16,
    /// Position inside a tensor-list argument (`GenericList[Tensor(float),...]`).
    pub list_index: Option<u16>,
    /// Tensor id: a view gets a new one.
    pub tensor_id: u64,
    /// Storage id: shared by a base tensor and all its views.
    pub storage_id: u64,
    /// Offset into the storage, in elements.
    pub offset_elems: u64,
    /// Elements.
    pub numel: u64,
    /// Bytes per element.
    pub itemsize: u32,
    /// Device as written (`cuda:0`, `cpu`); empty when not recorded.
    pub device: Name,
    /// Sizes.
    pub shape: Vec<i64>,
    /// Strides in elements; empty when not recorded (schema 1.0 has none).
    pub strides: Vec<i64>,
    /// Element type as the trace writes it (`float`, `c10::BFloat16`, `long int`).
    pub dtype: Name,
    /// The schema's alias annotation for this argument or return.
    pub alias: AliasKind,
}

impl EtTensor {
    /// Bytes the tensor's elements span (`numel × itemsize`).
    pub fn bytes(&self) -> u64 {
        self.numel.saturating_mul(self.itemsize as u64)
    }

    /// True when the strides are the row-major strides of the shape (sizes of 1 are
    /// ignored); `None` when strides were not recorded.
    pub fn is_contiguous(&self) -> Option<bool> {
        if self.strides.len() != self.shape.len() {
            return None;
        }
        let mut expected = 1i64;
        for (&size, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if size != 1 && stride != expected {
                return Some(false);
            }
            expected = expected.saturating_mul(size);
        }
        Some(true)
    }
}

/// What a bundle's `manifest.json` says about the run (written by `tensight run`'s
/// Python collector). Fields the manifest lacks are `None` or empty.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct BundleInfo {
    /// The bundle folder, as given.
    pub dir: String,
    /// `format_version` (`MAJOR.MINOR`).
    pub format_version: String,
    /// Version of the tensight that recorded it.
    pub tensight_version: Option<String>,
    /// Python version of the program.
    pub python_version: Option<String>,
    /// `torch.__version__` (`2.11.0+cu130`).
    pub torch_version: Option<String>,
    /// `torch.version.cuda` (`13.0`); `None` for CPU-only builds.
    pub cuda_version: Option<String>,
    /// The GPU the program used, as torch described it; `None` on CPU.
    pub device: Option<BundleDevice>,
    /// The program's command line (argv).
    pub command: Vec<String>,
    /// Working directory of the program.
    pub cwd: Option<String>,
    /// How the collector found steps: `optimizer`, `forward`, `loop` or `whole_program`.
    pub step_detection: Option<String>,
    /// The loop whose iterations were the steps (`loop`): `bench.py(12) in main`.
    pub step_loop: Option<String>,
    /// Steps skipped before recording.
    pub warmup_steps: Option<u64>,
    /// Steps asked for (`--steps`).
    pub steps_requested: Option<u64>,
    /// Steps actually recorded.
    pub steps_recorded: Option<u64>,
    /// The extra `ProfilerStep#k` that carried the execution-trace observer (its ~40 µs
    /// per op would distort timing), excluded from the analysed steps: the detail step
    /// (format 1.1, in `files.detail`) or a step of `files.trace` (1.0).
    pub execution_trace_step: Option<u64>,
    /// Collector options as written (free-form object).
    pub options: serde_json::Value,
    /// How the program ended.
    pub program: ProgramOutcome,
    /// Files of the bundle, relative to its folder.
    pub files: BundleFiles,
    /// Step times measured by the collector.
    pub timing: BundleTiming,
    /// How `run --hardware`'s second run went (`None` when there was none).
    pub hardware: Option<BundleHardware>,
}

/// The manifest's `hardware` object, written after the pass under Nsight Compute.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct BundleHardware {
    /// `recorded`, `skipped` or `failed`.
    pub status: String,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    /// The step profiled.
    pub step: Option<u64>,
    /// Kernel rows ncu wrote.
    pub kernels: Option<u64>,
    /// `every` or `repeated op calls skipped`.
    pub launches: Option<String>,
    /// Op calls in the profiled step, and those skipped as repeats of an earlier one.
    pub op_calls: Option<u64>,
    /// See `op_calls`.
    pub op_repeats: Option<u64>,
    /// Wall time of the pass (the program's second run under ncu), seconds.
    pub wall_s: Option<f64>,
}

impl BundleInfo {
    /// True when the program crashed (raised, or died on a signal) while recorded.
    pub fn crashed(&self) -> bool {
        self.program.status == "crashed"
    }
}

/// The GPU of a bundle's run (`torch.cuda.get_device_properties`).
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct BundleDevice {
    /// Name (`NVIDIA H200`).
    pub name: String,
    /// Global memory, bytes.
    pub total_memory_bytes: Option<u64>,
    /// Compute capability `[major, minor]`.
    pub capability: Option<[i64; 2]>,
    /// Streaming multiprocessors.
    pub multi_processor_count: Option<u32>,
}

/// How the recorded program ended.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct ProgramOutcome {
    /// `completed`, `crashed` or `running` (the collector did not see the end), as written.
    pub status: String,
    /// Exit code, when known.
    pub exit_code: Option<i64>,
    /// The exception or signal that ended it, for a crash.
    pub error: Option<String>,
}

/// Files a bundle holds, relative to its folder; `None` when not recorded.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct BundleFiles {
    /// Kineto trace of the timed steps.
    pub trace: Option<String>,
    /// Kineto trace of the detail step (stacks, shapes, allocator events).
    pub detail: Option<String>,
    /// Execution trace.
    pub execution_trace: Option<String>,
    /// Nsight Compute CSV of the hardware pass.
    pub ncu: Option<String>,
}

/// Step times the collector measured itself, in milliseconds.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct BundleTiming {
    /// Step times of the warm-up steps, run without the profiler (host clock).
    pub step_ms_unprofiled: Vec<f64>,
    /// The same steps timed by CUDA events at their boundaries (the GPU's view: right
    /// also when the host runs ahead of a GPU-bound queue); empty without CUDA.
    pub step_ms_unprofiled_gpu: Vec<f64>,
    /// Step times of the recorded steps, under the profiler.
    pub step_ms_profiled: Vec<f64>,
}
