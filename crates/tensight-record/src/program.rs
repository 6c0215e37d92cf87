//! Running the program: its environment for the collector, signals while it runs, and
//! how it ended.

use crate::{io_cause, Options};
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use tensight::Error;

/// How the program ended.
pub(crate) struct Ended {
    pub code: i32,
    pub signal: Option<i32>,
}

/// Why the program did not start.
pub(crate) struct StartError(std::io::Error);

impl StartError {
    pub(crate) fn start_error(self, program: &str) -> Error {
        let e = self.0;
        let err = Error::new(format!("failed to start {program}: {}", io_cause(&e)));
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                err.with_hint("is it installed and on PATH? (the command comes after `--`)")
            }
            std::io::ErrorKind::PermissionDenied => err.with_hint("is the file executable?"),
            _ => err,
        }
    }
}

/// The collector's environment: the boot hook first on PYTHONPATH, TENSIGHT_*.
pub(crate) fn collector_env(
    o: &Options,
    bundle: &Path,
) -> tensight::Result<Vec<(&'static str, OsString)>> {
    let mut paths = vec![o.boot_dir.to_path_buf()];
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        paths.extend(std::env::split_paths(&old));
    }
    let pythonpath = std::env::join_paths(paths).map_err(|e| {
        Error::new(format!("failed to set PYTHONPATH for the program: {e}"))
            .with_hint("a PYTHONPATH entry holds the path separator")
    })?;
    Ok(vec![
        ("PYTHONPATH", pythonpath),
        ("TENSIGHT_BUNDLE", bundle.as_os_str().to_os_string()),
        ("TENSIGHT_STEPS", o.steps.to_string().into()),
        ("TENSIGHT_WARMUP", o.warmup.to_string().into()),
        ("TENSIGHT_STOP", if o.stop { "1" } else { "0" }.into()),
    ])
}

/// Run `command` with `env` added, passing SIGTERM/SIGHUP on and surviving Ctrl-C.
pub(crate) fn run(
    command: &[OsString],
    env: &[(&'static str, OsString)],
) -> Result<Ended, StartError> {
    let (program, args) = command
        .split_first()
        .expect("a command (checked by record)");
    let mut cmd = Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    let guard = signals::install();
    let mut child = cmd.spawn().map_err(StartError)?;
    guard.forward_to(child.id());
    let status = child.wait();
    drop(guard);
    let status = status.map_err(StartError)?;
    Ok(Ended {
        code: exit_code(&status),
        signal: signal_of(&status),
    })
}

/// The shell's view of how a process ended: its code, or 128 + the signal.
fn exit_code(status: &std::process::ExitStatus) -> i32 {
    if let Some(c) = status.code() {
        return c;
    }
    signal_of(status).map_or(1, |s| 128 + s)
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// Signals while the program runs. Ctrl-C reaches the program directly (same process
/// group): tensight only survives it, waits, and reports what was recorded. SIGTERM
/// and SIGHUP sent to tensight alone are passed on to the program.
#[cfg(unix)]
mod signals {
    use std::sync::atomic::{AtomicI32, Ordering};

    static CHILD: AtomicI32 = AtomicI32::new(0);

    extern "C" fn ignore(_: libc::c_int) {}

    extern "C" fn forward(sig: libc::c_int) {
        let pid = CHILD.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }

    /// Restores the previous handlers when dropped.
    pub(super) struct Guard {
        old: Vec<(libc::c_int, libc::sigaction)>,
    }

    /// Install the handlers. A handler (not SIG_IGN) is reset to the default in the
    /// program by exec, so the program still gets its own Ctrl-C behaviour.
    pub(super) fn install() -> Guard {
        let mut old = Vec::new();
        let table: [(libc::c_int, extern "C" fn(libc::c_int)); 4] = [
            (libc::SIGINT, ignore),
            (libc::SIGQUIT, ignore),
            (libc::SIGTERM, forward),
            (libc::SIGHUP, forward),
        ];
        for (sig, handler) in table {
            // SAFETY: plain sigaction calls with zeroed, then filled, structs; the
            // handlers only touch an atomic and call kill.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = handler as usize;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Guard { old }
    }

    impl Guard {
        /// Pass SIGTERM/SIGHUP on to `pid` from now on.
        pub(super) fn forward_to(&self, pid: u32) {
            CHILD.store(i32::try_from(pid).unwrap_or(0), Ordering::SeqCst);
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            CHILD.store(0, Ordering::SeqCst);
            for (sig, prev) in &self.old {
                // SAFETY: restores a disposition read by sigaction above.
                unsafe {
                    libc::sigaction(*sig, prev, std::ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(not(unix))]
mod signals {
    pub(super) struct Guard;
    pub(super) fn install() -> Guard {
        Guard
    }
    impl Guard {
        pub(super) fn forward_to(&self, _: u32) {}
    }
}
