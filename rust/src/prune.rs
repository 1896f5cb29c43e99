//! Sliding-window prune of tool results in an OpenAI-style message list (seed 003).
//!
//! Older `role == "tool"` messages become placeholders naming their `tool_call_id`, so the model
//! can fetch the original with `read_tool_result(call_id)`; the `keep_recent` most recent tool
//! messages stay verbatim. The window counts tool messages by position, pruned or not, so
//! pruning the output again changes nothing (a placeholder is recognised by being exactly what
//! the template renders for its call id, and is neither rewritten nor counted).
//!
//! This module holds the policy (template, window); the binding walks the Python messages.

use crate::{CoreError, CoreResult};

/// The marker the placeholder template must contain.
pub const CALL_ID: &str = "{call_id}";

/// The seed's placeholder.
pub const DEFAULT_PLACEHOLDER: &str = "[summarized: call_id={call_id}]";

/// The seed's window.
pub const DEFAULT_KEEP_RECENT: usize = 3;

/// A placeholder template split around its `{call_id}` markers. Only `{call_id}` is
/// substituted; other braces are literal text (unlike `str.format`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pieces: Vec<String>,
}

impl Placeholder {
    pub fn parse(template: &str) -> CoreResult<Self> {
        if !template.contains(CALL_ID) {
            return Err(CoreError::InvalidArgument(format!(
                "placeholder must contain {CALL_ID} so the model can recover the result, got {template:?}"
            )));
        }
        Ok(Self {
            pieces: template.split(CALL_ID).map(str::to_owned).collect(),
        })
    }

    /// The text around the markers: `render` puts the call id between consecutive pieces.
    pub fn pieces(&self) -> &[String] {
        &self.pieces
    }

    pub fn render(&self, call_id: &str) -> String {
        let mut out = String::with_capacity(
            self.pieces.iter().map(String::len).sum::<usize>()
                + call_id.len() * (self.pieces.len() - 1),
        );
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                out.push_str(call_id);
            }
            out.push_str(piece);
        }
        out
    }
}

/// Checks `keep_recent` (a Python int, hence signed).
pub fn keep_recent(value: i64) -> CoreResult<usize> {
    usize::try_from(value).map_err(|_| {
        CoreError::InvalidArgument(format!("keep_recent must be 0 or more, got {value}"))
    })
}

/// How many of `tool_messages` tool messages (oldest first) fall outside the window.
pub fn outside_window(tool_messages: usize, keep_recent: usize) -> usize {
    tool_messages.saturating_sub(keep_recent)
}

/// What a message is to the prune.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    Other,
    /// A tool message with its call id and its text content (`None` when it is not text).
    Tool {
        call_id: &'a str,
        content: Option<&'a str>,
    },
}

/// The plain-Rust prune: which messages to rewrite, and their new content. The binding does
/// the same walk over Python objects without building this list.
pub fn plan(
    messages: &[Message<'_>],
    keep_recent: usize,
    placeholder: &Placeholder,
) -> Vec<(usize, String)> {
    let tools = messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    let mut older = outside_window(tools, keep_recent);
    let mut out = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if older == 0 {
            break;
        }
        if let Message::Tool { call_id, content } = message {
            older -= 1;
            let rendered = placeholder.render(call_id);
            if *content != Some(rendered.as_str()) {
                out.push((i, rendered));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_marker_and_keeps_other_braces() {
        let p = Placeholder::parse("{x} {call_id}/{call_id}").unwrap();
        assert_eq!(p.render("c1"), "{x} c1/c1");
        let d = Placeholder::parse(DEFAULT_PLACEHOLDER).unwrap();
        assert_eq!(d.render("call_9"), "[summarized: call_id=call_9]");
    }

    #[test]
    fn rejects_templates_without_the_marker_and_negative_windows() {
        let err = Placeholder::parse("[summarized]").unwrap_err();
        assert!(err.to_string().contains("{call_id}"));
        assert_eq!(keep_recent(0).unwrap(), 0);
        assert!(keep_recent(-1)
            .unwrap_err()
            .to_string()
            .contains("keep_recent"));
    }

    #[test]
    fn prunes_older_tool_messages_and_is_idempotent() {
        let p = Placeholder::parse(DEFAULT_PLACEHOLDER).unwrap();
        let tool = |id, content| Message::Tool {
            call_id: id,
            content: Some(content),
        };
        let msgs = [
            Message::Other,
            tool("a", "A"),
            tool("b", "B"),
            Message::Other,
            tool("c", "C"),
            tool("d", "D"),
        ];
        let plan1 = plan(&msgs, 2, &p);
        assert_eq!(
            plan1,
            [
                (1, "[summarized: call_id=a]".to_owned()),
                (2, "[summarized: call_id=b]".to_owned())
            ]
        );
        let again = [
            Message::Other,
            tool("a", &plan1[0].1),
            tool("b", &plan1[1].1),
            Message::Other,
            tool("c", "C"),
            tool("d", "D"),
        ];
        assert!(plan(&again, 2, &p).is_empty());
        assert!(plan(&msgs, 10, &p).is_empty());
        assert_eq!(plan(&msgs, 0, &p).len(), 4);
    }
}
