//! Host code on a thread that launches no GPU work, seen through Python frames (stacks
//! recorded): the outermost frames that launch nothing and hold no op (the user's
//! functions and libraries such as numpy, PIL or OpenCV; torch's own frames, and frames
//! holding ops, are left to their ops; CPU image libraries count whole),
//! and the user's code where the profiler records nothing at all (a C extension that
//! makes no frame, such as numpy's random generators, or plain Python between calls).
//! Not a rule: it computes ranges, no findings and no savings.

use crate::analysis::host_work::is_launch;
use crate::model::{is_user_frame, OpKind, Profile};
use rustc_hash::FxHashMap;

/// Frames of libraries whose calls are CPU image work however short (their ops, if any,
/// are the library's own): counted without [`HostCode::min_ns`].
const TRANSFORM_FRAMES: &[&str] = &["torchvision/transforms/", "PIL/", "albumentations/"];

/// Frames of torch itself (what they do on the host is in their ops) and of tensight's
/// collector (the profiler's cost, not the program's).
const TORCH_FRAMES: &[&str] = &["torch/", "torch.", "Tensor object", "tensight/"];

/// Libraries that compute on the host for a program (arrays, images, audio, tables):
/// their frames are host code like the program's own.
const DATA_LIBRARIES: &[&str] = &[
    "numpy",
    "PIL/",
    "cv2",
    "scipy/",
    "skimage/",
    "pandas/",
    "librosa/",
    "soundfile",
    "imageio/",
    "albumentations/",
    "torchvision/transforms/",
];

/// Frames inside which another rule owns the host's time: the DataLoader (D003).
const OWNED_ELSEWHERE: &[&str] = &["torch/utils/data/"];

/// What kind of host code a range is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A frame of a CPU image library (torchvision transforms, PIL, albumentations).
    Transform,
    /// A frame of another library (numpy, OpenCV, a built-in) or of the user's code,
    /// launching nothing under it.
    Frame,
    /// Time inside a frame of the user's code when no op, runtime call or deeper frame
    /// ran: host code the profiler records no call in.
    Untraced,
}

/// One range of host code: `frame` is the frame it is in (or is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Range {
    pub start_ns: i64,
    pub end_ns: i64,
    pub frame: u32,
    pub kind: Kind,
}

/// Finds host code on one thread.
pub(crate) struct HostCode<'a> {
    p: &'a Profile,
    pid: i64,
    tid: i64,
    /// Shortest frame or untraced stretch counted (transform frames aside): shorter ones
    /// are interpreter glue between launches, launch overhead that is not moved by
    /// moving preprocessing.
    pub min_ns: i64,
}

impl<'a> HostCode<'a> {
    pub(crate) fn new(p: &'a Profile, pid: i64, tid: i64, min_ns: i64) -> Self {
        HostCode {
            p,
            pid,
            tid,
            min_ns,
        }
    }

    /// The thread's frames: a contiguous run of `python_frames` (sorted by thread, then
    /// start).
    fn frames(&self) -> std::ops::Range<usize> {
        let f = &self.p.python_frames;
        let key = (self.pid, self.tid);
        f.partition_point(|x| (x.pid, x.tid) < key)..f.partition_point(|x| (x.pid, x.tid) <= key)
    }

    /// Times of the process's launch calls (kernels, graphs, copies, memsets), on any
    /// thread, sorted: while another thread launches, this one may be waiting for it
    /// (the backward pass runs on autograd's threads while the main thread sits in
    /// `run_backward`), not computing.
    fn launch_times(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .p
            .runtime
            .iter()
            .filter(|r| r.pid == self.pid && is_launch(r.kind))
            .map(|r| r.ts_ns)
            .collect();
        v.sort_unstable();
        v
    }

