//! One top-level string member of a JSON object text, located without parsing the rest.
//!
//! A bulk reader that digests one large string member itself (a stored vector's base64, say)
//! can cut it out and hand the rest, a fraction of the bytes, to a full JSON parser. The cut is
//! only offered when it is exact: for a text that is a JSON object, removing the member span
//! leaves the same object without that member, so parsing the rest gives what parsing the whole
//! text would, minus the key. Whenever that cannot be promised cheaply, [`string_member`]
//! answers `None` and the caller parses the whole text as usual:
//!
//! - brackets that do not pair up, or anything but whitespace after the object;
//! - a key written with an escape (`"embe\u0064ding"` is the same key to a parser);
//! - the key present more than once (a parser keeps the last);
//! - a value that is not a string, or a string written with an escape;
//! - anywhere in the text, a number written with an exponent or with twenty digits or more:
//!   one a parser may read past a double's range and refuse, where a parser of the rest that
//!   skips the members it does not need would not look at it.
//!
//! Everything else in the text is skipped by structure, not validated: a text that is not
//! valid JSON stays invalid once the (well-formed) member is cut out, and the parser of the
//! rest rejects it as it would the whole.

use std::ops::Range;

/// Where a member lies in its object's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The bytes to remove: the member with the comma that separates it from a neighbour.
    pub cut: Range<usize>,
    /// The string value's content, between its quotes (no escapes in it).
    pub value: Range<usize>,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_space(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && is_space(text[at]) {
        at += 1;
    }
    at
}

/// The end of the string starting at `at` (a quote) just past its closing quote, and whether
/// it holds an escape.
fn skip_string(text: &[u8], at: usize) -> Option<(usize, bool)> {
    let mut i = at + 1;
    let mut escaped = false;
    loop {
        // SIMD search: the strings worth cutting out are kilobytes long.
        let step = memchr::memchr2(b'"', b'\\', text.get(i..)?)?;
        i += step;
        if text[i] == b'"' {
            return Some((i + 1, escaped));
        }
        escaped = true;
        i += 2; // the backslash and the character it escapes
    }
}

