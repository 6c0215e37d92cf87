//! Merging the blocks' lists into the profile.
//!
//! Input: the [`Chunk`]s of one read, in file order, each with its lists sorted
//! ([`Chunk::sort_lists`]). Output: the profile's lists, each built once and sorted in
//! the order `model::finish` wants (stable: equal keys keep file order), plus the
//! blocks' threads, processes and counters. Each block's part is freed as soon as it
//! is used up. It does not parse anything.

use super::chunk::{frame_key, gpu_key, op_key, runtime_key, Chunk};
use crate::model::{GpuAnnotation, GpuSync, MemoryEvent, Process, Profile};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Move every chunk's lists into `profile`, merged; `warnings` gets a note when the
/// trace holds tensight's own annotations.
pub(super) fn into_profile(chunks: Vec<Chunk>, profile: &mut Profile, warnings: &mut Vec<String>) {
    // Each block's lists are sorted in the order model::finish wants; merging them
    // (in parallel across lists) builds each list once, sorted, and frees every
    // block's part as soon as it is used up.
    let mut op_runs = Vec::new();
    let mut frame_runs = Vec::new();
    let mut gpu_runs = Vec::with_capacity(chunks.len());
    let mut ann_runs = Vec::with_capacity(chunks.len());
    let mut sync_runs = Vec::with_capacity(chunks.len());
    let mut rt_runs = Vec::with_capacity(chunks.len());
    let mut mem_runs = Vec::with_capacity(chunks.len());
    let mut procs: HashMap<i64, Process> = HashMap::new();
    let tensight_events = |p: &Profile| {
        p.counters
            .counters
            .iter()
            .find(|c| c.name == "tensight_event")
            .map_or(0, |c| c.count)
    };
    let annotations_before = tensight_events(profile);
    for c in chunks {
        op_runs.extend(c.ops.0.into_iter().map(|(_, v)| v));
        frame_runs.extend(c.frames.0.into_iter().map(|(_, v)| v));
        gpu_runs.push(c.gpu);
        ann_runs.push(c.gpu_annotations);
        sync_runs.push(c.gpu_syncs);
        rt_runs.push(c.runtime);
        mem_runs.push(c.memory);
        profile.threads.extend(c.threads);
        profile.counters.merge(c.counters);
        for (pid, name, labels) in c.procs {
            let e = procs.entry(pid).or_insert(Process {
                pid,
                name: String::new(),
                labels: String::new(),
            });
            if let Some(n) = name {
                e.name = n;
            }
            if let Some(l) = labels {
                e.labels = l;
            }
        }
        profile.meta.rocm |= c.rocm;
    }
    let annotations = tensight_events(profile) - annotations_before;
    if annotations > 0 {
        warnings.push(format!(
            "this trace was annotated by `tensight analyze --format perfetto`: its {annotations} added events (findings, steps, idle gaps) are for trace viewers and were not analysed"
        ));
    }
    // Two halves of about equal size: ops (the biggest list), and the rest.
    let ((ops, frames), (gpu, runtime, ann, syncs, memory)) = rayon::join(
        || {
            (
                merge_runs(op_runs, op_key),
                merge_runs(frame_runs, frame_key),
            )
        },
        || {
            (
                merge_runs(gpu_runs, gpu_key),
                merge_runs(rt_runs, runtime_key),
                merge_runs(ann_runs, |a: &GpuAnnotation| a.ts_ns),
                merge_runs(sync_runs, |a: &GpuSync| a.ts_ns),
                merge_runs(mem_runs, |m: &MemoryEvent| m.ts_ns),
            )
        },
    );
    append(&mut profile.ops, ops);
    append(&mut profile.python_frames, frames);
    append(&mut profile.gpu, gpu);
    append(&mut profile.gpu_annotations, ann);
    append(&mut profile.gpu_syncs, syncs);
    append(&mut profile.runtime, runtime);
    append(&mut profile.memory, memory);
    let mut procs: Vec<Process> = procs.into_values().collect();
    procs.sort_by_key(|p| p.pid);
    profile.processes = procs;
    profile.threads.sort_by_key(|t| (t.pid, t.tid));
    profile.threads.dedup_by_key(|t| (t.pid, t.tid));
}

/// usually consecutive stretches of time: a run whose rest comes before all others
/// is copied whole, and while one run stays ahead its items are taken one comparison
/// each, without touching the heap.
fn merge_runs<T, K: Ord + Copy>(runs: Vec<Vec<T>>, key: impl Fn(&T) -> K) -> Vec<T> {
    let total = runs.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut runs: Vec<std::vec::IntoIter<T>> = runs.into_iter().map(Vec::into_iter).collect();
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (r, it) in runs.iter().enumerate() {
        if let Some(x) = it.as_slice().first() {
            heap.push(Reverse((key(x), r)));
        }
    }
    while let Some(Reverse((_, r))) = heap.pop() {
        let it = &mut runs[r];
        // The whole rest of the run comes before every other run: one copy.
        let ahead = match (it.as_slice().last(), heap.peek()) {
            (Some(last), Some(Reverse(top))) => (key(last), r) < *top,
            _ => true,
        };
        if ahead {
            out.extend(std::mem::take(it));
            continue;
        }
        while let Some(x) = it.next() {
            out.push(x);
            let Some(next) = it.as_slice().first() else {
                break;
            };
            let k = (key(next), r);
            if let Some(Reverse(top)) = heap.peek() {
                if k > *top {
                    heap.push(Reverse(k));
                    break;
                }
            }
        }
        if it.as_slice().is_empty() {
            *it = Vec::new().into_iter(); // free the run now
        }
    }
    out
}

/// `dst.extend(v)`, without the copy when `dst` is empty.
fn append<T>(dst: &mut Vec<T>, v: Vec<T>) {
    if dst.is_empty() {
        *dst = v;
    } else {
        dst.extend(v);
    }
}
