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
use rayon::prelude::*;
use rustc_hash::FxHashSet;

use super::features::Unit;
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

/// Whether `bytes` are one token of `encoding`'s vocabulary. A piece of text that is not
/// takes at least two.
pub fn is_token(bytes: &[u8], encoding: Encoding) -> bool {
    let c = counter(encoding);
    bytes.len() <= c.longest && c.single.contains(bytes)
}

/// From this many bytes a text is counted in chunks on rayon's threads: below it, waking a
/// second thread costs more than it saves (one core counts ~20 MB/s).
const PARALLEL_MIN_BYTES: usize = 1 << 17;

/// Exact number of tokens `encoding` turns `text` into.
pub fn count_tokens(text: &str, encoding: Encoding) -> usize {
    let c = counter(encoding);
    if text.len() >= PARALLEL_MIN_BYTES && rayon::current_num_threads() > 1 {
        let chunks = line_start_chunks(text, rayon::current_num_threads() * 4);
        if chunks.len() > 1 {
            return chunks.par_iter().map(|chunk| count_in(c, chunk)).sum();
        }
    }
    count_in(c, text)
}

/// [`count_tokens`] of UTF-8 bytes or UCS-4 code points: lone surrogates (which only UCS-4
/// input can hold) are counted as U+FFFD, another 3-byte character.
pub fn count_units<U: Unit>(units: &[U], encoding: Encoding) -> usize {
    // The probe's windows, a few dozen units each, are written on the stack: a string grown
    // on the heap took an allocation or more per window.
    if units.len() <= STACK_UNITS {
        let mut buf = [0u8; 4 * STACK_UNITS];
        let len = write_utf8(units, &mut buf);
        return count_tokens(&String::from_utf8_lossy(&buf[..len]), encoding);
    }
    if size_of::<U>() == 1 {
        let bytes: Vec<u8> = units.iter().map(|u| u.value() as u8).collect();
        return count_tokens(&String::from_utf8_lossy(&bytes), encoding);
    }
    let text: String = units.iter().map(|&u| to_char(u)).collect();
    count_tokens(&text, encoding)
}

/// Texts of up to this many units are written into a buffer on the stack for counting.
const STACK_UNITS: usize = 128;

/// The character of a UCS-4 unit, U+FFFD for one that is none.
#[inline]
fn to_char<U: Unit>(u: U) -> char {
    char::from_u32(u.value()).unwrap_or('\u{FFFD}')
}

/// Writes the UTF-8 of `units` (at most [`STACK_UNITS`]) to the start of `buf` and returns
/// its length: UTF-8 bytes as they are, UCS-4 units encoded as [`to_char`] reads them.
fn write_utf8<U: Unit>(units: &[U], buf: &mut [u8; 4 * STACK_UNITS]) -> usize {
    let mut len = 0;
    for &u in units {
        if size_of::<U>() == 1 {
            buf[len] = u.value() as u8;
            len += 1;
        } else {
            len += to_char(u).encode_utf8(&mut buf[len..]).len();
        }
    }
    len
}

fn count_in(c: &Counter, text: &str) -> usize {
    c.tokenizer.split(text).map(|piece| c.piece(piece)).sum()
}

/// `text` cut into about `parts` chunks whose token counts add up to the text's. Each cut is
/// just after a `\n` followed by a letter or a digit (any script): in both encodings'
/// pre-tokenisers no piece reaches across such a point (the pieces that may hold a newline,
/// whitespace runs and punctuation runs, can only go on with whitespace, or `/` in o200k, and a
/// piece starting with a letter or digit cannot start with a newline), so every piece, and so
/// every token, falls in one chunk. A text with no such point stays whole.
fn line_start_chunks(text: &str, parts: usize) -> Vec<&str> {
    let step = (text.len() / parts.max(1)).max(1);
    let mut chunks = Vec::with_capacity(parts + 1);
    let mut start = 0;
    while text.len() - start > step + step / 2 {
        let Some(cut) = line_start_at_or_after(text, start + step) else {
            break;
        };
        chunks.push(&text[start..cut]);
        start = cut;
    }
    chunks.push(&text[start..]);
    chunks
}

/// The first index `i >= from` just after a `\n` and before a letter or digit.
fn line_start_at_or_after(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from.max(1);
    while i < bytes.len() {
        let newline = i - 1 + bytes[i - 1..].iter().position(|&b| b == b'\n')?;
        let next = newline + 1;
        // After an ASCII newline `next` is a char boundary.
        if text[next..]
            .chars()
            .next()
            .is_some_and(char::is_alphanumeric)
        {
            return Some(next);
        }
        i = next + 1;
    }
    None
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
    fn units_on_the_stack_or_the_heap_count_as_the_text() {
        // Around STACK_UNITS in both unit sizes, with 1- to 4-byte characters and, in UCS-4, a
        // lone surrogate counted as U+FFFD.
        for text in [
            "a",
            "naïve 東京 😀 x",
            &"word 東 ".repeat(18),
            &"word 東 ".repeat(20),
            &"ab😀".repeat(60),
        ] {
            for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let mut ucs4: Vec<u32> = text.chars().map(u32::from).collect();
                assert_eq!(count_units(text.as_bytes(), e), count_tokens(text, e));
                assert_eq!(count_units(&ucs4, e), count_tokens(text, e));
                ucs4.push(0xD800);
                let lossy = format!("{text}\u{FFFD}");
                assert_eq!(count_units(&ucs4, e), count_tokens(&lossy, e));
            }
        }
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
    fn chunked_counts_equal_whole_counts() {
        // Texts big enough to be cut, with every kind of line start: letters after
        // punctuation, spaces, CRLF, digits, slashes and runs of newlines.
        let lines = [
            "Hello, world.\n",
            "  indented code();\n",
            "x = [1, 2, 3]\r\n",
            "42 is the answer\n\n",
            "/path/to/file\n",
            ".\nDot then letter\n",
            "naïve café — déjà vu\n",
            "中文字符和标点。\n",
            "\u{3000}全角空格\n",
            "Ⅻ roman numeral\n",
            "/slash after newline\n",
            "\u{301}combining\n",
            "'quoted' \"text\"\n",
            "\tTabbed\n",
        ];
        for seed in 0..6usize {
            let mut text = String::new();
            let mut i = seed;
            while text.len() < 3 * PARALLEL_MIN_BYTES {
                text.push_str(lines[i % lines.len()]);
                i = (i * 7 + 3) % 1_000_003;
            }
            let chunks = line_start_chunks(&text, 8);
            assert!(chunks.len() > 4, "{}", chunks.len());
            assert_eq!(chunks.concat(), text);
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let whole = count_in(counter(encoding), &text);
                let parts: usize = chunks
                    .iter()
                    .map(|ch| count_in(counter(encoding), ch))
                    .sum();
                assert_eq!(parts, whole);
                assert_eq!(count_tokens(&text, encoding), whole);
            }
        }
        // No line start to cut at: one chunk.
        assert_eq!(line_start_chunks(&"word ".repeat(100_000), 8).len(), 1);
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
