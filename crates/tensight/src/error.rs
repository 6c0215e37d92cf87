//! Errors that reach the user.
//!
//! An [`Error`] is one line, lowercase, context first then cause
//! (`failed to read trace run/trace.json.gz: unexpected end of gzip stream`), plus an
//! optional `hint:` line when the likely cause is known. The CLI prints it and exits 2.
//! Nothing here panics or formats backtraces: a user mistake is never a crash.

use std::fmt;

/// An error for the user: what failed, why, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// One line: context first, then the cause.
    pub message: String,
    /// A suggestion shown as `hint: ...` on its own line, when the likely cause is known.
    pub hint: Option<String>,
}

impl Error {
    /// An error with no hint.
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            hint: None,
        }
    }

    /// Attach a hint line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\nhint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Result with a user-facing [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