/// The end of the number (or other bare token) starting at `at`, if it is none of those the
/// module documentation declines: an exponent, or twenty digits or more.
fn skip_plain_number(text: &[u8], at: usize) -> Option<usize> {
    let end = text[at..]
        .iter()
        .position(|&c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
        .map_or(text.len(), |n| at + n);
    let token = &text[at..end];
    let digits = token.iter().filter(|c| c.is_ascii_digit()).count();
    (digits < 20 && !token.iter().any(|&c| c == b'e' || c == b'E')).then_some(end)
}

/// The end of the value starting at `at` (no whitespace before it): strings, nested objects
/// and arrays with their brackets paired, and anything else up to the next delimiter.
fn skip_value(text: &[u8], at: usize) -> Option<usize> {
    let mut open: Vec<u8> = Vec::new();
    let mut i = at;
    loop {
        let b = *text.get(i)?;
        match b {
            b'"' => i = skip_string(text, i)?.0,
            b'{' | b'[' => {
                open.push(if b == b'{' { b'}' } else { b']' });
                i += 1;
            }
            b'}' | b']' => {
                if open.pop()? != b {
                    return None;
                }
                i += 1;
            }
            _ if open.is_empty() => {
                // A scalar at the top: up to the next delimiter.
                let end = text[i..]
                    .iter()
                    .position(|&c| c == b',' || c == b'}' || c == b']' || is_space(c))
                    .map_or(text.len(), |n| i + n);
                if matches!(b, b'-' | b'0'..=b'9') {
                    skip_plain_number(text, i)?;
                }
                return (end > i).then_some(end);
            }
            b'-' | b'0'..=b'9' => i = skip_plain_number(text, i)?,
            _ => i += 1,
        }
        if open.is_empty() {
            return Some(i);
        }
    }
}

/// The top-level member `key` of the JSON object `text` when its value is a string, under the
/// conditions of the module documentation; `None` otherwise.
pub fn string_member(text: &[u8], key: &[u8]) -> Option<Member> {
    let mut at = skip_space(text, 0);
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(text, at + 1);
    let mut found: Option<Member> = None;
    // Where the previous member ended (for the comma before this one), if there was one.
    let mut previous_end: Option<usize> = None;
    if text.get(at) == Some(&b'}') {
        return None;
    }
    loop {
        let start = at;
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let (key_end, key_escaped) = skip_string(text, at)?;
        if key_escaped {
            return None;
        }
        let name = &text[at + 1..key_end - 1];
        at = skip_space(text, key_end);
        if text.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(text, at + 1);
        let value_start = at;
        at = skip_value(text, at)?;
        let value_end = at;
        at = skip_space(text, at);
        let next = *text.get(at)?;
        if name == key {
            if found.is_some() || text[value_start] != b'"' {
                return None;
            }
            let (_, escaped) = skip_string(text, value_start)?;
            if escaped {
                return None;
            }
            // With the comma before it, or, as the first member, the comma after it.
            let cut = match previous_end {
                Some(end) => end..value_end,
                None if next == b',' => start..skip_space(text, at + 1),
                None => start..value_end,
            };
            found = Some(Member {
                cut,
                value: value_start + 1..value_end - 1,
            });
        }
        match next {
            b',' => {
                previous_end = Some(value_end);
                at = skip_space(text, at + 1);
            }
            b'}' => {
                return (skip_space(text, at + 1) == text.len()).then_some(found?);
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest(text: &str, key: &str) -> Option<(String, String)> {
        let m = string_member(text.as_bytes(), key.as_bytes())?;
        let mut out = text[..m.cut.start].to_string();
        out.push_str(&text[m.cut.end..]);
        Some((out, text[m.value].to_string()))
    }

    fn parsed(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn cuts_the_member_wherever_it_stands() {
        for (text, left) in [
            (r#"{"e":"QUJD","a":1}"#, r#"{"a":1}"#),
            (r#"{"a":1,"e":"QUJD"}"#, r#"{"a":1}"#),
            (
                r#"{"a":1,"e":"QUJD","b":[1,{"e":2}]}"#,
                r#"{"a":1,"b":[1,{"e":2}]}"#,
            ),
            (r#" { "e" : "QUJD" } "#, r#" {  } "#),
            (
                r#"{"a": "x\"}", "e": "QUJD", "b": null}"#,
                r#"{"a": "x\"}", "b": null}"#,
            ),
            (
                r#"{"a":[-1.5,1234567890123456789,true,false],"e":"QUJD","t":-0}"#,
                r#"{"a":[-1.5,1234567890123456789,true,false],"t":-0}"#,
            ),
            (r#"{"e":"QUJD","n":"1e400"}"#, r#"{"n":"1e400"}"#),
        ] {
            let (out, value) = rest(text, "e").unwrap();
            assert_eq!(value, "QUJD");
            assert_eq!(parsed(&out), parsed(left), "{text}");
        }
    }

    #[test]
    fn declines_what_a_cut_could_get_wrong() {
        for text in [
            r#"{"e":"QUJD","e":"QUJE"}"#, // twice: a parser keeps the last
            r#"{"\u0065":"QUJD"}"#,       // an escaped key
            r#"{"e":"QU\u004aD"}"#,       // an escaped value
            r#"{"e":5}"#,                 // not a string
            r#"{"a":[1},"e":"QUJD"}"#,    // brackets that do not pair
            r#"{"a":1,"e":"QUJD"} x"#,    // trailing text
            r#"{"a":1 "e":"QUJD"}"#,      // no comma
            r#"["e","QUJD"]"#,            // not an object
            r#"{"a":{"e":"QUJD"}}"#,      // not at the top
            r#"{"a":1}"#,                 // absent
            r#"{"e":"QUJD""#,             // cut short
            r#"{"a":1e400,"e":"QUJD"}"#,  // a number a double may not hold
            r#"{"e":"QUJD","a":-1E3}"#,
            r#"{"a":[0,{"b":1e-400}],"e":"QUJD"}"#,
            r#"{"e":"QUJD","a":{"b":[12345678901234567890]}}"#,
            r#"{"a":-1.2345678901234567890,"e":"QUJD"}"#,
            "",
        ] {
            assert_eq!(string_member(text.as_bytes(), b"e"), None, "{text}");
        }
    }
}
