//! Model name -> encoding family.

use crate::{CoreError, CoreResult};

/// The BPE encodings memstrata knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// gpt-4o, gpt-4.1, gpt-4.5, gpt-5, the o-series.
    O200kBase,
    /// gpt-4, gpt-3.5-turbo, text-embedding-3-*, text-embedding-ada-002.
    Cl100kBase,
}

/// Names accepted wherever an encoding is chosen, in error messages too.
pub const ENCODING_NAMES: &str = "'o200k_base', 'cl100k_base'";

impl Encoding {
    /// Parses an encoding name; anything else is an `InvalidOption` listing the valid ones.
    pub fn from_name(name: &str) -> CoreResult<Self> {
        match name {
            "o200k_base" => Ok(Self::O200kBase),
            "cl100k_base" => Ok(Self::Cl100kBase),
            _ => Err(CoreError::InvalidOption {
                what: "encoding".into(),
                value: name.into(),
                expected: ENCODING_NAMES.into(),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }
}

/// Model-name prefixes and their encodings, after tiktoken's `model.py` tables. The longest
/// matching prefix wins, so `gpt-4o-mini` picks `gpt-4o` (o200k) over `gpt-4` (cl100k).
pub const MODEL_PREFIXES: &[(&str, Encoding)] = &[
    ("gpt-5", Encoding::O200kBase),
    ("gpt-4.5", Encoding::O200kBase),
    ("gpt-4.1", Encoding::O200kBase),
    ("gpt-4o", Encoding::O200kBase),
    ("chatgpt-4o", Encoding::O200kBase),
    ("gpt-oss", Encoding::O200kBase),
    ("o1", Encoding::O200kBase),
    ("o3", Encoding::O200kBase),
    ("o4", Encoding::O200kBase),
    ("gpt-4", Encoding::Cl100kBase),
    ("gpt-3.5", Encoding::Cl100kBase),
    ("gpt-35", Encoding::Cl100kBase),
    ("text-embedding-3", Encoding::Cl100kBase),
    ("text-embedding-ada-002", Encoding::Cl100kBase),
    ("davinci-002", Encoding::Cl100kBase),
    ("babbage-002", Encoding::Cl100kBase),
];

/// The encoding `model` uses: an encoding name is taken as is, a provider prefix such as
/// `openai/` is dropped, then the longest prefix of [`MODEL_PREFIXES`] decides. Unknown models
/// and `None` get o200k_base, the encoding of every current OpenAI model.
pub fn encoding_for_model(model: Option<&str>) -> Encoding {
    let Some(model) = model else {
        return Encoding::O200kBase;
    };
    if let Ok(encoding) = Encoding::from_name(model) {
        return encoding;
    }
    let bare = model.rsplit('/').next().unwrap_or(model);
    MODEL_PREFIXES
        .iter()
        .filter(|(prefix, _)| bare.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(Encoding::O200kBase, |&(_, encoding)| encoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let e = |m| encoding_for_model(Some(m));
        assert_eq!(e("gpt-4o-mini-2024-07-18"), Encoding::O200kBase);
        assert_eq!(e("gpt-4.1-nano"), Encoding::O200kBase);
        assert_eq!(e("gpt-4-0613"), Encoding::Cl100kBase);
        assert_eq!(e("gpt-4"), Encoding::Cl100kBase);
        assert_eq!(e("gpt-3.5-turbo"), Encoding::Cl100kBase);
        assert_eq!(e("text-embedding-3-small"), Encoding::Cl100kBase);
        assert_eq!(e("o3-mini"), Encoding::O200kBase);
        assert_eq!(e("openai/gpt-4"), Encoding::Cl100kBase);
        assert_eq!(e("cl100k_base"), Encoding::Cl100kBase);
    }

    #[test]
    fn unknown_and_none_are_o200k() {
        assert_eq!(encoding_for_model(None), Encoding::O200kBase);
        assert_eq!(
            encoding_for_model(Some("claude-sonnet")),
            Encoding::O200kBase
        );
    }

    #[test]
    fn bad_encoding_lists_the_valid_ones() {
        let err = Encoding::from_name("p50k_base").unwrap_err();
        assert!(err.to_string().contains("'o200k_base', 'cl100k_base'"));
        assert!(err.to_string().contains("p50k_base"));
    }
}
