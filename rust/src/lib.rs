//! memstrata's core: pure functions on plain data, with no knowledge of layers or storage.
//!
//! Each module is one kernel family. The PyO3 bindings live in [`python`] behind the `python`
//! cargo feature, so `cargo test` exercises the algorithms without a Python interpreter.

pub mod embed;
pub mod error;
pub mod json_member;
pub mod json_path;
pub mod merge;
pub mod patterns;
pub mod prune;
pub mod tokens;
pub mod vectors;

#[cfg(feature = "python")]
mod python;

pub use error::{CoreError, CoreResult};
