//! Replays the fuzz targets' committed corpus (`fuzz/corpus/TARGET/*`: seeds cut from
//! real traces plus what the fuzzers kept, minimised) and every crash they found
//! (`fuzz/regressions/TARGET/*`) through the same entry points the fuzz targets call
//! ([`tensight::fuzzing`]), on the stable toolchain: CI runs this without cargo-fuzz.
//! An input that panics fails the test; one that takes over 10 s (debug build) too.

use std::path::Path;
use std::time::{Duration, Instant};

fn replay(folder: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(folder);
    let mut n = 0;
    for (target, run) in tensight::fuzzing::TARGETS {
        let dir = root.join(target);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).expect("corpus file reads");
            let start = Instant::now();
            let caught = std::panic::catch_unwind(|| run(&data));
            assert!(caught.is_ok(), "{target}: {} panics", f.display());
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{target}: {} took {:?}",
                f.display(),
                start.elapsed()
            );
            n += 1;
        }
    }
    n
}

#[test]
fn the_corpus_replays_without_a_panic() {
    let n = replay("corpus");
    assert!(n >= 40, "only {n} corpus files: is fuzz/corpus there?");
}

#[test]
fn every_crash_the_fuzzers_found_stays_fixed() {
    replay("regressions");
}
