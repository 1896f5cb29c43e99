//! JSON paths (`$.profile.tags[3]`) for error messages.
//!
//! Kernels track where they are as a stack of segments and render the path only when an error
//! is raised, so the happy path pays for a push and a pop, never for string formatting.

/// One step into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// The current position inside a value, rendered lazily.
#[derive(Debug, Default, Clone)]
pub struct JsonPath {
    segments: Vec<Segment>,
}

impl JsonPath {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push_key(&mut self, key: &str) {
        self.segments.push(Segment::Key(key.to_owned()));
    }

    pub fn push_index(&mut self, index: usize) {
        self.segments.push(Segment::Index(index));
    }

    pub fn pop(&mut self) {
        self.segments.pop();
    }

    pub fn depth(&self) -> usize {
        self.segments.len()
    }

    /// Renders `$`, `$.a.b`, `$.a[3]`; keys that are not plain identifiers are quoted
    /// (`$["a b"]`) so the path stays unambiguous.
    pub fn render(&self) -> String {
        let mut out = String::from("$");
        for segment in &self.segments {
            match segment {
                Segment::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
                Segment::Key(k) if is_identifier(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Segment::Key(k) => {
                    out.push('[');
                    out.push_str(&serde_json::to_string(k).unwrap_or_else(|_| format!("{k:?}")));
                    out.push(']');
                }
            }
        }
        out
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_keys_indices_and_quoted_keys() {
        let mut p = JsonPath::new();
        assert_eq!(p.render(), "$");
        p.push_key("profile");
        p.push_key("tags");
        p.push_index(3);
        assert_eq!(p.render(), "$.profile.tags[3]");
        p.pop();
        p.push_key("a b");
        assert_eq!(p.render(), "$.profile.tags[\"a b\"]");
        assert_eq!(p.depth(), 3);
    }
}
