//! Getting a file's bytes: a read-only memory map for plain files, a decompressed buffer
//! for gzip. Offsets are `usize` throughout, so files past 4 GiB are fine on 64-bit.

use crate::error::{Error, Result};
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
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if meta.is_dir() {
        return Err(Error::new(format!(
            "failed to read {shown}: is a directory with no trace in it"
        ))
        .with_hint("pass a trace file (.json or .json.gz), or a folder holding one"));
    }
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
        let mut out = Vec::with_capacity((map.len() * 8).min(1 << 30));
        let mut dec = MultiGzDecoder::new(&map[..]);
        if let Err(e) = dec.read_to_end(&mut out) {
            if out.is_empty() {
                return Err(
                    Error::new(format!("failed to read trace {shown}: {e}")).with_hint(
                        "the file starts like gzip but does not decompress; was it copied whole?",
                    ),
                );
            }
            info.gzip_truncated = Some(e.to_string());
        }
        return Ok((Bytes::Owned(out), info));
    }
    Ok((Bytes::Mapped(map), info))
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
