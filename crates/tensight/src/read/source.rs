//! Getting a file's bytes: a read-only memory map for plain files, a decompressed buffer
//! for gzip. Offsets are `usize` throughout, so files past 4 GiB are fine on 64-bit.
//!
//! Only regular files are read: a FIFO would block and a device (`/dev/zero`) never
//! ends, so both are refused with an error ([`regular_file`]). Gzip is inflated as a
//! stream ([`inflate`]) that stops at the [`Limits`] in force (a size cap and a ratio
//! cap), so a decompression bomb never lands in memory whole.

use super::limits::{Limits, RATIO_GRACE_BYTES};
use crate::error::{Error, Result};
use crate::text::fmt_size;
use flate2::read::MultiGzDecoder;
use std::io::Read;
use std::path::Path;

/// The bytes of an input file.
pub enum Bytes {
    /// A memory-mapped plain file.
    Mapped(memmap2::Mmap),
    /// Decompressed or small content held in memory.
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

impl Bytes {
    /// Drop the pages wholly inside `start..end` from this process's memory: they
    /// were parsed and are not needed any more. For a memory map this keeps the
    /// resident size near what is being parsed instead of the whole file; the bytes
    /// stay readable (a later read faults them in again from the page cache). Owned
    /// buffers are left alone.
    pub fn release(&self, start: usize, end: usize) {
        #[cfg(unix)]
        if let Bytes::Mapped(m) = self {
            const PAGE: usize = 4096;
            let s = start.div_ceil(PAGE) * PAGE;
            let e = end.min(m.len()) / PAGE * PAGE;
            if s < e {
                // SAFETY: the map is a read-only shared file mapping: MADV_DONTNEED only
                // drops our page-table entries, and the next access reads the same file
                // contents back, so no reference into the map is invalidated.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, s, e - s)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (start, end);
    }
}

/// What happened while getting the bytes.
#[derive(Debug, Default)]
pub struct SourceInfo {
    /// Bytes on disk.
    pub file_bytes: u64,
    /// True when the file was gzip.
    pub gzip: bool,
    /// Set when a gzip stream ended early: the error, after `len` good bytes.
    pub gzip_truncated: Option<String>,
}

/// Open `path`, decompressing gzip (detected by magic bytes, not by name).
pub fn open(path: &Path) -> Result<(Bytes, SourceInfo)> {
    let shown = crate::text::shown(&path.display().to_string());
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if meta.is_dir() {
        return Err(Error::new(format!(
            "failed to read {shown}: is a directory with no trace in it"
        ))
        .with_hint("pass a trace file (.json or .json.gz), or a folder holding one"));
    }
    regular_file(path, &meta)?;
    let file = std::fs::File::open(path).map_err(|e| io_error(path, &e))?;
    let mut info = SourceInfo {
        file_bytes: meta.len(),
        ..Default::default()
    };
    if meta.len() == 0 {
        return Err(
            Error::new(format!("failed to read trace {shown}: the file is empty"))
                .with_hint("the profiler may have been killed before it wrote the trace"),
        );
    }
    // SAFETY: the map is read-only; a file truncated under us would fault, which is the
    // same risk every mmap-based reader (ripgrep, trace_processor) accepts for speed.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| Error::new(format!("failed to read trace {shown}: {e}")))?;
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    if map.len() >= 2 && map[0] == 0x1f && map[1] == 0x8b {
        info.gzip = true;
        let (out, cut) = inflate(&format!("trace {shown}"), &map, Limits::current())?;
        info.gzip_truncated = cut;
        return Ok((Bytes::Owned(out), info));
    }
    Ok((Bytes::Mapped(map), info))
}

/// Refuse anything but a regular file (a FIFO blocks, a device never ends), with an error
/// saying what it is. Symbolic links are followed (`meta` is from `metadata`).
pub fn regular_file(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    let what = special_kind(meta);
    Err(Error::new(format!(
        "failed to read {}: it is {what}, not a regular file",
        crate::text::shown(&path.display().to_string())
    ))
    .with_hint(
        "tensight reads files; copy the data to a file first (e.g. `cat PIPE > trace.json`)",
    ))
}

fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// Read the whole regular file at `path`, refusing one over `max` bytes. `what` names the
/// file in messages (`Nsight Compute CSV x.csv`).
pub fn read_bounded(path: &Path, what: &str, max: u64) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    regular_file(path, &meta)?;
    if meta.len() > max {
        return Err(Error::new(format!(
            "failed to read {what}: it is {}, over the {} this reader accepts",
            fmt_size(meta.len()),
            fmt_size(max)
        )));
    }
    let file = std::fs::File::open(path).map_err(|e| io_error(path, &e))?;
    let mut out = Vec::with_capacity(meta.len() as usize);
    // The file may grow while read: never past the cap.
    file.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::new(format!("failed to read {what}: {e}")))?;
    if out.len() as u64 > max {
        return Err(Error::new(format!(
            "failed to read {what}: it grew past {} while being read",
            fmt_size(max)
        )));
    }
    Ok(out)
}

/// A slice reader that counts what was taken from it.
struct Counted<'a> {
    rest: &'a [u8],
    taken: u64,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.taken += n as u64;
        Ok(n)
    }
}