    /// Host code inside `keep` (a time filter: the steps averaged over), sorted by start.
    pub(crate) fn find(&self, keep: impl Fn(i64) -> bool) -> Vec<Range> {
        let p = self.p;
        let frames = self.frames();
        let starts = self.launch_times();
        let launches = |a: i64, b: i64| any_in(&starts, a, b);
        // The name tests, once per distinct name of the thread's frames.
        let class: Vec<NameClass> = NameClass::of_frames(p, frames.clone());
        let local = |i: u32| {
            (i as usize)
                .checked_sub(frames.start)
                .filter(|&k| k < frames.len())
        };
        let class_of = |j: u32| match local(j) {
            Some(k) => class[k],
            None => NameClass::of(&p.python_frames[j as usize].name),
        };
        // Frames that can be host code themselves: the program's own, data libraries',
        // and built-ins the program's code calls; not torch's (their ops count), nor a
        // framework's (its own business).
        let candidate_at = |i: usize| {
            let c = class[i - frames.start];
            if c.torch {
                return false;
            }
            c.user
                || c.data
                || (c.builtin && p.python_frames[i].parent.is_some_and(|q| class_of(q).user))
        };
        let mut out = Vec::new();
        // Ops on the thread (annotations aside), by start: a frame that holds one is
        // host code through its ops (and the ops' own rules), not as a whole.
        let op_starts: Vec<i64> = {
            let o = &p.ops;
            let key = (self.pid, self.tid);
            let range = o.partition_point(|x| (x.pid, x.tid) < key)
                ..o.partition_point(|x| (x.pid, x.tid) <= key);
            o[range]
                .iter()
                .filter(|x| x.kind != OpKind::Annotation)
                .map(|x| x.ts_ns)
                .collect()
        };
        // Frames counted whole: launching nothing and holding no op (CPU image
        // libraries may hold their own ops).
        let whole: Vec<bool> = frames
            .clone()
            .map(|i| {
                let f = &p.python_frames[i];
                let (a, b) = (f.ts_ns, f.end_ns());
                !launches(a, b)
                    && (class[i - frames.start].transform || !any_in(&op_starts, a, b))
                    && candidate_at(i)
            })
            .collect();
        // The thread's runtime calls, by start, for the untraced stretches.
        let mut calls: Vec<(i64, i64)> = p
            .runtime
            .iter()
            .filter(|r| (r.pid, r.tid) == (self.pid, self.tid))
            .map(|r| (r.ts_ns, r.end_ns()))
            .collect();
        calls.sort_unstable();
        // Whether an enclosing frame is host code already, or owned by another rule.
        let covered = |i: usize| {
            let mut q = p.python_frames[i].parent;
            while let Some(j) = q {
                let pf = &p.python_frames[j as usize];
                if class_of(j).owned {
                    return true;
                }
                if local(j).is_some_and(|k| whole[k]) {
                    return true;
                }
                q = pf.parent;
            }
            false
        };
        for (k, i) in frames.clone().enumerate() {
            let f = &p.python_frames[i];
            let c = class[k];
            if !keep(f.ts_ns) || c.owned || !(whole[k] || c.user) {
                continue;
            }
            let tf = c.transform;
            if whole[k] {
                if (tf || f.dur_ns >= self.min_ns) && !covered(i) {
                    out.push(Range {
                        start_ns: f.ts_ns,
                        end_ns: f.end_ns(),
                        frame: i as u32,
                        kind: if tf { Kind::Transform } else { Kind::Frame },
                    });
                }
            } else if c.user && !covered(i) {
                self.untraced_in(i, frames.clone(), &calls, &launches, &mut out);
            }
        }
        out.sort_by_key(|r| (r.start_ns, r.end_ns));
        out
    }

    /// The stretches of at least `min_ns` inside frame `i` when nothing recorded ran:
    /// no deeper frame, op (annotations aside) or runtime call (`calls`: the thread's,
    /// sorted) on the thread, and no other thread launched GPU work (this one may be
    /// waiting for it).
    fn untraced_in(
        &self,
        i: usize,
        frames: std::ops::Range<usize>,
        calls: &[(i64, i64)],
        launches: &dyn Fn(i64, i64) -> bool,
        out: &mut Vec<Range>,
    ) {
        let p = self.p;
        let f = &p.python_frames[i];
        let (a, b) = (f.ts_ns, f.end_ns());
        let mut busy: Vec<(i64, i64)> = Vec::new();
        // Children frames start after it, before its end (sorted by start).
        let from = frames.start + p.python_frames[frames.clone()].partition_point(|x| x.ts_ns < a);
        for x in &p.python_frames[from..frames.end] {
            if x.ts_ns >= b {
                break;
            }
            if x.parent == Some(i as u32) {
                busy.push((x.ts_ns, x.end_ns()));
            }
        }
        let ops = &p.ops;
        let k = ops.partition_point(|o| (o.pid, o.tid, o.ts_ns) < (self.pid, self.tid, a));
        for o in &ops[k..] {
            if (o.pid, o.tid) != (self.pid, self.tid) || o.ts_ns >= b {
                break;
            }
            if o.kind != OpKind::Annotation {
                // An annotation (a step, a record_function) labels code, it runs none.
                busy.push((o.ts_ns, o.end_ns()));
            }
        }
        // A call starting before the frame may still run into it: from the one before.
        let c = calls.partition_point(|r| r.0 < a).saturating_sub(1);
        busy.extend(
            calls[c..]
                .iter()
                .take_while(|r| r.0 < b)
                .filter(|r| r.1 > a)
                .copied(),
        );
        busy.sort(); // three sorted runs (frames, ops, calls): merged, not re-sorted
        let mut t = a;
        let mut push = |s: i64, e: i64| {
            if e - s >= self.min_ns && !launches(s, e) {
                out.push(Range {
                    start_ns: s,
                    end_ns: e,
                    frame: i as u32,
                    kind: Kind::Untraced,
                });
            }
        };
        for (s, e) in busy {
            if s > t {
                push(t, s.min(b));
            }
            t = t.max(e);
            if t >= b {
                break;
            }
        }
        if t < b {
            push(t, b);
        }
    }
}

