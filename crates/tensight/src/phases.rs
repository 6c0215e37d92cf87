//! Wall time per phase of `analyze`, printed to stderr when `TENSIGHT_PHASES` is set
//! (to anything but `0`): how the benchmarks in `bench/` split a run into reading, the
//! analyses, each rule and the diagnosis after them. Costs one check of a flag
//! otherwise.

use std::sync::OnceLock;
use std::time::Instant;

/// Whether phases are timed (read once from the environment).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TENSIGHT_PHASES").is_some_and(|v| v != "0"))
}

/// A phase being timed: its wall time is printed when it is dropped.
pub struct Phase {
    name: &'static str,
    detail: &'static str,
    start: Option<Instant>,
}

/// Start timing `name` (nothing is measured when phases are off).
pub fn start(name: &'static str) -> Phase {
    start_detail(name, "")
}

/// Start timing `name` `detail` (a rule's code, say).
pub fn start_detail(name: &'static str, detail: &'static str) -> Phase {
    Phase {
        name,
        detail,
        start: enabled().then(Instant::now),
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        if let Some(t) = self.start {
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let sep = if self.detail.is_empty() { "" } else { " " };
            eprintln!("phase {}{sep}{}: {ms:.1} ms", self.name, self.detail);
        }
    }
}
