//! Exact token counts with `bpe-openai`, identical to tiktoken's `encode_ordinary`.
//!
//! Cost of the crate: both vocabularies are compiled in, pre-serialised (about 32 MB for
//! o200k_base and 15 MB for cl100k_base of the extension's ~50 MB; the wheel compresses to
//! ~26 MB), and deserialised on first use of each encoding (~0.1 s for o200k_base, ~0.03 s for
//! cl100k_base on the dev machine, including the single-token set built below).
//!
//! Special-token text such as `<|endoftext|>` is counted as ordinary text, as
//! `encode_ordinary` does: a memory layer counts what a user wrote, not control tokens.

use std::sync::LazyLock;

use bpe_openai::Tokenizer;
use rustc_hash::FxHashSet;

use super::models::Encoding;

/// A tokenizer plus the set of its tokens' bytes. Most pre-tokenised pieces (a word with its
/// leading space, a punctuation run) are a token by themselves, as tiktoken exploits too: one
/// hash lookup answers 1 where bpe's backtracking encoder would allocate and search.
struct Counter {
    tokenizer: &'static Tokenizer,
    single: FxHashSet<&'static [u8]>,
    longest: usize,
}

impl Counter {
    fn new(tokenizer: &'static Tokenizer) -> Self {
        let bpe = &tokenizer.bpe;
        let single: FxHashSet<&'static [u8]> = (0..bpe.num_tokens() as u32)
            .map(|id| bpe.token_bytes(id))
            .collect();
        let longest = single.iter().map(|t| t.len()).max().unwrap_or(0);
        Self {
            tokenizer,
            single,
            longest,
        }
    }

    #[inline]
    fn piece(&self, piece: &str) -> usize {
        let bytes = piece.as_bytes();
        if bytes.len() <= self.longest && self.single.contains(bytes) {
            1
        } else {
            self.tokenizer.bpe.count(bytes)
        }
    }
}

// Loaded lazily, once per encoding: deserialising o200k's tables takes ~0.1 s.
static O200K: LazyLock<Counter> = LazyLock::new(|| Counter::new(bpe_openai::o200k_base()));
static CL100K: LazyLock<Counter> = LazyLock::new(|| Counter::new(bpe_openai::cl100k_base()));

fn counter(encoding: Encoding) -> &'static Counter {
    match encoding {
        Encoding::O200kBase => &O200K,
        Encoding::Cl100kBase => &CL100K,
    }
}

/// Exact number of tokens `encoding` turns `text` into.
pub fn count_tokens(text: &str, encoding: Encoding) -> usize {
    let c = counter(encoding);
    c.tokenizer.split(text).map(|piece| c.piece(piece)).sum()
}

/// Decides `fits_within` from a prefix of a longer text, when the prefix suffices: `Some(false)`
/// once the prefix's settled pieces exceed `limit`, `None` when more text is needed. The last
/// two pieces of a prefix are not settled: the cut may truncate the last one, and the
/// pre-tokeniser's one-character look-ahead may change the one before.
pub fn prefix_exceeds(prefix: &str, limit: usize, encoding: Encoding) -> Option<bool> {
    let c = counter(encoding);
    let mut pieces = c.tokenizer.split(prefix);
    let mut pending = [pieces.next(), pieces.next()];
    let mut used = 0usize;
    for piece in pieces {
        let settled = pending[0].take().unwrap_or_default();
        pending = [pending[1], Some(piece)];
        let bytes = settled.as_bytes();
        used += if bytes.len() <= c.longest && c.single.contains(bytes) {
            1
        } else {
            match c
                .tokenizer
                .bpe
                .count_till_limit(bytes, limit.saturating_sub(used))
            {
                Some(n) => n,
                None => return Some(false),
            }
        };
        if used > limit {
            return Some(false);
        }
    }
    None
}

/// Whether `text` is at most `limit` tokens. Pre-tokenised pieces are counted one by one and
/// the walk stops once the limit is passed, so the cost grows with `limit`, not with the text
/// (except for a single pre-token piece longer than the limit allows, which is read whole).
pub fn fits_within(text: &str, limit: usize, encoding: Encoding) -> bool {
    let c = counter(encoding);
    let mut used = 0usize;
    for piece in c.tokenizer.split(text) {
        let bytes = piece.as_bytes();
        used += if bytes.len() <= c.longest && c.single.contains(bytes) {
            1
        } else {
            match c
                .tokenizer
                .bpe
                .count_till_limit(bytes, limit.saturating_sub(used))
            {
                Some(n) => n,
                None => return false,
            }
        };
        if used > limit {
            return false;
        }
    }
    true
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
    fn prefixes_decide_only_when_safe() {
        let text = "alpha beta gamma delta ".repeat(100);
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let n = count_tokens(&text, encoding);
            for cut in [5, 40, 200, 1000, text.len()] {
                match prefix_exceeds(&text[..cut], 10, encoding) {
                    Some(answer) => assert_eq!(answer, n <= 10),
                    None => assert!(count_tokens(&text[..cut], encoding) <= 12),
                }
            }
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
