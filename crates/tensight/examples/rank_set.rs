//! Write the traces of a distributed job into a folder, one per rank, for
//! `tensight analyze DIR` and scale-out tests (a later Ray run over 64 ranks):
//!
//! ```text
//! cargo run --release --example rank_set -- OUT_DIR RANKS [STRAGGLER GAP_US [TRACE]]
//! ```
//!
//! Without TRACE the job is synthetic ([`tensight::rank_sets::synthetic`], 5 steps);
//! with one (a real rank's Kineto trace, plain or gzip) its copies are perturbed
//! ([`tensight::rank_sets::perturbed`]). Rank STRAGGLER (default 0) pauses GAP_US
//! (default 2000) per step before its last collective.

use std::io::Read;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, ranks, rest @ ..] = args.as_slice() else {
        return Err("usage: rank_set OUT_DIR RANKS [STRAGGLER GAP_US [TRACE]]".into());
    };
    let ranks: u32 = ranks
        .parse()
        .map_err(|_| format!("RANKS {ranks:?} is not a number"))?;
    let straggler: u32 = rest
        .first()
        .map_or(Ok(0), |s| s.parse())
        .map_err(|_| "bad STRAGGLER")?;
    let gap: f64 = rest
        .get(1)
        .map_or(Ok(2000.0), |s| s.parse())
        .map_err(|_| "bad GAP_US")?;
    let traces = match rest.get(2) {
        None => tensight::rank_sets::synthetic(ranks, 5, straggler, gap),
        Some(t) => {
            let raw = std::fs::read(t).map_err(|e| format!("{t}: {e}"))?;
            let mut plain = Vec::new();
            if raw.starts_with(&[0x1f, 0x8b]) {
                flate2::read::GzDecoder::new(&raw[..])
                    .read_to_end(&mut plain)
                    .map_err(|e| format!("{t}: {e}"))?;
            } else {
                plain = raw;
            }
            tensight::rank_sets::perturbed(&plain, ranks, straggler, gap)
                .ok_or_else(|| format!("{t}: no communication kernel inside a ProfilerStep"))?
        }
    };
    std::fs::create_dir_all(out).map_err(|e| format!("{out}: {e}"))?;
    for (r, t) in traces.iter().enumerate() {
        let p = std::path::Path::new(out).join(format!("rank-{r}.json"));
        std::fs::write(&p, t).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    eprintln!("wrote {} rank traces to {out}", traces.len());
    Ok(())
}
