//! Token estimation and exact counting for OpenAI-style encodings.
//!
//! * [`estimate`]: one linear pass over the text counting features ([`features`]), then a
//!   per-encoding-family linear model whose coefficients `tools/calibrate_tokens.py` fits
//!   against exact BPE counts and writes into the generated [`coefficients`] module.
//! * [`count`]: exact counts with the `bpe-openai` crate, whose vocabularies are compiled into
//!   the binary and deserialised lazily, once per encoding, on first use.
//! * [`messages`]: OpenAI's chat counting convention on top of either counter.
//! * [`models`]: which encoding a model name uses.
//! * [`words`]: whether a chunk's words are in the vocabulary, for the estimate's guard.
//! * [`kana`]: whether a chunk's kana follow one another as in Japanese, for the same guard.
//! * [`probe`]: a sample of a chunk counted exactly, where the guard is in doubt.

pub mod coefficients;
pub mod count;
pub mod estimate;
pub mod features;
pub mod kana;
pub mod messages;
pub mod models;
pub mod probe;
pub mod words;

pub use count::{count_tokens, fits_within};
pub use estimate::estimate_tokens;
pub use messages::{count_messages, ContentPart, Message, ToolCall};
pub use models::{encoding_for_model, Encoding};
