//! One block's lists: what its events became, grouped and sorted as `finish` wants.
//!
//! Input: model structs pushed by [`super::to_model`]. Output: a [`Chunk`] whose lists
//! [`Chunk::sort_lists`] sorts (stable) in the orders of `model::finish`, for
//! [`super::merge`]. Ops and Python frames are kept per thread, so the merge frees
//! each thread's list as it is used.

use crate::model::{
    CpuOp, GpuActivity, GpuAnnotation, GpuSync, ImportCounters, MemoryEvent, PyFrame, RuntimeCall,
    Thread,
};

/// What one block's events became.
#[derive(Default)]
pub(super) struct Chunk {
    /// Ops by thread: one list per (pid, tid), so the merge frees each as it is used.
    pub(super) ops: ByThread<CpuOp>,
    /// Python frames by thread.
    pub(super) frames: ByThread<PyFrame>,
    pub(super) gpu: Vec<GpuActivity>,
    pub(super) gpu_annotations: Vec<GpuAnnotation>,
    pub(super) gpu_syncs: Vec<GpuSync>,
    pub(super) runtime: Vec<RuntimeCall>,
    pub(super) memory: Vec<MemoryEvent>,
    pub(super) threads: Vec<Thread>,
    pub(super) procs: Vec<(i64, Option<String>, Option<String>)>,
    pub(super) counters: ImportCounters,
    pub(super) rocm: bool,
    /// Array elements read (events, including those skipped).
    pub(super) elements: usize,
}

/// Items grouped by thread (pid, tid), in first-seen order; few threads, so a list.
pub(super) struct ByThread<T>(pub(super) Vec<((i64, i64), Vec<T>)>);

impl<T> Default for ByThread<T> {
    fn default() -> Self {
        ByThread(Vec::new())
    }
}

impl<T> ByThread<T> {
    #[inline]
    pub(super) fn push(&mut self, thread: (i64, i64), item: T) {
        // Events of one thread come in runs: try the last list first.
        if let Some((t, v)) = self.0.last_mut() {
            if *t == thread {
                v.push(item);
                return;
            }
        }
        match self.0.iter().position(|(t, _)| *t == thread) {
            Some(i) => {
                let g = self.0.remove(i);
                self.0.push(g);
            }
            None => self.0.push((thread, Vec::new())),
        }
        if let Some((_, v)) = self.0.last_mut() {
            v.push(item);
        }
    }
}

// The orders model::finish sorts the lists in. The reader sorts each block's lists
// this way and merges them, so finish's (stable) sorts find them sorted and only
// check. Keep in step with model/build.rs for speed; correctness does not depend on
// it (finish sorts anyway).
pub(super) fn op_key(o: &CpuOp) -> (i64, i64, i64, i64, u8) {
    (o.pid, o.tid, o.ts_ns, -o.dur_ns, o.kind as u8)
}
pub(super) fn frame_key(f: &PyFrame) -> (i64, i64, i64, i64) {
    (f.pid, f.tid, f.ts_ns, -f.dur_ns)
}
pub(super) fn gpu_key(g: &GpuActivity) -> (i64, i64, i64) {
    (g.ts_ns, g.device, g.stream)
}
pub(super) fn runtime_key(r: &RuntimeCall) -> (i64, i64) {
    (r.ts_ns, r.tid)
}

impl Chunk {
    /// Sort every list of a finished block (stable: equal keys keep file order).
    pub(super) fn sort_lists(&mut self) {
        for (_, v) in &mut self.ops.0 {
            sort_by_key(v, op_key);
        }
        for (_, v) in &mut self.frames.0 {
            sort_by_key(v, frame_key);
        }
        sort_by_key(&mut self.gpu, gpu_key);
        sort_by_key(&mut self.runtime, runtime_key);
        sort_by_key(&mut self.gpu_annotations, |a| a.ts_ns);
        sort_by_key(&mut self.gpu_syncs, |a| a.ts_ns);
        sort_by_key(&mut self.memory, |m| m.ts_ns);
    }
}

/// Stable sort, skipped (with its scratch allocation) when already sorted.
fn sort_by_key<T, K: Ord>(v: &mut [T], key: impl Fn(&T) -> K) {
    if !v.is_sorted_by_key(&key) {
        v.sort_by_key(key);
    }
}
