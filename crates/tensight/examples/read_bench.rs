//! Reader benchmark: `tensight::read::load` on one trace, then event counts and the
//! throughput on stderr. Used by `bench/run.sh`; `--phases` also times each stage
//! (map, parse+merge, finish) separately, for profiling the reader.
//!
//! Usage: `read_bench [--phases] TRACE`

use std::path::Path;
use std::time::Instant;

fn main() {
    let mut phases = false;
    let mut path = None;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--phases" => phases = true,
            _ => path = Some(a),
        }
    }
    let Some(path) = path else {
        eprintln!("usage: read_bench [--phases] TRACE");
        std::process::exit(2);
    };
    let path = Path::new(&path);
    if phases {
        run_phases(path);
        return;
    }
    let t = Instant::now();
    let loaded = match tensight::read::load(path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let p = &loaded.profile;
    println!(
        "ops {} frames {} gpu {} runtime {} memory {} steps {}",
        p.ops.len(),
        p.python_frames.len(),
        p.gpu.len(),
        p.runtime.len(),
        p.memory.len(),
        p.steps.len()
    );
    let gb = p.meta.json_bytes as f64 / 1e9;
    eprintln!("read {gb:.3} GB in {secs:.3} s: {:.3} GB/s", gb / secs);
}

fn run_phases(path: &Path) {
    use tensight::read::{kineto, source};
    let t = Instant::now();
    let (bytes, _) = source::open(path).expect("open");
    let t_open = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut profile = tensight::model::Profile::default();
    let mut warnings = Vec::new();
    let release = |s, e| bytes.release(s, e);
    if kineto::read_releasing(&bytes, &release, &mut profile, &mut warnings).is_err() {
        eprintln!("error: not a trace");
        std::process::exit(2);
    }
    let t_read = t.elapsed().as_secs_f64();
    let mem_read = memory();
    let len = bytes.len();
    drop(bytes);

    let t = Instant::now();
    tensight::model::finish(&mut profile);
    let t_finish = t.elapsed().as_secs_f64();
    let mem_finish = memory();

    let gb = len as f64 / 1e9;
    let total = t_open + t_read + t_finish;
    eprintln!("{gb:.3} GB");
    eprintln!("  map/gunzip          {t_open:8.3} s");
    eprintln!(
        "  parse+merge         {t_read:8.3} s  {:.2} GB/s   after: {mem_read}",
        gb / t_read
    );
    eprintln!("  finish (model)      {t_finish:8.3} s          after: {mem_finish}");
    eprintln!(
        "  total               {total:8.3} s  {:.2} GB/s",
        gb / total
    );
}

/// "rss N MB, peak M MB" from /proc/self/status (Linux), else empty.
fn memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| v / 1024)
    };
    match (kb("VmRSS:"), kb("VmHWM:"), kb("RssAnon:"), kb("RssFile:")) {
        (Some(r), Some(h), Some(a), Some(f)) => {
            format!("rss {r} MB (anon {a}, file {f}), peak {h} MB")
        }
        _ => String::new(),
    }
}