/// Inflate the gzip (one or more members) in `compressed` as a stream, stopping with an
/// error when the output would pass `limits.max_inflated_bytes`, or, past
/// [`RATIO_GRACE_BYTES`], `limits.max_ratio` times the compressed bytes read so far.
/// A stream that ends early returns what came before the cut with the error's text
/// (`None` when whole); nothing at all is an error. `what` names the input in messages.
pub fn inflate(what: &str, compressed: &[u8], limits: Limits) -> Result<(Vec<u8>, Option<String>)> {
    let mut dec = MultiGzDecoder::new(Counted {
        rest: compressed,
        taken: 0,
    });
    let mut out: Vec<u8> = Vec::with_capacity(
        (compressed.len().saturating_mul(8))
            .min(1 << 30)
            .min(limits.max_inflated_bytes as usize),
    );
    const STEP: usize = 1 << 20;
    loop {
        let len = out.len();
        out.resize(len + STEP, 0);
        let n = match dec.read(&mut out[len..]) {
            Ok(n) => n,
            Err(e) => {
                out.truncate(len);
                if out.is_empty() {
                    return Err(Error::new(format!("failed to read {what}: {e}")).with_hint(
                        "the file starts like gzip but does not decompress; was it copied whole?",
                    ));
                }
                out.shrink_to_fit();
                return Ok((out, Some(e.to_string())));
            }
        };
        out.truncate(len + n);
        if n == 0 {
            out.shrink_to_fit();
            return Ok((out, None));
        }
        let inflated = out.len() as u64;
        if inflated > limits.max_inflated_bytes {
            return Err(Error::new(format!(
                "failed to read {what}: it inflates past {}, the limit on decompressed input",
                fmt_size(limits.max_inflated_bytes)
            ))
            .with_hint("raise the limit with --max-inflated SIZE (or TENSIGHT_MAX_INFLATED=SIZE), or gunzip the file and pass the plain one: plain files are memory-mapped, not held in memory"));
        }
        let taken = dec.get_ref().taken.max(1);
        if inflated > RATIO_GRACE_BYTES && inflated > limits.max_ratio.saturating_mul(taken) {
            return Err(Error::new(format!(
                "failed to read {what}: it inflates more than {}× ({} from the first {}), which looks like a decompression bomb",
                limits.max_ratio,
                fmt_size(inflated),
                fmt_size(taken)
            ))
            .with_hint("real traces inflate 5-20×; if this file is genuine, raise the limit with --max-ratio N (or TENSIGHT_MAX_RATIO=N)"));
        }
    }
}

fn io_error(path: &Path, e: &std::io::Error) -> Error {
    let shown = path.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::new(format!("failed to read {shown}: no such file or directory"))
        }
        std::io::ErrorKind::PermissionDenied => {
            Error::new(format!("failed to read {shown}: permission denied"))
        }
        _ => Error::new(format!("failed to read {shown}: {e}")),
    }
}
