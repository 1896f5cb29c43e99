//! Exact token counts with `bpe-openai`, identical to tiktoken's `encode_ordinary`.
//!
//! Special-token text such as `<|endoftext|>` is counted as ordinary text, as
//! `encode_ordinary` does: a memory layer counts what a user wrote, not control tokens.

use bpe_openai::Tokenizer;

use super::models::Encoding;

fn tokenizer(encoding: Encoding) -> &'static Tokenizer {
    // bpe-openai keeps each vocabulary in a LazyLock: the first call pays the deserialisation.
    match encoding {
        Encoding::O200kBase => bpe_openai::o200k_base(),
        Encoding::Cl100kBase => bpe_openai::cl100k_base(),
    }
}

/// Exact number of tokens `encoding` turns `text` into.
pub fn count_tokens(text: &str, encoding: Encoding) -> usize {
    tokenizer(encoding).count(text)
}

/// Whether `text` is at most `limit` tokens. Pre-tokenised pieces are counted one by one and
/// the walk stops once the limit is passed, so the cost grows with `limit`, not with the text
/// (except for a single pre-token piece longer than the limit allows, which is read whole).
pub fn fits_within(text: &str, limit: usize, encoding: Encoding) -> bool {
    let tok = tokenizer(encoding);
    tok.count_till_limit(&tok.normalize(text), limit).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_counts() {
        assert_eq!(count_tokens("", Encoding::O200kBase), 0);
        assert_eq!(count_tokens("hello world", Encoding::O200kBase), 2);
        assert_eq!(count_tokens("hello world", Encoding::Cl100kBase), 2);
        // Special tokens are ordinary text here.
        assert!(count_tokens("<|endoftext|>", Encoding::O200kBase) > 1);
    }

    #[test]
    fn fits_within_agrees_with_count() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let n = count_tokens(&text, encoding);
            assert!(fits_within(&text, n, encoding));
            assert!(!fits_within(&text, n - 1, encoding));
            assert!(fits_within("", 0, encoding));
            assert!(!fits_within("a", 0, encoding));
        }
    }

    #[test]
    fn fits_within_on_a_big_text() {
        let text = "word ".repeat(200_000);
        assert!(!fits_within(&text, 10, Encoding::O200kBase));
        let n = count_tokens(&text, Encoding::O200kBase);
        assert!(fits_within(&text, n, Encoding::O200kBase));
        assert!(!fits_within(&text, n - 1, Encoding::O200kBase));
    }
}
