//! A linear pre-scan of JSON text for its nesting depth.
//!
//! serde_json parses recursively, so text nested 100,000 deep would overflow the stack once its
//! recursion limit is lifted (and with it, anything past 128 levels is refused). This scan walks
//! the bytes once with an explicit stack, rejects text nesting past [`MAX_DEPTH`] with the path
//! of the first container that is too deep, and reports the depth so the caller can give the
//! parser a stack that fits. It does not validate the JSON; the parser does that afterwards.

use super::trace::{Trace, WalkError};
use super::MAX_DEPTH;
use crate::CoreError;

enum Level {
    /// An array and the index of the element being read.
    Array(usize),
    /// An object, the byte range of the last key seen, and whether the next string is a key.
    Object {
        key: Option<(usize, usize)>,
        expect_key: bool,
    },
}

/// The deepest nesting in `text` (`0` for a scalar), or `NestingTooDeep` past [`MAX_DEPTH`].
pub fn nesting_depth(text: &[u8]) -> Result<usize, CoreError> {
    let mut stack: Vec<Level> = Vec::new();
    let mut deepest = 0;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                if let Some(Level::Object { key, expect_key }) = stack.last_mut() {
                    if *expect_key {
                        *key = Some((start, (i + 1).min(text.len())));
                        *expect_key = false;
                    }
                }
            }
            open @ (b'[' | b'{') => {
                if stack.len() == MAX_DEPTH {
                    return Err(too_deep(text, &stack));
                }
                stack.push(if open == b'[' {
                    Level::Array(0)
                } else {
                    Level::Object {
                        key: None,
                        expect_key: true,
                    }
                });
                deepest = deepest.max(stack.len());
            }
            b']' | b'}' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Level::Array(index)) => *index += 1,
                Some(Level::Object { expect_key, .. }) => *expect_key = true,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    Ok(deepest)
}

fn too_deep(text: &[u8], stack: &[Level]) -> CoreError {
    let mut trace = Trace::new(WalkError::TooDeep);
    for level in stack.iter().rev() {
        trace = match level {
            Level::Array(index) => trace.at_index(*index),
            Level::Object { key, .. } => {
                let raw = key.map_or(&b"\"\""[..], |(start, end)| &text[start..end]);
                let key: String = serde_json::from_slice(raw)
                    .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned());
                trace.at_key(&key)
            }
        };
    }
    trace.into_core()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_depth_ignoring_brackets_in_strings() {
        assert_eq!(nesting_depth(b"1").unwrap(), 0);
        assert_eq!(nesting_depth(b"[[1],{\"a\":[2]}]").unwrap(), 3);
        assert_eq!(nesting_depth(br#"{"a":"[[[\"{{"}"#).unwrap(), 1);
    }

    #[test]
    fn accepts_the_limit_and_names_the_path_past_it() {
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert_eq!(nesting_depth(ok.as_bytes()).unwrap(), MAX_DEPTH);
        let deep = format!(
            "{{\"profile\": {{\"tags\": [0, 1, 2, {}]}}}}",
            "[".repeat(MAX_DEPTH)
        );
        match nesting_depth(deep.as_bytes()).unwrap_err() {
            CoreError::NestingTooDeep { path, limit } => {
                assert!(path.starts_with("$.profile.tags[3][0][0]"), "{path}");
                assert_eq!(path.matches('[').count(), MAX_DEPTH - 2);
                assert_eq!(limit, MAX_DEPTH);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decodes_escaped_keys_in_the_path() {
        let deep = format!("{{\"a\\\"b\": {}}}", "[".repeat(MAX_DEPTH));
        let err = nesting_depth(deep.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("$[\"a\\\"b\"][0]"), "{err}");
    }

    #[test]
    fn a_hundred_thousand_levels_is_a_clean_error() {
        let deep = "[".repeat(100_000);
        assert!(matches!(
            nesting_depth(deep.as_bytes()),
            Err(CoreError::NestingTooDeep { .. })
        ));
    }
}
