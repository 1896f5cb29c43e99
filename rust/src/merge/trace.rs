//! Errors that learn their JSON path while they unwind.
//!
//! A recursive walk returns `Err(Trace)` from the node that failed; each caller adds its own
//! segment on the way out. The path is therefore built only when something went wrong.

use crate::json_path::{JsonPath, Segment};
use crate::CoreError;

/// An error of kind `K` and the path from the failing node back up to the root.
#[derive(Debug)]
pub struct Trace<K> {
    pub kind: K,
    reversed: Vec<Segment>,
}

impl<K> Trace<K> {
    pub fn new(kind: K) -> Self {
        Self {
            kind,
            reversed: Vec::new(),
        }
    }

    #[must_use]
    pub fn at_key(mut self, key: &str) -> Self {
        self.push_key(key);
        self
    }

    #[must_use]
    pub fn at_index(mut self, index: usize) -> Self {
        self.push_index(index);
        self
    }

    /// In-place [`Self::at_key`], for errors kept behind a pointer.
    pub fn push_key(&mut self, key: &str) {
        self.reversed.push(Segment::Key(key.to_owned()));
    }

    pub fn push_index(&mut self, index: usize) {
        self.reversed.push(Segment::Index(index));
    }

    /// The same path with another kind of error, for front ends that add their own failures.
    pub fn map_kind<L>(self, f: impl FnOnce(K) -> L) -> Trace<L> {
        Trace {
            kind: f(self.kind),
            reversed: self.reversed,
        }
    }

    pub fn path(&self) -> String {
        let mut path = JsonPath::new();
        for segment in self.reversed.iter().rev() {
            match segment {
                Segment::Key(k) => path.push_key(k),
                Segment::Index(i) => path.push_index(*i),
            }
        }
        path.render()
    }
}

/// The failures of a walk over JSON data, independent of where the data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    TooDeep,
    UnsupportedType(String),
    NonFinite(String),
}

impl Trace<WalkError> {
    pub fn into_core(self) -> CoreError {
        let path = self.path();
        match self.kind {
            WalkError::TooDeep => CoreError::NestingTooDeep {
                path,
                limit: super::MAX_DEPTH,
            },
            WalkError::UnsupportedType(type_name) => CoreError::UnsupportedType { path, type_name },
            WalkError::NonFinite(value) => CoreError::NonFiniteNumber { path, value },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_built_from_the_failing_node_outwards() {
        let trace = Trace::new(WalkError::TooDeep)
            .at_index(3)
            .at_key("tags")
            .at_key("profile");
        assert_eq!(trace.path(), "$.profile.tags[3]");
        let err = trace.into_core();
        assert_eq!(
            err.to_string(),
            "$.profile.tags[3]: nesting deeper than the limit of 1024 levels"
        );
    }
}