/// What the name tests of [`HostCode::find`] say about a frame's name.
#[derive(Debug, Clone, Copy, Default)]
struct NameClass {
    /// A frame of torch or of tensight ([`TORCH_FRAMES`]).
    torch: bool,
    /// [`is_user_frame`].
    user: bool,
    /// A data library's frame ([`DATA_LIBRARIES`]).
    data: bool,
    /// A built-in (`<built-in ...>`).
    builtin: bool,
    /// A CPU image library's frame ([`TRANSFORM_FRAMES`]).
    transform: bool,
    /// Owned by another rule ([`OWNED_ELSEWHERE`]).
    owned: bool,
}

impl NameClass {
    fn of(n: &str) -> NameClass {
        let any = |list: &[&str]| list.iter().any(|m| n.contains(m));
        NameClass {
            torch: any(TORCH_FRAMES),
            user: is_user_frame(n),
            data: any(DATA_LIBRARIES),
            builtin: n.starts_with("<built-in"),
            transform: any(TRANSFORM_FRAMES),
            owned: any(OWNED_ELSEWHERE),
        }
    }

    /// The class of each frame in `range`, each distinct name tested once: the reader
    /// interns names, so frames of one name share its allocation (the key; equal
    /// names in different allocations are only tested again).
    fn of_frames(p: &Profile, range: std::ops::Range<usize>) -> Vec<NameClass> {
        let mut seen: FxHashMap<(usize, usize), NameClass> = FxHashMap::default();
        p.python_frames[range]
            .iter()
            .map(|f| {
                let key = (f.name.as_ptr() as usize, f.name.len());
                *seen.entry(key).or_insert_with(|| NameClass::of(&f.name))
            })
            .collect()
    }
}

/// Whether a time of `sorted` falls in [a, b).
fn any_in(sorted: &[i64], a: i64, b: i64) -> bool {
    let k = sorted.partition_point(|&t| t < a);
    sorted.get(k).is_some_and(|&t| t < b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TraceBuilder, PID, TID};

    /// A step (0–10 ms) on the thread: `train.py(5): step` launches a kernel at 9 ms;
    /// inside it `train.py(9): augment` (1–4 ms) runs numpy (`numpy/...: clip`, 1–2 ms)
    /// and nothing else; the rest of the step's frame records no call but two 20 µs
    /// built-ins 20 µs apart (at 8 ms: the 20 µs between them too short to count) and
    /// the op at 9–9.5 ms.
    fn profile() -> Profile {
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 10_000.0);
        b.frame("train.py(5): step", 0.0, 10_000.0);
        b.frame("train.py(9): augment", 1_000.0, 3_000.0);
        b.frame("numpy/core/fromnumeric.py(2169): clip", 1_000.0, 1_000.0);
        b.frame(
            "<built-in method append of list object at 0x1>",
            8_000.0,
            20.0,
        );
        b.frame(
            "<built-in method append of list object at 0x1>",
            8_040.0,
            20.0,
        );
        relu(&mut b, 9_000.0);
        loaded(&b)
    }

    /// `aten::relu` at `ts` µs (500 µs), its kernel launched 10 µs in and running 300 µs
    /// from 100 µs in.
    fn relu(b: &mut TraceBuilder, ts: f64) {
        let e = b.op("aten::relu", ts, 500.0);
        b.kernel(
            "relu_kernel",
            e,
            ts + 10.0,
            ts + 100.0,
            300.0,
            [1; 3],
            [128, 1, 1],
        );
    }

    fn loaded(b: &TraceBuilder) -> Profile {
        match crate::read::load_bytes("t", &b.build()) {
            Ok(l) => l.profile,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn finds_launch_free_frames_and_untraced_stretches() {
        let p = profile();
        let got = HostCode::new(&p, PID, TID, 50_000).find(|_| true);
        let what: Vec<(Kind, i64, i64, &str)> = got
            .iter()
            .map(|r| {
                (
                    r.kind,
                    r.start_ns / 1000,
                    r.end_ns / 1000,
                    &*p.python_frames[r.frame as usize].name,
                )
            })
            .collect();
        assert_eq!(
            what,
            vec![
                (Kind::Untraced, 0, 1_000, "train.py(5): step"),
                (Kind::Frame, 1_000, 4_000, "train.py(9): augment"),
                (Kind::Untraced, 4_000, 8_000, "train.py(5): step"),
                (Kind::Untraced, 8_060, 9_000, "train.py(5): step"),
                (Kind::Untraced, 9_500, 10_000, "train.py(5): step"),
            ]
        );
    }

    #[test]
    fn nothing_without_frames_or_in_the_data_loader() {
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 10_000.0);
        b.frame(
            "torch/utils/data/dataloader.py(700): __next__",
            0.0,
            5_000.0,
        );
        b.frame("data.py(12): __getitem__", 100.0, 4_000.0);
        relu(&mut b, 6_000.0);
        let p = loaded(&b);
        assert!(HostCode::new(&p, PID, TID, 50_000)
            .find(|_| true)
            .is_empty());
    }
}
