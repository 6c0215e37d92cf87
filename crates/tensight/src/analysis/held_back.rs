//! What held the GPU back: each GPU idle gap the host caused, attributed along the
//! critical path to what the host was doing before the launch that ended it.
//!
//! For a gap the timeline does not put on a sync, a copy or the DataLoader: the GPU
//! activity that ends it, the runtime call that launched it, and the host interval from
//! the gap's start to that launch on the launching thread. That interval is charged to
//! the innermost Python frame of the user's code enclosing its midpoint, with the
//! library call it was in when that is not the user's code (`train.py(40): augment →
//! numpy clip`), else to the outermost op enclosing it, else to host time no recorded op
//! or frame covers. Summed per cause over the steps. Without stacks only ops name it.

use super::timeline::{overlap, Timeline};
use crate::analysis::host_work::{frame_at, user_frame_at};
use crate::model::{is_user_frame, OpKind, Profile, RuntimeKind};
use serde::Serialize;
use std::collections::HashMap;

/// Most causes listed.
const MAX_CAUSES: usize = 5;

/// One cause of host-held GPU idle.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HeldBack {
    /// What the host was doing: a source line (and library call), an op, or untraced.
    pub what: String,
    /// GPU idle it held per step, ms.
    pub ms_per_step: f64,
}

/// The largest causes of host-held GPU idle in the analysed steps.
pub fn of(p: &Profile, t: &Timeline) -> Vec<HeldBack> {
    let n = t.steps.len().max(1) as f64;
    let starts: Vec<i64> = t
        .gpu_in_steps
        .iter()
        .map(|&g| p.gpu[g as usize].ts_ns)
        .collect();
    let elsewhere: Vec<(i64, i64)> = {
        let mut v: Vec<(i64, i64)> = p
            .runtime
            .iter()
            .filter(|r| matches!(r.kind, RuntimeKind::Sync | RuntimeKind::Memcpy))
            .map(|r| (r.ts_ns, r.end_ns()))
            .chain(
                p.ops
                    .iter()
                    .filter(|o| {
                        o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#")
                    })
                    .map(|o| (o.ts_ns, o.end_ns())),
            )
            .collect();
        v.sort_unstable();
        v
    };
    let mut by: HashMap<String, i64> = HashMap::new();
    for &(g0, g1) in &t.idle_gaps {
        let held = (g1 - g0) - overlap(&elsewhere, g0, g1);
        if held <= 0 {
            continue;
        }
        // The activity that ended the gap, and its launch.
        let k = starts.partition_point(|&s| s < g1);
        let Some(&gi) = t.gpu_in_steps.get(k) else {
            continue;
        };
        let Some(r) = p.gpu[gi as usize]
            .runtime
            .and_then(|r| p.runtime.get(r as usize))
        else {
            continue;
        };
        let mid = g0 + ((r.ts_ns - g0).max(0)) / 2;
        *by.entry(cause(p, r.pid, r.tid, mid)).or_default() += held;
    }
    let mut v: Vec<(String, i64)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter()
        .take(MAX_CAUSES)
        .map(|(what, ns)| HeldBack {
            what,
            ms_per_step: ns as f64 / 1e6 / n,
        })
        .collect()
}

/// What thread (pid, tid) was doing at `ts`.
fn cause(p: &Profile, pid: i64, tid: i64, ts: i64) -> String {
    if let Some(u) = user_frame_at(p, pid, tid, ts) {
        let user = &p.python_frames[u as usize].name;
        let inner = frame_at(p, pid, tid, ts)
            .map(|i| &p.python_frames[i as usize].name)
            .filter(|f| !is_user_frame(f));
        return match inner {
            Some(lib) => format!("{user} → {}", library_call(lib)),
            None => user.to_string(),
        };
    }
    // Ops are sorted by (pid, tid, start) and nested: the last one starting at or before
    // `ts`, up its parents to one still open, then up to the outermost that is no step.
    let n = p
        .ops
        .partition_point(|o| (o.pid, o.tid, o.ts_ns) <= (pid, tid, ts));
    let mut cur = n.checked_sub(1).map(|i| i as u32);
    let mut open = None;
    while let Some(i) = cur {
        let o = &p.ops[i as usize];
        if (o.pid, o.tid) != (pid, tid) {
            break;
        }
        if o.ts_ns <= ts && ts < o.end_ns() {
            open = Some(i);
            break;
        }
        cur = o.parent;
    }
    let mut top = None;
    while let Some(i) = open {
        let o = &p.ops[i as usize];
        if !(o.kind == OpKind::Annotation && o.name.starts_with("ProfilerStep#")) {
            top = Some(i);
        }
        open = o.parent;
    }
    match top {
        Some(i) => p.ops[i as usize].name.to_string(),
        None => "host time outside any recorded op".into(),
    }
}

/// A library frame in a few words: `numpy/core/fromnumeric.py(2169): clip` → `numpy
/// clip`; a built-in (`<built-in method item of Tensor object at 0x…>`) without its
/// address.
fn library_call(frame: &str) -> String {
    if let Some(rest) = frame.strip_prefix("<built-in method ") {
        return rest.split(" of ").next().unwrap_or(rest).to_string();
    }
    if let Some(rest) = frame.strip_prefix("<built-in function ") {
        return rest.trim_end_matches('>').to_string();
    }
    let (file, func) = frame.split_once("): ").unwrap_or((frame, ""));
    let file = file.split('(').next().unwrap_or(file);
    let package = ["site-packages/", "dist-packages/"]
        .iter()
        .find_map(|m| file.split_once(m).map(|x| x.1))
        .unwrap_or(file);
    let top = package.split('/').next().unwrap_or(package);
    let top = top.trim_end_matches(".py");
    format!("{top} {func}").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::library_call;

    #[test]
    fn library_calls_read_short() {
        assert_eq!(
            library_call("/usr/lib/python3/site-packages/numpy/core/fromnumeric.py(2169): clip"),
            "numpy clip"
        );
        assert_eq!(
            library_call("<built-in method item of Tensor object at 0x7f00>"),
            "item"
        );
        assert_eq!(library_call("PIL/Image.py(2192): resize"), "PIL resize");
    }
}
