//! Deep merge of JSON documents, and stripping of prototype-pollution keys.
//!
//! The policy lives here and is shared by both front ends:
//!
//! - [`ArrayMode`], [`NullMode`], [`UnsafeKeys`] and the [`MAX_DEPTH`] nesting limit;
//! - JSON equality for `arrays="union"` (a boolean never equals a number, `1 == 1.0`, objects
//!   compare by key set regardless of order) and the structural hash consistent with it, plus
//!   [`union::UnionIndex`], the hash index that keeps union dedup linear for long arrays;
//! - [`trace::Trace`], which builds the JSON path of an error while it unwinds, so the happy path
//!   never formats or allocates a path.
//!
//! Both front ends treat an array as a value: a union is a deduplicated concatenation, and the
//! null policy governs the keys of patch objects reached through object keys, never anything
//! beneath an array, whose nulls are kept verbatim (unsafe keys are stripped there all the same).
//!
//! [`value`] implements the merge over `serde_json::Value` (used by `merge_json` and the unit
//! tests). The Python binding (`python/merge.rs`) walks Python objects directly with the same
//! policy: converting a whole state to `Value` and back would cost more than the merge itself
//! and could not share the untouched subtrees of `base` with the result.

pub mod scan;
pub mod trace;
pub mod union;
pub mod value;

use crate::{CoreError, CoreResult};

/// The deepest nesting of objects and arrays the kernels accept. `[[1]]` nests 2 deep. Deeper
/// input raises `NestingTooDeep` instead of risking the stack.
pub const MAX_DEPTH: usize = 1024;

/// Keys removed at every depth unless the caller configures others: the two keys that let a JSON
/// document pollute a JavaScript prototype when the state is later read by JS code.
pub const DEFAULT_UNSAFE_KEYS: [&str; 2] = ["__proto__", "constructor"];

/// What a patch array does to the array it lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayMode {
    /// The patch array replaces the old one (seed 000).
    Replace,
    /// The old array followed by the patch array, each value once, at its first occurrence:
    /// seed 002's deduplicated concatenation, so duplicates already in the old array go too.
    Union,
}

impl ArrayMode {
    pub const ALLOWED: &'static str = "\"replace\", \"union\"";

    pub fn parse(value: &str) -> CoreResult<Self> {
        match value {
            "replace" => Ok(Self::Replace),
            "union" => Ok(Self::Union),
            other => Err(invalid_option("arrays", other, Self::ALLOWED)),
        }
    }
}

/// What a `null` under a key of a patch object does to that key. Nulls beneath an array,
/// including under the keys of objects inside it, are values and are kept in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullMode {
    /// Store `null`.
    Keep,
    /// Remove the key.
    Delete,
    /// Leave the old value: OpenAI strict-mode tools pad every optional field with `null`.
    Ignore,
}

impl NullMode {
    pub const ALLOWED: &'static str = "\"keep\", \"delete\", \"ignore\"";

    pub fn parse(value: &str) -> CoreResult<Self> {
        match value {
            "keep" => Ok(Self::Keep),
            "delete" => Ok(Self::Delete),
            "ignore" => Ok(Self::Ignore),
            other => Err(invalid_option("nulls", other, Self::ALLOWED)),
        }
    }
}

fn invalid_option(what: &str, value: &str, expected: &str) -> CoreError {
    CoreError::InvalidOption {
        what: what.to_owned(),
        value: value.to_owned(),
        expected: expected.to_owned(),
    }
}

/// The keys stripped from every object the merge produces. A handful at most, so a linear scan
/// beats hashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsafeKeys {
    keys: Vec<String>,
}

impl Default for UnsafeKeys {
    fn default() -> Self {
        Self::new(DEFAULT_UNSAFE_KEYS)
    }
}

impl UnsafeKeys {
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out: Vec<String> = Vec::new();
        for key in keys {
            let key = key.into();
            if !out.contains(&key) {
                out.push(key);
            }
        }
        Self { keys: out }
    }

    pub fn none() -> Self {
        Self { keys: Vec::new() }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k == key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Everything `deep_merge` / `merge_json` can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOptions {
    pub arrays: ArrayMode,
    pub nulls: NullMode,
    pub unsafe_keys: UnsafeKeys,
}

impl Default for MergeOptions {
    fn default() -> Self {
        Self {
            arrays: ArrayMode::Replace,
            nulls: NullMode::Keep,
            unsafe_keys: UnsafeKeys::default(),
        }
    }
}

/// What a top-level `null` patch yields: there is no key to delete, so `delete` and `keep` both
/// give `null`, while `ignore` keeps the base as it keeps any value a `null` would overwrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopLevelNull {
    Null,
    Base,
}

impl NullMode {
    pub fn top_level(self) -> TopLevelNull {
        match self {
            NullMode::Ignore => TopLevelNull::Base,
            NullMode::Keep | NullMode::Delete => TopLevelNull::Null,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_name_the_allowed_values() {
        assert_eq!(ArrayMode::parse("union").unwrap(), ArrayMode::Union);
        assert_eq!(NullMode::parse("ignore").unwrap(), NullMode::Ignore);
        let err = ArrayMode::parse("merge").unwrap_err();
        assert_eq!(
            err.to_string(),
            "arrays must be one of \"replace\", \"union\", got \"merge\""
        );
        let err = NullMode::parse("drop").unwrap_err();
        assert!(err.to_string().starts_with("nulls must be one of"));
    }

    #[test]
    fn unsafe_keys_dedup_and_match_exactly() {
        let keys = UnsafeKeys::new(["a", "b", "a"]);
        assert_eq!(keys.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(keys.contains("a") && !keys.contains("A"));
        assert!(UnsafeKeys::default().contains("__proto__"));
        assert!(UnsafeKeys::none().is_empty());
    }

    #[test]
    fn top_level_null_follows_the_null_mode() {
        assert_eq!(NullMode::Ignore.top_level(), TopLevelNull::Base);
        assert_eq!(NullMode::Delete.top_level(), TopLevelNull::Null);
    }
}
