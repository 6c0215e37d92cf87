//! Writing a report with `-o FILE`, safely.
//!
//! - Never over an input: the trace, the bundle's own files (manifest, execution trace,
//!   ncu CSV, detail trace), `--et` and `--ncu`, compared by device and inode, so a hard
//!   link or a symbolic link to an input is caught too.
//! - An existing file is replaced without asking only when it is an earlier tensight
//!   report (text, JSON, HTML, a tensor forest, an annotated trace or a diff); anything
//!   else needs `--force`. A symbolic
//!   link is replaced itself (never followed); a directory, FIFO or device is refused.
//! - The text goes to a new temporary file beside the target (created exclusively, so
//!   never through a planted link), then renamed into place: an interrupted write never
//!   leaves half a report under the name.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use tensight::text::shown;
use tensight::Error;

/// A file's identity: (device, inode) on Unix, the canonical path elsewhere.
#[derive(PartialEq, Eq, Debug)]
enum Id {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

fn id_of(path: &Path) -> Option<Id> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let _ = path;
        Some(Id::Inode(meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        path.canonicalize().ok().map(Id::Path)
    }
}

/// Every file `analyze PATH [--et] [--ncu]` may read: the path, the trace found under it,
/// and for a folder every file directly in it (a bundle's manifest, trace, execution
/// trace, ncu CSV and detail trace all live there).
pub fn inputs(path: &Path, extra: &[&Path]) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    if let Ok(t) = tensight::read::resolve(path) {
        out.push(t);
    }
    if path.is_dir() {
        if let Ok(rd) = std::fs::read_dir(path) {
            out.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    out.extend(extra.iter().map(|p| p.to_path_buf()));
    out
}

/// Write `text` to `target` under the rules in the module doc.
pub fn write(target: &Path, text: &str, inputs: &[PathBuf], force: bool) -> tensight::Result<()> {
    check(target, inputs, force)?;
    let name = shown(&target.display().to_string());
    write_atomically(target, text)
        .map_err(|e| Error::new(format!("failed to write the report to {name}: {e}")))
}

/// [`write`] for bytes (a rank summary).
pub fn write_bytes(
    target: &Path,
    bytes: &[u8],
    inputs: &[PathBuf],
    force: bool,
) -> tensight::Result<()> {
    check(target, inputs, force)?;
    let name = shown(&target.display().to_string());
    write_atomically_with(target, |f| f.write_all(bytes))
        .map_err(|e| Error::new(format!("failed to write {name}: {e}")))
}

/// [`write`] for output produced as it goes (an annotated trace): `produce` writes into
/// the temporary file, which is renamed into place only when it succeeds.
pub fn write_with(
    target: &Path,
    inputs: &[PathBuf],
    force: bool,
    produce: impl FnOnce(&mut dyn Write) -> tensight::Result<()>,
) -> tensight::Result<()> {
    check(target, inputs, force)?;
    let name = shown(&target.display().to_string());
    let mut failed = None;
    let done = write_atomically_with(target, |file| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        if let Err(e) = produce(&mut w) {
            failed = Some(e);
            return Err(std::io::Error::other("not produced"));
        }
        w.flush()
    });
    if let Some(e) = failed {
        return Err(e);
    }
    done.map_err(|e| Error::new(format!("failed to write the report to {name}: {e}")))
}

/// Whether `target` may be written (the rules in the module doc), as an error if not.
pub fn check(target: &Path, inputs: &[PathBuf], force: bool) -> tensight::Result<()> {
    let name = shown(&target.display().to_string());
    if let Some(me) = id_of(target) {
        if let Some(input) = inputs.iter().find(|i| id_of(i).as_ref() == Some(&me)) {
            return Err(Error::new(format!(
                "refusing to write the report over the input {}",
                shown(&input.display().to_string())
            ))
            .with_hint(format!(
                "{name} is that file (or a link to it); choose another file for -o"
            )));
        }
    }
    match std::fs::symlink_metadata(target) {
        Err(_) => {}
        Ok(m) if m.file_type().is_symlink() => {
            if !force {
                return Err(Error::new(format!(
                    "refusing to write the report to {name}: it is a symbolic link"
                ))
                .with_hint("pass --force to replace the link itself (its target is left alone)"));
            }
        }
        Ok(m) if !m.is_file() => {
            return Err(Error::new(format!(
                "refusing to write the report to {name}: it exists and is not a regular file"
            ))
            .with_hint("choose another file for -o"));
        }
        Ok(_) => {
            if !force && !is_report(target) {
                return Err(Error::new(format!(
                    "refusing to overwrite {name}: it exists and is not a tensight report"
                ))
                .with_hint("pass --force to replace it, or choose another file for -o"));
            }
        }
    }
    Ok(())
}

/// True when the file at `path` looks like something tensight wrote: a text report, a
/// JSON report, an HTML report, or a tensor forest (tree, DOT or JSON).
pub fn is_report(path: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = vec![0u8; 1024];
    let n = f.read(&mut head).unwrap_or(0);
    head.truncate(n);
    if head.starts_with(b"PAR1") {
        // A Parquet summary: its version key is in the footer.
        let small = std::fs::metadata(path).is_ok_and(|m| m.len() < 1 << 30);
        return small && std::fs::read(path).is_ok_and(|b| tensight::summary::is_summary(&b));
    }
    let head = String::from_utf8_lossy(&head);
    if head.starts_with(tensight::summary::HEAD) {
        return true;
    }
    if head.contains("GPU PERFORMANCE DIAGNOSIS REPORT")
        || head.starts_with("{\"tensight\": {\"annotation_version\":")
        || head.starts_with("TENSIGHT DIFF")
        || head.starts_with("<!doctype html>")
            && head.contains("<meta name=\"generator\" content=\"tensight")
        || head.starts_with("Tensor forest of ")
        || head.starts_with("digraph tensor_forest {")
    {
        return true;
    }
    if !head.starts_with("{\n  \"") {
        return false;
    }
    // JSON (pretty-printed, keys sorted): the report's version keys at the top level,
    // or a forest's nodes and attribution. Reports are small: read up to 64 MiB.
    let mut all = Vec::new();
    if f.seek(SeekFrom::Start(0)).is_err() || f.take(64 << 20).read_to_end(&mut all).is_err() {
        return false;
    }
    let has = |k: &str| memchr_find(&all, k.as_bytes());
    (has("\n  \"schema_version\": \"") && has("\n  \"tensight_version\": \""))
        || (head.starts_with("{\n  \"attribution\": ") || has("\n  \"attribution\": {"))
            && has("\n  \"nodes\": [")
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Write to a fresh temporary file in the target's folder, then rename it over the target.
fn write_atomically(target: &Path, text: &str) -> std::io::Result<()> {
    write_atomically_with(target, |f| f.write_all(text.as_bytes()))
}

/// [`write_atomically`] with the content written by `produce`.
fn write_atomically_with(
    target: &Path,
    produce: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let mut attempt = 0u32;
    let (tmp, mut file) = loop {
        let tmp = dir.join(format!(
            ".{base}.tensight-{}-{attempt}.tmp",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    let done = produce(&mut file)
        .and_then(|_| file.sync_all())
        .and_then(|_| std::fs::rename(&tmp, target));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Standard output for output produced as it goes: buffered, and a closed pipe
/// (`tensight analyze x --format perfetto | head`) ends the output quietly instead of
/// failing.
pub struct Stdout {
    inner: std::io::BufWriter<std::io::StdoutLock<'static>>,
    closed: bool,
}

impl Default for Stdout {
    fn default() -> Self {
        Stdout {
            inner: std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock()),
            closed: false,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match self.inner.write_all(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            r => r.map(|_| buf.len()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            r => r,
        }
    }
}
