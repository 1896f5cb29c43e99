//! Chat-message token accounting, after OpenAI's published convention (the "How to count
//! tokens with tiktoken" cookbook, for gpt-3.5-turbo-0613 onward and gpt-4/4o):
//!
//! * every message costs [`TOKENS_PER_MESSAGE`] (`<|start|>{role}\n ... <|end|>` framing) plus
//!   the tokens of its role and content;
//! * a `name` costs its tokens plus [`TOKENS_PER_NAME`];
//! * the reply is primed with `<|start|>assistant<|message|>`: [`REPLY_PRIMING`] once per list
//!   (an empty list costs 0: there is no request to prime).
//!
//! The cookbook is silent on the rest; memstrata's choices:
//! * content-part lists: `text` (and `refusal`) parts count their text; any other part (image,
//!   audio, file) costs [`NON_TEXT_PART_TOKENS`], OpenAI's price of a low-detail image, since
//!   the real cost depends on data we do not decode;
//! * each tool call (and the legacy `function_call`) costs its function name, its arguments
//!   string and [`TOKENS_PER_TOOL_CALL`] for the framing around them;
//! * a `tool_call_id` counts its tokens; other keys are ignored (metadata, not prompt).

/// Framing of every message.
pub const TOKENS_PER_MESSAGE: usize = 3;
/// Extra cost of a `name` field.
pub const TOKENS_PER_NAME: usize = 1;
/// Priming of the assistant reply, once per non-empty message list.
pub const REPLY_PRIMING: usize = 3;
/// Framing of one tool call besides its name and arguments.
pub const TOKENS_PER_TOOL_CALL: usize = 3;
/// Fixed cost of a non-text content part.
pub const NON_TEXT_PART_TOKENS: usize = 85;

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    Text(String),
    /// Image, audio, file...: priced at [`NON_TEXT_PART_TOKENS`].
    NonText,
    /// A tool call written as a content block (Anthropic's `tool_use`): priced as a tool call.
    ToolUse(ToolCall),
}

/// A function call the assistant asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// The parts of a chat message that reach the prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub name: Option<String>,
    pub content: Vec<ContentPart>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
}

/// Tokens of `messages` under the convention above, counting each text with `count`.
pub fn count_messages(messages: &[Message], count: impl Fn(&str) -> usize) -> usize {
    if messages.is_empty() {
        return 0;
    }
    let mut total = REPLY_PRIMING;
    for message in messages {
        total += TOKENS_PER_MESSAGE + count(&message.role);
        if let Some(name) = &message.name {
            total += count(name) + TOKENS_PER_NAME;
        }
        for part in &message.content {
            total += match part {
                ContentPart::Text(text) => count(text),
                ContentPart::NonText => NON_TEXT_PART_TOKENS,
                ContentPart::ToolUse(call) => {
                    TOKENS_PER_TOOL_CALL + count(&call.name) + count(&call.arguments)
                }
            };
        }
        for call in &message.tool_calls {
            total += TOKENS_PER_TOOL_CALL + count(&call.name) + count(&call.arguments);
        }
        if let Some(id) = &message.tool_call_id {
            total += count(id);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{count_tokens, Encoding};

    fn exact(text: &str) -> usize {
        count_tokens(text, Encoding::O200kBase)
    }

    #[test]
    fn cookbook_shape() {
        let messages = vec![
            Message {
                role: "system".into(),
                content: vec![ContentPart::Text("You are helpful.".into())],
                ..Message::default()
            },
            Message {
                role: "user".into(),
                name: Some("example_user".into()),
                content: vec![ContentPart::Text("New synergies?".into())],
                ..Message::default()
            },
        ];
        let expected = 3
            + (3 + exact("system") + exact("You are helpful."))
            + (3 + exact("user") + exact("example_user") + 1 + exact("New synergies?"));
        assert_eq!(count_messages(&messages, exact), expected);
    }

    #[test]
    fn parts_and_tool_calls() {
        let messages = vec![Message {
            role: "assistant".into(),
            content: vec![ContentPart::Text("look".into()), ContentPart::NonText],
            tool_calls: vec![ToolCall {
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            }],
            ..Message::default()
        }];
        let expected = 3
            + 3
            + exact("assistant")
            + exact("look")
            + NON_TEXT_PART_TOKENS
            + TOKENS_PER_TOOL_CALL
            + exact("get_weather")
            + exact("{\"city\":\"Paris\"}");
        assert_eq!(count_messages(&messages, exact), expected);
    }

    #[test]
    fn empty_list_is_zero() {
        assert_eq!(count_messages(&[], exact), 0);
    }

    #[test]
    fn a_tool_use_block_costs_what_the_same_tool_call_costs() {
        let count = |t: &str| t.len();
        let call = ToolCall {
            name: "get_weather".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
        };
        let as_tool_call = Message {
            role: "assistant".into(),
            tool_calls: vec![call.clone()],
            ..Message::default()
        };
        let as_block = Message {
            role: "assistant".into(),
            content: vec![ContentPart::ToolUse(call)],
            ..Message::default()
        };
        assert_eq!(
            count_messages(&[as_tool_call], count),
            count_messages(&[as_block], count)
        );
    }
}
