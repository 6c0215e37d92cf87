//! tensight: why a PyTorch GPU program is slow, and what to change.
//!
//! Data flows one way: [`read`] (trace bytes → [`model::Profile`]) → [`analysis`]
//! (per-step metrics, FLOPs, roofline) → [`rules`] (findings ranked by estimated saving)
//! → [`report`] (terminal, JSON). Nothing imports a later stage. No PyO3 and no CLI here:
//! those live in the `tensight-py` and `tensight-cli` crates.

pub mod error;
pub mod model;
pub mod read;

pub use error::{Error, Result};
