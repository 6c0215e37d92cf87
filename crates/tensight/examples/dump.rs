//! Print a one-line summary of the model of each trace given: a debugging aid.
fn main() {
    for a in std::env::args().skip(1) {
        match tensight::read::load(std::path::Path::new(&a)) {
            Ok(l) => {
                let p = &l.profile;
                println!(
                    "{a}\n  ops {} frames {} gpu {} rt {} mem {} syncs {} steps {} ({}) dev {:?} warn {:?}",
                    p.ops.len(), p.python_frames.len(), p.gpu.len(), p.runtime.len(), p.memory.len(), p.gpu_syncs.len(),
                    p.steps.len(), p.step_source.describe(), p.main_device().map(|d| &d.name), l.warnings
                );
                for s in p.steps.iter().take(4) {
                    println!("    {} {:.3} ms", s.name, s.dur_ns() as f64 / 1e6);
                }
                for c in &p.counters.counters {
                    println!("    counter {} {}", c.name, c.count);
                }
            }
            Err(e) => println!("{a}\n  ERROR {e}"),
        }
    }
}
