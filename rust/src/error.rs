//! The one error type of the core. Every variant names what was wrong (a JSON path, an option,
//! a dimension) so the message is useful without a traceback; `python/errors.rs` maps each
//! variant to its class in `memstrata.exceptions` in one place.

use thiserror::Error;

pub type CoreResult<T> = Result<T, CoreError>;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// A value nests deeper than the kernel's documented limit.
    #[error("{path}: nesting deeper than the limit of {limit} levels")]
    NestingTooDeep { path: String, limit: usize },
    /// A value that is not JSON data (a set, bytes, an arbitrary object...).
    #[error("{path}: a value of type {type_name} is not JSON data")]
    UnsupportedType { path: String, type_name: String },
    /// NaN or ±Infinity where only finite numbers are allowed.
    #[error("{path}: {value} is not a finite number and JSON cannot hold it")]
    NonFiniteNumber { path: String, value: String },
    /// Text that does not parse as JSON.
    #[error("{what} is not valid JSON: {detail}")]
    InvalidJson { what: String, detail: String },
    /// Vectors whose lengths disagree.
    #[error("{what}: expected dimension {expected}, got {got}")]
    DimensionMismatch {
        what: String,
        expected: usize,
        got: usize,
    },
    /// A zero vector, for which cosine similarity is undefined.
    #[error("{what} is a zero vector; cosine similarity is undefined for it")]
    ZeroVector { what: String },
    /// An option outside its allowed set (e.g. `arrays="merge"`, an unknown encoding).
    #[error("{what} must be one of {expected}, got {value:?}")]
    InvalidOption {
        what: String,
        value: String,
        expected: String,
    },
    /// NaN or ±Infinity inside a vector, where similarity needs finite numbers.
    #[error("{what} is {value}; vectors must hold finite numbers")]
    NonFiniteVector { what: String, value: String },
    /// Any other argument out of its documented range.
    #[error("{0}")]
    InvalidArgument(String),
}
