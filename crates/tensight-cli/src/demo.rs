//! `tensight demo`: real profiles recorded on an NVIDIA H200 ship inside the binary, so
//! a new user sees a real report on a machine without a GPU. The bundles are the test
//! fixtures in tests/fixtures/bundles (recorded by scripts/h200/record.sh and, with the
//! hardware pass, scripts/h200/accuracy.sh; see the README there), embedded as their
//! manifest and Kineto trace, and for the tensor-view demos their execution trace and
//! Nsight Compute CSV too.

use tensight::report::terminal::{fit, wrap_hanging};
use tensight::report::Report;

/// One embedded profile.
pub struct Demo {
    /// Name on the command line (`tensight demo NAME`).
    pub name: &'static str,
    /// What the program is.
    pub what: &'static str,
    manifest: Option<&'static [u8]>,
    trace: &'static [u8],
    /// Execution trace and Nsight Compute CSV, for the demos that have them.
    et: Option<&'static [u8]>,
    ncu: Option<&'static [u8]>,
}

macro_rules! bundle {
    ($name:expr, $dir:expr, $what:expr) => {
        Demo {
            name: $name,
            what: $what,
            manifest: Some(include_bytes!(concat!(
                "../../../tests/fixtures/bundles/",
                $dir,
                "/manifest.json"
            ))),
            trace: include_bytes!(concat!(
                "../../../tests/fixtures/bundles/",
                $dir,
                "/trace.json.gz"
            )),
            et: None,
            ncu: None,
        }
    };
    ($name:expr, $dir:expr, $what:expr, hardware) => {
        Demo {
            et: Some(include_bytes!(concat!(
                "../../../tests/fixtures/bundles/",
                $dir,
                "/et.json.gz"
            ))),
            ncu: Some(include_bytes!(concat!(
                "../../../tests/fixtures/bundles/",
                $dir,
                "/ncu.csv.gz"
            ))),
            ..bundle!($name, $dir, $what)
        }
    };
}

/// Every demo; the first is the default.
pub const DEMOS: &[Demo] = &[
    bundle!("resnet50", "h200-resnet50", "ResNet-50 training, batch 32, fp32 (tensight bench --model resnet50)"),
    bundle!("late-migration", "h200-late-migration", "input created on the CPU and moved with .to('cuda') each step"),
    bundle!("launch-bound", "h200-launch-bound", "24 tiny Linear+LayerNorm blocks at batch 8"),
    bundle!("fp32-gemm", "h200-fp32-gemm", "4096-wide fp32 MLP with TF32 off"),
    bundle!("sync-in-loop", "h200-sync-in-loop", "MLP reading loss.item() every step"),
    bundle!("transposed-view", "h200-transposed-view-hw", "an elementwise op reading a transposed view, with the tensor forest and Nsight Compute counters (tensight run --hardware)", hardware),
    bundle!("transposed-chain", "h200-transposed-chain-hw", "a transposed view feeding a chain of elementwise ops, with Nsight Compute counters (tensight run --hardware)", hardware),
    Demo {
        name: "probe",
        what: "small conv net: CPU-created input, transposed view, .item() per step (torch.profiler only)",
        manifest: None,
        trace: include_bytes!("../../../tests/fixtures/h200-probe/kineto_trace.json.gz"),
        et: None,
        ncu: None,
    },
];

/// The demos' names, for the command line (its `--help` lists them, with what each is).
pub fn names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        DEMOS
            .iter()
            .map(|d| clap::builder::PossibleValue::new(d.name).help(d.what)),
    )
}

/// Find a demo by name.
pub fn find(name: &str) -> Option<&'static Demo> {
    DEMOS.iter().find(|d| d.name == name)
}

impl Demo {
    /// Its Kineto trace, as embedded (gzip).
    pub fn trace(&self) -> &'static [u8] {
        self.trace
    }

    /// Analyse it.
    pub fn report(&self) -> tensight::Result<Report> {
        let label = format!(
            "demo {}: {} (recorded on an NVIDIA H200)",
            self.name, self.what
        );
        match self.manifest {
            Some(m) => tensight::analyze_bundle_bytes(&label, m, self.trace, self.et, self.ncu),
            None => tensight::analyze_bytes(&label, self.trace),
        }
    }
}

/// An entry per other demo: what it is and its primary bottleneck, wrapped to `width`
/// (60 to 120) with a hanging indent.
pub fn others(shown: &str, width: usize) -> String {
    let w = width.clamp(60, 120);
    let mut s = String::from("\n");
    s.push_str(&wrap_hanging(
        "OTHER DEMOS (recorded on the same H200; `tensight demo NAME` shows one)",
        w,
        "",
        "  ",
    ));
    let name_w = DEMOS.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let hang = " ".repeat(name_w + 3);
    let arrow = format!("{hang}→ ");
    let under = " ".repeat(name_w + 5);
    for d in DEMOS.iter().filter(|d| d.name != shown) {
        let primary = d
            .report()
            .ok()
            .and_then(|r| {
                let f = r
                    .diagnosis
                    .primary
                    .and_then(|c| r.diagnosis.findings.iter().find(|f| f.code == c))?;
                Some(format!(
                    "{} {} (~{}/step)",
                    f.code,
                    f.title,
                    tensight::rules::fmt_ms(f.saving_ms)
                ))
            })
            .unwrap_or_else(|| "no bottleneck found".into());
        s.push_str(&wrap_hanging(
            d.what,
            w,
            &format!("  {:<name_w$} ", d.name),
            &hang,
        ));
        s.push_str(&wrap_hanging(&primary, w, &arrow, &under));
    }
    fit(&s, w, false)
}

/// The demo's last lines: what to run on one's own program, wrapped to `width`.
pub fn closing(width: usize) -> String {
    let w = width.clamp(60, 120);
    let mut s = String::from("\n");
    s.push_str(&wrap_hanging(
        "Your own program: `tensight run -- python train.py` (profiles it and writes a \
         bundle), or `tensight analyze TRACE` on a torch.profiler trace.",
        w,
        "",
        "",
    ));
    fit(&s, w, false)
}
